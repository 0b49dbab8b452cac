package aws

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
)

// Tags of the load balancers' resources, besides the cluster tag.
const (
	// tagServiceName = <namespace>/<name> names a resource's Service.
	tagServiceName = "kubernetes.io/service-name"
	// tagClusterOwned is the cluster tag's value on what the cluster
	// created and deletes.
	tagClusterOwned = "owned"
	// Subnet tags that mark subnets for internet-facing and internal
	// load balancers.
	tagRoleELB         = "kubernetes.io/role/elb"
	tagRoleInternalELB = "kubernetes.io/role/internal-elb"
	tagName            = "Name"
)

// Filters of DescribeSubnets and DescribeSecurityGroups.
const (
	filterVPCID     = "vpc-id"
	filterTagKey    = "tag-key"
	filterSubnetID  = "subnet-id"
	filterGroupName = "group-name"
	filterTagPrefix = "tag:"
)

// Defaults of the waits for the deletion of what a load balancer used.
const (
	// A security group or target group stays in use for a while after
	// its load balancer is deleted; the delete is tried again every
	// interval until the timeout (or the caller's context) ends.
	defaultInUseRetryInterval = 5 * time.Second
	defaultInUseRetryTimeout  = 3 * time.Minute
	// targetChunk is how many targets one (de)registration names.
	targetChunk = 100
	// tagChunk is how many resources one ELBv2 DescribeTags names.
	tagChunk = 20
	// maxLBNameLength is ELB's limit on load balancer and target group
	// names.
	maxLBNameLength = 32
)

// loadBalancers implements cloudprovider.LoadBalancer on ELB: a Classic
// ELB, or a Network Load Balancer for a Service annotated
// aws-load-balancer-type: nlb. The load balancer of a Service is named as
// aws-cloud-controller-manager names it, so that one it made is adopted.
// Everything it makes is tagged with the cluster (owned) and the Service,
// and nothing without those tags is ever changed or deleted. Every
// request and every wait ends with the caller's context.
type loadBalancers struct {
	ec2       *ec2.Client
	elb       *elb.Client
	elbv2     *elbv2.Client
	instances *instances
	cfg       GlobalConfig

	inUseInterval, inUseTimeout time.Duration
}

var _ cloudprovider.LoadBalancer = (*loadBalancers)(nil)

func newLoadBalancers(c *clients, inst *instances, g GlobalConfig) *loadBalancers {
	return &loadBalancers{
		ec2: c.ec2, elb: c.elb, elbv2: c.elbv2, instances: inst, cfg: g,
		inUseInterval: defaultInUseRetryInterval, inUseTimeout: defaultInUseRetryTimeout,
	}
}

// GetLoadBalancerName is aws-cloud-controller-manager's: "a" and the
// Service's UID without dashes, cut to 32 characters.
func (l *loadBalancers) GetLoadBalancerName(_ context.Context, _ string, svc *v1.Service) string {
	return loadBalancerName(svc)
}

func loadBalancerName(svc *v1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// clusterID is the cluster of the tags: the config's, else the name the
// controller manager was given.
func (l *loadBalancers) clusterID(clusterName string) string {
	if id := l.cfg.clusterID(); id != "" {
		return id
	}
	return clusterName
}

// lbContext adds the Service and load balancer to the context's logger.
func lbContext(ctx context.Context, svc *v1.Service, name string, kind lbKind) context.Context {
	return klog.NewContext(ctx, klog.FromContext(ctx).WithValues("service", klog.KObj(svc), "loadBalancer", name, "kind", string(kind)))
}

// GetLoadBalancer returns the DNS name of the Service's load balancer,
// of whichever kind it is.
func (l *loadBalancers) GetLoadBalancer(ctx context.Context, _ string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	if _, err := serviceKind(svc); errors.Is(err, cloudprovider.ImplementedElsewhere) {
		return nil, false, nil
	}
	name := loadBalancerName(svc)
	nlb, err := l.findNLB(ctx, name)
	if err != nil {
		return nil, false, err
	}
	if nlb != nil {
		return hostnameStatus(aws.ToString(nlb.DNSName)), true, nil
	}
	clb, err := l.findCLB(ctx, name)
	if err != nil || clb == nil {
		return nil, false, err
	}
	return hostnameStatus(aws.ToString(clb.DNSName)), true, nil
}

func hostnameStatus(dns string) *v1.LoadBalancerStatus {
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{Hostname: dns}}}
}

