package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Attributes of a Network Load Balancer.
const nlbAttrCrossZone = "load_balancing.cross_zone.enabled"

// invalidTargetGroupName are the characters left out of the namespace and
// name in a target group's name.
var invalidTargetGroupName = regexp.MustCompile(`[^a-zA-Z0-9]+`)

// nlbPort is what one Service port needs of a Network Load Balancer: a
// listener on the port and a target group of the nodes on its NodePort.
type nlbPort struct {
	port          v1.ServicePort
	listenerProto elbv2types.ProtocolEnum
	targetProto   elbv2types.ProtocolEnum
	targetGroup   string
}

// nlbPorts are the listeners and target groups the options ask for, one
// per port number: a port number over both TCP and UDP (with one
// NodePort, as parseLBOptions checks) is one TCP_UDP listener and target
// group.
func nlbPorts(clusterID string, svc *v1.Service, o *lbOptions) []nlbPort {
	out := make([]nlbPort, 0, len(o.ports))
	for _, p := range o.ports {
		if i := slices.IndexFunc(out, func(np nlbPort) bool { return np.port.Port == p.Port }); i >= 0 {
			out[i].listenerProto, out[i].targetProto = elbv2types.ProtocolEnumTcpUdp, elbv2types.ProtocolEnumTcpUdp
			continue
		}
		np := nlbPort{port: p, listenerProto: elbv2types.ProtocolEnumTcp, targetProto: elbv2types.ProtocolEnumTcp}
		if protocolOf(p) == v1.ProtocolUDP {
			np.listenerProto, np.targetProto = elbv2types.ProtocolEnumUdp, elbv2types.ProtocolEnumUdp
		} else {
			if o.usesCert(p) {
				np.listenerProto = elbv2types.ProtocolEnumTls
			}
			if o.backend == backendSSL {
				np.targetProto = elbv2types.ProtocolEnumTls
			}
		}
		out = append(out, np)
	}
	for i := range out {
		out[i].targetGroup = targetGroupName(clusterID, svc, out[i].port, out[i].targetProto, o.health)
	}
	return out
}

// targetGroupName is k8s-<namespace>-<name>-<hash>, at most 32
// characters, as aws-cloud-controller-manager names them. The hash covers
// the cluster, the Service, the port and everything of the target group
// that cannot change in place, so that a change makes a new target group
// which replaces the old one.
func targetGroupName(clusterID string, svc *v1.Service, p v1.ServicePort, proto elbv2types.ProtocolEnum, h healthCheck) string {
	sum := sha256.New()
	for _, part := range []string{
		clusterID, svc.Namespace, svc.Name, strconv.Itoa(int(p.Port)), strconv.Itoa(int(p.NodePort)), string(proto),
		h.protocol, h.port, h.path, strconv.Itoa(int(h.interval)), strconv.Itoa(int(h.timeout)),
		strconv.Itoa(int(h.healthy)), strconv.Itoa(int(h.unhealthy)),
	} {
		sum.Write([]byte(part))
		sum.Write([]byte{0})
	}
	ns := invalidTargetGroupName.ReplaceAllString(svc.Namespace, "")
	name := invalidTargetGroupName.ReplaceAllString(svc.Name, "")
	return fmt.Sprintf("k8s-%.8s-%.8s-%.10s", ns, name, hex.EncodeToString(sum.Sum(nil)))
}

// findNLB returns the Network Load Balancer of the name, nil when there
// is none.
func (l *loadBalancers) findNLB(ctx context.Context, name string) (*elbv2types.LoadBalancer, error) {
	out, err := l.elbv2.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{Names: []string{name}})
	var nf *elbv2types.LoadBalancerNotFoundException
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("describing load balancer %s: %w", name, err)
	}
	for i := range out.LoadBalancers {
		if aws.ToString(out.LoadBalancers[i].LoadBalancerName) == name {
			return &out.LoadBalancers[i], nil
		}
	}
	return nil, nil
}

