package aws

import (
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	v1 "k8s.io/api/core/v1"
)

// eni is a network interface in use at a device index, with private IPv4
// addresses (the first one primary) and IPv6 addresses.
func eni(device int32, v4 []string, v6 ...string) ec2types.InstanceNetworkInterface {
	n := ec2types.InstanceNetworkInterface{
		Status:     ec2types.NetworkInterfaceStatusInUse,
		Attachment: &ec2types.InstanceNetworkInterfaceAttachment{DeviceIndex: aws.Int32(device)},
	}
	for i, ip := range v4 {
		n.PrivateIpAddresses = append(n.PrivateIpAddresses, ec2types.InstancePrivateIpAddress{PrivateIpAddress: aws.String(ip), Primary: aws.Bool(i == 0)})
	}
	for _, ip := range v6 {
		n.Ipv6Addresses = append(n.Ipv6Addresses, ec2types.InstanceIpv6Address{Ipv6Address: aws.String(ip)})
	}
	return n
}

func TestNodeAddresses(t *testing.T) {
	detached := eni(9, []string{"10.0.9.1"}, "2001:db8::9")
	detached.Status = ec2types.NetworkInterfaceStatusAvailable
	secondaryFirst := eni(1, []string{"10.0.1.1", "10.0.1.2"}, "2001:db8::1:1", "2001:db8::1:2")
	// EC2 may list the secondary address first: the primary still leads.
	secondaryFirst.PrivateIpAddresses[0], secondaryFirst.PrivateIpAddresses[1] = secondaryFirst.PrivateIpAddresses[1], secondaryFirst.PrivateIpAddresses[0]
	in := &ec2types.Instance{
		PrivateDnsName:  aws.String("ip-10-0-0-1.ec2.internal"),
		PublicDnsName:   aws.String("ec2-54-0-0-1.compute-1.amazonaws.com"),
		PublicIpAddress: aws.String("54.0.0.1"),
		NetworkInterfaces: []ec2types.InstanceNetworkInterface{
			eni(2, []string{"10.0.2.1"}),
			detached,
			secondaryFirst,
			eni(0, []string{"10.0.0.1", "10.0.0.2", "not-an-ip"}, "2001:DB8::0:1"),
		},
	}
	ipv4 := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.0.0.1"},
		{Type: v1.NodeInternalIP, Address: "10.0.0.2"},
		{Type: v1.NodeInternalIP, Address: "10.0.1.1"},
		{Type: v1.NodeInternalIP, Address: "10.0.1.2"},
		{Type: v1.NodeInternalIP, Address: "10.0.2.1"},
		{Type: v1.NodeExternalIP, Address: "54.0.0.1"},
		{Type: v1.NodeInternalDNS, Address: "ip-10-0-0-1.ec2.internal"},
		{Type: v1.NodeHostName, Address: "ip-10-0-0-1.ec2.internal"},
		{Type: v1.NodeExternalDNS, Address: "ec2-54-0-0-1.compute-1.amazonaws.com"},
	}
	// The first IPv6 address of each interface, in device order.
	ipv6 := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "2001:db8::1"},
		{Type: v1.NodeInternalIP, Address: "2001:db8::1:1"},
	}
	for _, tt := range []struct {
		name     string
		families []string
		want     []v1.NodeAddress
	}{
		{"ipv4", []string{"ipv4"}, ipv4},
		{"ipv6", []string{"ipv6"}, ipv6},
		{"ipv4 then ipv6", []string{"ipv4", "ipv6"}, append(append([]v1.NodeAddress{}, ipv4...), ipv6...)},
		{"ipv6 then ipv4", []string{"ipv6", "ipv4"}, append(append([]v1.NodeAddress{}, ipv6...), ipv4...)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := nodeAddresses(in, tt.families); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("nodeAddresses:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestNodeAddressesPrivateOnly(t *testing.T) {
	in := &ec2types.Instance{
		PrivateDnsName:    aws.String("ip-10-0-0-1.ec2.internal"),
		NetworkInterfaces: []ec2types.InstanceNetworkInterface{eni(0, []string{"10.0.0.1"})},
	}
	want := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.0.0.1"},
		{Type: v1.NodeInternalDNS, Address: "ip-10-0-0-1.ec2.internal"},
		{Type: v1.NodeHostName, Address: "ip-10-0-0-1.ec2.internal"},
	}
	if got := nodeAddresses(in, []string{"ipv4", "ipv6"}); !reflect.DeepEqual(got, want) {
		t.Errorf("nodeAddresses:\n got %v\nwant %v", got, want)
	}
}
