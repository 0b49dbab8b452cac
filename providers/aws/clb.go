package aws

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing/types"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// clbFrontend is the listener protocol of a backend protocol when the
// listener terminates TLS, aws-cloud-controller-manager's.
var clbFrontend = map[string]string{
	backendHTTPS: backendHTTPS,
	backendHTTP:  backendHTTPS,
	backendSSL:   backendSSL,
	backendTCP:   backendSSL,
}

// clbListeners are the listeners of the options: per port, the backend
// protocol to the NodePort; a port with the certificate terminates TLS
// (SSL or HTTPS).
func clbListeners(o *lbOptions) []elbtypes.Listener {
	out := make([]elbtypes.Listener, 0, len(o.ports))
	for _, p := range o.ports {
		ls := elbtypes.Listener{
			LoadBalancerPort: p.Port,
			InstancePort:     aws.Int32(p.NodePort),
			Protocol:         aws.String(o.backend),
			InstanceProtocol: aws.String(o.backend),
		}
		if o.usesCert(p) {
			ls.Protocol = aws.String(clbFrontend[o.backend])
			ls.SSLCertificateId = aws.String(o.sslCert)
		}
		out = append(out, ls)
	}
	return out
}

func sameListener(a, b elbtypes.Listener) bool {
	return a.LoadBalancerPort == b.LoadBalancerPort && aws.ToInt32(a.InstancePort) == aws.ToInt32(b.InstancePort) &&
		strings.EqualFold(aws.ToString(a.Protocol), aws.ToString(b.Protocol)) &&
		strings.EqualFold(aws.ToString(a.InstanceProtocol), aws.ToString(b.InstanceProtocol)) &&
		aws.ToString(a.SSLCertificateId) == aws.ToString(b.SSLCertificateId)
}

// clbHealthCheck is the Classic ELB health check of the options: the
// traffic port is the first port's NodePort.
func clbHealthCheck(o *lbOptions) *elbtypes.HealthCheck {
	h := o.health
	port := h.port
	if port == trafficPort {
		port = strconv.Itoa(int(o.ports[0].NodePort))
	}
	target := h.protocol + ":" + port
	if h.protocol == protoHTTP || h.protocol == protoHTTPS {
		target += h.path
	}
	return &elbtypes.HealthCheck{
		Target: aws.String(target), Interval: aws.Int32(h.interval), Timeout: aws.Int32(h.timeout),
		HealthyThreshold: aws.Int32(h.healthy), UnhealthyThreshold: aws.Int32(h.unhealthy),
	}
}

func sameHealthCheck(a, b *elbtypes.HealthCheck) bool {
	if a == nil || b == nil {
		return a == b
	}
	return strings.EqualFold(aws.ToString(a.Target), aws.ToString(b.Target)) && aws.ToInt32(a.Interval) == aws.ToInt32(b.Interval) &&
		aws.ToInt32(a.Timeout) == aws.ToInt32(b.Timeout) && aws.ToInt32(a.HealthyThreshold) == aws.ToInt32(b.HealthyThreshold) &&
		aws.ToInt32(a.UnhealthyThreshold) == aws.ToInt32(b.UnhealthyThreshold)
}

// findCLB returns the Classic ELB of the name, nil when there is none.
func (l *loadBalancers) findCLB(ctx context.Context, name string) (*elbtypes.LoadBalancerDescription, error) {
	out, err := l.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerNames: []string{name}})
	var nf *elbtypes.AccessPointNotFoundException
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("describing classic load balancer %s: %w", name, err)
	}
	for i := range out.LoadBalancerDescriptions {
		if aws.ToString(out.LoadBalancerDescriptions[i].LoadBalancerName) == name {
			return &out.LoadBalancerDescriptions[i], nil
		}
	}
	return nil, nil
}

