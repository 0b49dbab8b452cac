package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/ccmkit/ccmkit/providers/aws/awstest"
	"github.com/ccmkit/ccmkit/test/harness"
)

// TestMain stops the moto server that the AWS tests share
// (awstest.StartMoto) once the tests have run.
func TestMain(m *testing.M) {
	code := m.Run()
	awstest.StopMoto()
	os.Exit(code)
}

// The AWS tests' cloud: moto's us-east-1, with the cluster awsCluster.
const (
	awsRegion  = "us-east-1"
	awsCluster = "e2e"
	// awsClusterTag marks what belongs to the cluster.
	awsClusterTag = "kubernetes.io/cluster/" + awsCluster
	// awsAMI is any image ID: moto runs instances of images it does not know.
	awsAMI = "ami-12345678"
	// awsLBTypeAnnotation asks for a Network Load Balancer ("nlb").
	awsLBTypeAnnotation = "service.beta.kubernetes.io/aws-load-balancer-type"
	// awsELBSecurityGroupPrefix starts the name of a Classic ELB's own
	// security group.
	awsELBSecurityGroupPrefix = "k8s-elb-"
	// awsCIDR is the cluster's pod CIDR; Node i gets 10.244.i.0/24.
	awsCIDR = "10.244.0.0/16"
)

// awsZones are the zones of the instances, one after the other.
var awsZones = []string{"us-east-1a", "us-east-1b"}

// awsCloud is moto arranged as a cluster's AWS account: moto's default
// VPC, whose subnets in awsZones are tagged for the cluster's
// internet-facing load balancers, and a nodes' security group with the
// cluster tag. Its clients talk to moto directly, never through a proxy.
type awsCloud struct {
	moto  *awstest.Moto
	ec2   *ec2.Client
	elb   *elb.Client
	elbv2 *elbv2.Client

	vpc     string
	subnets map[string]string // by zone
	nodesSG string
}

// newAWSCloud resets moto and arranges it.
func newAWSCloud(t *testing.T) *awsCloud {
	t.Helper()
	ctx := t.Context()
	m := awstest.StartMoto(t)
	creds := credentials.NewStaticCredentialsProvider("testing", "testing", "")
	c := &awsCloud{
		moto:    m,
		ec2:     ec2.New(ec2.Options{Region: awsRegion, BaseEndpoint: aws.String(m.URL), Credentials: creds}),
		elb:     elb.New(elb.Options{Region: awsRegion, BaseEndpoint: aws.String(m.URL), Credentials: creds}),
		elbv2:   elbv2.New(elbv2.Options{Region: awsRegion, BaseEndpoint: aws.String(m.URL), Credentials: creds}),
		subnets: map[string]string{},
	}
	out, err := c.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{
		{Name: aws.String("default-for-az"), Values: []string{"true"}},
		{Name: aws.String("availability-zone"), Values: awsZones},
	}})
	if err != nil {
		t.Fatalf("describing moto's default subnets: %v", err)
	}
	for _, s := range out.Subnets {
		c.subnets[aws.ToString(s.AvailabilityZone)] = aws.ToString(s.SubnetId)
		c.vpc = aws.ToString(s.VpcId)
	}
	if len(c.subnets) != len(awsZones) {
		t.Fatalf("moto's default subnets in %v: %v", awsZones, c.subnets)
	}
	if _, err := c.ec2.CreateTags(ctx, &ec2.CreateTagsInput{
		Resources: slices.Collect(maps.Values(c.subnets)),
		Tags:      awsTags(awsClusterTag, "shared", "kubernetes.io/role/elb", "1"),
	}); err != nil {
		t.Fatalf("tagging the subnets: %v", err)
	}
	sg, err := c.ec2.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
		GroupName: aws.String("e2e-nodes"), Description: aws.String("the cluster's nodes"), VpcId: aws.String(c.vpc),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSecurityGroup, Tags: awsTags(awsClusterTag, "owned")}},
	})
	if err != nil {
		t.Fatalf("creating the nodes' security group: %v", err)
	}
	c.nodesSG = aws.ToString(sg.GroupId)
	return c
}

