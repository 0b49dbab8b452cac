package aws

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	v1 "k8s.io/api/core/v1"
)

// nodeAddresses are an instance's addresses for its Node, one IP family
// after the other in the order of families (NodeIPFamilies):
//
//   - ipv4: the private IPv4 addresses of each network interface in use,
//     the interfaces in device order and each one's primary address first
//     (InternalIP); the public IPv4 address (ExternalIP); the private DNS
//     name (InternalDNS and Hostname); the public DNS name (ExternalDNS).
//   - ipv6: the first IPv6 address of each network interface in use, in
//     device order (InternalIP).
//
// An address EC2 reports that does not parse is left out.
func nodeAddresses(in *ec2types.Instance, families []string) []v1.NodeAddress {
	enis := interfacesInUse(in)
	var out []v1.NodeAddress
	add := func(t v1.NodeAddressType, addr string) {
		if addr != "" && !slices.Contains(out, v1.NodeAddress{Type: t, Address: addr}) {
			out = append(out, v1.NodeAddress{Type: t, Address: addr})
		}
	}
	for _, family := range families {
		switch family {
		case familyIPv4:
			for _, eni := range enis {
				ips := slices.Clone(eni.PrivateIpAddresses)
				// The primary address first, the others as EC2 lists them.
				slices.SortStableFunc(ips, func(a, b ec2types.InstancePrivateIpAddress) int {
					return cmp.Compare(boolRank(aws.ToBool(a.Primary)), boolRank(aws.ToBool(b.Primary)))
				})
				for _, ip := range ips {
					add(v1.NodeInternalIP, ipString(aws.ToString(ip.PrivateIpAddress), true))
				}
			}
			add(v1.NodeExternalIP, ipString(aws.ToString(in.PublicIpAddress), true))
			if dns := aws.ToString(in.PrivateDnsName); dns != "" {
				add(v1.NodeInternalDNS, dns)
				add(v1.NodeHostName, dns)
			}
			add(v1.NodeExternalDNS, aws.ToString(in.PublicDnsName))
		case familyIPv6:
			for _, eni := range enis {
				for _, ip := range eni.Ipv6Addresses {
					if a := ipString(aws.ToString(ip.Ipv6Address), false); a != "" {
						add(v1.NodeInternalIP, a)
						break
					}
				}
			}
		}
	}
	return out
}

// interfacesInUse are the instance's network interfaces in use, in device
// order (then network card order); interfaces without an attachment last.
func interfacesInUse(in *ec2types.Instance) []ec2types.InstanceNetworkInterface {
	var enis []ec2types.InstanceNetworkInterface
	for _, eni := range in.NetworkInterfaces {
		if eni.Status == ec2types.NetworkInterfaceStatusInUse {
			enis = append(enis, eni)
		}
	}
	slices.SortStableFunc(enis, func(a, b ec2types.InstanceNetworkInterface) int {
		if (a.Attachment == nil) != (b.Attachment == nil) {
			return cmp.Compare(boolRank(a.Attachment != nil), boolRank(b.Attachment != nil))
		}
		if a.Attachment == nil {
			return 0
		}
		return cmp.Or(
			cmp.Compare(aws.ToInt32(a.Attachment.DeviceIndex), aws.ToInt32(b.Attachment.DeviceIndex)),
			cmp.Compare(aws.ToInt32(a.Attachment.NetworkCardIndex), aws.ToInt32(b.Attachment.NetworkCardIndex)),
		)
	})
	return enis
}

// boolRank sorts true before false.
func boolRank(b bool) int {
	if b {
		return 0
	}
	return 1
}

// ipString is s as a canonical IPv4 (v4) or IPv6 address, "" when it is
// not one.
func ipString(s string, v4 bool) string {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Is4() != v4 {
		return ""
	}
	return a.String()
}