// EnsureLoadBalancer creates the Service's load balancer or brings it in
// line with the Service and the nodes, and returns its DNS name. Every
// annotation is read first: a bad one is an error naming it, and nothing
// is changed. A load balancer of the other kind under the Service's name
// is not replaced: changing the type annotation is refused.
func (l *loadBalancers) EnsureLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	kind, err := serviceKind(svc)
	if err != nil {
		return nil, err
	}
	opts, err := parseLBOptions(svc, kind)
	if err != nil {
		return nil, err
	}
	name := loadBalancerName(svc)
	ctx = lbContext(ctx, svc, name, kind)
	if kind == kindNetwork {
		return l.ensureNLB(ctx, l.clusterID(clusterName), svc, name, opts, nodes)
	}
	return l.ensureCLB(ctx, l.clusterID(clusterName), svc, name, opts, nodes)
}

// UpdateLoadBalancer brings the load balancer's targets in line with the
// nodes; nothing else changes.
func (l *loadBalancers) UpdateLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) error {
	kind, err := serviceKind(svc)
	if err != nil {
		return err
	}
	opts, err := parseLBOptions(svc, kind)
	if err != nil {
		return err
	}
	name := loadBalancerName(svc)
	ctx = lbContext(ctx, svc, name, kind)
	if kind == kindNetwork {
		return l.updateNLB(ctx, l.clusterID(clusterName), svc, name, opts, nodes)
	}
	return l.updateCLB(ctx, l.clusterID(clusterName), svc, name, opts, nodes)
}

// EnsureLoadBalancerDeleted deletes the Service's load balancer of either
// kind and what it used: target groups, its security group and the
// rules it added to the nodes' security groups. A load balancer that is
// gone is success; one without the cluster's and the Service's tags is
// left alone. The annotations other than the type are not read, so that
// a bad one never keeps a load balancer alive.
func (l *loadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, svc *v1.Service) error {
	if _, err := serviceKind(svc); errors.Is(err, cloudprovider.ImplementedElsewhere) {
		return err
	}
	name := loadBalancerName(svc)
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("service", klog.KObj(svc), "loadBalancer", name))
	id := l.clusterID(clusterName)
	return errors.Join(l.deleteNLB(ctx, id, svc, name), l.deleteCLB(ctx, id, svc, name))
}

// ownTags are the tags of every resource of a Service's load balancer:
// the cluster's, the Service's, and the annotation's.
func ownTags(clusterID string, svc *v1.Service, extra map[string]string) map[string]string {
	tags := maps.Clone(extra)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[tagClusterPrefix+clusterID] = tagClusterOwned
	tags[tagServiceName] = serviceName(svc)
	return tags
}

func serviceName(svc *v1.Service) string { return svc.Namespace + "/" + svc.Name }

// ownedBy reports whether tags mark a resource as the Service's, made by
// the cluster: the Service's tag, and the cluster tag "owned" (or the
// legacy cluster tag).
func ownedBy(tags map[string]string, clusterID string, svc *v1.Service) bool {
	if tags[tagServiceName] != serviceName(svc) {
		return false
	}
	return tags[tagClusterPrefix+clusterID] == tagClusterOwned || tags[tagClusterLegacy] == clusterID
}

// missingTags are the tags of want that have has not, or with another
// value.
func missingTags(has, want map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range want {
		if cur, ok := has[k]; !ok || cur != v {
			out[k] = v
		}
	}
	return out
}