// elbv2Tags are the tags of ELBv2 resources, by ARN.
func (l *loadBalancers) elbv2Tags(ctx context.Context, arns []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for chunk := range slices.Chunk(arns, tagChunk) {
		res, err := l.elbv2.DescribeTags(ctx, &elbv2.DescribeTagsInput{ResourceArns: chunk})
		if err != nil {
			return nil, fmt.Errorf("describing the tags of %v: %w", chunk, err)
		}
		for _, d := range res.TagDescriptions {
			tags := map[string]string{}
			for _, t := range d.Tags {
				tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
			}
			out[aws.ToString(d.ResourceArn)] = tags
		}
	}
	return out, nil
}

func elbv2TagList(tags map[string]string) []elbv2types.Tag {
	out := make([]elbv2types.Tag, 0, len(tags))
	for _, k := range sortedKeys(tags) {
		out = append(out, elbv2types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	return out
}

// ownedNLB returns the Service's Network Load Balancer, nil when there is
// none; one that is not the Service's is an error.
func (l *loadBalancers) ownedNLB(ctx context.Context, clusterID string, svc *v1.Service, name string) (*elbv2types.LoadBalancer, map[string]string, error) {
	lb, err := l.findNLB(ctx, name)
	if err != nil || lb == nil {
		return nil, nil, err
	}
	tags, err := l.elbv2Tags(ctx, []string{aws.ToString(lb.LoadBalancerArn)})
	if err != nil {
		return nil, nil, err
	}
	own := tags[aws.ToString(lb.LoadBalancerArn)]
	if !ownedBy(own, clusterID, svc) || lb.Type != elbv2types.LoadBalancerTypeEnumNetwork {
		return nil, nil, foreignError("load balancer", name, clusterID, svc)
	}
	return lb, own, nil
}

// ensureNLB creates or brings in line a Network Load Balancer: its
// target groups (created before the listeners that forward to them),
// their targets, its listeners, and then deletes the target groups no
// listener uses any more.
func (l *loadBalancers) ensureNLB(ctx context.Context, clusterID string, svc *v1.Service, name string, o *lbOptions, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	logger := klog.FromContext(ctx)
	lb, tags, err := l.ownedNLB(ctx, clusterID, svc, name)
	if err != nil {
		return nil, err
	}
	if lb == nil {
		clb, err := l.findCLB(ctx, name)
		if err != nil {
			return nil, err
		}
		if clb != nil {
			return nil, typeChangeError(name, kindClassic, kindNetwork)
		}
	} else if string(lb.Scheme) != o.scheme() {
		return nil, schemeChangeError(name, string(lb.Scheme))
	}
	instances, err := l.targetInstances(ctx, nodes, o.nodeLabels)
	if err != nil {
		return nil, err
	}
	want := ownTags(clusterID, svc, o.extraTags)
	var at *placement
	if lb != nil {
		at = &placement{vpc: aws.ToString(lb.VpcId)}
		for _, z := range lb.AvailabilityZones {
			at.subnets = append(at.subnets, lbSubnet{id: aws.ToString(z.SubnetId), zone: aws.ToString(z.ZoneName)})
			at.zones = append(at.zones, aws.ToString(z.ZoneName))
		}
	}
	subnets, _, err := l.subnets(ctx, clusterID, o, instances, at)
	if err != nil {
		return nil, err
	}

	// Subnets the load balancer is in and the Service no longer asks
	// for: reported once everything else is in line.
	var kept []string
	if lb == nil {
		out, err := l.elbv2.CreateLoadBalancer(ctx, &elbv2.CreateLoadBalancerInput{
			Name:    aws.String(name),
			Type:    elbv2types.LoadBalancerTypeEnumNetwork,
			Scheme:  elbv2types.LoadBalancerSchemeEnum(o.scheme()),
			Subnets: subnetIDs(subnets),
			Tags:    elbv2TagList(want),
		})
		if err != nil {
			return nil, fmt.Errorf("creating network load balancer %s: %w", name, err)
		}
		if len(out.LoadBalancers) != 1 {
			return nil, fmt.Errorf("creating network load balancer %s: ELB returned %d load balancers", name, len(out.LoadBalancers))
		}
		lb = &out.LoadBalancers[0]
		logger.V(2).Info("Created network load balancer", "subnets", subnetIDs(subnets), "scheme", o.scheme())
	} else {
		if add := missingTags(tags, want); len(add) > 0 {
			if _, err := l.elbv2.AddTags(ctx, &elbv2.AddTagsInput{ResourceArns: []string{aws.ToString(lb.LoadBalancerArn)}, Tags: elbv2TagList(add)}); err != nil {
				return nil, fmt.Errorf("tagging load balancer %s: %w", name, err)
			}
		}
		if kept, err = l.ensureNLBSubnets(ctx, lb, subnets); err != nil {
			return nil, err
		}
	}
	lbARN := aws.ToString(lb.LoadBalancerArn)
	if err := l.ensureNLBCrossZone(ctx, lbARN, o.crossZone); err != nil {
		return nil, err
	}

	// The target groups the listeners forward to now.
	attached, err := l.targetGroupsOf(ctx, lbARN)
	if err != nil {
		return nil, err
	}
	ports := nlbPorts(clusterID, svc, o)
	ids := instanceIDs(instances)
	tgARNs := map[int32]string{}
	for _, p := range ports {
		arn, err := l.ensureTargetGroup(ctx, clusterID, svc, aws.ToString(lb.VpcId), p, o, want, attached)
		if err != nil {
			return nil, err
		}
		if err := l.syncTargets(ctx, arn, p.port.NodePort, ids); err != nil {
			return nil, err
		}
		tgARNs[p.port.Port] = arn
	}
	if err := l.ensureListeners(ctx, lbARN, ports, tgARNs, o, want); err != nil {
		return nil, err
	}
	if err := l.ensureNLBNodeRules(ctx, clusterID, aws.ToString(lb.VpcId), name, o, instances); err != nil {
		return nil, err
	}

	// Target groups that no listener forwards to any more.
	var stale []elbv2types.TargetGroup
	for _, tg := range attached {
		if !slices.ContainsFunc(ports, func(p nlbPort) bool { return p.targetGroup == aws.ToString(tg.TargetGroupName) }) {
			stale = append(stale, tg)
		}
	}
	if err := l.deleteTargetGroups(ctx, clusterID, svc, stale); err != nil {
		return nil, err
	}
	if len(kept) > 0 {
		return nil, subnetsKeptError(name, kept)
	}
	return hostnameStatus(aws.ToString(lb.DNSName)), nil
}

// ensureNLBSubnets adds to a Network Load Balancer the availability zones
// of want it is not in, with SetSubnets naming every subnet it has with
// its addresses, as ELB asks. It never removes a zone nor changes a
// zone's subnet (aws-cloud-controller-manager changes no subnet of an
// NLB): that would take the load balancer's addresses in the zone from
// the clients that use them, and ELB did not allow it when the NLB was
// designed. It returns the subnets it keeps that want does not name.
func (l *loadBalancers) ensureNLBSubnets(ctx context.Context, lb *elbv2types.LoadBalancer, want []lbSubnet) (kept []string, err error) {
	var mappings []elbv2types.SubnetMapping
	for _, z := range lb.AvailabilityZones {
		id := aws.ToString(z.SubnetId)
		if !slices.ContainsFunc(want, func(s lbSubnet) bool { return s.id == id }) {
			kept = append(kept, id)
		}
		m := elbv2types.SubnetMapping{SubnetId: z.SubnetId}
		for _, a := range z.LoadBalancerAddresses {
			if a.AllocationId != nil {
				m.AllocationId = a.AllocationId
			}
			// Only an internal NLB is given its private addresses.
			if a.PrivateIPv4Address != nil && lb.Scheme == elbv2types.LoadBalancerSchemeEnumInternal {
				m.PrivateIPv4Address = a.PrivateIPv4Address
			}
			if a.IPv6Address != nil {
				m.IPv6Address = a.IPv6Address
			}
		}
		mappings = append(mappings, m)
	}
	var added []string
	for _, s := range want {
		if !slices.ContainsFunc(lb.AvailabilityZones, func(z elbv2types.AvailabilityZone) bool { return aws.ToString(z.ZoneName) == s.zone }) {
			added = append(added, s.id)
			mappings = append(mappings, elbv2types.SubnetMapping{SubnetId: aws.String(s.id)})
		}
	}
	slices.Sort(kept)
	if len(added) == 0 {
		return kept, nil
	}
	if _, err := l.elbv2.SetSubnets(ctx, &elbv2.SetSubnetsInput{LoadBalancerArn: lb.LoadBalancerArn, SubnetMappings: mappings}); err != nil {
		return nil, fmt.Errorf("adding subnets %v to load balancer %s: %w", added, aws.ToString(lb.LoadBalancerName), err)
	}
	klog.FromContext(ctx).V(2).Info("Added subnets", "subnets", added)
	return kept, nil
}

// subnetsKeptError says that a Network Load Balancer stays in subnets the
// Service no longer asks for.
func subnetsKeptError(name string, kept []string) error {
	return fmt.Errorf("network load balancer %s stays in subnets %v, which annotation %s no longer names: "+
		"subnets are added to an existing network load balancer, never removed or replaced "+
		"(restore the annotation, or delete and recreate the Service)", name, kept, AnnotationSubnets)
}

// ensureNLBCrossZone sets the cross-zone attribute when the annotation
// asks for a value the load balancer does not have.
func (l *loadBalancers) ensureNLBCrossZone(ctx context.Context, lbARN string, want *bool) error {
	if want == nil {
		return nil
	}
	out, err := l.elbv2.DescribeLoadBalancerAttributes(ctx, &elbv2.DescribeLoadBalancerAttributesInput{LoadBalancerArn: aws.String(lbARN)})
	if err != nil {
		return fmt.Errorf("describing the attributes of %s: %w", lbARN, err)
	}
	value := strconv.FormatBool(*want)
	for _, a := range out.Attributes {
		if aws.ToString(a.Key) == nlbAttrCrossZone && aws.ToString(a.Value) == value {
			return nil
		}
	}
	_, err = l.elbv2.ModifyLoadBalancerAttributes(ctx, &elbv2.ModifyLoadBalancerAttributesInput{
		LoadBalancerArn: aws.String(lbARN),
		Attributes:      []elbv2types.LoadBalancerAttribute{{Key: aws.String(nlbAttrCrossZone), Value: aws.String(value)}},
	})
	if err != nil {
		return fmt.Errorf("setting %s of %s: %w", nlbAttrCrossZone, lbARN, err)
	}
	return nil
}

// targetGroupsOf are the target groups a load balancer's listeners
// forward to. Some implementations of the API answer TargetGroupNotFound
// for a load balancer without any: that is none.
func (l *loadBalancers) targetGroupsOf(ctx context.Context, lbARN string) ([]elbv2types.TargetGroup, error) {
	var out []elbv2types.TargetGroup
	pages := elbv2.NewDescribeTargetGroupsPaginator(l.elbv2, &elbv2.DescribeTargetGroupsInput{LoadBalancerArn: aws.String(lbARN)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		var nf *elbv2types.TargetGroupNotFoundException
		if errors.As(err, &nf) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("describing the target groups of %s: %w", lbARN, err)
		}
		out = append(out, page.TargetGroups...)
	}
	return out, nil
}

// findTargetGroup returns the target group of the name, nil when there is
// none.
func (l *loadBalancers) findTargetGroup(ctx context.Context, name string) (*elbv2types.TargetGroup, error) {
	out, err := l.elbv2.DescribeTargetGroups(ctx, &elbv2.DescribeTargetGroupsInput{Names: []string{name}})
	var nf *elbv2types.TargetGroupNotFoundException
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("describing target group %s: %w", name, err)
	}
	for i := range out.TargetGroups {
		if aws.ToString(out.TargetGroups[i].TargetGroupName) == name {
			return &out.TargetGroups[i], nil
		}
	}
	return nil, nil
}

// ensureTargetGroup returns the ARN of a port's target group: one a
// listener uses, else one of the name that is the Service's (made by an
// Ensure that did not finish), else a new one.
func (l *loadBalancers) ensureTargetGroup(ctx context.Context, clusterID string, svc *v1.Service, vpc string, p nlbPort, o *lbOptions,
	tags map[string]string, attached []elbv2types.TargetGroup,
) (string, error) {
	for _, tg := range attached {
		if aws.ToString(tg.TargetGroupName) == p.targetGroup {
			return aws.ToString(tg.TargetGroupArn), nil
		}
	}
	tg, err := l.findTargetGroup(ctx, p.targetGroup)
	if err != nil {
		return "", err
	}
	if tg != nil {
		arn := aws.ToString(tg.TargetGroupArn)
		found, err := l.elbv2Tags(ctx, []string{arn})
		if err != nil {
			return "", err
		}
		if !ownedBy(found[arn], clusterID, svc) {
			return "", foreignError("target group", p.targetGroup, clusterID, svc)
		}
		return arn, nil
	}
	h := o.health
	in := &elbv2.CreateTargetGroupInput{
		Name:                       aws.String(p.targetGroup),
		Protocol:                   p.targetProto,
		Port:                       aws.Int32(p.port.NodePort),
		VpcId:                      aws.String(vpc),
		TargetType:                 elbv2types.TargetTypeEnumInstance,
		HealthCheckEnabled:         aws.Bool(true),
		HealthCheckProtocol:        elbv2types.ProtocolEnum(h.protocol),
		HealthCheckPort:            aws.String(h.port),
		HealthCheckIntervalSeconds: aws.Int32(h.interval),
		HealthCheckTimeoutSeconds:  aws.Int32(h.timeout),
		HealthyThresholdCount:      aws.Int32(h.healthy),
		UnhealthyThresholdCount:    aws.Int32(h.unhealthy),
		Tags:                       elbv2TagList(tags),
	}
	if h.protocol == protoHTTP || h.protocol == protoHTTPS {
		in.HealthCheckPath = aws.String(h.path)
	}
	out, err := l.elbv2.CreateTargetGroup(ctx, in)
	if err != nil {
		return "", fmt.Errorf("creating target group %s: %w", p.targetGroup, err)
	}
	if len(out.TargetGroups) != 1 {
		return "", fmt.Errorf("creating target group %s: ELB returned %d target groups", p.targetGroup, len(out.TargetGroups))
	}
	klog.FromContext(ctx).V(2).Info("Created target group", "targetGroup", p.targetGroup, "port", p.port.Port, "nodePort", p.port.NodePort)
	return aws.ToString(out.TargetGroups[0].TargetGroupArn), nil
}

// syncTargets makes the instances, on port, a target group's targets:
// registering the new ones and deregistering the others, in chunks.
func (l *loadBalancers) syncTargets(ctx context.Context, tgARN string, port int32, ids []string) error {
	out, err := l.elbv2.DescribeTargetHealth(ctx, &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(tgARN)})
	if err != nil {
		return fmt.Errorf("describing the targets of %s: %w", tgARN, err)
	}
	var stale []elbv2types.TargetDescription
	registered := map[string]bool{}
	for _, d := range out.TargetHealthDescriptions {
		if d.Target == nil {
			continue
		}
		id := aws.ToString(d.Target.Id)
		if aws.ToInt32(d.Target.Port) == port && slices.Contains(ids, id) {
			registered[id] = true
			continue
		}
		stale = append(stale, elbv2types.TargetDescription{Id: d.Target.Id, Port: d.Target.Port})
	}
	var add []elbv2types.TargetDescription
	for _, id := range ids {
		if !registered[id] {
			add = append(add, elbv2types.TargetDescription{Id: aws.String(id), Port: aws.Int32(port)})
		}
	}
	for chunk := range slices.Chunk(add, targetChunk) {
		if _, err := l.elbv2.RegisterTargets(ctx, &elbv2.RegisterTargetsInput{TargetGroupArn: aws.String(tgARN), Targets: chunk}); err != nil {
			return fmt.Errorf("registering %d targets with %s: %w", len(chunk), tgARN, err)
		}
	}
	for chunk := range slices.Chunk(stale, targetChunk) {
		if _, err := l.elbv2.DeregisterTargets(ctx, &elbv2.DeregisterTargetsInput{TargetGroupArn: aws.String(tgARN), Targets: chunk}); err != nil {
			return fmt.Errorf("deregistering %d targets from %s: %w", len(chunk), tgARN, err)
		}
	}
	if len(add)+len(stale) > 0 {
		klog.FromContext(ctx).V(2).Info("Changed targets", "targetGroup", tgARN, "registered", len(add), "deregistered", len(stale))
	}
	return nil
}

