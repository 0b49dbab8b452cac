package aws

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2/ktesting"
)

// lbEnv is moto with a cluster's VPC: subnets tagged for load balancers
// in two zones, a nodes' security group with the cluster tag, and raw
// clients to arrange and inspect the cloud.
type lbEnv struct {
	*testCloud
	elb   *elb.Client
	elbv2 *elbv2.Client
	lbs   *loadBalancers

	vpc string
	// public are the subnets for internet-facing load balancers by zone;
	// internal the one for internal ones; spare a second tagged subnet in
	// zone a, with a higher ID than public["us-east-1a"].
	public   map[string]string
	internal string
	spare    string
	nodesSG  string
}

func newLBEnv(t *testing.T, extra ...string) *lbEnv {
	t.Helper()
	c := newTestCloud(t)
	e := &lbEnv{testCloud: c, public: map[string]string{}}
	e.elb, e.elbv2 = c.loadBalancerClients()
	p := newTestProvider(t, c.conf(extra...), defaultBatchOptions)
	e.lbs = p.lbs
	e.lbs.inUseInterval = 10 * time.Millisecond
	e.lbs.inUseTimeout = 5 * time.Second

	ctx := t.Context()
	vpc, err := c.ec2.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: aws.String("10.0.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	e.vpc = aws.ToString(vpc.Vpc.VpcId)
	cluster := map[string]string{tagClusterPrefix + testCluster: "shared"}
	subnet := func(cidr, zone string, tags map[string]string) string {
		out, err := c.ec2.CreateSubnet(ctx, &ec2.CreateSubnetInput{
			VpcId: aws.String(e.vpc), CidrBlock: aws.String(cidr), AvailabilityZone: aws.String(zone),
			TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSubnet, Tags: ec2Tags(tags)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.Subnet.SubnetId)
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for ck, cv := range cluster {
			m[ck] = cv
		}
		return m
	}
	a1 := subnet("10.0.1.0/24", "us-east-1a", with(tagRoleELB, "1"))
	a2 := subnet("10.0.2.0/24", "us-east-1a", with(tagRoleELB, "1"))
	e.public["us-east-1a"], e.spare = min(a1, a2), max(a1, a2)
	e.public["us-east-1b"] = subnet("10.0.3.0/24", "us-east-1b", with(tagRoleELB, ""))
	e.internal = subnet("10.0.4.0/24", "us-east-1a", with(tagRoleInternalELB, "1"))
	// Tagged for load balancers, but not the cluster's.
	subnet("10.0.5.0/24", "us-east-1c", map[string]string{tagRoleELB: "1", tagName: "other-cluster"})

	sg, err := c.ec2.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
		GroupName: aws.String("nodes"), Description: aws.String("nodes"), VpcId: aws.String(e.vpc),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSecurityGroup, Tags: ec2Tags(cluster)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.nodesSG = aws.ToString(sg.GroupId)
	return e
}

// runNodes runs n instances of the cluster in the VPC's subnets, in the
// nodes' security group, and returns their Nodes as the cloud-node
// controller leaves them.
func (e *lbEnv) runNodes(t *testing.T, n int) []*v1.Node {
	t.Helper()
	var nodes []*v1.Node
	for i := range n {
		subnet := e.public["us-east-1a"]
		if i%2 == 1 {
			subnet = e.public["us-east-1b"]
		}
		out, err := e.ec2.RunInstances(t.Context(), &ec2.RunInstancesInput{
			ImageId: aws.String(testAMI), MinCount: aws.Int32(1), MaxCount: aws.Int32(1), InstanceType: ec2types.InstanceTypeM5Large,
			SubnetId: aws.String(subnet), SecurityGroupIds: []string{e.nodesSG},
			TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: ec2Tags(clusterTags())}},
		})
		if err != nil {
			t.Fatal(err)
		}
		in := out.Instances[0]
		nodes = append(nodes, &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: aws.ToString(in.PrivateDnsName)},
			Spec:       v1.NodeSpec{ProviderID: providerID(aws.ToString(in.Placement.AvailabilityZone), aws.ToString(in.InstanceId))},
		})
	}
	return nodes
}