// sortedKeys are a map's keys in order, so that requests are stable.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func ec2Tags(tags map[string]string) []ec2types.Tag {
	out := make([]ec2types.Tag, 0, len(tags))
	for _, k := range sortedKeys(tags) {
		out = append(out, ec2types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	return out
}

func ec2TagMap(tags []ec2types.Tag) map[string]string {
	out := make(map[string]string, len(tags))
	for _, t := range tags {
		out[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return out
}

// typeChangeError refuses to turn a load balancer of one kind into the
// other: the Service would lose its address, so an operator deletes and
// recreates the Service instead.
func typeChangeError(name string, has, want lbKind) error {
	return fmt.Errorf("load balancer %s is a %s and the Service asks for a %s: changing annotation %s of an existing load balancer is not supported "+
		"(restore it, or delete and recreate the Service)", name, has, want, AnnotationType)
}

// schemeChangeError refuses to change an existing load balancer between
// internal and internet-facing, which ELB cannot do in place.
func schemeChangeError(name, has string) error {
	return fmt.Errorf("load balancer %s is %s: changing annotation %s of an existing load balancer is not supported "+
		"(restore it, or delete and recreate the Service)", name, has, AnnotationInternal)
}

// foreignError refuses to adopt a load balancer that is not the
// Service's.
func foreignError(what, name string, clusterID string, svc *v1.Service) error {
	return fmt.Errorf("%s %s exists without the tags of this Service (%s=%s, %s%s=%s): it is not changed or adopted",
		what, name, tagServiceName, serviceName(svc), tagClusterPrefix, clusterID, tagClusterOwned)
}

// scheme is the load balancer scheme of the options.
func (o *lbOptions) scheme() string {
	if o.internal {
		return "internal"
	}
	return "internet-facing"
}

// targetInstances are the running instances of the nodes that may be
// targets: those with the annotation's labels, found by providerID or,
// without one, by name. Nodes whose instance is gone are left out; the
// result is sorted by instance ID.
func (l *loadBalancers) targetInstances(ctx context.Context, nodes []*v1.Node, labels map[string]string) ([]ec2types.Instance, error) {
	logger := klog.FromContext(ctx)
	var ids []string
	var found []ec2types.Instance
	for _, n := range nodes {
		if !hasLabels(n, labels) {
			continue
		}
		if n.Spec.ProviderID == "" {
			in, err := l.instances.findByName(ctx, n.Name)
			if isNotFound(err) {
				logger.V(4).Info("Node has no instance, not a target", "node", klog.KObj(n))
				continue
			}
			if err != nil {
				return nil, err
			}
			found = append(found, *in)
			continue
		}
		id, err := instanceIDFromProviderID(n.Spec.ProviderID)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	for chunk := range slices.Chunk(ids, 200) {
		list, err := l.instances.describeByIDs(ctx, chunk)
		if err != nil {
			return nil, fmt.Errorf("describing the nodes' instances: %w", err)
		}
		found = append(found, list...)
	}
	var out []ec2types.Instance
	for _, in := range found {
		if gone(&in) || slices.ContainsFunc(out, func(o ec2types.Instance) bool { return aws.ToString(o.InstanceId) == aws.ToString(in.InstanceId) }) {
			continue
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b ec2types.Instance) int {
		return strings.Compare(aws.ToString(a.InstanceId), aws.ToString(b.InstanceId))
	})
	return out, nil
}

func hasLabels(n *v1.Node, labels map[string]string) bool {
	for k, v := range labels {
		if cur, ok := n.Labels[k]; !ok || cur != v {
			return false
		}
	}
	return true
}

func instanceIDs(list []ec2types.Instance) []string {
	out := make([]string, 0, len(list))
	for _, in := range list {
		out = append(out, aws.ToString(in.InstanceId))
	}
	return out
}

// vpcOf is the VPC of new load balancers: the config's, else the nodes'.
func (l *loadBalancers) vpcOf(list []ec2types.Instance) (string, error) {
	if l.cfg.VPC != "" {
		return l.cfg.VPC, nil
	}
	for _, in := range list {
		if v := aws.ToString(in.VpcId); v != "" {
			return v, nil
		}
	}
	return "", errors.New("no VPC for the load balancer: no node has an instance in one, and [Global] VPC is not set")
}

// lbSubnet is a subnet of a load balancer, with its availability zone.
type lbSubnet struct {
	id, zone string
}

func subnetIDs(list []lbSubnet) []string {
	out := make([]string, 0, len(list))
	for _, s := range list {
		out = append(out, s.id)
	}
	return out
}

// placement is where an existing load balancer is: its VPC, its subnets
// (with their zones where ELB tells them) and its availability zones.
type placement struct {
	vpc     string
	subnets []lbSubnet
	zones   []string
}

// subnets are the subnets a load balancer should be in, sorted by ID.
//
// With the annotation, they are the annotation's: an operator's explicit
// choice, which an existing load balancer follows as far as its kind
// allows (not into another VPC).
//
// Otherwise they are discovered: the subnets of the VPC with the role tag
// of the scheme and the cluster tag, one per availability zone, the
// lowest ID when a zone has several. An existing load balancer keeps the
// subnets it is in, and gets the discovered ones of zones it is not in
// only: it may have been made by aws-cloud-controller-manager, which also
// takes subnets without the role tag, and discovery is no reason to move
// it (a subnet tagged later, or a tag taken away, does not either). The
// VPC is the existing load balancer's, else the config's or the nodes'.
// It returns the subnets' VPC.
func (l *loadBalancers) subnets(ctx context.Context, clusterID string, o *lbOptions, instances []ec2types.Instance, at *placement) (list []lbSubnet, vpc string, err error) {
	if len(o.subnets) > 0 {
		list, vpc, err = l.annotatedSubnets(ctx, o.subnets)
		if err == nil && at != nil && vpc != at.vpc {
			err = fmt.Errorf("annotation %s: the subnets are in VPC %s and the load balancer in VPC %s: a load balancer cannot move to another VPC "+
				"(restore the annotation, or delete and recreate the Service)", AnnotationSubnets, vpc, at.vpc)
		}
		return list, vpc, err
	}
	if at != nil {
		vpc = at.vpc
	} else if vpc, err = l.vpcOf(instances); err != nil {
		return nil, "", err
	}
	role := tagRoleELB
	if o.internal {
		role = tagRoleInternalELB
	}
	var found []ec2types.Subnet
	pages := ec2.NewDescribeSubnetsPaginator(l.ec2, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{
		{Name: aws.String(filterVPCID), Values: []string{vpc}},
		{Name: aws.String(filterTagKey), Values: []string{role}},
	}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("describing the subnets of VPC %s: %w", vpc, err)
		}
		found = append(found, page.Subnets...)
	}
	byZone := map[string]string{}
	for _, s := range found {
		tags := ec2TagMap(s.Tags)
		if _, ok := tags[tagClusterPrefix+clusterID]; !ok {
			continue
		}
		if v := tags[role]; v != "" && v != "1" && v != "true" {
			continue
		}
		zone, id := aws.ToString(s.AvailabilityZone), aws.ToString(s.SubnetId)
		if cur, ok := byZone[zone]; !ok || id < cur {
			byZone[zone] = id
		}
	}
	if at != nil {
		list = slices.Clone(at.subnets)
		if err := l.fillZones(ctx, list, found); err != nil {
			return nil, "", err
		}
		for _, zone := range at.zones {
			delete(byZone, zone)
		}
		for _, s := range list {
			delete(byZone, s.zone)
		}
	}
	if len(list) == 0 && len(byZone) == 0 {
		return nil, "", fmt.Errorf("no subnet of VPC %s has the tags %s and %s%s; tag the load balancers' subnets or list them in annotation %s",
			vpc, role, tagClusterPrefix, clusterID, AnnotationSubnets)
	}
	for zone, id := range byZone {
		list = append(list, lbSubnet{id: id, zone: zone})
	}
	slices.SortFunc(list, func(a, b lbSubnet) int { return strings.Compare(a.id, b.id) })
	return list, vpc, nil
}

// fillZones fills in the zones of the subnets that lack theirs (a Classic
// ELB lists its subnets and its zones apart): from known, subnets already
// described, else from one DescribeSubnets. A subnet that is gone keeps no
// zone.
func (l *loadBalancers) fillZones(ctx context.Context, list []lbSubnet, known []ec2types.Subnet) error {
	fill := func(subnets []ec2types.Subnet) (missing []string) {
		for i := range list {
			if list[i].zone != "" {
				continue
			}
			j := slices.IndexFunc(subnets, func(s ec2types.Subnet) bool { return aws.ToString(s.SubnetId) == list[i].id })
			if j < 0 {
				missing = append(missing, list[i].id)
				continue
			}
			list[i].zone = aws.ToString(subnets[j].AvailabilityZone)
		}
		return missing
	}
	ids := fill(known)
	if len(ids) == 0 {
		return nil
	}
	// A filter, not SubnetIds: a subnet that is gone is no error.
	out, err := l.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{{Name: aws.String(filterSubnetID), Values: ids}}})
	if err != nil {
		return fmt.Errorf("describing subnets %v: %w", ids, err)
	}
	fill(out.Subnets)
	return nil
}

// annotatedSubnets finds the subnets of the annotation, by ID (subnet-...)
// or Name tag.
func (l *loadBalancers) annotatedSubnets(ctx context.Context, names []string) ([]lbSubnet, string, error) {
	var ids, tagged []string
	for _, n := range names {
		if strings.HasPrefix(n, "subnet-") {
			ids = append(ids, n)
		} else {
			tagged = append(tagged, n)
		}
	}
	var list []ec2types.Subnet
	if len(ids) > 0 {
		out, err := l.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: ids})
		if err != nil {
			return nil, "", fmt.Errorf("annotation %s: describing subnets %v: %w", AnnotationSubnets, ids, err)
		}
		list = append(list, out.Subnets...)
	}
	if len(tagged) > 0 {
		out, err := l.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{
			{Name: aws.String(filterTagPrefix + tagName), Values: tagged},
		}})
		if err != nil {
			return nil, "", fmt.Errorf("annotation %s: describing subnets named %v: %w", AnnotationSubnets, tagged, err)
		}
		list = append(list, out.Subnets...)
	}
	var vpc string
	var out []lbSubnet
	for _, n := range names {
		i := slices.IndexFunc(list, func(s ec2types.Subnet) bool {
			return aws.ToString(s.SubnetId) == n || ec2TagMap(s.Tags)[tagName] == n
		})
		if i < 0 {
			return nil, "", fmt.Errorf("annotation %s: no subnet %s", AnnotationSubnets, n)
		}
		s := list[i]
		if vpc != "" && aws.ToString(s.VpcId) != vpc {
			return nil, "", fmt.Errorf("annotation %s: the subnets are in different VPCs (%s, %s)", AnnotationSubnets, vpc, aws.ToString(s.VpcId))
		}
		vpc = aws.ToString(s.VpcId)
		out = append(out, lbSubnet{id: aws.ToString(s.SubnetId), zone: aws.ToString(s.AvailabilityZone)})
	}
	slices.SortFunc(out, func(a, b lbSubnet) int { return strings.Compare(a.id, b.id) })
	return slices.Compact(out), vpc, nil
}

// retryWhileInUse calls del until it succeeds or fails with an error
// inUse does not accept, every interval, for at most timeout and never
// past the context: what a deleted load balancer used stays in use for a
// little while.
func retryWhileInUse(ctx context.Context, interval, timeout time.Duration, inUse func(error) bool, del func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		last = del(ctx)
		if last == nil {
			return true, nil
		}
		if inUse(last) {
			klog.FromContext(ctx).V(4).Info("Still in use, trying again", "err", last)
			return false, nil
		}
		return false, last
	})
	if err != nil && last != nil && inUse(last) {
		return fmt.Errorf("%w (still in use when giving up: %w)", err, last)
	}
	return err
}
