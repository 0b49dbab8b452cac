package openstack

import (
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
)

// serverAddress is one entry of a Nova server's addresses, by network.
type serverAddress struct {
	Addr    string `json:"addr"`
	Version int    `json:"version"`
	// Type is "fixed" or "floating".
	Type string `json:"OS-EXT-IPS:type"`
}

// serverAddresses is what nodeAddresses reads of a server.
type serverAddresses struct {
	// ByNetwork are the server's addresses by network name.
	ByNetwork  map[string][]serverAddress
	AccessIPv4 string
	AccessIPv6 string
}

// nodeAddresses turns a server's addresses into Node addresses:
//   - a floating address is an ExternalIP;
//   - a fixed address on a network named in public-network-name is an
//     ExternalIP;
//   - any other fixed address is an InternalIP, unless internal-network-name
//     is set and does not name its network (then it is left out);
//   - accessIPv4 and accessIPv6 are ExternalIPs;
//   - IPv6 addresses are left out with ipv6-support-disabled.
//
// Networks are taken in name order, each network's addresses in the order
// Nova lists them, so the result does not change from call to call. An
// address appears once, as its first type. With address-sort-order, the
// addresses inside its first CIDR come first, then those inside the second,
// and so on; the rest keep their order at the end.
func nodeAddresses(srv serverAddresses, opts NetworkingConfig) []v1.NodeAddress {
	var out []v1.NodeAddress
	add := func(t v1.NodeAddressType, addr string) {
		ip, err := netip.ParseAddr(addr)
		if err != nil || (ip.Is6() && !ip.Is4In6() && opts.IPv6SupportDisabled) {
			return
		}
		if slices.ContainsFunc(out, func(a v1.NodeAddress) bool { return a.Address == addr }) {
			return
		}
		out = append(out, v1.NodeAddress{Type: t, Address: addr})
	}
	networks := make([]string, 0, len(srv.ByNetwork))
	for name := range srv.ByNetwork {
		networks = append(networks, name)
	}
	slices.Sort(networks)
	for _, network := range networks {
		for _, a := range srv.ByNetwork[network] {
			switch {
			case a.Type == "floating", slices.Contains(opts.PublicNetworkNames, network):
				add(v1.NodeExternalIP, a.Addr)
			case len(opts.InternalNetworkNames) == 0 || slices.Contains(opts.InternalNetworkNames, network):
				add(v1.NodeInternalIP, a.Addr)
			}
		}
	}
	add(v1.NodeExternalIP, srv.AccessIPv4)
	add(v1.NodeExternalIP, srv.AccessIPv6)
	if len(opts.AddressSortOrder) > 0 {
		rank := func(a v1.NodeAddress) int {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil {
				return len(opts.AddressSortOrder)
			}
			for i, p := range opts.AddressSortOrder {
				if p.Contains(ip.Unmap()) {
					return i
				}
			}
			return len(opts.AddressSortOrder)
		}
		slices.SortStableFunc(out, func(a, b v1.NodeAddress) int { return rank(a) - rank(b) })
	}
	return out
}