func nodeIDs(t *testing.T, nodes []*v1.Node) []string {
	t.Helper()
	var ids []string
	for _, n := range nodes {
		id, err := instanceIDFromProviderID(n.Spec.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// mutations counts the requests that change the cloud.
func (e *lbEnv) mutations() map[string]int {
	out := map[string]int{}
	for _, r := range e.proxy.recorded() {
		for _, prefix := range []string{"Create", "Delete", "Modify", "Register", "Deregister", "Authorize", "Revoke", "Add", "Apply", "Configure", "Set", "Attach", "Detach"} {
			if strings.HasPrefix(r.action, prefix) {
				out[r.action]++
			}
		}
	}
	return out
}

func (e *lbEnv) nlbs(t *testing.T) []elbv2types.LoadBalancer {
	t.Helper()
	out, err := e.elbv2.DescribeLoadBalancers(t.Context(), &elbv2.DescribeLoadBalancersInput{})
	if err != nil {
		t.Fatal(err)
	}
	return out.LoadBalancers
}

func (e *lbEnv) targetGroups(t *testing.T) []elbv2types.TargetGroup {
	t.Helper()
	out, err := e.elbv2.DescribeTargetGroups(t.Context(), &elbv2.DescribeTargetGroupsInput{})
	if err != nil {
		t.Fatal(err)
	}
	return out.TargetGroups
}

func (e *lbEnv) v2Tags(t *testing.T, arn string) map[string]string {
	t.Helper()
	tags, err := e.lbs.elbv2Tags(t.Context(), []string{arn})
	if err != nil {
		t.Fatal(err)
	}
	return tags[arn]
}

func (e *lbEnv) targets(t *testing.T, tgARN string) []string {
	t.Helper()
	out, err := e.elbv2.DescribeTargetHealth(t.Context(), &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(tgARN)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range out.TargetHealthDescriptions {
		ids = append(ids, aws.ToString(d.Target.Id))
	}
	slices.Sort(ids)
	return ids
}

func (e *lbEnv) securityGroup(t *testing.T, id string) *ec2types.SecurityGroup {
	t.Helper()
	out, err := e.ec2.DescribeSecurityGroups(t.Context(), &ec2.DescribeSecurityGroupsInput{GroupIds: []string{id}})
	if errorCode(err) == codeGroupNotFound {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &out.SecurityGroups[0]
}

func expectTags(t *testing.T, what string, tags map[string]string, svc *v1.Service, extra map[string]string) {
	t.Helper()
	want := map[string]string{tagClusterPrefix + testCluster: "owned", tagServiceName: svc.Namespace + "/" + svc.Name}
	for k, v := range extra {
		want[k] = v
	}
	for k, v := range want {
		if tags[k] != v {
			t.Errorf("%s: tag %s = %q; want %q (tags %v)", what, k, tags[k], v, tags)
		}
	}
}

// TestNLB: a Network Load Balancer is made once, with one target group
// per port and one listener per port, everything tagged; an update
// changes only targets; a delete leaves nothing.
func TestNLB(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 3)
	svc := lbService(map[string]string{
		AnnotationType:           "nlb",
		AnnotationAdditionalTags: "team=shop,env=test",
		AnnotationCrossZone:      "true",
	}, v1.ServicePort{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080},
		v1.ServicePort{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 30053})
	extra := map[string]string{"team": "shop", "env": "test"}

	first, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes)
	if err != nil {
		t.Fatalf("EnsureLoadBalancer: %v", err)
	}
	if len(first.Ingress) != 1 || first.Ingress[0].Hostname == "" {
		t.Fatalf("status = %+v; want a hostname", first)
	}
	before := e.mutations()
	second, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes)
	if err != nil || second.Ingress[0].Hostname != first.Ingress[0].Hostname {
		t.Fatalf("EnsureLoadBalancer again = %+v, %v; want %+v", second, err, first)
	}
	if after := e.mutations(); !mapsEqual(before, after) {
		t.Errorf("a second Ensure changed the cloud: %v, then %v", before, after)
	}

	lbs := e.nlbs(t)
	if len(lbs) != 1 {
		t.Fatalf("%d load balancers; want 1", len(lbs))
	}
	lb := lbs[0]
	if aws.ToString(lb.LoadBalancerName) != loadBalancerName(svc) || lb.Type != elbv2types.LoadBalancerTypeEnumNetwork ||
		lb.Scheme != elbv2types.LoadBalancerSchemeEnumInternetFacing || aws.ToString(lb.VpcId) != e.vpc {
		t.Errorf("load balancer = %s %s %s in %s", aws.ToString(lb.LoadBalancerName), lb.Type, lb.Scheme, aws.ToString(lb.VpcId))
	}
	var subnets []string
	for _, z := range lb.AvailabilityZones {
		subnets = append(subnets, aws.ToString(z.SubnetId))
	}
	slices.Sort(subnets)
	if want := []string{e.public["us-east-1a"], e.public["us-east-1b"]}; !slices.Equal(subnets, sortedCopy(want)) {
		t.Errorf("subnets = %v; want one per zone, the lowest ID: %v", subnets, want)
	}
	expectTags(t, "load balancer", e.v2Tags(t, aws.ToString(lb.LoadBalancerArn)), svc, extra)

	groups := e.targetGroups(t)
	if len(groups) != 2 {
		t.Fatalf("%d target groups; want 2", len(groups))
	}
	ids := nodeIDs(t, nodes)
	for _, tg := range groups {
		name := aws.ToString(tg.TargetGroupName)
		if len(name) > maxLBNameLength || tg.TargetType != elbv2types.TargetTypeEnumInstance || tg.HealthCheckProtocol != elbv2types.ProtocolEnumTcp {
			t.Errorf("target group %s: type %s, health check %s", name, tg.TargetType, tg.HealthCheckProtocol)
		}
		port := aws.ToInt32(tg.Port)
		if (port == 30080) != (tg.Protocol == elbv2types.ProtocolEnumTcp) || (port == 30053) != (tg.Protocol == elbv2types.ProtocolEnumUdp) {
			t.Errorf("target group %s: %s on %d", name, tg.Protocol, port)
		}
		expectTags(t, "target group "+name, e.v2Tags(t, aws.ToString(tg.TargetGroupArn)), svc, extra)
		if got := e.targets(t, aws.ToString(tg.TargetGroupArn)); !slices.Equal(got, ids) {
			t.Errorf("targets of %s = %v; want %v", name, got, ids)
		}
	}
	listeners, err := e.elbv2.DescribeListeners(ctx, &elbv2.DescribeListenersInput{LoadBalancerArn: lb.LoadBalancerArn})
	if err != nil {
		t.Fatal(err)
	}
	if len(listeners.Listeners) != 2 {
		t.Errorf("%d listeners; want 2", len(listeners.Listeners))
	}
	for _, ls := range listeners.Listeners {
		tg := forwardsTo(ls)
		i := slices.IndexFunc(groups, func(g elbv2types.TargetGroup) bool { return aws.ToString(g.TargetGroupArn) == tg })
		if i < 0 || aws.ToInt32(groups[i].Port)-30000 != aws.ToInt32(ls.Port) || groups[i].Protocol != ls.Protocol {
			t.Errorf("listener %d %s forwards to %s", aws.ToInt32(ls.Port), ls.Protocol, tg)
		}
	}
	attrs, err := e.elbv2.DescribeLoadBalancerAttributes(ctx, &elbv2.DescribeLoadBalancerAttributesInput{LoadBalancerArn: lb.LoadBalancerArn})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(attrs.Attributes, func(a elbv2types.LoadBalancerAttribute) bool {
		return aws.ToString(a.Key) == nlbAttrCrossZone && aws.ToString(a.Value) == "true"
	}) {
		t.Errorf("attributes = %+v; want cross-zone on", attrs.Attributes)
	}

	if got, exists, err := e.lbs.GetLoadBalancer(ctx, "kubernetes", svc); err != nil || !exists || got.Ingress[0].Hostname != first.Ingress[0].Hostname {
		t.Errorf("GetLoadBalancer = %+v, %v, %v", got, exists, err)
	}
	// Clients reach the NodePorts, health checks come from the VPC.
	name := loadBalancerName(svc)
	rules := nlbRulesOf(*e.securityGroup(t, e.nodesSG), name)
	for _, r := range []nodeRule{
		{"tcp", 30080, "0.0.0.0/0", ruleNLBClient + name}, {"udp", 30053, "0.0.0.0/0", ruleNLBClient + name},
		{"tcp", 30080, "10.0.0.0/16", ruleNLBHealth + name}, {"tcp", 30053, "10.0.0.0/16", ruleNLBHealth + name},
	} {
		if !slices.Contains(rules, r) {
			t.Errorf("the nodes' security group lacks %+v; has %+v", r, rules)
		}
	}
	if len(rules) != 4 {
		t.Errorf("the nodes' security group has %d rules of the load balancer; want 4: %+v", len(rules), rules)
	}

	// An update changes targets, and nothing else.
	before = e.mutations()
	if err := e.lbs.UpdateLoadBalancer(ctx, "kubernetes", svc, nodes[:2]); err != nil {
		t.Fatalf("UpdateLoadBalancer: %v", err)
	}
	after := e.mutations()
	for action, n := range after {
		if n != before[action] && action != "DeregisterTargets" {
			t.Errorf("UpdateLoadBalancer made %d %s requests", n-before[action], action)
		}
	}
	if after["DeregisterTargets"]-before["DeregisterTargets"] != 2 {
		t.Errorf("UpdateLoadBalancer made %d DeregisterTargets; want one per target group", after["DeregisterTargets"]-before["DeregisterTargets"])
	}
	for _, tg := range e.targetGroups(t) {
		if got := e.targets(t, aws.ToString(tg.TargetGroupArn)); !slices.Equal(got, nodeIDs(t, nodes[:2])) {
			t.Errorf("targets after update = %v; want %v", got, nodeIDs(t, nodes[:2]))
		}
	}

	// A changed port replaces its target group.
	svc.Spec.Ports[0].NodePort = 30081
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatalf("EnsureLoadBalancer with a new NodePort: %v", err)
	}
	groups = e.targetGroups(t)
	if len(groups) != 2 || !slices.ContainsFunc(groups, func(g elbv2types.TargetGroup) bool { return aws.ToInt32(g.Port) == 30081 }) {
		t.Errorf("target groups after a NodePort change: %d, %+v", len(groups), groups)
	}

	if err := e.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
	}
	if lbs := e.nlbs(t); len(lbs) != 0 {
		t.Errorf("load balancers left: %d", len(lbs))
	}
	if groups := e.targetGroups(t); len(groups) != 0 {
		t.Errorf("target groups left: %d", len(groups))
	}
	if rules := nlbRulesOf(*e.securityGroup(t, e.nodesSG), name); len(rules) != 0 {
		t.Errorf("rules left in the nodes' security group: %+v", rules)
	}
	if err := e.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted of a deleted load balancer: %v", err)
	}
	if _, exists, err := e.lbs.GetLoadBalancer(ctx, "kubernetes", svc); err != nil || exists {
		t.Errorf("GetLoadBalancer after delete = %v, %v", exists, err)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestNLBInternalLocal: an internal NLB is made in the subnets tagged
// for internal load balancers; a Local Service's health check is HTTP on
// its health check NodePort; only nodes with the target labels are
// targets.
func TestNLBInternalLocal(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 3)
	nodes[1].Labels = map[string]string{"lb": "yes"}
	svc := lbService(map[string]string{AnnotationType: "nlb", AnnotationInternal: "true", AnnotationTargetNodeLabels: "lb=yes"})
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	svc.Spec.HealthCheckNodePort = 32100

	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	lb := e.nlbs(t)[0]
	if lb.Scheme != elbv2types.LoadBalancerSchemeEnumInternal || len(lb.AvailabilityZones) != 1 || aws.ToString(lb.AvailabilityZones[0].SubnetId) != e.internal {
		t.Errorf("load balancer %s in %+v; want internal in %s", lb.Scheme, lb.AvailabilityZones, e.internal)
	}
	tg := e.targetGroups(t)[0]
	if tg.HealthCheckProtocol != elbv2types.ProtocolEnumHttp || aws.ToString(tg.HealthCheckPort) != "32100" || aws.ToString(tg.HealthCheckPath) != "/healthz" {
		t.Errorf("health check %s %s %s; want HTTP 32100 /healthz", tg.HealthCheckProtocol, aws.ToString(tg.HealthCheckPort), aws.ToString(tg.HealthCheckPath))
	}
	if got := e.targets(t, aws.ToString(tg.TargetGroupArn)); !slices.Equal(got, nodeIDs(t, nodes[1:2])) {
		t.Errorf("targets = %v; want only the labelled node's %v", got, nodeIDs(t, nodes[1:2]))
	}

	// The scheme of an existing load balancer is not changed.
	svc.Annotations[AnnotationInternal] = "false"
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err == nil || !strings.Contains(err.Error(), AnnotationInternal) {
		t.Errorf("Ensure with the scheme changed = %v; want an error naming %s", err, AnnotationInternal)
	}
}

