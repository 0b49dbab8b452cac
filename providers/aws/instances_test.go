package aws

import (
	"errors"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/cloud"
)

func TestInstanceMetadata(t *testing.T) {
	c := newTestCloud(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	in := c.runInstance(t, instanceSpec{instanceType: ec2types.InstanceTypeC5Xlarge, tags: clusterTags()})
	id, zone, dns := aws.ToString(in.InstanceId), aws.ToString(in.Placement.AvailabilityZone), aws.ToString(in.PrivateDnsName)
	if zone == "" || dns == "" || aws.ToString(in.PublicIpAddress) == "" {
		t.Fatalf("moto's instance lacks a zone, a private DNS name or a public IP: %+v", in)
	}
	wantAddresses := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: aws.ToString(in.PrivateIpAddress)},
		{Type: v1.NodeExternalIP, Address: aws.ToString(in.PublicIpAddress)},
		{Type: v1.NodeInternalDNS, Address: dns},
		{Type: v1.NodeHostName, Address: dns},
		{Type: v1.NodeExternalDNS, Address: aws.ToString(in.PublicDnsName)},
	}

	for _, tt := range []struct {
		name, providerID, wantProviderID string
	}{
		{"by name", "", "aws:///" + zone + "/" + id},
		{"by providerID", "aws:///" + zone + "/" + id, "aws:///" + zone + "/" + id},
		{"by providerID without zone", "aws:////" + id, "aws:////" + id},
		{"by bare instance ID", id, id},
	} {
		t.Run(tt.name, func(t *testing.T) {
			md, err := p.instances.InstanceMetadata(t.Context(), node(dns, tt.providerID))
			if err != nil {
				t.Fatal(err)
			}
			want := &cloudprovider.InstanceMetadata{
				ProviderID:    tt.wantProviderID,
				InstanceType:  "c5.xlarge",
				Zone:          zone,
				Region:        testRegion,
				NodeAddresses: wantAddresses,
			}
			if !reflect.DeepEqual(md, want) {
				t.Errorf("InstanceMetadata:\n got %+v\nwant %+v", md, want)
			}
		})
	}

	if _, err := p.instances.InstanceMetadata(t.Context(), node("n", "gce://project/zone/vm")); err == nil || isNotFound(err) {
		t.Errorf("InstanceMetadata of another provider's providerID = %v; want an error that is not InstanceNotFound", err)
	}
}