// awsTags are EC2 tags from key, value pairs.
func awsTags(kv ...string) []ec2types.Tag {
	var tags []ec2types.Tag
	for i := 0; i+1 < len(kv); i += 2 {
		tags = append(tags, ec2types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	return tags
}

// conf writes the CCM's cloud config and returns its path: ELB and
// ELBv2 at moto, EC2 at ec2URL (moto, or a proxy in front of it).
func (c *awsCloud) conf(t *testing.T, ec2URL string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "[Global]\nRegion = %s\nKubernetesClusterID = %s\n", awsRegion, awsCluster)
	for _, o := range [][2]string{{"ec2", ec2URL}, {"elasticloadbalancing", c.moto.URL}, {"elasticloadbalancingv2", c.moto.URL}} {
		fmt.Fprintf(&b, "\n[ServiceOverride %q]\nService = %s\nRegion = %s\nURL = %s\nSigningRegion = %s\n", o[0], o[0], awsRegion, o[1], awsRegion)
	}
	path := filepath.Join(t.TempDir(), "cloud.conf")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runInstance runs an instance of the cluster in the zone's subnet and
// the nodes' security group, and returns it as DescribeInstances has it.
func (c *awsCloud) runInstance(t *testing.T, zone string, instanceType ec2types.InstanceType) ec2types.Instance {
	t.Helper()
	out, err := c.ec2.RunInstances(t.Context(), &ec2.RunInstancesInput{
		ImageId: aws.String(awsAMI), MinCount: aws.Int32(1), MaxCount: aws.Int32(1), InstanceType: instanceType,
		SubnetId: aws.String(c.subnets[zone]), SecurityGroupIds: []string{c.nodesSG},
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: awsTags(awsClusterTag, "owned")}},
	})
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	id := aws.ToString(out.Instances[0].InstanceId)
	described, err := c.ec2.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(described.Reservations) != 1 || len(described.Reservations[0].Instances) != 1 {
		t.Fatalf("DescribeInstances(%s) = %+v, %v", id, described, err)
	}
	return described.Reservations[0].Instances[0]
}

// addAWSNode runs an instance and creates its Node as a kubelet with
// --cloud-provider=external registers it: named by the instance's
// private DNS name, tainted uninitialized, without a providerID; with
// the pod CIDR podCIDR unless it is empty.
func (c *awsCloud) addAWSNode(t *testing.T, cp *harness.ControlPlane, zone string, instanceType ec2types.InstanceType, podCIDR string) ec2types.Instance {
	t.Helper()
	in := c.runInstance(t, zone, instanceType)
	registerNode(t, cp, aws.ToString(in.PrivateDnsName), podCIDR)
	return in
}

// startAWSCCM starts the CCM with the aws provider, the cloud config at
// conf, credentials for moto and nothing from the developer's AWS
// configuration, Node lifecycle checks every second and extra flags, and
// waits until it is healthy.
func startAWSCCM(t *testing.T, cp *harness.ControlPlane, conf string, extra ...string) *harness.CCM {
	t.Helper()
	args := append([]string{
		"--cloud-provider=aws", "--cloud-config=" + conf,
		"--node-monitor-period=1s", "--node-deletion-grace-period=2s", "--node-sync-coalesce-period=200ms", "--v=2",
	}, extra...)
	ccm := harness.StartCCM(t, harness.CCMOptions{Kubeconfig: cp.Kubeconfig, Args: args, Env: []string{
		"AWS_ACCESS_KEY_ID=testing", "AWS_SECRET_ACCESS_KEY=testing", "AWS_SESSION_TOKEN=", "AWS_PROFILE=",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true",
	}})
	if err := ccm.WaitHealthy(t.Context()); err != nil {
		t.Fatal(err)
	}
	return ccm
}