// listeners are a load balancer's listeners.
func (l *loadBalancers) listeners(ctx context.Context, lbARN string) ([]elbv2types.Listener, error) {
	var out []elbv2types.Listener
	pages := elbv2.NewDescribeListenersPaginator(l.elbv2, &elbv2.DescribeListenersInput{LoadBalancerArn: aws.String(lbARN)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describing the listeners of %s: %w", lbARN, err)
		}
		out = append(out, page.Listeners...)
	}
	return out, nil
}

// forwardsTo is the target group a listener forwards to, "" when it does
// something else.
func forwardsTo(ls elbv2types.Listener) string {
	if len(ls.DefaultActions) != 1 || ls.DefaultActions[0].Type != elbv2types.ActionTypeEnumForward {
		return ""
	}
	a := ls.DefaultActions[0]
	if arn := aws.ToString(a.TargetGroupArn); arn != "" {
		return arn
	}
	if a.ForwardConfig != nil && len(a.ForwardConfig.TargetGroups) == 1 {
		return aws.ToString(a.ForwardConfig.TargetGroups[0].TargetGroupArn)
	}
	return ""
}

func certificateOf(ls elbv2types.Listener) string {
	if len(ls.Certificates) == 0 {
		return ""
	}
	return aws.ToString(ls.Certificates[0].CertificateArn)
}