func TestInstanceLifecycle(t *testing.T) {
	c := newTestCloud(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	in := c.runInstance(t, instanceSpec{tags: clusterTags()})
	id, dns := aws.ToString(in.InstanceId), aws.ToString(in.PrivateDnsName)
	byID, byName := node(dns, "aws:///"+aws.ToString(in.Placement.AvailabilityZone)+"/"+id), node(dns, "")
	i := p.instances

	expect := func(t *testing.T, n *v1.Node, exists, shutdown bool) {
		t.Helper()
		if got, err := i.InstanceExists(t.Context(), n); err != nil || got != exists {
			t.Errorf("InstanceExists(%s) = %v, %v; want %v", n.Spec.ProviderID, got, err, exists)
		}
		if got, err := i.InstanceShutdown(t.Context(), n); err != nil || got != shutdown {
			t.Errorf("InstanceShutdown(%s) = %v, %v; want %v", n.Spec.ProviderID, got, err, shutdown)
		}
	}
	for _, n := range []*v1.Node{byID, byName} {
		expect(t, n, true, false)
	}

	c.stopInstance(t, id)
	for _, n := range []*v1.Node{byID, byName} {
		expect(t, n, true, true)
	}
	if md, err := i.InstanceMetadata(t.Context(), byID); err != nil || md.ProviderID != byID.Spec.ProviderID {
		t.Errorf("InstanceMetadata(stopped) = %+v, %v; want its metadata", md, err)
	}

	c.terminateInstance(t, id)
	if got, err := i.InstanceExists(t.Context(), byID); err != nil || got {
		t.Errorf("InstanceExists(terminated) = %v, %v; want false", got, err)
	}
	if got, err := i.InstanceShutdown(t.Context(), byID); err != nil || got {
		t.Errorf("InstanceShutdown(terminated) = %v, %v; want false", got, err)
	}
	if _, err := i.InstanceMetadata(t.Context(), byID); !isNotFound(err) {
		t.Errorf("InstanceMetadata(terminated) = %v; want InstanceNotFound", err)
	}
	// Terminated instances keep their name for a while; it is no longer theirs.
	if got, err := i.InstanceExists(t.Context(), byName); err != nil || got {
		t.Errorf("InstanceExists(terminated, by name) = %v, %v; want false", got, err)
	}
	if _, err := i.InstanceMetadata(t.Context(), byName); !isNotFound(err) {
		t.Errorf("InstanceMetadata(terminated, by name) = %v; want InstanceNotFound", err)
	}
}

func TestInstanceNotFound(t *testing.T) {
	c := newTestCloud(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	i := p.instances
	for _, n := range []*v1.Node{node("ip-10-9-9-9.ec2.internal", ""), node("x", "aws:///us-east-1a/i-0123456789abcdef0")} {
		if got, err := i.InstanceExists(t.Context(), n); err != nil || got {
			t.Errorf("InstanceExists(%s %s) = %v, %v; want false", n.Name, n.Spec.ProviderID, got, err)
		}
		if _, err := i.InstanceShutdown(t.Context(), n); !isNotFound(err) {
			t.Errorf("InstanceShutdown(%s %s) = %v; want InstanceNotFound", n.Name, n.Spec.ProviderID, err)
		}
		if _, err := i.InstanceMetadata(t.Context(), n); !isNotFound(err) {
			t.Errorf("InstanceMetadata(%s %s) = %v; want InstanceNotFound", n.Name, n.Spec.ProviderID, err)
		}
	}
}

func TestInstanceClusterTag(t *testing.T) {
	c := newTestCloud(t)
	ours := c.runInstance(t, instanceSpec{tags: clusterTags()})
	legacy := c.runInstance(t, instanceSpec{tags: map[string]string{tagClusterLegacy: testCluster}})
	other := c.runInstance(t, instanceSpec{tags: map[string]string{tagClusterPrefix + "other": "owned", tagClusterLegacy: "other"}})
	untagged := c.runInstance(t, instanceSpec{})

	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	for _, tt := range []struct {
		name string
		in   ec2types.Instance
		ours bool
	}{
		{"cluster tag", ours, true},
		{"legacy tag", legacy, true},
		{"another cluster's tags", other, false},
		{"no tag", untagged, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dns, id := aws.ToString(tt.in.PrivateDnsName), aws.ToString(tt.in.InstanceId)
			exists, err := p.instances.InstanceExists(t.Context(), node(dns, ""))
			if err != nil || exists != tt.ours {
				t.Errorf("InstanceExists(by name) = %v, %v; want %v", exists, err, tt.ours)
			}
			// By providerID an instance that is not the cluster's is an
			// error, never "gone": the Node is not deleted over a tag.
			exists, err = p.instances.InstanceExists(t.Context(), node(dns, id))
			if tt.ours && (err != nil || !exists) {
				t.Errorf("InstanceExists(by providerID) = %v, %v; want true", exists, err)
			}
			if !tt.ours && (err == nil || isNotFound(err)) {
				t.Errorf("InstanceExists(by providerID) = %v, %v; want an error that is not InstanceNotFound", exists, err)
			}
		})
	}

	t.Run("no cluster ID configured", func(t *testing.T) {
		all := newTestProvider(t, `[Global]
Region = `+testRegion+`
[ServiceOverride "ec2"]
Service = ec2
Region = `+testRegion+`
URL = `+c.proxy.URL+`
SigningRegion = `+testRegion, defaultBatchOptions)
		if all.HasClusterID() {
			t.Error("HasClusterID = true without a cluster ID")
		}
		for _, in := range []ec2types.Instance{other, untagged} {
			if exists, err := all.instances.InstanceExists(t.Context(), node(aws.ToString(in.PrivateDnsName), "")); err != nil || !exists {
				t.Errorf("InstanceExists(%s) = %v, %v; want true", aws.ToString(in.InstanceId), exists, err)
			}
		}
	})
}

func TestInstanceNameTakenTwice(t *testing.T) {
	c := newTestCloud(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	a := c.runInstance(t, instanceSpec{tags: clusterTags()})
	b := c.runInstance(t, instanceSpec{tags: clusterTags()})
	if aws.ToString(a.PrivateDnsName) == aws.ToString(b.PrivateDnsName) {
		t.Fatal("moto gave two instances the same private DNS name")
	}
	// A name filter matches exactly one instance, whatever else is running.
	md, err := p.instances.InstanceMetadata(t.Context(), node(aws.ToString(b.PrivateDnsName), ""))
	if err != nil || md.ProviderID != providerID(aws.ToString(b.Placement.AvailabilityZone), aws.ToString(b.InstanceId)) {
		t.Errorf("InstanceMetadata(by name) = %+v, %v; want instance %s", md, err, aws.ToString(b.InstanceId))
	}
}

// TestInstanceAddressOrder: the addresses follow the network interfaces'
// device order, whatever order they were attached in, each interface's
// primary address first.
func TestInstanceAddressOrder(t *testing.T) {
	c := newTestCloud(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	in := c.runInstance(t, instanceSpec{tags: clusterTags()})
	id, subnet := aws.ToString(in.InstanceId), aws.ToString(in.SubnetId)
	ctx := t.Context()

	primaryENI := aws.ToString(in.NetworkInterfaces[0].NetworkInterfaceId)
	if _, err := c.ec2.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String(primaryENI), SecondaryPrivateIpAddressCount: aws.Int32(1),
	}); err != nil {
		t.Fatal(err)
	}
	attach := func(device int32) {
		out, err := c.ec2.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(subnet)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ec2.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{
			InstanceId: aws.String(id), NetworkInterfaceId: out.NetworkInterface.NetworkInterfaceId, DeviceIndex: aws.Int32(device),
		}); err != nil {
			t.Fatal(err)
		}
	}
	attach(2)
	attach(1)

	described := c.describe(t, id)
	byDevice := map[int32]ec2types.InstanceNetworkInterface{}
	for _, n := range described.NetworkInterfaces {
		byDevice[aws.ToInt32(n.Attachment.DeviceIndex)] = n
	}
	if len(byDevice) != 3 || len(byDevice[0].PrivateIpAddresses) != 2 {
		t.Fatalf("moto's instance has interfaces %+v; want devices 0 (two addresses), 1 and 2", described.NetworkInterfaces)
	}
	var want []string
	for _, d := range []int32{0, 1, 2} {
		for _, ip := range byDevice[d].PrivateIpAddresses {
			if aws.ToBool(ip.Primary) {
				want = append(want, aws.ToString(ip.PrivateIpAddress))
			}
		}
		for _, ip := range byDevice[d].PrivateIpAddresses {
			if !aws.ToBool(ip.Primary) {
				want = append(want, aws.ToString(ip.PrivateIpAddress))
			}
		}
	}
	want = append(want, aws.ToString(described.PublicIpAddress))

	md, err := p.instances.InstanceMetadata(ctx, node(aws.ToString(in.PrivateDnsName), id))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range md.NodeAddresses {
		if a.Type == v1.NodeInternalIP || a.Type == v1.NodeExternalIP {
			got = append(got, a.Address)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("IP addresses = %v, want %v (device 0, 1, 2, then the public one)", got, want)
	}
}

func TestInstanceThrottled(t *testing.T) {
	c := newTestCloud(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	in := c.runInstance(t, instanceSpec{tags: clusterTags()})
	c.proxy.setThrottle("DescribeInstances", true)

	for _, n := range []*v1.Node{node(aws.ToString(in.PrivateDnsName), ""), node("n", aws.ToString(in.InstanceId))} {
		before := c.proxy.count("DescribeInstances")
		_, err := p.instances.InstanceExists(t.Context(), n)
		var throttled *cloud.ThrottledError
		if !errors.As(err, &throttled) {
			t.Errorf("InstanceExists(%q) while throttled = %v; want a *cloud.ThrottledError", n.Spec.ProviderID, err)
		}
		if got := c.proxy.count("DescribeInstances") - before; got != 1 {
			t.Errorf("a throttled request was sent %d times; want once, not retried", got)
		}
	}

	c.proxy.setThrottle("DescribeInstances", false)
	if exists, err := p.instances.InstanceExists(t.Context(), node("n", aws.ToString(in.InstanceId))); err != nil || !exists {
		t.Errorf("InstanceExists after throttling = %v, %v; want true", exists, err)
	}
}
