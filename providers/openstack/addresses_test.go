package openstack

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestNodeAddresses(t *testing.T) {
	srv := serverAddresses{
		ByNetwork: map[string][]serverAddress{
			"private": {
				{Addr: "10.0.0.5", Version: 4, Type: "fixed"},
				{Addr: "fd00::5", Version: 6, Type: "fixed"},
				{Addr: "203.0.113.5", Version: 4, Type: "floating"},
			},
			"storage": {{Addr: "192.168.7.5", Version: 4, Type: "fixed"}},
			"public":  {{Addr: "198.51.100.5", Version: 4, Type: "fixed"}},
		},
		AccessIPv4: "203.0.113.5", // also the floating address: listed once
		AccessIPv6: "2001:db8::5",
	}
	type addr = v1.NodeAddress
	internal := func(a string) addr { return addr{Type: v1.NodeInternalIP, Address: a} }
	external := func(a string) addr { return addr{Type: v1.NodeExternalIP, Address: a} }
	tests := []struct {
		name string
		opts NetworkingConfig
		want []addr
	}{
		{
			name: "defaults: fixed internal, floating and access IPs external, networks in name order",
			want: []addr{internal("10.0.0.5"), internal("fd00::5"), external("203.0.113.5"), internal("198.51.100.5"), internal("192.168.7.5"), external("2001:db8::5")},
		},
		{
			name: "public network",
			opts: NetworkingConfig{PublicNetworkNames: []string{"public"}},
			want: []addr{internal("10.0.0.5"), internal("fd00::5"), external("203.0.113.5"), external("198.51.100.5"), internal("192.168.7.5"), external("2001:db8::5")},
		},
		{
			name: "internal network filter",
			opts: NetworkingConfig{InternalNetworkNames: []string{"private"}, PublicNetworkNames: []string{"public"}},
			want: []addr{internal("10.0.0.5"), internal("fd00::5"), external("203.0.113.5"), external("198.51.100.5"), external("2001:db8::5")},
		},
		{
			name: "IPv6 disabled",
			opts: NetworkingConfig{IPv6SupportDisabled: true},
			want: []addr{internal("10.0.0.5"), external("203.0.113.5"), internal("198.51.100.5"), internal("192.168.7.5")},
		},
		{
			name: "sort order",
			opts: NetworkingConfig{AddressSortOrder: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("203.0.113.0/24")}},
			want: []addr{internal("192.168.7.5"), external("203.0.113.5"), internal("10.0.0.5"), internal("fd00::5"), internal("198.51.100.5"), external("2001:db8::5")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := nodeAddresses(srv, tt.opts)
			if !slices.Equal(got, tt.want) {
				t.Errorf("nodeAddresses =\n  %v\nwant\n  %v", got, tt.want)
			}
		})
	}
	if got := nodeAddresses(serverAddresses{}, NetworkingConfig{}); len(got) != 0 {
		t.Errorf("no addresses: %v", got)
	}
}