// TestSubnets: discovery by tags (cluster and role, one per zone, the
// lowest ID), the annotation by ID and Name tag, and a clear error when no
// subnet is tagged.
func TestSubnets(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 1)
	instances, err := e.lbs.targetInstances(ctx, nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := parseLBOptions(lbService(nil), kindNetwork)
	got, vpc, err := e.lbs.subnets(ctx, testCluster, o, instances, nil)
	if want := sortedCopy([]string{e.public["us-east-1a"], e.public["us-east-1b"]}); err != nil || vpc != e.vpc || !slices.Equal(subnetIDs(got), want) {
		t.Errorf("discovered subnets = %v in %s, %v; want %v in %s", got, vpc, err, want, e.vpc)
	}
	// An existing load balancer keeps the subnets it is in, tagged or not,
	// and gets the discovered subnets of the zones it is not in.
	at := &placement{vpc: e.vpc, subnets: []lbSubnet{{id: "subnet-untagged"}}, zones: []string{"us-east-1a"}}
	if got, _, err := e.lbs.subnets(ctx, testCluster, o, nil, at); err != nil || !slices.Equal(subnetIDs(got), sortedCopy([]string{"subnet-untagged", e.public["us-east-1b"]})) {
		t.Errorf("discovered subnets of an existing load balancer = %v, %v; want its own subnet kept, and %s added", got, err, e.public["us-east-1b"])
	}
	// With no subnet tagged at all, it stays where it is.
	if got, _, err := e.lbs.subnets(ctx, "another-cluster", o, nil, at); err != nil || !slices.Equal(subnetIDs(got), []string{"subnet-untagged"}) {
		t.Errorf("subnets of an existing load balancer of a cluster without tagged subnets = %v, %v; want its own", got, err)
	}
	o.internal = true
	if got, _, err := e.lbs.subnets(ctx, testCluster, o, instances, nil); err != nil || !slices.Equal(subnetIDs(got), []string{e.internal}) {
		t.Errorf("internal subnets = %v, %v; want %v", got, err, e.internal)
	}
	if _, _, err := e.lbs.subnets(ctx, "another-cluster", o, instances, nil); err == nil || !strings.Contains(err.Error(), AnnotationSubnets) {
		t.Errorf("subnets of a cluster without tagged subnets = %v; want an error naming %s", err, AnnotationSubnets)
	}

	if _, err := e.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{e.spare}, Tags: ec2Tags(map[string]string{tagName: "lb-spare"})}); err != nil {
		t.Fatal(err)
	}
	o.subnets = []string{e.public["us-east-1b"], "lb-spare"}
	if got, vpc, err := e.lbs.subnets(ctx, testCluster, o, nil, nil); err != nil || vpc != e.vpc || !slices.Equal(subnetIDs(got), sortedCopy([]string{e.public["us-east-1b"], e.spare})) {
		t.Errorf("annotated subnets = %v in %s, %v", got, vpc, err)
	}
	// A load balancer cannot move to another VPC.
	if _, _, err := e.lbs.subnets(ctx, testCluster, o, nil, &placement{vpc: "vpc-other"}); err == nil || !strings.Contains(err.Error(), "another VPC") {
		t.Errorf("annotated subnets of another VPC than the load balancer's = %v; want an error", err)
	}
	o.subnets = []string{"no-such-subnet"}
	if _, _, err := e.lbs.subnets(ctx, testCluster, o, nil, nil); err == nil || !strings.Contains(err.Error(), AnnotationSubnets) {
		t.Errorf("an unknown annotated subnet = %v; want an error naming %s", err, AnnotationSubnets)
	}
}