// awsProviderID is the providerID of an instance.
func awsProviderID(in ec2types.Instance) string {
	return fmt.Sprintf("aws:///%s/%s", aws.ToString(in.Placement.AvailabilityZone), aws.ToString(in.InstanceId))
}

// checkInitialisedFrom checks that the Node carries what EC2 says of its
// instance.
func checkInitialisedFrom(t *testing.T, n *v1.Node, in ec2types.Instance) {
	t.Helper()
	if want := awsProviderID(in); n.Spec.ProviderID != want {
		t.Errorf("%s: providerID %q, want %q", n.Name, n.Spec.ProviderID, want)
	}
	zone := aws.ToString(in.Placement.AvailabilityZone)
	if n.Labels[v1.LabelTopologyZone] != zone || n.Labels[v1.LabelTopologyRegion] != awsRegion || n.Labels[v1.LabelInstanceTypeStable] != string(in.InstanceType) {
		t.Errorf("%s: labels %v, want zone %s, region %s, instance type %s", n.Name, n.Labels, zone, awsRegion, in.InstanceType)
	}
	want := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: aws.ToString(in.PrivateIpAddress)},
		{Type: v1.NodeInternalDNS, Address: aws.ToString(in.PrivateDnsName)},
		{Type: v1.NodeHostName, Address: aws.ToString(in.PrivateDnsName)},
	}
	if ip := aws.ToString(in.PublicIpAddress); ip != "" {
		want = append(want, v1.NodeAddress{Type: v1.NodeExternalIP, Address: ip})
	}
	if dns := aws.ToString(in.PublicDnsName); dns != "" {
		want = append(want, v1.NodeAddress{Type: v1.NodeExternalDNS, Address: dns})
	}
	for _, a := range want {
		if !slices.Contains(n.Status.Addresses, a) {
			t.Errorf("%s: addresses %v lack %s %s", n.Name, n.Status.Addresses, a.Type, a.Address)
		}
	}
}

// routeTable creates a route table in the VPC with the cluster's tag:
// the table of the pod routes.
func (c *awsCloud) routeTable(t *testing.T) string {
	t.Helper()
	out, err := c.ec2.CreateRouteTable(t.Context(), &ec2.CreateRouteTableInput{
		VpcId:             aws.String(c.vpc),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeRouteTable, Tags: awsTags(awsClusterTag, "owned")}},
	})
	if err != nil {
		t.Fatalf("CreateRouteTable: %v", err)
	}
	return aws.ToString(out.RouteTable.RouteTableId)
}

// instanceRoutes maps the destinations of the table's routes to
// instances to the instances.
func (c *awsCloud) instanceRoutes(ctx context.Context, table string) (map[string]string, error) {
	out, err := c.ec2.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{RouteTableIds: []string{table}})
	if err != nil {
		return nil, err
	}
	if len(out.RouteTables) != 1 {
		return nil, fmt.Errorf("%d route tables %s", len(out.RouteTables), table)
	}
	routes := map[string]string{}
	for _, r := range out.RouteTables[0].Routes {
		if id := aws.ToString(r.InstanceId); id != "" {
			routes[aws.ToString(r.DestinationCidrBlock)] = id
		}
	}
	return routes, nil
}

// sourceDestCheck is the instance's source/destination check.
func (c *awsCloud) sourceDestCheck(t *testing.T, id string) bool {
	t.Helper()
	out, err := c.ec2.DescribeInstanceAttribute(t.Context(), &ec2.DescribeInstanceAttributeInput{
		InstanceId: aws.String(id), Attribute: ec2types.InstanceAttributeNameSourceDestCheck,
	})
	if err != nil || out.SourceDestCheck == nil {
		t.Fatalf("DescribeInstanceAttribute(%s, sourceDestCheck) = %+v, %v", id, out, err)
	}
	return aws.ToBool(out.SourceDestCheck.Value)
}

// networkAvailable reports whether the route controller has set the
// Node's NetworkUnavailable condition to False.
func networkAvailable(n *v1.Node) bool {
	return slices.ContainsFunc(n.Status.Conditions, func(c v1.NodeCondition) bool {
		return c.Type == v1.NodeNetworkUnavailable && c.Status == v1.ConditionFalse
	})
}