// clbTags are a Classic ELB's tags.
func (l *loadBalancers) clbTags(ctx context.Context, name string) (map[string]string, error) {
	out, err := l.elb.DescribeTags(ctx, &elb.DescribeTagsInput{LoadBalancerNames: []string{name}})
	if err != nil {
		return nil, fmt.Errorf("describing the tags of %s: %w", name, err)
	}
	tags := map[string]string{}
	for _, d := range out.TagDescriptions {
		if aws.ToString(d.LoadBalancerName) != name {
			continue
		}
		for _, t := range d.Tags {
			tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
		}
	}
	return tags, nil
}

func elbTagList(tags map[string]string) []elbtypes.Tag {
	out := make([]elbtypes.Tag, 0, len(tags))
	for _, k := range sortedKeys(tags) {
		out = append(out, elbtypes.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	return out
}

// ownedCLB returns the Service's Classic ELB, nil when there is none; one
// that is not the Service's is an error.
func (l *loadBalancers) ownedCLB(ctx context.Context, clusterID string, svc *v1.Service, name string) (*elbtypes.LoadBalancerDescription, map[string]string, error) {
	lb, err := l.findCLB(ctx, name)
	if err != nil || lb == nil {
		return nil, nil, err
	}
	tags, err := l.clbTags(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if !ownedBy(tags, clusterID, svc) {
		return nil, nil, foreignError("load balancer", name, clusterID, svc)
	}
	return lb, tags, nil
}

// ensureCLB creates or brings in line a Classic ELB: its security group
// (ingress on the listener ports from the source ranges), listeners,
// health check, cross-zone setting, instances, and the rules that let it
// into the nodes' security groups.
func (l *loadBalancers) ensureCLB(ctx context.Context, clusterID string, svc *v1.Service, name string, o *lbOptions, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	logger := klog.FromContext(ctx)
	lb, tags, err := l.ownedCLB(ctx, clusterID, svc, name)
	if err != nil {
		return nil, err
	}
	if lb == nil {
		nlb, err := l.findNLB(ctx, name)
		if err != nil {
			return nil, err
		}
		if nlb != nil {
			return nil, typeChangeError(name, kindNetwork, kindClassic)
		}
	} else if scheme := aws.ToString(lb.Scheme); scheme != o.scheme() {
		return nil, schemeChangeError(name, scheme)
	}
	instances, err := l.targetInstances(ctx, nodes, o.nodeLabels)
	if err != nil {
		return nil, err
	}
	want := ownTags(clusterID, svc, o.extraTags)

	var at *placement
	if lb != nil {
		at = &placement{vpc: aws.ToString(lb.VPCId), zones: lb.AvailabilityZones}
		for _, id := range lb.Subnets {
			at.subnets = append(at.subnets, lbSubnet{id: id})
		}
	}
	subnets, vpc, err := l.subnets(ctx, clusterID, o, instances, at)
	if err != nil {
		return nil, err
	}

	sg := l.cfg.ElbSecurityGroup
	if sg == "" {
		if sg, err = l.ensureELBSecurityGroup(ctx, clusterID, svc, name, vpc, o, want); err != nil {
			return nil, err
		}
	}
	listeners := clbListeners(o)

	if lb == nil {
		in := &elb.CreateLoadBalancerInput{
			LoadBalancerName: aws.String(name),
			Listeners:        listeners,
			Subnets:          subnetIDs(subnets),
			SecurityGroups:   []string{sg},
			Tags:             elbTagList(want),
		}
		if o.internal {
			in.Scheme = aws.String(o.scheme())
		}
		if _, err := l.elb.CreateLoadBalancer(ctx, in); err != nil {
			return nil, fmt.Errorf("creating classic load balancer %s: %w", name, err)
		}
		logger.V(2).Info("Created classic load balancer", "subnets", subnetIDs(subnets), "scheme", o.scheme(), "securityGroup", sg)
		if lb, err = l.findCLB(ctx, name); err != nil {
			return nil, err
		}
		if lb == nil {
			return nil, fmt.Errorf("classic load balancer %s is not found right after it was created", name)
		}
	} else {
		if add := missingTags(tags, want); len(add) > 0 {
			if _, err := l.elb.AddTags(ctx, &elb.AddTagsInput{LoadBalancerNames: []string{name}, Tags: elbTagList(add)}); err != nil {
				return nil, fmt.Errorf("tagging load balancer %s: %w", name, err)
			}
		}
		if err := l.syncCLBSubnets(ctx, lb, subnets); err != nil {
			return nil, err
		}
		if err := l.syncCLBListeners(ctx, lb, listeners); err != nil {
			return nil, err
		}
		if !slices.Equal(lb.SecurityGroups, []string{sg}) {
			if _, err := l.elb.ApplySecurityGroupsToLoadBalancer(ctx, &elb.ApplySecurityGroupsToLoadBalancerInput{
				LoadBalancerName: aws.String(name), SecurityGroups: []string{sg},
			}); err != nil {
				return nil, fmt.Errorf("setting the security group of %s: %w", name, err)
			}
		}
	}

	if hc := clbHealthCheck(o); !sameHealthCheck(lb.HealthCheck, hc) {
		if _, err := l.elb.ConfigureHealthCheck(ctx, &elb.ConfigureHealthCheckInput{LoadBalancerName: aws.String(name), HealthCheck: hc}); err != nil {
			return nil, fmt.Errorf("configuring the health check of %s: %w", name, err)
		}
		logger.V(2).Info("Configured health check", "target", aws.ToString(hc.Target))
	}
	if err := l.ensureCLBCrossZone(ctx, name, o.crossZone); err != nil {
		return nil, err
	}
	if err := l.syncInstances(ctx, lb, instances); err != nil {
		return nil, err
	}
	if err := l.syncCLBNodeIngress(ctx, clusterID, sg, instances); err != nil {
		return nil, err
	}
	return hostnameStatus(aws.ToString(lb.DNSName)), nil
}

// syncCLBSubnets attaches the Classic ELB to the subnets of want it is
// not in and detaches it from the others, as aws-cloud-controller-manager
// does on every Ensure. A Classic ELB has one subnet per availability
// zone, and at least one: subnets of zones it is not in are attached
// first, then the others detached, then the subnets that replace them in
// their zones attached.
func (l *loadBalancers) syncCLBSubnets(ctx context.Context, lb *elbtypes.LoadBalancerDescription, want []lbSubnet) error {
	var newZones, sameZones, detach []string
	for _, s := range want {
		switch {
		case slices.Contains(lb.Subnets, s.id):
		case slices.Contains(lb.AvailabilityZones, s.zone):
			sameZones = append(sameZones, s.id)
		default:
			newZones = append(newZones, s.id)
		}
	}
	for _, id := range lb.Subnets {
		if !slices.ContainsFunc(want, func(s lbSubnet) bool { return s.id == id }) {
			detach = append(detach, id)
		}
	}
	slices.Sort(detach)
	name := lb.LoadBalancerName
	attach := func(ids []string) error {
		if len(ids) == 0 {
			return nil
		}
		if _, err := l.elb.AttachLoadBalancerToSubnets(ctx, &elb.AttachLoadBalancerToSubnetsInput{LoadBalancerName: name, Subnets: ids}); err != nil {
			return fmt.Errorf("attaching load balancer %s to subnets %v: %w", aws.ToString(name), ids, err)
		}
		return nil
	}
	if err := attach(newZones); err != nil {
		return err
	}
	if len(detach) > 0 {
		if _, err := l.elb.DetachLoadBalancerFromSubnets(ctx, &elb.DetachLoadBalancerFromSubnetsInput{LoadBalancerName: name, Subnets: detach}); err != nil {
			return fmt.Errorf("detaching load balancer %s from subnets %v: %w", aws.ToString(name), detach, err)
		}
	}
	if err := attach(sameZones); err != nil {
		return err
	}
	if len(newZones)+len(sameZones)+len(detach) > 0 {
		klog.FromContext(ctx).V(2).Info("Changed subnets", "attached", slices.Concat(newZones, sameZones), "detached", detach)
	}
	return nil
}

// syncCLBListeners replaces the listeners that differ from want and
// deletes those of other ports.
func (l *loadBalancers) syncCLBListeners(ctx context.Context, lb *elbtypes.LoadBalancerDescription, want []elbtypes.Listener) error {
	var remove []int32
	var add []elbtypes.Listener
	var have []elbtypes.Listener
	for _, d := range lb.ListenerDescriptions {
		if d.Listener != nil {
			have = append(have, *d.Listener)
		}
	}
	for _, h := range have {
		if !slices.ContainsFunc(want, func(w elbtypes.Listener) bool { return sameListener(h, w) }) {
			remove = append(remove, h.LoadBalancerPort)
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(have, func(h elbtypes.Listener) bool { return sameListener(h, w) }) {
			add = append(add, w)
		}
	}
	name := lb.LoadBalancerName
	if len(remove) > 0 {
		if _, err := l.elb.DeleteLoadBalancerListeners(ctx, &elb.DeleteLoadBalancerListenersInput{LoadBalancerName: name, LoadBalancerPorts: remove}); err != nil {
			return fmt.Errorf("deleting the listeners of ports %v: %w", remove, err)
		}
	}
	if len(add) > 0 {
		if _, err := l.elb.CreateLoadBalancerListeners(ctx, &elb.CreateLoadBalancerListenersInput{LoadBalancerName: name, Listeners: add}); err != nil {
			return fmt.Errorf("creating listeners: %w", err)
		}
	}
	if len(remove)+len(add) > 0 {
		klog.FromContext(ctx).V(2).Info("Changed listeners", "removedPorts", remove, "added", len(add))
	}
	return nil
}

// ensureCLBCrossZone sets cross-zone load balancing when the annotation
// asks for a value the load balancer does not have.
func (l *loadBalancers) ensureCLBCrossZone(ctx context.Context, name string, want *bool) error {
	if want == nil {
		return nil
	}
	out, err := l.elb.DescribeLoadBalancerAttributes(ctx, &elb.DescribeLoadBalancerAttributesInput{LoadBalancerName: aws.String(name)})
	if err != nil {
		return fmt.Errorf("describing the attributes of %s: %w", name, err)
	}
	if a := out.LoadBalancerAttributes; a != nil && a.CrossZoneLoadBalancing != nil && a.CrossZoneLoadBalancing.Enabled == *want {
		return nil
	}
	_, err = l.elb.ModifyLoadBalancerAttributes(ctx, &elb.ModifyLoadBalancerAttributesInput{
		LoadBalancerName:       aws.String(name),
		LoadBalancerAttributes: &elbtypes.LoadBalancerAttributes{CrossZoneLoadBalancing: &elbtypes.CrossZoneLoadBalancing{Enabled: *want}},
	})
	if err != nil {
		return fmt.Errorf("setting cross-zone load balancing of %s: %w", name, err)
	}
	return nil
}

// syncInstances registers the instances that are not registered with the
// Classic ELB and deregisters the others, in chunks.
func (l *loadBalancers) syncInstances(ctx context.Context, lb *elbtypes.LoadBalancerDescription, instances []ec2types.Instance) error {
	want := instanceIDs(instances)
	var have []string
	for _, in := range lb.Instances {
		have = append(have, aws.ToString(in.InstanceId))
	}
	var add, remove []elbtypes.Instance
	for _, id := range want {
		if !slices.Contains(have, id) {
			add = append(add, elbtypes.Instance{InstanceId: aws.String(id)})
		}
	}
	for _, id := range have {
		if !slices.Contains(want, id) {
			remove = append(remove, elbtypes.Instance{InstanceId: aws.String(id)})
		}
	}
	for chunk := range slices.Chunk(add, targetChunk) {
		if _, err := l.elb.RegisterInstancesWithLoadBalancer(ctx, &elb.RegisterInstancesWithLoadBalancerInput{LoadBalancerName: lb.LoadBalancerName, Instances: chunk}); err != nil {
			return fmt.Errorf("registering %d instances with %s: %w", len(chunk), aws.ToString(lb.LoadBalancerName), err)
		}
	}
	for chunk := range slices.Chunk(remove, targetChunk) {
		if _, err := l.elb.DeregisterInstancesFromLoadBalancer(ctx, &elb.DeregisterInstancesFromLoadBalancerInput{LoadBalancerName: lb.LoadBalancerName, Instances: chunk}); err != nil {
			return fmt.Errorf("deregistering %d instances from %s: %w", len(chunk), aws.ToString(lb.LoadBalancerName), err)
		}
	}
	if len(add)+len(remove) > 0 {
		klog.FromContext(ctx).V(2).Info("Changed instances", "registered", len(add), "deregistered", len(remove))
	}
	return nil
}

// syncCLBNodeIngress lets the load balancer's security group into the
// instances' security groups, unless the config turns that off. The
// config's ElbSecurityGroup is shared by every Classic ELB: its rules are
// added, never revoked.
func (l *loadBalancers) syncCLBNodeIngress(ctx context.Context, clusterID, sg string, instances []ec2types.Instance) error {
	if l.cfg.DisableSecurityGroupIngress {
		return nil
	}
	groups, err := l.nodeSecurityGroups(ctx, clusterID, instances)
	if err != nil {
		return err
	}
	groups = slices.DeleteFunc(groups, func(g string) bool { return g == sg })
	return l.syncNodeIngress(ctx, sg, groups, sg != l.cfg.ElbSecurityGroup)
}

// updateCLB brings the Classic ELB's instances, and the rules that let it
// into their security groups, in line with the nodes.
func (l *loadBalancers) updateCLB(ctx context.Context, clusterID string, svc *v1.Service, name string, o *lbOptions, nodes []*v1.Node) error {
	lb, _, err := l.ownedCLB(ctx, clusterID, svc, name)
	if err != nil {
		return err
	}
	if lb == nil {
		if nlb, err := l.findNLB(ctx, name); err != nil || nlb != nil {
			return errors.Join(err, typeChangeError(name, kindNetwork, kindClassic))
		}
		return fmt.Errorf("classic load balancer %s does not exist", name)
	}
	instances, err := l.targetInstances(ctx, nodes, o.nodeLabels)
	if err != nil {
		return err
	}
	if err := l.syncInstances(ctx, lb, instances); err != nil {
		return err
	}
	if len(lb.SecurityGroups) != 1 {
		return nil
	}
	return l.syncCLBNodeIngress(ctx, clusterID, lb.SecurityGroups[0], instances)
}

// deleteCLB deletes the Service's Classic ELB and then its own security
// group, with the rules that let it into the nodes' groups. A security
// group left by a delete that did not finish is found by its name.
func (l *loadBalancers) deleteCLB(ctx context.Context, clusterID string, svc *v1.Service, name string) error {
	logger := klog.FromContext(ctx)
	lb, err := l.findCLB(ctx, name)
	if err != nil {
		return err
	}
	vpc := l.cfg.VPC
	if lb != nil {
		tags, err := l.clbTags(ctx, name)
		if err != nil {
			return err
		}
		if !ownedBy(tags, clusterID, svc) {
			logger.Info("Not deleting a load balancer without the Service's tags", "tags", tags)
			return nil
		}
		vpc = aws.ToString(lb.VPCId)
		if _, err := l.elb.DeleteLoadBalancer(ctx, &elb.DeleteLoadBalancerInput{LoadBalancerName: aws.String(name)}); err != nil {
			return fmt.Errorf("deleting classic load balancer %s: %w", name, err)
		}
		logger.V(2).Info("Deleted classic load balancer")
	}
	sg, err := l.findSecurityGroup(ctx, elbSecurityGroupName(name), vpc)
	if err != nil || sg == nil {
		return err
	}
	if !ownedBy(ec2TagMap(sg.Tags), clusterID, svc) {
		logger.Info("Not deleting a security group without the Service's tags", "securityGroup", aws.ToString(sg.GroupId))
		return nil
	}
	return l.deleteSecurityGroup(ctx, aws.ToString(sg.GroupId))
}