// nlbSubnets are the subnets of the Service's Network Load Balancer,
// sorted.
func (e *lbEnv) nlbSubnets(t *testing.T, svc *v1.Service) []string {
	t.Helper()
	lb, err := e.lbs.findNLB(t.Context(), loadBalancerName(svc))
	if err != nil || lb == nil {
		t.Fatalf("network load balancer: %v, %v", lb, err)
	}
	var out []string
	for _, z := range lb.AvailabilityZones {
		out = append(out, aws.ToString(z.SubnetId))
	}
	slices.Sort(out)
	return out
}

// clbSubnets are the subnets of the Service's Classic ELB, sorted.
func (e *lbEnv) clbSubnets(t *testing.T, svc *v1.Service) []string {
	t.Helper()
	lb, err := e.lbs.findCLB(t.Context(), loadBalancerName(svc))
	if err != nil || lb == nil {
		t.Fatalf("classic load balancer: %v, %v", lb, err)
	}
	return sortedCopy(lb.Subnets)
}

// TestCLBSubnetChanges: an existing Classic ELB is attached to the
// subnets the Service adds and detached from those it drops, in a zone
// too; discovery by tags keeps the subnet it is in.
func TestCLBSubnetChanges(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 2)
	a, b := e.public["us-east-1a"], e.public["us-east-1b"]
	svc := lbService(map[string]string{AnnotationSubnets: a})
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name           string
		subnets        string
		want           []string
		attach, detach int
	}{
		{name: "a zone added", subnets: a + "," + b, want: []string{a, b}, attach: 1},
		{name: "unchanged", subnets: b + ", " + a, want: []string{a, b}},
		{name: "a zone's subnet replaced", subnets: b + "," + e.spare, want: []string{b, e.spare}, attach: 1, detach: 1},
		{name: "a zone dropped", subnets: e.spare, want: []string{e.spare}, detach: 1},
		// Discovery finds a and b; the load balancer keeps spare, tagged
		// too, in zone a.
		{name: "discovered", want: []string{b, e.spare}, attach: 1},
	}
	for _, st := range steps {
		if st.subnets == "" {
			delete(svc.Annotations, AnnotationSubnets)
		} else {
			svc.Annotations[AnnotationSubnets] = st.subnets
		}
		before := e.mutations()
		if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
			t.Fatalf("%s: EnsureLoadBalancer: %v", st.name, err)
		}
		after := e.mutations()
		if got := e.clbSubnets(t, svc); !slices.Equal(got, sortedCopy(st.want)) {
			t.Errorf("%s: subnets = %v; want %v", st.name, got, sortedCopy(st.want))
		}
		attach, detach := after["AttachLoadBalancerToSubnets"]-before["AttachLoadBalancerToSubnets"], after["DetachLoadBalancerFromSubnets"]-before["DetachLoadBalancerFromSubnets"]
		if attach != st.attach || detach != st.detach {
			t.Errorf("%s: %d attach and %d detach requests; want %d and %d", st.name, attach, detach, st.attach, st.detach)
		}
	}

	// A subnet of another VPC is refused before any change.
	other, err := e.ec2.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: aws.String("10.1.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := e.ec2.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: other.Vpc.VpcId, CidrBlock: aws.String("10.1.1.0/24"), AvailabilityZone: aws.String("us-east-1a")})
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations[AnnotationSubnets] = aws.ToString(sub.Subnet.SubnetId)
	before := e.mutations()
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err == nil || !strings.Contains(err.Error(), AnnotationSubnets) {
		t.Errorf("Ensure with a subnet of another VPC = %v; want an error naming %s", err, AnnotationSubnets)
	}
	if after := e.mutations(); !mapsEqual(before, after) {
		t.Errorf("a refused VPC change changed the cloud: %v, then %v", before, after)
	}
}