// ensureListeners makes one listener per port, forwarding to its target
// group, and deletes the others.
func (l *loadBalancers) ensureListeners(ctx context.Context, lbARN string, ports []nlbPort, tgARNs map[int32]string, o *lbOptions, tags map[string]string) error {
	logger := klog.FromContext(ctx)
	current, err := l.listeners(ctx, lbARN)
	if err != nil {
		return err
	}
	for _, p := range ports {
		tg := tgARNs[p.port.Port]
		var certs []elbv2types.Certificate
		cert := ""
		if p.listenerProto == elbv2types.ProtocolEnumTls {
			cert = o.sslCert
			certs = []elbv2types.Certificate{{CertificateArn: aws.String(cert)}}
		}
		actions := []elbv2types.Action{{Type: elbv2types.ActionTypeEnumForward, TargetGroupArn: aws.String(tg)}}
		i := slices.IndexFunc(current, func(ls elbv2types.Listener) bool { return aws.ToInt32(ls.Port) == p.port.Port })
		if i < 0 {
			_, err := l.elbv2.CreateListener(ctx, &elbv2.CreateListenerInput{
				LoadBalancerArn: aws.String(lbARN), Port: aws.Int32(p.port.Port), Protocol: p.listenerProto,
				Certificates: certs, DefaultActions: actions, Tags: elbv2TagList(tags),
			})
			if err != nil {
				return fmt.Errorf("creating the listener of port %d: %w", p.port.Port, err)
			}
			logger.V(2).Info("Created listener", "port", p.port.Port, "protocol", p.listenerProto)
			continue
		}
		ls := current[i]
		if ls.Protocol == p.listenerProto && forwardsTo(ls) == tg && certificateOf(ls) == cert {
			continue
		}
		_, err := l.elbv2.ModifyListener(ctx, &elbv2.ModifyListenerInput{
			ListenerArn: ls.ListenerArn, Port: aws.Int32(p.port.Port), Protocol: p.listenerProto, Certificates: certs, DefaultActions: actions,
		})
		if err != nil {
			return fmt.Errorf("changing the listener of port %d: %w", p.port.Port, err)
		}
		logger.V(2).Info("Changed listener", "port", p.port.Port, "protocol", p.listenerProto)
	}
	for _, ls := range current {
		if slices.ContainsFunc(ports, func(p nlbPort) bool { return p.port.Port == aws.ToInt32(ls.Port) }) {
			continue
		}
		if _, err := l.elbv2.DeleteListener(ctx, &elbv2.DeleteListenerInput{ListenerArn: ls.ListenerArn}); err != nil {
			var nf *elbv2types.ListenerNotFoundException
			if !errors.As(err, &nf) {
				return fmt.Errorf("deleting the listener of port %d: %w", aws.ToInt32(ls.Port), err)
			}
		}
		logger.V(2).Info("Deleted listener", "port", aws.ToInt32(ls.Port))
	}
	return nil
}