// TestAWSNodesAndRoutes runs the binary with --cloud-provider=aws against
// moto: Nodes registered as kubelet --cloud-provider=external registers
// them (named by their instance's private DNS name, no providerID) are
// initialised from EC2; their pod CIDRs become routes to their instances
// in the cluster's route table, with the instances' source/destination
// check off. The Node of a stopped instance is tainted as shut down; the
// Node of a terminated instance is deleted, and its route with it.
func TestAWSNodesAndRoutes(t *testing.T) {
	cp := harness.StartControlPlane(t)
	cloud := newAWSCloud(t)
	table := cloud.routeTable(t)
	instanceTypes := []ec2types.InstanceType{ec2types.InstanceTypeM5Large, ec2types.InstanceTypeT3Medium, ec2types.InstanceTypeC5Xlarge}
	var instances []ec2types.Instance
	for i, it := range instanceTypes {
		instances = append(instances, cloud.addAWSNode(t, cp, awsZones[i%len(awsZones)], it, fmt.Sprintf("10.244.%d.0/24", i)))
	}
	startAWSCCM(t, cp, cloud.conf(t, cloud.moto.URL), "--cluster-cidr="+awsCIDR)

	for _, in := range instances {
		n := waitNode(t, cp, aws.ToString(in.PrivateDnsName), "initialised from EC2", initialised)
		checkInitialisedFrom(t, n, in)
	}

	want := map[string]string{}
	for i, in := range instances {
		want[fmt.Sprintf("10.244.%d.0/24", i)] = aws.ToString(in.InstanceId)
	}
	waitRoutes(t, cloud, table, want)
	for _, in := range instances {
		waitNode(t, cp, aws.ToString(in.PrivateDnsName), "NetworkUnavailable=False", networkAvailable)
		if cloud.sourceDestCheck(t, aws.ToString(in.InstanceId)) {
			t.Errorf("instance %s, the next hop of a pod route, has its source/destination check on", aws.ToString(in.InstanceId))
		}
	}

	stopped := instances[1]
	if _, err := cloud.ec2.StopInstances(t.Context(), &ec2.StopInstancesInput{InstanceIds: []string{aws.ToString(stopped.InstanceId)}}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, cp, aws.ToString(stopped.PrivateDnsName), "tainted as shut down", func(n *v1.Node) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == cloudproviderapi.TaintNodeShutdown })
	})

	gone := instances[2]
	if _, err := cloud.ec2.TerminateInstances(t.Context(), &ec2.TerminateInstancesInput{InstanceIds: []string{aws.ToString(gone.InstanceId)}}); err != nil {
		t.Fatal(err)
	}
	waitNodeGone(t, cp, aws.ToString(gone.PrivateDnsName))
	delete(want, "10.244.2.0/24")
	waitRoutes(t, cloud, table, want)
}

// waitRoutes waits until the table's routes to instances are want.
func waitRoutes(t *testing.T, cloud *awsCloud, table string, want map[string]string) {
	t.Helper()
	var got map[string]string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = cloud.instanceRoutes(ctx, table)
		return err == nil && maps.Equal(got, want), err
	})
	if err != nil {
		t.Fatalf("routes to instances in %s: %v, want %v: %v", table, got, want, err)
	}
}

// awsLBService creates a LoadBalancer Service with one TCP port, 80, and
// the annotations.
func awsLBService(t *testing.T, cp *harness.ControlPlane, name string, annotations map[string]string) {
	t.Helper()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, Annotations: annotations},
		Spec: v1.ServiceSpec{
			Type:     v1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
			Ports:    []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := cp.Client.CoreV1().Services(metav1.NamespaceDefault).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitHostname waits until the Service has an ingress hostname and
// returns the Service.
func waitHostname(t *testing.T, cp *harness.ControlPlane, name string) *v1.Service {
	t.Helper()
	svc := &v1.Service{}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := cp.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		svc = got
		return len(svc.Status.LoadBalancer.Ingress) > 0 && svc.Status.LoadBalancer.Ingress[0].Hostname != "", nil
	})
	if err != nil {
		t.Fatalf("Service %s has no ingress hostname (status %+v): %v", name, svc.Status, err)
	}
	return svc
}