// TestNLBSubnetChanges: an existing Network Load Balancer gets the zones
// the Service adds; a subnet dropped or replaced stays, everything else
// is still brought in line, and the error names the subnet and the
// annotation.
func TestNLBSubnetChanges(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 2)
	a, b := e.public["us-east-1a"], e.public["us-east-1b"]
	svc := lbService(map[string]string{AnnotationType: "nlb", AnnotationSubnets: a})
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	if got := e.nlbSubnets(t, svc); !slices.Equal(got, []string{a}) {
		t.Fatalf("subnets = %v; want %v", got, []string{a})
	}

	svc.Annotations[AnnotationSubnets] = a + "," + b
	before := e.mutations()
	first, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes)
	if err != nil {
		t.Fatalf("Ensure with a zone added: %v", err)
	}
	if got, want := e.nlbSubnets(t, svc), sortedCopy([]string{a, b}); !slices.Equal(got, want) {
		t.Errorf("subnets after a zone was added = %v; want %v", got, want)
	}
	if n := e.mutations()["SetSubnets"] - before["SetSubnets"]; n != 1 {
		t.Errorf("%d SetSubnets requests; want 1", n)
	}
	before = e.mutations()
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	if after := e.mutations(); !mapsEqual(before, after) {
		t.Errorf("a second Ensure changed the cloud: %v, then %v", before, after)
	}

	for _, tt := range []struct {
		name, subnets string
		nodes         []*v1.Node
	}{
		{name: "a zone dropped", subnets: b, nodes: nodes[:1]},
		{name: "a zone's subnet replaced", subnets: e.spare + "," + b, nodes: nodes},
	} {
		svc.Annotations[AnnotationSubnets] = tt.subnets
		before := e.mutations()
		// The other change of the Ensure, to the targets, is made.
		_, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, tt.nodes)
		if err == nil || !strings.Contains(err.Error(), AnnotationSubnets) || !strings.Contains(err.Error(), a) {
			t.Errorf("%s: Ensure = %v; want an error naming %s and %s", tt.name, err, AnnotationSubnets, a)
		}
		if got, want := e.nlbSubnets(t, svc), sortedCopy([]string{a, b}); !slices.Equal(got, want) {
			t.Errorf("%s: subnets = %v; want %v kept", tt.name, got, want)
		}
		if n := e.mutations()["SetSubnets"] - before["SetSubnets"]; n != 0 {
			t.Errorf("%s: %d SetSubnets requests; want none", tt.name, n)
		}
		groups := e.targetGroups(t)
		if len(groups) != 1 {
			t.Fatalf("%d target groups; want 1", len(groups))
		}
		if got := e.targets(t, aws.ToString(groups[0].TargetGroupArn)); !slices.Equal(got, nodeIDs(t, tt.nodes)) {
			t.Errorf("%s: targets = %v; want %v", tt.name, got, nodeIDs(t, tt.nodes))
		}
	}

	// Discovery by tags finds a and b, where the load balancer is.
	delete(svc.Annotations, AnnotationSubnets)
	got, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes)
	if err != nil || got.Ingress[0].Hostname != first.Ingress[0].Hostname {
		t.Errorf("Ensure with discovered subnets = %+v, %v; want %+v", got, err, first)
	}
}

// TestNLBTCPUDP: a port number over TCP and UDP is one TCP_UDP listener
// forwarding to one TCP_UDP target group; the nodes let both protocols in
// on the NodePort; dropping the UDP port makes the listener TCP again.
func TestNLBTCPUDP(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 2)
	svc := lbService(map[string]string{AnnotationType: "nlb"},
		v1.ServicePort{Name: "dns-tcp", Protocol: v1.ProtocolTCP, Port: 53, NodePort: 30053},
		v1.ServicePort{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080},
		v1.ServicePort{Name: "dns-udp", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 30053})
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatalf("EnsureLoadBalancer: %v", err)
	}
	before := e.mutations()
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	if after := e.mutations(); !mapsEqual(before, after) {
		t.Errorf("a second Ensure changed the cloud: %v, then %v", before, after)
	}

	listenerProtocols := func() map[int32]elbv2types.ProtocolEnum {
		t.Helper()
		lb := e.nlbs(t)[0]
		out, err := e.elbv2.DescribeListeners(ctx, &elbv2.DescribeListenersInput{LoadBalancerArn: lb.LoadBalancerArn})
		if err != nil {
			t.Fatal(err)
		}
		groups := e.targetGroups(t)
		got := map[int32]elbv2types.ProtocolEnum{}
		for _, ls := range out.Listeners {
			got[aws.ToInt32(ls.Port)] = ls.Protocol
			i := slices.IndexFunc(groups, func(g elbv2types.TargetGroup) bool { return aws.ToString(g.TargetGroupArn) == forwardsTo(ls) })
			if i < 0 || groups[i].Protocol != ls.Protocol || aws.ToInt32(groups[i].Port) != 30000+aws.ToInt32(ls.Port) {
				t.Errorf("listener %d %s forwards to %s", aws.ToInt32(ls.Port), ls.Protocol, forwardsTo(ls))
				continue
			}
			if targets := e.targets(t, forwardsTo(ls)); !slices.Equal(targets, nodeIDs(t, nodes)) {
				t.Errorf("targets of listener %d = %v; want %v", aws.ToInt32(ls.Port), targets, nodeIDs(t, nodes))
			}
		}
		if len(groups) != len(out.Listeners) {
			t.Errorf("%d target groups for %d listeners", len(groups), len(out.Listeners))
		}
		return got
	}
	want := map[int32]elbv2types.ProtocolEnum{53: elbv2types.ProtocolEnumTcpUdp, 80: elbv2types.ProtocolEnumTcp}
	if got := listenerProtocols(); !maps.Equal(got, want) {
		t.Errorf("listeners = %v; want %v", got, want)
	}
	name := loadBalancerName(svc)
	rules := nlbRulesOf(*e.securityGroup(t, e.nodesSG), name)
	for _, r := range []nodeRule{{"tcp", 30053, "0.0.0.0/0", ruleNLBClient + name}, {"udp", 30053, "0.0.0.0/0", ruleNLBClient + name}} {
		if !slices.Contains(rules, r) {
			t.Errorf("the nodes' security group lacks %+v; has %+v", r, rules)
		}
	}

	// Without the UDP port, port 53 is TCP alone again.
	svc.Spec.Ports = svc.Spec.Ports[:2]
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatalf("EnsureLoadBalancer without UDP: %v", err)
	}
	want[53] = elbv2types.ProtocolEnumTcp
	if got := listenerProtocols(); !maps.Equal(got, want) {
		t.Errorf("listeners without UDP = %v; want %v", got, want)
	}

	if err := e.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if groups := e.targetGroups(t); len(groups) != 0 {
		t.Errorf("target groups left: %d", len(groups))
	}
}

