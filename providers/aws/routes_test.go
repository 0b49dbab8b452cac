package aws

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2/ktesting"
)

// defaultVPC is the ID of moto's default VPC, where instances run
// without a subnet land.
func (c *testCloud) defaultVPC(t *testing.T) string {
	t.Helper()
	out, err := c.ec2.DescribeVpcs(t.Context(), &ec2.DescribeVpcsInput{
		Filters: []ec2types.Filter{{Name: aws.String("is-default"), Values: []string{"true"}}},
	})
	if err != nil || len(out.Vpcs) != 1 {
		t.Fatalf("DescribeVpcs(default) = %+v, %v", out, err)
	}
	return aws.ToString(out.Vpcs[0].VpcId)
}

// createRouteTable creates a route table in the default VPC with tags.
func (c *testCloud) createRouteTable(t *testing.T, tags map[string]string) string {
	t.Helper()
	in := &ec2.CreateRouteTableInput{VpcId: aws.String(c.defaultVPC(t))}
	if len(tags) > 0 {
		ts := ec2types.TagSpecification{ResourceType: ec2types.ResourceTypeRouteTable}
		for k, v := range tags {
			ts.Tags = append(ts.Tags, ec2types.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
		in.TagSpecifications = []ec2types.TagSpecification{ts}
	}
	out, err := c.ec2.CreateRouteTable(t.Context(), in)
	if err != nil {
		t.Fatalf("CreateRouteTable: %v", err)
	}
	return aws.ToString(out.RouteTable.RouteTableId)
}

// createClusterRouteTable creates the test cluster's route table: one in
// the default VPC with the cluster's tag.
func (c *testCloud) createClusterRouteTable(t *testing.T) string {
	t.Helper()
	return c.createRouteTable(t, clusterTags())
}

// tableRoutes maps the destinations of a table's routes to their targets
// (an instance or gateway ID, "local").
func (c *testCloud) tableRoutes(t *testing.T, tableID string) map[string]string {
	t.Helper()
	out, err := c.ec2.DescribeRouteTables(t.Context(), &ec2.DescribeRouteTablesInput{RouteTableIds: []string{tableID}})
	if err != nil || len(out.RouteTables) != 1 {
		t.Fatalf("DescribeRouteTables(%s) = %+v, %v", tableID, out, err)
	}
	got := map[string]string{}
	for _, rt := range out.RouteTables[0].Routes {
		target := aws.ToString(rt.InstanceId)
		if target == "" {
			target = describeTarget(rt)
		}
		got[aws.ToString(rt.DestinationCidrBlock)] = target
	}
	return got
}

// addRoute adds a route to an instance or a gateway behind the provider's
// back.
func (c *testCloud) addRoute(t *testing.T, tableID, cidr string, in ec2.CreateRouteInput) {
	t.Helper()
	in.RouteTableId, in.DestinationCidrBlock = aws.String(tableID), aws.String(cidr)
	if _, err := c.ec2.CreateRoute(t.Context(), &in); err != nil {
		t.Fatalf("CreateRoute(%s): %v", cidr, err)
	}
}

// sourceDestCheck is the instance's source/destination check.
func (c *testCloud) sourceDestCheck(t *testing.T, id string) bool {
	t.Helper()
	out, err := c.ec2.DescribeInstanceAttribute(t.Context(), &ec2.DescribeInstanceAttributeInput{
		InstanceId: aws.String(id), Attribute: ec2types.InstanceAttributeNameSourceDestCheck,
	})
	if err != nil || out.SourceDestCheck == nil {
		t.Fatalf("DescribeInstanceAttribute(%s, sourceDestCheck) = %+v, %v", id, out, err)
	}
	return aws.ToBool(out.SourceDestCheck.Value)
}

// listed is ListRoutes as "destination>node" and "destination>blackhole".
func listed(t *testing.T, r cloudprovider.Routes) []string {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	list, err := r.ListRoutes(ctx, "kubernetes")
	if err != nil {
		t.Fatalf("ListRoutes: %v", err)
	}
	out := []string{}
	for _, route := range list {
		target := string(route.TargetNode)
		if route.Blackhole {
			target = "blackhole"
		}
		if route.Name != "kubernetes-"+route.DestinationCIDR {
			t.Errorf("route %s is named %q", route.DestinationCIDR, route.Name)
		}
		out = append(out, route.DestinationCIDR+">"+target)
	}
	return out
}

func podRoute(node, cidr string) *cloudprovider.Route {
	return &cloudprovider.Route{TargetNode: types.NodeName(node), DestinationCIDR: cidr}
}

func providerRoutes(t *testing.T, p *Cloud) cloudprovider.Routes {
	t.Helper()
	r, ok := p.Routes()
	if !ok {
		t.Fatal("Routes not offered")
	}
	return r
}

func TestRoutesCreateListDelete(t *testing.T) {
	c := newTestCloud(t)
	table := c.createClusterRouteTable(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	routes := providerRoutes(t, p)
	_, ctx := ktesting.NewTestContext(t)
	a := c.runInstance(t, instanceSpec{tags: clusterTags()})
	name, id := aws.ToString(a.PrivateDnsName), aws.ToString(a.InstanceId)
	if !c.sourceDestCheck(t, id) {
		t.Fatal("a new instance's source/destination check is off")
	}

	if got := listed(t, routes); len(got) != 0 {
		t.Errorf("routes of a new table = %v, want none", got)
	}
	for range 2 {
		if err := routes.CreateRoute(ctx, "kubernetes", "uid-a", podRoute(name, "10.244.1.0/24")); err != nil {
			t.Fatalf("CreateRoute: %v", err)
		}
	}
	if c.sourceDestCheck(t, id) {
		t.Error("CreateRoute left the instance's source/destination check on")
	}
	if n := c.proxy.count("CreateRoute"); n != 1 {
		t.Errorf("CreateRoute twice sent %d CreateRoute requests; want 1", n)
	}
	if n := c.proxy.count("ModifyInstanceAttribute"); n != 1 {
		t.Errorf("CreateRoute twice sent %d ModifyInstanceAttribute requests; want 1 (the check is off the second time)", n)
	}
	if got := c.tableRoutes(t, table)["10.244.1.0/24"]; got != id {
		t.Errorf("route table sends 10.244.1.0/24 to %q, want %s", got, id)
	}
	if got, want := listed(t, routes), []string{"10.244.1.0/24>" + name}; !slices.Equal(got, want) {
		t.Errorf("ListRoutes = %v, want %v", got, want)
	}

	for range 2 {
		if err := routes.DeleteRoute(ctx, "kubernetes", podRoute(name, "10.244.1.0/24")); err != nil {
			t.Fatalf("DeleteRoute: %v", err)
		}
	}
	if n := c.proxy.count("DeleteRoute"); n != 1 {
		t.Errorf("DeleteRoute twice sent %d DeleteRoute requests; want 1", n)
	}
	if got := listed(t, routes); len(got) != 0 {
		t.Errorf("routes after DeleteRoute = %v, want none", got)
	}
	if _, ok := c.tableRoutes(t, table)["10.244.1.0/24"]; ok {
		t.Error("the route is still in the table")
	}
}

func TestRoutesTerminatedInstanceIsBlackhole(t *testing.T) {
	c := newTestCloud(t)
	table := c.createClusterRouteTable(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	routes := providerRoutes(t, p)
	_, ctx := ktesting.NewTestContext(t)
	a := c.runInstance(t, instanceSpec{tags: clusterTags()})
	b := c.runInstance(t, instanceSpec{tags: clusterTags()})
	nameA, nameB := aws.ToString(a.PrivateDnsName), aws.ToString(b.PrivateDnsName)
	for i, name := range []string{nameA, nameB} {
		cidr := []string{"10.244.1.0/24", "10.244.2.0/24"}[i]
		if err := routes.CreateRoute(ctx, "kubernetes", "uid", podRoute(name, cidr)); err != nil {
			t.Fatalf("CreateRoute(%s): %v", cidr, err)
		}
	}
	c.terminateInstance(t, aws.ToString(b.InstanceId))
	before := c.proxy.count("DescribeInstances")
	if got, want := listed(t, routes), []string{"10.244.1.0/24>" + nameA, "10.244.2.0/24>blackhole"}; !slices.Equal(got, want) {
		t.Errorf("ListRoutes = %v, want %v", got, want)
	}
	if n := c.proxy.count("DescribeInstances") - before; n != 1 {
		t.Errorf("ListRoutes sent %d DescribeInstances requests; want 1 for all routes", n)
	}

	// The route controller deletes the blackhole.
	if err := routes.DeleteRoute(ctx, "kubernetes", &cloudprovider.Route{DestinationCIDR: "10.244.2.0/24", Blackhole: true}); err != nil {
		t.Fatalf("DeleteRoute(blackhole): %v", err)
	}
	if got := c.tableRoutes(t, table); got["10.244.2.0/24"] != "" || got["10.244.1.0/24"] != aws.ToString(a.InstanceId) {
		t.Errorf("table after deleting the blackhole = %v", got)
	}
}

func TestRoutesBlackholeReplaced(t *testing.T) {
	c := newTestCloud(t)
	table := c.createClusterRouteTable(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	routes := providerRoutes(t, p)
	_, ctx := ktesting.NewTestContext(t)
	a := c.runInstance(t, instanceSpec{tags: clusterTags()})
	old := c.runInstance(t, instanceSpec{tags: clusterTags()})
	c.addRoute(t, table, "10.244.3.0/24", ec2.CreateRouteInput{InstanceId: old.InstanceId})
	c.terminateInstance(t, aws.ToString(old.InstanceId))
	if got := listed(t, routes); !slices.Equal(got, []string{"10.244.3.0/24>blackhole"}) {
		t.Fatalf("ListRoutes = %v, want the route to the terminated instance as a blackhole", got)
	}

	name := aws.ToString(a.PrivateDnsName)
	if err := routes.CreateRoute(ctx, "kubernetes", "uid-a", podRoute(name, "10.244.3.0/24")); err != nil {
		t.Fatalf("CreateRoute over a blackhole: %v", err)
	}
	if got := c.tableRoutes(t, table)["10.244.3.0/24"]; got != aws.ToString(a.InstanceId) {
		t.Errorf("route table sends 10.244.3.0/24 to %q, want %s", got, aws.ToString(a.InstanceId))
	}
	if n := c.proxy.count("ReplaceRoute"); n != 1 {
		t.Errorf("%d ReplaceRoute requests; want 1", n)
	}
	if got, want := listed(t, routes), []string{"10.244.3.0/24>" + name}; !slices.Equal(got, want) {
		t.Errorf("ListRoutes = %v, want %v", got, want)
	}
}

func TestRoutesOthersIgnored(t *testing.T) {
	c := newTestCloud(t)
	table := c.createClusterRouteTable(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	routes := providerRoutes(t, p)
	_, ctx := ktesting.NewTestContext(t)
	igw, err := c.ec2.CreateInternetGateway(t.Context(), &ec2.CreateInternetGatewayInput{})
	if err != nil {
		t.Fatal(err)
	}
	gw := igw.InternetGateway.InternetGatewayId
	if _, err := c.ec2.AttachInternetGateway(t.Context(), &ec2.AttachInternetGatewayInput{InternetGatewayId: gw, VpcId: aws.String(c.defaultVPC(t))}); err != nil {
		t.Fatal(err)
	}
	c.addRoute(t, table, "0.0.0.0/0", ec2.CreateRouteInput{GatewayId: gw})
	c.addRoute(t, table, "10.244.9.0/24", ec2.CreateRouteInput{GatewayId: gw})
	stranger := c.runInstance(t, instanceSpec{tags: map[string]string{tagClusterPrefix + "other": "owned"}})
	c.addRoute(t, table, "192.168.0.0/16", ec2.CreateRouteInput{InstanceId: stranger.InstanceId})
	// A table of another cluster.
	otherTable := c.createRouteTable(t, map[string]string{tagClusterPrefix + "other": "owned"})
	c.addRoute(t, otherTable, "10.244.8.0/24", ec2.CreateRouteInput{InstanceId: stranger.InstanceId})
	before := c.tableRoutes(t, table)

	if got := listed(t, routes); len(got) != 0 {
		t.Errorf("ListRoutes = %v; want none: routes to a gateway, the local route, a route to another cluster's instance and another cluster's table are not ours", got)
	}
	if err := routes.DeleteRoute(ctx, "kubernetes", podRoute("", "10.244.9.0/24")); err != nil {
		t.Errorf("DeleteRoute of a destination that goes to a gateway: %v; want a no-op", err)
	}
	a := c.runInstance(t, instanceSpec{tags: clusterTags()})
	err = routes.CreateRoute(ctx, "kubernetes", "uid-a", podRoute(aws.ToString(a.PrivateDnsName), "10.244.9.0/24"))
	if err == nil || !strings.Contains(err.Error(), aws.ToString(gw)) {
		t.Errorf("CreateRoute over a route to a gateway = %v; want an error that names the gateway", err)
	}
	if after := c.tableRoutes(t, table); !mapsEqualString(after, before) {
		t.Errorf("table changed from %v to %v", before, after)
	}
	if got := c.tableRoutes(t, otherTable)["10.244.8.0/24"]; got != aws.ToString(stranger.InstanceId) {
		t.Errorf("another cluster's table changed: 10.244.8.0/24 goes to %q", got)
	}
}

func mapsEqualString(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestRoutesUnknownNode(t *testing.T) {
	c := newTestCloud(t)
	c.createClusterRouteTable(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	_, ctx := ktesting.NewTestContext(t)
	err := providerRoutes(t, p).CreateRoute(ctx, "kubernetes", "uid", podRoute("ip-10-9-9-9.ec2.internal", "10.244.1.0/24"))
	if !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Errorf("CreateRoute to an unknown node = %v; want InstanceNotFound", err)
	}
	if n := c.proxy.count("CreateRoute"); n != 0 {
		t.Errorf("%d CreateRoute requests; want none", n)
	}
}

func TestRouteTables(t *testing.T) {
	t.Run("none tagged", func(t *testing.T) {
		c := newTestCloud(t)
		c.createRouteTable(t, nil)
		p := newTestProvider(t, c.conf(), defaultBatchOptions)
		_, ctx := ktesting.NewTestContext(t)
		_, err := providerRoutes(t, p).ListRoutes(ctx, "kubernetes")
		if err == nil || !strings.Contains(err.Error(), "RouteTableID") || !strings.Contains(err.Error(), tagClusterPrefix+testCluster) {
			t.Errorf("ListRoutes without a tagged table = %v; want an error naming the tag and RouteTableID", err)
		}
		a := c.runInstance(t, instanceSpec{tags: clusterTags()})
		if err := providerRoutes(t, p).CreateRoute(ctx, "kubernetes", "uid", podRoute(aws.ToString(a.PrivateDnsName), "10.244.1.0/24")); err == nil {
			t.Error("CreateRoute without a tagged table succeeded")
		}
		if n := c.proxy.count("ModifyInstanceAttribute"); n != 0 {
			t.Errorf("CreateRoute without a table sent %d ModifyInstanceAttribute requests; want none (the instance is left as it is)", n)
		}
	})
	t.Run("no cluster ID", func(t *testing.T) {
		c := newTestCloud(t)
		c.createRouteTable(t, nil)
		conf := strings.Replace(c.conf(), "KubernetesClusterID = "+testCluster+"\n", "", 1)
		p := newTestProvider(t, conf, defaultBatchOptions)
		_, ctx := ktesting.NewTestContext(t)
		if _, err := providerRoutes(t, p).ListRoutes(ctx, "kubernetes"); err == nil || !strings.Contains(err.Error(), "RouteTableID") {
			t.Errorf("ListRoutes without a cluster ID or RouteTableID = %v; want an error naming RouteTableID", err)
		}
		if n := c.proxy.count("DescribeRouteTables"); n != 0 {
			t.Errorf("%d DescribeRouteTables requests; want none", n)
		}
	})
	t.Run("RouteTableID", func(t *testing.T) {
		c := newTestCloud(t)
		tagged := c.createClusterRouteTable(t)
		configured := c.createRouteTable(t, nil)
		p := newTestProvider(t, c.conf("RouteTableID = "+configured), defaultBatchOptions)
		_, ctx := ktesting.NewTestContext(t)
		a := c.runInstance(t, instanceSpec{tags: clusterTags()})
		if err := providerRoutes(t, p).CreateRoute(ctx, "kubernetes", "uid", podRoute(aws.ToString(a.PrivateDnsName), "10.244.1.0/24")); err != nil {
			t.Fatal(err)
		}
		if c.tableRoutes(t, configured)["10.244.1.0/24"] != aws.ToString(a.InstanceId) || c.tableRoutes(t, tagged)["10.244.1.0/24"] != "" {
			t.Errorf("route in the configured table: %v, in the tagged one: %v; want only the configured one",
				c.tableRoutes(t, configured), c.tableRoutes(t, tagged))
		}
	})
	t.Run("RouteTableID missing", func(t *testing.T) {
		c := newTestCloud(t)
		p := newTestProvider(t, c.conf("RouteTableID = rtb-0123456789abcdef0"), defaultBatchOptions)
		_, ctx := ktesting.NewTestContext(t)
		if _, err := providerRoutes(t, p).ListRoutes(ctx, "kubernetes"); err == nil || !strings.Contains(err.Error(), "rtb-0123456789abcdef0") {
			t.Errorf("ListRoutes with a missing RouteTableID = %v; want an error naming it", err)
		}
	})
	t.Run("several tagged", func(t *testing.T) {
		c := newTestCloud(t)
		first := c.createClusterRouteTable(t)
		legacy := c.createRouteTable(t, map[string]string{tagClusterLegacy: testCluster})
		otherLegacy := c.createRouteTable(t, map[string]string{tagClusterLegacy: "other"})
		p := newTestProvider(t, c.conf(), defaultBatchOptions)
		routes := providerRoutes(t, p)
		_, ctx := ktesting.NewTestContext(t)
		a := c.runInstance(t, instanceSpec{tags: clusterTags()})
		name, id := aws.ToString(a.PrivateDnsName), aws.ToString(a.InstanceId)
		if err := routes.CreateRoute(ctx, "kubernetes", "uid", podRoute(name, "10.244.1.0/24")); err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{first, legacy} {
			if got := c.tableRoutes(t, table)["10.244.1.0/24"]; got != id {
				t.Errorf("table %s sends 10.244.1.0/24 to %q, want %s", table, got, id)
			}
		}
		if got := c.tableRoutes(t, otherLegacy)["10.244.1.0/24"]; got != "" {
			t.Errorf("another cluster's legacy-tagged table got the route (to %s)", got)
		}
		if got, want := listed(t, routes), []string{"10.244.1.0/24>" + name}; !slices.Equal(got, want) {
			t.Errorf("ListRoutes = %v, want %v", got, want)
		}

		// A table that lacks the route: it is not listed, so that the
		// route controller creates it, and CreateRoute fills the gap.
		if _, err := c.ec2.DeleteRoute(t.Context(), &ec2.DeleteRouteInput{RouteTableId: aws.String(legacy), DestinationCidrBlock: aws.String("10.244.1.0/24")}); err != nil {
			t.Fatal(err)
		}
		if got := listed(t, routes); len(got) != 0 {
			t.Errorf("ListRoutes with the route in one of two tables = %v, want none", got)
		}
		if err := routes.CreateRoute(ctx, "kubernetes", "uid", podRoute(name, "10.244.1.0/24")); err != nil {
			t.Fatal(err)
		}
		if got := c.tableRoutes(t, legacy)["10.244.1.0/24"]; got != id {
			t.Errorf("CreateRoute did not fill the gap: legacy table sends it to %q", got)
		}

		if err := routes.DeleteRoute(ctx, "kubernetes", podRoute(name, "10.244.1.0/24")); err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{first, legacy} {
			if got := c.tableRoutes(t, table)["10.244.1.0/24"]; got != "" {
				t.Errorf("table %s still sends 10.244.1.0/24 to %s", table, got)
			}
		}
	})
}

// TestRoutesOf covers what moto cannot show: routes in state blackhole,
// with or without their instance, and tables that disagree.
func TestRoutesOf(t *testing.T) {
	live := func(id, name string, tags map[string]string) ec2types.Instance {
		in := ec2types.Instance{
			InstanceId: aws.String(id), PrivateDnsName: aws.String(name),
			State: &ec2types.InstanceState{Name: ec2types.InstanceStateNameRunning},
		}
		for k, v := range tags {
			in.Tags = append(in.Tags, ec2types.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
		return in
	}
	found := map[string]ec2types.Instance{
		"i-a":       live("i-a", "node-a", clusterTags()),
		"i-b":       live("i-b", "node-b", clusterTags()),
		"i-nat":     live("i-nat", "nat", nil),
		"i-noname":  live("i-noname", "", clusterTags()),
		"i-stopped": {InstanceId: aws.String("i-stopped"), PrivateDnsName: aws.String("node-s"), Tags: live("", "", clusterTags()).Tags, State: &ec2types.InstanceState{Name: ec2types.InstanceStateNameStopped}},
	}
	route := func(cidr string, set func(*ec2types.Route)) ec2types.Route {
		rt := ec2types.Route{DestinationCidrBlock: aws.String(cidr), State: ec2types.RouteStateActive}
		set(&rt)
		return rt
	}
	to := func(id string) func(*ec2types.Route) {
		return func(rt *ec2types.Route) { rt.InstanceId = aws.String(id) }
	}
	table := func(id string, routes ...ec2types.Route) ec2types.RouteTable {
		return ec2types.RouteTable{RouteTableId: aws.String(id), Routes: routes}
	}
	tests := []struct {
		name   string
		tables []ec2types.RouteTable
		want   []string
	}{
		{
			name: "one table",
			tables: []ec2types.RouteTable{table("rtb-1",
				route("10.0.0.0/16", func(rt *ec2types.Route) { rt.GatewayId = aws.String("local") }),
				route("0.0.0.0/0", func(rt *ec2types.Route) { rt.NatGatewayId = aws.String("nat-1") }),
				route("10.244.0.0/24", to("i-a")),
				route("10.244.1.0/24", to("i-gone")),
				route("10.244.2.0/24", func(rt *ec2types.Route) {
					rt.InstanceId, rt.State = aws.String("i-b"), ec2types.RouteStateBlackhole
				}),
				route("10.244.3.0/24", func(rt *ec2types.Route) {
					rt.NetworkInterfaceId, rt.State = aws.String("eni-1"), ec2types.RouteStateBlackhole
				}),
				route("10.244.4.0/24", func(rt *ec2types.Route) {
					rt.GatewayId, rt.State = aws.String("igw-gone"), ec2types.RouteStateBlackhole
				}),
				route("10.244.5.0/24", func(rt *ec2types.Route) { rt.NetworkInterfaceId = aws.String("eni-2") }),
				route("10.244.6.0/24", to("i-nat")),
				route("10.244.7.0/24", to("i-noname")),
				route("10.244.8.0/24", to("i-stopped")),
				ec2types.Route{DestinationPrefixListId: aws.String("pl-1"), GatewayId: aws.String("vpce-1")},
			)},
			want: []string{
				"10.244.0.0/24>node-a", "10.244.1.0/24>blackhole", "10.244.2.0/24>blackhole",
				"10.244.3.0/24>blackhole", "10.244.8.0/24>node-s",
			},
		},
		{
			name: "tables agree",
			tables: []ec2types.RouteTable{
				table("rtb-1", route("10.244.0.0/24", to("i-a"))),
				table("rtb-2", route("10.244.0.0/24", to("i-a"))),
			},
			want: []string{"10.244.0.0/24>node-a"},
		},
		{
			name: "tables disagree",
			tables: []ec2types.RouteTable{
				table("rtb-1", route("10.244.0.0/24", to("i-a")), route("10.244.1.0/24", to("i-b"))),
				table("rtb-2", route("10.244.0.0/24", to("i-b"))),
			},
			want: []string{"10.244.0.0/24>blackhole"},
		},
		{
			name: "blackhole in one table",
			tables: []ec2types.RouteTable{
				table("rtb-1", route("10.244.0.0/24", to("i-a"))),
				table("rtb-2", route("10.244.0.0/24", func(rt *ec2types.Route) {
					rt.NetworkInterfaceId, rt.State = aws.String("eni-1"), ec2types.RouteStateBlackhole
				})),
			},
			want: []string{"10.244.0.0/24>blackhole"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			got := []string{}
			for _, r := range routesOf(logger, "kubernetes", len(tt.tables), byDestination(tt.tables), found, testCluster) {
				target := string(r.TargetNode)
				if r.Blackhole {
					target = "blackhole"
				}
				got = append(got, r.DestinationCIDR+">"+target)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("routes = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRouteDestination(t *testing.T) {
	tests := []struct {
		cidr    string
		want    string
		wantErr bool
	}{
		{cidr: "10.244.1.0/24", want: "10.244.1.0/24"},
		{cidr: "10.244.1.7/24", want: "10.244.1.0/24"},
		{cidr: "FD00:10:244:1::/64", want: "fd00:10:244:1::/64"},
		{cidr: "10.244.1.0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			got, err := parseDestination(tt.cidr)
			if (err != nil) != tt.wantErr || (err == nil && got.String() != tt.want) {
				t.Errorf("parseDestination(%q) = %v, %v; want %s (error %v)", tt.cidr, got, err, tt.want, tt.wantErr)
			}
			if err != nil {
				return
			}
			var v4, v6 *string
			setDestination(got, &v4, &v6)
			if want := netip.MustParsePrefix(tt.want); (v4 != nil) != want.Addr().Is4() || (v6 != nil) == want.Addr().Is4() {
				t.Errorf("setDestination(%s) set v4 %v, v6 %v", got, v4, v6)
			}
		})
	}
}