// nlbMembers is the DNS name of the Service's Network Load Balancer in
// moto and the instances its target groups hold, as instance:port, sorted.
func (c *awsCloud) nlbMembers(ctx context.Context, svc *v1.Service) (string, []string, error) {
	lbs, err := c.elbv2.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{Names: []string{cloudprovider.DefaultLoadBalancerName(svc)}})
	if err != nil {
		return "", nil, err
	}
	if len(lbs.LoadBalancers) != 1 {
		return "", nil, fmt.Errorf("%d Network Load Balancers for %s", len(lbs.LoadBalancers), svc.Name)
	}
	lb := lbs.LoadBalancers[0]
	groups, err := c.elbv2.DescribeTargetGroups(ctx, &elbv2.DescribeTargetGroupsInput{LoadBalancerArn: lb.LoadBalancerArn})
	if err != nil {
		return "", nil, err
	}
	if len(groups.TargetGroups) != 1 {
		return "", nil, fmt.Errorf("%d target groups for the one port of %s", len(groups.TargetGroups), svc.Name)
	}
	health, err := c.elbv2.DescribeTargetHealth(ctx, &elbv2.DescribeTargetHealthInput{TargetGroupArn: groups.TargetGroups[0].TargetGroupArn})
	if err != nil {
		return "", nil, err
	}
	var targets []string
	for _, d := range health.TargetHealthDescriptions {
		targets = append(targets, fmt.Sprintf("%s:%d", aws.ToString(d.Target.Id), aws.ToInt32(d.Target.Port)))
	}
	slices.Sort(targets)
	return aws.ToString(lb.DNSName), targets, nil
}

// clbMembers is the DNS name of the Service's Classic ELB in moto and
// its instances, sorted.
func (c *awsCloud) clbMembers(ctx context.Context, svc *v1.Service) (string, []string, error) {
	out, err := c.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerNames: []string{cloudprovider.DefaultLoadBalancerName(svc)}})
	if err != nil {
		return "", nil, err
	}
	if len(out.LoadBalancerDescriptions) != 1 {
		return "", nil, fmt.Errorf("%d Classic ELBs for %s", len(out.LoadBalancerDescriptions), svc.Name)
	}
	lb := out.LoadBalancerDescriptions[0]
	var ids []string
	for _, in := range lb.Instances {
		ids = append(ids, aws.ToString(in.InstanceId))
	}
	slices.Sort(ids)
	return aws.ToString(lb.DNSName), ids, nil
}

// waitMembersOf waits until both load balancers send to exactly the
// instances: the NLB's targets on the Service's NodePort, the CLB's
// instances.
func waitMembersOf(t *testing.T, cloud *awsCloud, nlbSvc, clbSvc *v1.Service, instances ...ec2types.Instance) {
	t.Helper()
	var wantTargets, wantIDs []string
	for _, in := range instances {
		id := aws.ToString(in.InstanceId)
		wantIDs = append(wantIDs, id)
		wantTargets = append(wantTargets, fmt.Sprintf("%s:%d", id, nlbSvc.Spec.Ports[0].NodePort))
	}
	slices.Sort(wantIDs)
	slices.Sort(wantTargets)
	var targets, ids []string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if _, targets, err = cloud.nlbMembers(ctx, nlbSvc); err != nil {
			return false, err
		}
		if _, ids, err = cloud.clbMembers(ctx, clbSvc); err != nil {
			return false, err
		}
		return slices.Equal(targets, wantTargets) && slices.Equal(ids, wantIDs), nil
	})
	if err != nil {
		t.Fatalf("NLB targets %v (want %v), CLB instances %v (want %v): %v", targets, wantTargets, ids, wantIDs, err)
	}
}