// TestCLB: a Classic ELB with its own security group open to the source
// ranges on the listener ports, let into the nodes' security group; an
// update changes only instances; a delete leaves no load balancer or
// security group, and revokes the nodes' rule.
func TestCLB(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 3)
	svc := lbService(map[string]string{AnnotationAdditionalTags: "team=shop", AnnotationCrossZone: "true", AnnotationHealthCheckInterval: "20"},
		v1.ServicePort{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080},
		v1.ServicePort{Name: "https", Protocol: v1.ProtocolTCP, Port: 443, NodePort: 30443})
	svc.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", "198.51.100.0/24"}
	name := loadBalancerName(svc)

	first, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes)
	if err != nil {
		t.Fatalf("EnsureLoadBalancer: %v", err)
	}
	if len(first.Ingress) != 1 || first.Ingress[0].Hostname == "" {
		t.Fatalf("status = %+v; want a hostname", first)
	}
	before := e.mutations()
	second, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes)
	if err != nil || second.Ingress[0].Hostname != first.Ingress[0].Hostname {
		t.Fatalf("EnsureLoadBalancer again = %+v, %v; want %+v", second, err, first)
	}
	if after := e.mutations(); !mapsEqual(before, after) {
		t.Errorf("a second Ensure changed the cloud: %v, then %v", before, after)
	}

	out, err := e.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.LoadBalancerDescriptions) != 1 {
		t.Fatalf("%d classic load balancers; want 1", len(out.LoadBalancerDescriptions))
	}
	lb := out.LoadBalancerDescriptions[0]
	if aws.ToString(lb.LoadBalancerName) != name || aws.ToString(lb.Scheme) != "internet-facing" {
		t.Errorf("load balancer %s, scheme %s", aws.ToString(lb.LoadBalancerName), aws.ToString(lb.Scheme))
	}
	if len(lb.ListenerDescriptions) != 2 {
		t.Errorf("%d listeners; want 2", len(lb.ListenerDescriptions))
	}
	if hc := lb.HealthCheck; hc == nil || aws.ToString(hc.Target) != "TCP:30080" || aws.ToInt32(hc.Interval) != 20 || aws.ToInt32(hc.UnhealthyThreshold) != 6 {
		t.Errorf("health check = %+v; want TCP:30080 every 20s", hc)
	}
	var registered []string
	for _, in := range lb.Instances {
		registered = append(registered, aws.ToString(in.InstanceId))
	}
	if slices.Sort(registered); !slices.Equal(registered, nodeIDs(t, nodes)) {
		t.Errorf("instances = %v; want %v", registered, nodeIDs(t, nodes))
	}
	tags, err := e.lbs.clbTags(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	expectTags(t, "load balancer", tags, svc, map[string]string{"team": "shop"})

	if len(lb.SecurityGroups) != 1 {
		t.Fatalf("security groups %v; want the load balancer's own", lb.SecurityGroups)
	}
	sgID := lb.SecurityGroups[0]
	sg := e.securityGroup(t, sgID)
	if aws.ToString(sg.GroupName) != "k8s-elb-"+name || aws.ToString(sg.VpcId) != e.vpc {
		t.Errorf("security group %s in %s", aws.ToString(sg.GroupName), aws.ToString(sg.VpcId))
	}
	expectTags(t, "security group", ec2TagMap(sg.Tags), svc, map[string]string{"team": "shop"})
	rules, other := rulesOf(sg.IpPermissions)
	want := ingressRules([]int32{80, 443}, svc.Spec.LoadBalancerSourceRanges)
	if len(other) != 0 || len(rules) != len(want) {
		t.Errorf("ingress = %+v, other %+v; want %+v", rules, other, want)
	}
	for _, r := range want {
		if !slices.Contains(rules, r) {
			t.Errorf("ingress lacks %+v", r)
		}
	}
	if !hasRuleFrom(*e.securityGroup(t, e.nodesSG), sgID) {
		t.Errorf("the nodes' security group does not let %s in", sgID)
	}
	attrs, err := e.elb.DescribeLoadBalancerAttributes(ctx, &elb.DescribeLoadBalancerAttributesInput{LoadBalancerName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if a := attrs.LoadBalancerAttributes; a == nil || a.CrossZoneLoadBalancing == nil || !a.CrossZoneLoadBalancing.Enabled {
		t.Errorf("attributes = %+v; want cross-zone on", attrs.LoadBalancerAttributes)
	}

	// Source ranges changed: only the security group's rules change.
	svc.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	if rules, _ := rulesOf(e.securityGroup(t, sgID).IpPermissions); len(rules) != 3 ||
		!slices.Contains(rules, ingressRule{protocol: protocolICMP, from: icmpUnreachable, to: icmpFragmentationNeeded, cidr: "192.0.2.0/24"}) {
		t.Errorf("ingress after narrowing the source ranges = %+v; want 3 rules: the two ports and path MTU discovery, from 192.0.2.0/24", rules)
	}

	before = e.mutations()
	if err := e.lbs.UpdateLoadBalancer(ctx, "kubernetes", svc, nodes[:1]); err != nil {
		t.Fatalf("UpdateLoadBalancer: %v", err)
	}
	after := e.mutations()
	for action, n := range after {
		if n != before[action] && action != "DeregisterInstancesFromLoadBalancer" {
			t.Errorf("UpdateLoadBalancer made %d %s requests", n-before[action], action)
		}
	}
	lb2, err := e.lbs.findCLB(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(lb2.Instances) != 1 || aws.ToString(lb2.Instances[0].InstanceId) != nodeIDs(t, nodes[:1])[0] {
		t.Errorf("instances after update = %+v; want %v", lb2.Instances, nodeIDs(t, nodes[:1]))
	}

	if err := e.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
	}
	if lb, err := e.lbs.findCLB(ctx, name); err != nil || lb != nil {
		t.Errorf("load balancer after delete = %v, %v", lb, err)
	}
	if e.securityGroup(t, sgID) != nil {
		t.Errorf("security group %s left", sgID)
	}
	if hasRuleFrom(*e.securityGroup(t, e.nodesSG), sgID) {
		t.Errorf("the nodes' security group still lets %s in", sgID)
	}
	if err := e.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted of a deleted load balancer: %v", err)
	}
}

// TestTypeChangeRefused: a load balancer of one kind is never replaced by
// one of the other kind; the error names the annotation and the cloud is
// left as it was.
// TestCLBPathMTU: a Classic ELB's own security group lets in the ICMP
// messages of path MTU discovery from each source range, ICMPv6 from an
// IPv6 one; a second Ensure changes no rule.
func TestCLBPathMTU(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 1)
	svc := lbService(nil)
	svc.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", "2001:db8::/32"}
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	lb, err := e.lbs.findCLB(ctx, loadBalancerName(svc))
	if err != nil || lb == nil || len(lb.SecurityGroups) != 1 {
		t.Fatalf("classic load balancer: %+v, %v", lb, err)
	}
	rules, other := rulesOf(e.securityGroup(t, lb.SecurityGroups[0]).IpPermissions)
	for _, want := range []ingressRule{
		{protocol: protocolICMP, from: icmpUnreachable, to: icmpFragmentationNeeded, cidr: "192.0.2.0/24"},
		{protocol: protocolICMPv6, from: icmpv6PacketTooBig, to: 0, cidr: "2001:db8::/32"},
	} {
		if !slices.Contains(rules, want) {
			t.Errorf("ingress %+v (other %+v) lacks %+v", rules, other, want)
		}
	}
	before := e.mutations()
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	after := e.mutations()
	for _, action := range []string{"AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress"} {
		if n := after[action] - before[action]; n != 0 {
			t.Errorf("a second Ensure sent %d %s requests; want none", n, action)
		}
	}
}