// deleteTargetGroups deletes those of the target groups that are the
// Service's, trying again while ELB still counts one as in use.
func (l *loadBalancers) deleteTargetGroups(ctx context.Context, clusterID string, svc *v1.Service, list []elbv2types.TargetGroup) error {
	if len(list) == 0 {
		return nil
	}
	arns := make([]string, 0, len(list))
	for _, tg := range list {
		arns = append(arns, aws.ToString(tg.TargetGroupArn))
	}
	tags, err := l.elbv2Tags(ctx, arns)
	if err != nil {
		return err
	}
	var errs []error
	for _, tg := range list {
		arn := aws.ToString(tg.TargetGroupArn)
		if !ownedBy(tags[arn], clusterID, svc) {
			klog.FromContext(ctx).Info("Not deleting a target group without the Service's tags", "targetGroup", aws.ToString(tg.TargetGroupName))
			continue
		}
		err := retryWhileInUse(ctx, l.inUseInterval, l.inUseTimeout, isResourceInUse, func(ctx context.Context) error {
			_, err := l.elbv2.DeleteTargetGroup(ctx, &elbv2.DeleteTargetGroupInput{TargetGroupArn: aws.String(arn)})
			var nf *elbv2types.TargetGroupNotFoundException
			if errors.As(err, &nf) {
				return nil
			}
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting target group %s: %w", aws.ToString(tg.TargetGroupName), err))
			continue
		}
		klog.FromContext(ctx).V(2).Info("Deleted target group", "targetGroup", aws.ToString(tg.TargetGroupName))
	}
	return errors.Join(errs...)
}

func isResourceInUse(err error) bool {
	var e *elbv2types.ResourceInUseException
	return errors.As(err, &e)
}

// updateNLB brings the targets of every target group of the load
// balancer in line with the nodes.
func (l *loadBalancers) updateNLB(ctx context.Context, clusterID string, svc *v1.Service, name string, o *lbOptions, nodes []*v1.Node) error {
	lb, _, err := l.ownedNLB(ctx, clusterID, svc, name)
	if err != nil {
		return err
	}
	if lb == nil {
		if clb, err := l.findCLB(ctx, name); err != nil || clb != nil {
			return errors.Join(err, typeChangeError(name, kindClassic, kindNetwork))
		}
		return fmt.Errorf("network load balancer %s does not exist", name)
	}
	instances, err := l.targetInstances(ctx, nodes, o.nodeLabels)
	if err != nil {
		return err
	}
	groups, err := l.targetGroupsOf(ctx, aws.ToString(lb.LoadBalancerArn))
	if err != nil {
		return err
	}
	ids := instanceIDs(instances)
	for _, tg := range groups {
		if err := l.syncTargets(ctx, aws.ToString(tg.TargetGroupArn), aws.ToInt32(tg.Port), ids); err != nil {
			return err
		}
	}
	return l.ensureNLBNodeRules(ctx, clusterID, aws.ToString(lb.VpcId), name, o, instances)
}

// ensureNLBNodeRules lets the clients and the health checks into the
// instances' security groups, unless the config turns that off.
func (l *loadBalancers) ensureNLBNodeRules(ctx context.Context, clusterID, vpc, name string, o *lbOptions, instances []ec2types.Instance) error {
	if l.cfg.DisableSecurityGroupIngress {
		return nil
	}
	groups, err := l.nodeSecurityGroups(ctx, clusterID, instances)
	if err != nil {
		return err
	}
	cidrs, err := l.vpcCIDRs(ctx, vpc)
	if err != nil {
		return err
	}
	return l.syncNLBNodeRules(ctx, vpc, name, groups, nlbNodeRules(name, o, cidrs))
}

// deleteNLB deletes the Service's Network Load Balancer, then its target
// groups: those its listeners used and those the Service's ports name
// (left by an Ensure that did not finish).
func (l *loadBalancers) deleteNLB(ctx context.Context, clusterID string, svc *v1.Service, name string) error {
	logger := klog.FromContext(ctx)
	lb, err := l.findNLB(ctx, name)
	if err != nil {
		return err
	}
	var groups []elbv2types.TargetGroup
	vpc := l.cfg.VPC
	if lb != nil {
		vpc = aws.ToString(lb.VpcId)
		arn := aws.ToString(lb.LoadBalancerArn)
		tags, err := l.elbv2Tags(ctx, []string{arn})
		if err != nil {
			return err
		}
		if !ownedBy(tags[arn], clusterID, svc) {
			logger.Info("Not deleting a load balancer without the Service's tags", "tags", tags[arn])
			return nil
		}
		if groups, err = l.targetGroupsOf(ctx, arn); err != nil {
			return err
		}
		if _, err := l.elbv2.DeleteLoadBalancer(ctx, &elbv2.DeleteLoadBalancerInput{LoadBalancerArn: aws.String(arn)}); err != nil {
			var nf *elbv2types.LoadBalancerNotFoundException
			if !errors.As(err, &nf) {
				return fmt.Errorf("deleting load balancer %s: %w", name, err)
			}
		}
		logger.V(2).Info("Deleted network load balancer")
	}
	if vpc != "" {
		if err := l.syncNLBNodeRules(ctx, vpc, name, nil, nil); err != nil {
			return err
		}
	}
	if kind, err := serviceKind(svc); err == nil && kind == kindNetwork {
		if o, err := parseLBOptions(svc, kind); err == nil {
			for _, p := range nlbPorts(clusterID, svc, o) {
				if slices.ContainsFunc(groups, func(tg elbv2types.TargetGroup) bool { return aws.ToString(tg.TargetGroupName) == p.targetGroup }) {
					continue
				}
				tg, err := l.findTargetGroup(ctx, p.targetGroup)
				if err != nil {
					return err
				}
				if tg != nil {
					groups = append(groups, *tg)
				}
			}
		}
	}
	return l.deleteTargetGroups(ctx, clusterID, svc, groups)
}