// securityGroups are the VPC's security groups by name.
func (c *awsCloud) securityGroups(t *testing.T) map[string]ec2types.SecurityGroup {
	t.Helper()
	out, err := c.ec2.DescribeSecurityGroups(t.Context(), &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{
		{Name: aws.String("vpc-id"), Values: []string{c.vpc}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]ec2types.SecurityGroup{}
	for _, g := range out.SecurityGroups {
		groups[aws.ToString(g.GroupName)] = g
	}
	return groups
}

// ingressOf describes a security group's ingress rules, sorted.
func ingressOf(g ec2types.SecurityGroup) []string {
	var rules []string
	for _, p := range g.IpPermissions {
		from := ""
		for _, r := range p.IpRanges {
			from += " " + aws.ToString(r.CidrIp)
		}
		for _, r := range p.UserIdGroupPairs {
			from += " " + aws.ToString(r.GroupId)
		}
		rules = append(rules, fmt.Sprintf("%s %d-%d from%s", aws.ToString(p.IpProtocol), aws.ToInt32(p.FromPort), aws.ToInt32(p.ToPort), from))
	}
	slices.Sort(rules)
	return rules
}

// TestAWSLoadBalancers runs the binary with --cloud-provider=aws against
// moto: a Service annotated as nlb gets a Network Load Balancer, one
// without the annotation a Classic ELB, each Service's ingress hostname
// the DNS name moto gave its load balancer. The NLB's targets and the
// CLB's instances follow a Node added and a Node labelled to be excluded
// from load balancers. Deleting the Services leaves no load balancer,
// target group or security group of theirs, and the nodes' security group
// as it was.
func TestAWSLoadBalancers(t *testing.T) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	cloud := newAWSCloud(t)
	a := cloud.addAWSNode(t, cp, awsZones[0], ec2types.InstanceTypeM5Large, "")
	b := cloud.addAWSNode(t, cp, awsZones[1], ec2types.InstanceTypeM5Large, "")
	startAWSCCM(t, cp, cloud.conf(t, cloud.moto.URL), "--configure-cloud-routes=false")
	for _, in := range []ec2types.Instance{a, b} {
		waitNode(t, cp, aws.ToString(in.PrivateDnsName), "initialised from EC2", initialised)
	}
	before := cloud.securityGroups(t)
	nodesIngress := ingressOf(before["e2e-nodes"])

	start := time.Now()
	awsLBService(t, cp, "web-nlb", map[string]string{awsLBTypeAnnotation: "nlb"})
	awsLBService(t, cp, "web-clb", nil)
	nlbSvc, clbSvc := waitHostname(t, cp, "web-nlb"), waitHostname(t, cp, "web-clb")
	t.Logf("the Services got their load balancers' hostnames in %s", time.Since(start).Round(time.Millisecond))
	nlbDNS, _, err := cloud.nlbMembers(ctx, nlbSvc)
	if err != nil {
		t.Fatal(err)
	}
	clbDNS, _, err := cloud.clbMembers(ctx, clbSvc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		svc *v1.Service
		dns string
	}{{nlbSvc, nlbDNS}, {clbSvc, clbDNS}} {
		if got := tt.svc.Status.LoadBalancer.Ingress; len(got) != 1 || got[0].Hostname != tt.dns || got[0].IP != "" {
			t.Errorf("Service %s ingress %+v, want the one hostname %q", tt.svc.Name, got, tt.dns)
		}
		if !slices.Contains(tt.svc.Finalizers, lbFinalizer) {
			t.Errorf("Service %s finalizers %v, want %s", tt.svc.Name, tt.svc.Finalizers, lbFinalizer)
		}
	}
	if nlbDNS == clbDNS {
		t.Errorf("both load balancers have the DNS name %s", nlbDNS)
	}
	waitMembersOf(t, cloud, nlbSvc, clbSvc, a, b)

	during := cloud.securityGroups(t)
	clbSG, ok := during[awsELBSecurityGroupPrefix+cloudprovider.DefaultLoadBalancerName(clbSvc)]
	if !ok {
		t.Errorf("no security group %s%s of the Classic ELB among %v", awsELBSecurityGroupPrefix, cloudprovider.DefaultLoadBalancerName(clbSvc), slices.Sorted(maps.Keys(during)))
	}
	rules := ingressOf(during["e2e-nodes"])
	nodePort := nlbSvc.Spec.Ports[0].NodePort
	nlbRule := fmt.Sprintf("tcp %d-%d from", nodePort, nodePort)
	if !slices.ContainsFunc(rules, func(r string) bool { return strings.HasPrefix(r, nlbRule) }) ||
		(ok && !slices.ContainsFunc(rules, func(r string) bool { return strings.HasSuffix(r, " "+aws.ToString(clbSG.GroupId)) })) {
		t.Errorf("the nodes' security group lets in %v; want the NLB's NodePort %d and the Classic ELB's group", rules, nodePort)
	}

	c := cloud.addAWSNode(t, cp, awsZones[0], ec2types.InstanceTypeM5Large, "")
	waitNode(t, cp, aws.ToString(c.PrivateDnsName), "initialised from EC2", initialised)
	waitMembersOf(t, cloud, nlbSvc, clbSvc, a, b, c)

	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, v1.LabelNodeExcludeBalancers)
	if _, err := cp.Client.CoreV1().Nodes().Patch(ctx, aws.ToString(a.PrivateDnsName), types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMembersOf(t, cloud, nlbSvc, clbSvc, b, c)

	start = time.Now()
	for _, name := range []string{"web-nlb", "web-clb"} {
		if err := cp.Client.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client.CoreV1().Services(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(list.Items, func(s v1.Service) bool { return s.Spec.Type == v1.ServiceTypeLoadBalancer }), nil
	})
	if err != nil {
		t.Fatalf("the deleted Services are still there: %v", err)
	}
	t.Logf("the Services and their load balancers were deleted in %s", time.Since(start).Round(time.Millisecond))
	// The finalizer goes only once the load balancer is deleted: the cloud
	// is clean the moment the Services are gone.
	if out, err := cloud.elbv2.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{}); err != nil || len(out.LoadBalancers) != 0 {
		t.Errorf("Network Load Balancers left: %+v, %v", out, err)
	}
	if out, err := cloud.elbv2.DescribeTargetGroups(ctx, &elbv2.DescribeTargetGroupsInput{}); err != nil || len(out.TargetGroups) != 0 {
		t.Errorf("target groups left: %+v, %v", out, err)
	}
	if out, err := cloud.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{}); err != nil || len(out.LoadBalancerDescriptions) != 0 {
		t.Errorf("Classic ELBs left: %+v, %v", out, err)
	}
	after := cloud.securityGroups(t)
	for name := range after {
		if _, existed := before[name]; !existed {
			t.Errorf("security group %s left", name)
		}
	}
	if got := ingressOf(after["e2e-nodes"]); !slices.Equal(got, nodesIngress) {
		t.Errorf("the nodes' security group lets in %v, want what it did before the Services: %v", got, nodesIngress)
	}
}