func TestTypeChangeRefused(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 1)
	svc := lbService(nil)
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	svc.Annotations = map[string]string{AnnotationType: "nlb"}
	before := e.mutations()
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err == nil || !strings.Contains(err.Error(), AnnotationType) {
		t.Errorf("Ensure as nlb of a classic load balancer = %v; want an error naming %s", err, AnnotationType)
	}
	if err := e.lbs.UpdateLoadBalancer(ctx, "kubernetes", svc, nodes); err == nil || !strings.Contains(err.Error(), AnnotationType) {
		t.Errorf("Update as nlb of a classic load balancer = %v; want an error naming %s", err, AnnotationType)
	}
	if after := e.mutations(); !mapsEqual(before, after) {
		t.Errorf("a refused type change changed the cloud: %v, then %v", before, after)
	}
	if lbs := e.nlbs(t); len(lbs) != 0 {
		t.Errorf("a network load balancer was made")
	}
	// Deleting finds the load balancer whatever the annotation says.
	if err := e.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if lb, err := e.lbs.findCLB(ctx, loadBalancerName(svc)); err != nil || lb != nil {
		t.Errorf("classic load balancer after delete = %v, %v", lb, err)
	}

	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	svc.Annotations = nil
	before = e.mutations()
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err == nil || !strings.Contains(err.Error(), AnnotationType) {
		t.Errorf("Ensure as classic of a network load balancer = %v; want an error naming %s", err, AnnotationType)
	}
	if after := e.mutations(); !mapsEqual(before, after) {
		t.Errorf("a refused type change changed the cloud: %v, then %v", before, after)
	}
}

// TestNotOurs: a load balancer of the Service's name without its tags is
// neither adopted nor deleted.
func TestNotOurs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 1)
	svc := lbService(map[string]string{AnnotationType: "nlb"})
	_, err := e.elbv2.CreateLoadBalancer(ctx, &elbv2.CreateLoadBalancerInput{
		Name: aws.String(loadBalancerName(svc)), Type: elbv2types.LoadBalancerTypeEnumNetwork, Subnets: []string{e.public["us-east-1a"]},
		Tags: []elbv2types.Tag{{Key: aws.String(tagServiceName), Value: aws.String("other/service")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err == nil || !strings.Contains(err.Error(), "without the tags") {
		t.Errorf("Ensure of another's load balancer = %v; want a refusal", err)
	}
	if err := e.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted = %v", err)
	}
	if lbs := e.nlbs(t); len(lbs) != 1 {
		t.Errorf("another's load balancer was deleted")
	}
}

// TestImplementedElsewhere: nlb-ip and external Services are another
// controller's; nothing is asked of the cloud.
func TestImplementedElsewhere(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	for _, typ := range []string{"nlb-ip", "external"} {
		svc := lbService(map[string]string{AnnotationType: typ, AnnotationHealthCheckPort: "bad"})
		before := len(e.proxy.recorded())
		if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nil); !errors.Is(err, cloudprovider.ImplementedElsewhere) {
			t.Errorf("%s: Ensure = %v", typ, err)
		}
		if err := e.lbs.UpdateLoadBalancer(ctx, "kubernetes", svc, nil); !errors.Is(err, cloudprovider.ImplementedElsewhere) {
			t.Errorf("%s: Update = %v", typ, err)
		}
		if err := e.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); !errors.Is(err, cloudprovider.ImplementedElsewhere) {
			t.Errorf("%s: Delete = %v", typ, err)
		}
		if _, exists, err := e.lbs.GetLoadBalancer(ctx, "kubernetes", svc); err != nil || exists {
			t.Errorf("%s: Get = %v, %v", typ, exists, err)
		}
		if n := len(e.proxy.recorded()) - before; n != 0 {
			t.Errorf("%s: %d requests; want none", typ, n)
		}
	}
}

// TestBadAnnotationChangesNothing: a bad annotation is found before any
// request.
func TestBadAnnotationChangesNothing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 1)
	for _, typ := range []string{"", "nlb"} {
		svc := lbService(map[string]string{AnnotationType: typ, AnnotationHealthCheckInterval: "often"})
		before := len(e.proxy.recorded())
		if _, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes); err == nil || !strings.Contains(err.Error(), AnnotationHealthCheckInterval) {
			t.Errorf("type %q: Ensure = %v; want an error naming %s", typ, err, AnnotationHealthCheckInterval)
		}
		if err := e.lbs.UpdateLoadBalancer(ctx, "kubernetes", svc, nodes); err == nil || !strings.Contains(err.Error(), AnnotationHealthCheckInterval) {
			t.Errorf("type %q: Update = %v; want an error naming %s", typ, err, AnnotationHealthCheckInterval)
		}
		if n := len(e.proxy.recorded()) - before; n != 0 {
			t.Errorf("type %q: %d requests; want none", typ, n)
		}
	}
}