// Labels of the guard's series in the CCM's /metrics.
const (
	awsRequestsTotal  = "cloudprovider_api_requests_total"
	awsProviderLabel  = `provider="aws"`
	awsThrottledLabel = `result="throttled"`
	awsErrorLabel     = `result="error"`
)

// metricSum sums the series of a metric in a /metrics body whose labels
// include every one of labels (name="value").
func metricSum(body, metric string, labels ...string) float64 {
	sum := 0.0
	line := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(metric) + `\{([^}]*)\} (\S+)$`)
	for _, m := range line.FindAllStringSubmatch(body, -1) {
		if slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(m[1], l) }) {
			continue
		}
		if v, err := strconv.ParseFloat(m[2], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// The throttling test's share of throttled EC2 requests, one in
// throttleEvery, and the concurrency of its CCM: how many EC2 requests
// its controllers can have in flight at once.
const (
	throttleEvery          = 3
	throttleNodeSyncs      = 4
	throttleLifecycleSyncs = 2
)

// TestAWSThrottledEC2 puts the awstest fault proxy between the CCM and
// moto's EC2, which then answers every third request with
// RequestLimitExceeded and Retry-After: 1. Nodes added meanwhile are all
// initialised from EC2; the CCM's metrics count throttled calls and no
// failed ones, and no Node gets a FailedToInitializeNode event. As every
// throttled answer pauses all calls for at least the second it asks for,
// the requests that reach EC2 in the throttled window are bounded by
// twice the controllers' concurrency per second of it: retrying without
// back-off would make that many per round trip.
func TestAWSThrottledEC2(t *testing.T) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	cloud := newAWSCloud(t)
	proxy, err := awstest.NewProxy(cloud.moto.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	first := cloud.addAWSNode(t, cp, awsZones[0], ec2types.InstanceTypeM5Large, "")
	ccm := startAWSCCM(t, cp, cloud.conf(t, proxy.URL()),
		"--controllers=cloud-node,cloud-node-lifecycle",
		fmt.Sprintf("--concurrent-node-syncs=%d", throttleNodeSyncs),
		fmt.Sprintf("--concurrent-node-lifecycle-syncs=%d", throttleLifecycleSyncs))
	waitNode(t, cp, aws.ToString(first.PrivateDnsName), "initialised from EC2", initialised)
	token := cp.MetricsToken(ctx, t)

	proxy.SetFault(awstest.AnyAction, awstest.Fault{Throttle: true, RetryAfter: time.Second, ThrottleEvery: throttleEvery})
	seen := len(proxy.Requests())
	start := time.Now()
	const added = 6
	instances := map[string]ec2types.Instance{}
	for i := range added {
		in := cloud.addAWSNode(t, cp, awsZones[i%len(awsZones)], ec2types.InstanceTypeT3Medium, "")
		instances[aws.ToString(in.PrivateDnsName)] = in
	}
	var pending []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		pending = pending[:0]
		for name := range instances {
			n, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !initialised(n) {
				pending = append(pending, name)
			}
		}
		return len(pending) == 0, nil
	})
	window := time.Since(start)
	requests := proxy.Requests()[seen:]
	proxy.ClearFaults()
	if err != nil {
		t.Fatalf("Nodes %v not initialised while EC2 throttles: %v", pending, err)
	}
	throttled := 0
	for _, r := range requests {
		if r.Throttled {
			throttled++
		}
	}
	t.Logf("%d Nodes initialised in %s while EC2 throttled %d of the %d requests that reached it",
		added, window.Round(time.Millisecond), throttled, len(requests))

	for name, in := range instances {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkInitialisedFrom(t, n, in)
	}
	if throttled == 0 {
		t.Errorf("the proxy throttled none of %d requests", len(requests))
	}
	seconds := int(window/time.Second) + 1
	if bound := 2 * (throttleNodeSyncs + throttleLifecycleSyncs) * (seconds + 1); len(requests) > bound {
		t.Errorf("%d EC2 requests in the %s of throttling, want at most %d: throttled answers do not pause the calls", len(requests), window, bound)
	}

	status, body, err := ccm.Get(ctx, "/metrics", token)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics = %d, %v", status, err)
	}
	if n := metricSum(body, awsRequestsTotal, awsProviderLabel, awsThrottledLabel); n < 1 {
		t.Errorf("/metrics counts %v throttled calls, want at least one", n)
	}
	if n := metricSum(body, awsRequestsTotal, awsProviderLabel, awsErrorLabel); n != 0 {
		t.Errorf("/metrics counts %v failed calls, want none: a throttled call is no failure", n)
	}
	events, err := cp.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedToInitializeNode"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 0 {
		t.Errorf("%d FailedToInitializeNode events, want none; the first: %s", len(events.Items), events.Items[0].Message)
	}
}