// TestLoadBalancerHonoursContext: a cancelled caller's Ensure stops.
func TestLoadBalancerHonoursContext(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newLBEnv(t)
	nodes := e.runNodes(t, 1)
	release := e.proxy.holdAction(t, "DescribeLoadBalancers")
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.lbs.EnsureLoadBalancer(ctx, "kubernetes", lbService(nil), nodes)
		done <- err
	}()
	receive(t, e.proxy.held, "a held request")
	cancel()
	if err := receive(t, done, "Ensure to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("Ensure with a cancelled context = %v; want context.Canceled", err)
	}
}

// loadBalancerClients are raw ELB and ELBv2 clients of moto.
func (c *testCloud) loadBalancerClients() (*elb.Client, *elbv2.Client) {
	creds := credentials.NewStaticCredentialsProvider("AKIDARRANGE", "secret", "")
	return elb.New(elb.Options{Region: testRegion, BaseEndpoint: aws.String(c.moto.URL), Credentials: creds}),
		elbv2.New(elbv2.Options{Region: testRegion, BaseEndpoint: aws.String(c.moto.URL), Credentials: creds})
}

// tagDefaultSubnetsForLoadBalancers tags the default VPC's subnets, where
// instances without a subnet run, as the cluster's subnets for
// internet-facing load balancers.
func (c *testCloud) tagDefaultSubnetsForLoadBalancers(t *testing.T) {
	t.Helper()
	out, err := c.ec2.DescribeSubnets(t.Context(), &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{
		{Name: aws.String("default-for-az"), Values: []string{"true"}},
	}})
	if err != nil || len(out.Subnets) == 0 {
		t.Fatalf("default subnets: %d, %v", len(out.Subnets), err)
	}
	var ids []string
	for _, s := range out.Subnets {
		ids = append(ids, aws.ToString(s.SubnetId))
	}
	_, err = c.ec2.CreateTags(t.Context(), &ec2.CreateTagsInput{Resources: ids, Tags: ec2Tags(map[string]string{
		tagClusterPrefix + testCluster: "shared", tagRoleELB: "1",
	})})
	if err != nil {
		t.Fatal(err)
	}
}

// cloudLoadBalancers lists the Classic ELBs and Network Load Balancers in
// moto by their Service tag, sorted.
func cloudLoadBalancers(ctx context.Context, elbClient *elb.Client, elbv2Client *elbv2.Client) ([]string, error) {
	var out []string
	clbs, err := elbClient.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
	if err != nil {
		return nil, err
	}
	for _, lb := range clbs.LoadBalancerDescriptions {
		tags, err := elbClient.DescribeTags(ctx, &elb.DescribeTagsInput{LoadBalancerNames: []string{aws.ToString(lb.LoadBalancerName)}})
		if err != nil {
			return nil, err
		}
		for _, d := range tags.TagDescriptions {
			for _, tag := range d.Tags {
				if aws.ToString(tag.Key) == tagServiceName {
					out = append(out, aws.ToString(tag.Value))
				}
			}
		}
	}
	nlbs, err := elbv2Client.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{})
	if err != nil {
		return nil, err
	}
	for _, lb := range nlbs.LoadBalancers {
		tags, err := elbv2Client.DescribeTags(ctx, &elbv2.DescribeTagsInput{ResourceArns: []string{aws.ToString(lb.LoadBalancerArn)}})
		if err != nil {
			return nil, err
		}
		for _, d := range tags.TagDescriptions {
			for _, tag := range d.Tags {
				if aws.ToString(tag.Key) == tagServiceName {
					out = append(out, aws.ToString(tag.Value))
				}
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// cloudMembers lists the private DNS names of the instances a load
// balancer sends to: a Classic ELB's instances, or the targets of a
// Network Load Balancer's target groups.
func cloudMembers(ctx context.Context, ec2Client *ec2.Client, elbClient *elb.Client, elbv2Client *elbv2.Client, name string) ([]string, error) {
	var ids []string
	nlbs, err := elbv2Client.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{Names: []string{name}})
	var nf *elbv2types.LoadBalancerNotFoundException
	switch {
	case errors.As(err, &nf):
		clbs, err := elbClient.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerNames: []string{name}})
		if err != nil {
			return nil, err
		}
		for _, in := range clbs.LoadBalancerDescriptions[0].Instances {
			ids = append(ids, aws.ToString(in.InstanceId))
		}
	case err != nil:
		return nil, err
	default:
		groups, err := elbv2Client.DescribeTargetGroups(ctx, &elbv2.DescribeTargetGroupsInput{LoadBalancerArn: nlbs.LoadBalancers[0].LoadBalancerArn})
		if err != nil {
			return nil, err
		}
		for _, tg := range groups.TargetGroups {
			health, err := elbv2Client.DescribeTargetHealth(ctx, &elbv2.DescribeTargetHealthInput{TargetGroupArn: tg.TargetGroupArn})
			if err != nil {
				return nil, err
			}
			for _, d := range health.TargetHealthDescriptions {
				ids = append(ids, aws.ToString(d.Target.Id))
			}
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	out, err := ec2Client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			names = append(names, aws.ToString(in.PrivateDnsName))
		}
	}
	slices.Sort(names)
	return names, nil
}

// cloudAddresses lists the DNS names of every load balancer and the
// allocated Elastic IPs.
func cloudAddresses(ctx context.Context, ec2Client *ec2.Client, elbClient *elb.Client, elbv2Client *elbv2.Client) ([]string, error) {
	var out []string
	clbs, err := elbClient.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
	if err != nil {
		return nil, err
	}
	for _, lb := range clbs.LoadBalancerDescriptions {
		out = append(out, aws.ToString(lb.DNSName))
	}
	nlbs, err := elbv2Client.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{})
	if err != nil {
		return nil, err
	}
	for _, lb := range nlbs.LoadBalancers {
		out = append(out, aws.ToString(lb.DNSName))
	}
	eips, err := ec2Client.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{})
	if err != nil {
		return nil, err
	}
	for _, a := range eips.Addresses {
		out = append(out, aws.ToString(a.PublicIp))
	}
	slices.Sort(out)
	return out, nil
}
