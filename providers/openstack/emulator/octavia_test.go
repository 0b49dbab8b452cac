package emulator_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
)

// lbCloud is a cloud with a private network (10.0.0.0/24), an external
// one (172.24.4.0/24) and clients of Neutron and Octavia.
type lbCloud struct {
	*cloud
	private, public             emulator.Net
	privateSubnet, publicSubnet emulator.Subnet
	network, octavia            *gophercloud.ServiceClient
}

func newLBCloud(t *testing.T, opts emulator.Options) *lbCloud {
	t.Helper()
	c := &lbCloud{cloud: newCloud(t, opts)}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	c.private, err = c.AddNetwork(emulator.Net{Name: "private"})
	must(err)
	c.privateSubnet, err = c.AddSubnet(emulator.Subnet{NetworkID: c.private.ID, CIDR: "10.0.0.0/24"})
	must(err)
	c.public, err = c.AddNetwork(emulator.Net{Name: "public", External: true})
	must(err)
	c.publicSubnet, err = c.AddSubnet(emulator.Subnet{NetworkID: c.public.ID, CIDR: "172.24.4.0/24"})
	must(err)
	pc, err := authenticate(t.Context(), c.passwordAuth())
	must(err)
	c.network, err = openstack.NewNetworkV2(pc, gophercloud.EndpointOpts{})
	must(err)
	c.octavia, err = openstack.NewLoadBalancerV2(pc, gophercloud.EndpointOpts{})
	must(err)
	return c
}

func listPorts(ctx context.Context, t *testing.T, nc *gophercloud.ServiceClient, opts ports.ListOpts) []ports.Port {
	t.Helper()
	pages, err := ports.List(nc, opts).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	list, err := ports.ExtractPorts(pages)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func listFIPs(ctx context.Context, t *testing.T, nc *gophercloud.ServiceClient, opts floatingips.ListOpts) []floatingips.FloatingIP {
	t.Helper()
	pages, err := floatingips.List(nc, opts).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	list, err := floatingips.ExtractFloatingIPs(pages)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// TestNeutronPortsAndFloatingIPs: servers have ports; ports are found by
// device and address; allowed address pairs change under a revision
// precondition; floating IPs are allocated on external networks only,
// associated, one per fixed address, and let go when their port goes.
func TestNeutronPortsAndFloatingIPs(t *testing.T) {
	c := newLBCloud(t, emulator.Options{})
	ctx := t.Context()
	srv, err := c.AddServer(emulator.Server{Name: "node-1", Addresses: map[string][]emulator.Address{
		"private": {{Addr: "10.0.0.11"}}, "elsewhere": {{Addr: "192.168.0.4"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	byDevice := listPorts(ctx, t, c.network, ports.ListOpts{DeviceID: srv.ID})
	if len(byDevice) != 1 || byDevice[0].FixedIPs[0].IPAddress != "10.0.0.11" || byDevice[0].FixedIPs[0].SubnetID != c.privateSubnet.ID ||
		byDevice[0].DeviceOwner != "compute:nova" {
		t.Fatalf("ports of the server = %+v, want one on the private subnet", byDevice)
	}
	port := byDevice[0]
	if got := listPorts(ctx, t, c.network, ports.ListOpts{FixedIPs: []ports.FixedIPOpts{{IPAddress: "10.0.0.11"}}}); len(got) != 1 || got[0].ID != port.ID {
		t.Errorf("ports by address = %+v", got)
	}
	if got := listPorts(ctx, t, c.network, ports.ListOpts{FixedIPs: []ports.FixedIPOpts{{IPAddress: "10.0.0.99"}}}); len(got) != 0 {
		t.Errorf("ports of an unused address = %+v", got)
	}
	if _, err := ports.List(c.network, ports.ListOpts{Tags: "x", Name: "y", SortKey: "id"}).AllPages(ctx); err != nil {
		t.Errorf("known filters: %v", err)
	}
	resp, err := c.network.Get(ctx, c.network.ServiceURL("ports")+"?colour=blue", nil, nil)
	if !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("an unknown filter: %v, %v; want 400", resp, err)
	}

	pairs := []ports.AddressPair{{IPAddress: "10.244.1.0/24"}}
	updated, err := ports.Update(ctx, c.network, port.ID, ports.UpdateOpts{AllowedAddressPairs: &pairs, RevisionNumber: ptr.To(port.RevisionNumber)}).Extract()
	if err != nil || len(updated.AllowedAddressPairs) != 1 || updated.AllowedAddressPairs[0].MACAddress != port.MACAddress ||
		updated.RevisionNumber != port.RevisionNumber+1 {
		t.Fatalf("setting allowed address pairs: %+v, %v", updated, err)
	}
	stale := ports.UpdateOpts{AllowedAddressPairs: &[]ports.AddressPair{}, RevisionNumber: ptr.To(port.RevisionNumber)}
	if err := ports.Update(ctx, c.network, port.ID, stale).Err; !gophercloud.ResponseCodeIs(err, http.StatusPreconditionFailed) {
		t.Errorf("an update at a stale revision: %v, want 412", err)
	}

	if err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{FloatingNetworkID: c.private.ID}).Err; !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("a floating IP on an internal network: %v, want 400", err)
	}
	fip, err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{FloatingNetworkID: c.public.ID, PortID: port.ID, Description: "mine"}).Extract()
	if err != nil || fip.PortID != port.ID || fip.FixedIP != "10.0.0.11" || fip.Status != "ACTIVE" || !strings.HasPrefix(fip.FloatingIP, "172.24.4.") {
		t.Fatalf("floating IP = %+v, %v", fip, err)
	}
	if err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{FloatingNetworkID: c.public.ID, PortID: port.ID}).Err; !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("a second floating IP on the same address: %v, want 409", err)
	}
	if err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{FloatingNetworkID: c.public.ID, FloatingIP: fip.FloatingIP}).Err; !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("an address in use: %v, want 409", err)
	}
	if got := listFIPs(ctx, t, c.network, floatingips.ListOpts{PortID: port.ID}); len(got) != 1 || got[0].ID != fip.ID {
		t.Errorf("floating IPs of the port = %+v", got)
	}
	if got := listFIPs(ctx, t, c.network, floatingips.ListOpts{Description: "mine"}); len(got) != 1 {
		t.Errorf("floating IPs by description = %+v", got)
	}
	free, err := floatingips.Update(ctx, c.network, fip.ID, floatingips.UpdateOpts{PortID: ptr.To("")}).Extract()
	if err != nil || free.PortID != "" || free.Status != "DOWN" {
		t.Errorf("disassociated: %+v, %v", free, err)
	}
	if _, err := floatingips.Update(ctx, c.network, fip.ID, floatingips.UpdateOpts{PortID: ptr.To(port.ID)}).Extract(); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteServer(srv.ID); err != nil {
		t.Fatal(err)
	}
	if got := listPorts(ctx, t, c.network, ports.ListOpts{DeviceID: srv.ID}); len(got) != 0 {
		t.Errorf("ports of the deleted server: %+v", got)
	}
	if got, err := floatingips.Get(ctx, c.network, fip.ID).Extract(); err != nil || got.PortID != "" {
		t.Errorf("the floating IP of the deleted port: %+v, %v; want it disassociated", got, err)
	}
	if err := floatingips.Delete(ctx, c.network, fip.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := floatingips.Delete(ctx, c.network, fip.ID).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("deleting it again: %v, want 404", err)
	}
}

func fullyPopulated(subnetID string) loadbalancers.CreateOpts {
	return loadbalancers.CreateOpts{
		Name: "lb-1", VipSubnetID: subnetID, Tags: []string{"owner"},
		Listeners: []listeners.CreateOpts{{
			Name: "http", Protocol: listeners.ProtocolTCP, ProtocolPort: 80, AllowedCIDRs: []string{"192.0.2.0/24"},
			DefaultPool: &pools.CreateOpts{
				Name: "http-pool", Protocol: pools.ProtocolTCP, LBMethod: pools.LBMethodRoundRobin,
				Members: []pools.CreateMemberOpts{{Name: "a", Address: "10.0.0.11", ProtocolPort: 30080}, {Name: "b", Address: "10.0.0.12", ProtocolPort: 30080}},
				Monitor: monitors.CreateOpts{Type: monitors.TypeTCP, Delay: 5, Timeout: 3, MaxRetries: 1},
			},
		}},
	}
}

func getLB(ctx context.Context, t *testing.T, oc *gophercloud.ServiceClient, id string) *loadbalancers.LoadBalancer {
	t.Helper()
	lb, err := loadbalancers.Get(ctx, oc, id).Extract()
	if err != nil {
		t.Fatal(err)
	}
	return lb
}

// TestOctaviaProvisioning: a fully populated load balancer is accepted
// PENDING_CREATE with its VIP port, refuses changes until it is ACTIVE
// (after the delay, on the emulator's clock), and every change makes it
// PENDING_UPDATE again; the batch update replaces the members; a delete
// needs cascade when there are children, and takes them and the VIP port
// along.
func TestOctaviaProvisioning(t *testing.T) {
	clk := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newLBCloud(t, emulator.Options{Now: clk.Now, OctaviaDelay: 30 * time.Second})
	ctx := t.Context()

	created, err := loadbalancers.Create(ctx, c.octavia, fullyPopulated(c.privateSubnet.ID)).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if created.ProvisioningStatus != "PENDING_CREATE" || created.VipPortID == "" || created.VipSubnetID != c.privateSubnet.ID ||
		len(created.Listeners) != 1 || created.Listeners[0].DefaultPool == nil && len(created.Pools) != 1 {
		t.Fatalf("created = %+v", created)
	}
	vip, ok := c.Port(created.VipPortID)
	if !ok || vip.DeviceOwner != emulator.DeviceOwnerOctavia || vip.FixedIPs[0].IPAddress != created.VipAddress {
		t.Fatalf("VIP port = %+v, %v", vip, ok)
	}
	listenerOpts := listeners.CreateOpts{LoadbalancerID: created.ID, Protocol: listeners.ProtocolUDP, ProtocolPort: 53}
	if err := listeners.Create(ctx, c.octavia, listenerOpts).Err; !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("a listener while PENDING_CREATE: %v, want 409", err)
	}
	clk.Advance(29 * time.Second)
	if lb := getLB(ctx, t, c.octavia, created.ID); lb.ProvisioningStatus != "PENDING_CREATE" {
		t.Errorf("before the delay: %s", lb.ProvisioningStatus)
	}
	clk.Advance(time.Second)
	if lb := getLB(ctx, t, c.octavia, created.ID); lb.ProvisioningStatus != "ACTIVE" || lb.OperatingStatus != "ONLINE" {
		t.Errorf("after the delay: %s/%s", lb.ProvisioningStatus, lb.OperatingStatus)
	}
	lb, _ := c.LoadBalancer(created.ID)
	if len(lb.Pools) != 1 || len(lb.Pools[0].Members) != 2 || lb.Pools[0].HealthMonitor == nil || lb.Pools[0].ProvisioningStatus != "ACTIVE" ||
		!slices.Equal(lb.Listeners[0].AllowedCIDRs, []string{"192.0.2.0/24"}) || lb.Listeners[0].DefaultPoolID != lb.Pools[0].ID {
		t.Fatalf("load balancer = %+v", lb)
	}
	pool := lb.Pools[0]
	kept := pool.Members[1]

	// The batch update: b stays (same address and port), a goes, c comes.
	batch := []pools.BatchUpdateMemberOpts{
		{Name: ptr.To("b"), Address: "10.0.0.12", ProtocolPort: 30080, MonitorPort: ptr.To(32000)},
		{Name: ptr.To("c"), Address: "10.0.0.13", ProtocolPort: 30080},
	}
	if err := pools.BatchUpdateMembers(ctx, c.octavia, pool.ID, batch).Err; err != nil {
		t.Fatal(err)
	}
	if lb := getLB(ctx, t, c.octavia, created.ID); lb.ProvisioningStatus != "PENDING_UPDATE" {
		t.Errorf("after the batch update: %s", lb.ProvisioningStatus)
	}
	if err := pools.BatchUpdateMembers(ctx, c.octavia, pool.ID, batch).Err; !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("a batch update while PENDING_UPDATE: %v, want 409", err)
	}
	clk.Advance(30 * time.Second)
	pages, err := pools.ListMembers(c.octavia, pool.ID, nil).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	members, _ := pools.ExtractMembers(pages)
	var got []string
	for _, m := range members {
		got = append(got, m.Name+"@"+m.Address)
		if m.Name == "b" && (m.ID != kept.ID || m.MonitorPort != 32000) {
			t.Errorf("member b = %+v, want it updated in place (ID %s)", m, kept.ID)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"b@10.0.0.12", "c@10.0.0.13"}) {
		t.Errorf("members = %v", got)
	}

	fip, err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{FloatingNetworkID: c.public.ID, PortID: created.VipPortID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if l, p, m := c.Listeners(), c.Pools(), c.HealthMonitors(); len(l) != 1 || len(p) != 1 || len(m) != 1 || m[0].PoolID != p[0].ID {
		t.Errorf("before the deletion: listeners %+v, pools %+v, monitors %+v; want one of each", l, p, m)
	}
	if err := loadbalancers.Delete(ctx, c.octavia, created.ID, nil).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("deleting a load balancer with children: %v, want 400", err)
	}
	if err := loadbalancers.Delete(ctx, c.octavia, created.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if lb := getLB(ctx, t, c.octavia, created.ID); lb.ProvisioningStatus != "PENDING_DELETE" {
		t.Errorf("after delete: %s", lb.ProvisioningStatus)
	}
	clk.Advance(30 * time.Second)
	if err := loadbalancers.Get(ctx, c.octavia, created.ID).Err; !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("after the deletion: %v, want 404", err)
	}
	if _, ok := c.Port(created.VipPortID); ok {
		t.Error("the VIP port outlived its load balancer")
	}
	if f, err := floatingips.Get(ctx, c.network, fip.ID).Extract(); err != nil || f.PortID != "" {
		t.Errorf("floating IP of the VIP = %+v, %v; want it there, disassociated", f, err)
	}
	if lbs := c.LoadBalancers(); len(lbs) != 0 {
		t.Errorf("load balancers left: %+v", lbs)
	}
	if l, p, m := c.Listeners(), c.Pools(), c.HealthMonitors(); len(l)+len(p)+len(m) != 0 {
		t.Errorf("left after the cascade delete: listeners %+v, pools %+v, monitors %+v", l, p, m)
	}
}

// TestOctaviaChildren: listeners, pools (with members and a monitor in
// one request), monitors and members one by one, each making the load
// balancer PENDING_UPDATE; Octavia's checks refuse what it refuses.
func TestOctaviaChildren(t *testing.T) {
	c := newLBCloud(t, emulator.Options{})
	ctx := t.Context()
	lb, err := loadbalancers.Create(ctx, c.octavia, loadbalancers.CreateOpts{Name: "lb", VipNetworkID: c.private.ID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if lb.VipSubnetID != c.privateSubnet.ID {
		t.Errorf("VIP on subnet %s, want the network's %s", lb.VipSubnetID, c.privateSubnet.ID)
	}
	l, err := listeners.Create(ctx, c.octavia, listeners.CreateOpts{LoadbalancerID: lb.ID, Protocol: listeners.ProtocolUDP, ProtocolPort: 53, Name: "dns"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if l.ConnLimit != -1 || l.TimeoutClientData != 50000 || l.TimeoutMemberConnect != 5000 || l.ProvisioningStatus != "PENDING_CREATE" {
		t.Errorf("listener = %+v", l)
	}
	if got := getLB(ctx, t, c.octavia, lb.ID); got.ProvisioningStatus != "ACTIVE" {
		t.Errorf("with no delay, the next request sees %s", got.ProvisioningStatus)
	}
	for _, tc := range []struct {
		name   string
		status int
		err    error
	}{
		{"duplicate listener", http.StatusConflict, listeners.Create(ctx, c.octavia, listeners.CreateOpts{LoadbalancerID: lb.ID, Protocol: listeners.ProtocolUDP, ProtocolPort: 53}).Err},
		{"bad algorithm", http.StatusBadRequest, pools.Create(ctx, c.octavia, pools.CreateOpts{ListenerID: l.ID, Protocol: pools.ProtocolUDP, LBMethod: "RANDOM"}).Err},
		{"TCP pool on a UDP listener", http.StatusBadRequest, pools.Create(ctx, c.octavia, pools.CreateOpts{ListenerID: l.ID, Protocol: pools.ProtocolTCP, LBMethod: pools.LBMethodRoundRobin}).Err},
		{"bad CIDR", http.StatusBadRequest, listeners.Create(ctx, c.octavia, listeners.CreateOpts{LoadbalancerID: lb.ID, Protocol: listeners.ProtocolTCP, ProtocolPort: 81, AllowedCIDRs: []string{"10.0.0.0/33"}}).Err},
		{"no VIP", http.StatusBadRequest, loadbalancers.Create(ctx, c.octavia, loadbalancers.CreateOpts{Name: "x"}).Err},
	} {
		if !gophercloud.ResponseCodeIs(tc.err, tc.status) {
			t.Errorf("%s: %v, want %d", tc.name, tc.err, tc.status)
		}
	}
	p, err := pools.Create(ctx, c.octavia, pools.CreateOpts{ListenerID: l.ID, Protocol: pools.ProtocolUDP, LBMethod: pools.LBMethodSourceIp,
		Members: []pools.CreateMemberOpts{{Address: "10.0.0.11", ProtocolPort: 30053}},
		Monitor: monitors.CreateOpts{Type: monitors.TypeUDPConnect, Delay: 5, Timeout: 3, MaxRetries: 2}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if p.MonitorID == "" || len(p.Members) != 1 {
		t.Errorf("pool = %+v, want a monitor and a member", p)
	}
	if err := monitors.Create(ctx, c.octavia, monitors.CreateOpts{PoolID: p.ID, Type: monitors.TypeUDPConnect, Delay: 5, Timeout: 3, MaxRetries: 2}).Err; !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("a second monitor: %v, want 409", err)
	}
	if err := monitors.Update(ctx, c.octavia, p.MonitorID, monitors.UpdateOpts{Delay: 2, Timeout: 3}).Err; !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("a timeout over the delay: %v, want 400", err)
	}
	if err := monitors.Delete(ctx, c.octavia, p.MonitorID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := monitors.Create(ctx, c.octavia, monitors.CreateOpts{PoolID: p.ID, Type: monitors.TypeHTTP, Delay: 5, Timeout: 3, MaxRetries: 2, URLPath: "/healthz"}).Err; err != nil {
		t.Errorf("an HTTP monitor of a UDP pool: %v", err)
	}
	cidrs := []string{"198.51.100.0/24"}
	if _, err := listeners.Update(ctx, c.octavia, l.ID, listeners.UpdateOpts{AllowedCIDRs: &cidrs, ConnLimit: ptr.To(10)}).Extract(); err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Update(ctx, c.octavia, p.ID, pools.UpdateOpts{LBMethod: pools.LBMethodRoundRobin, Persistence: &pools.SessionPersistence{Type: "SOURCE_IP"}}).Extract(); err != nil {
		t.Fatal(err)
	}
	got, _ := c.LoadBalancer(lb.ID)
	if got.Listeners[0].ConnectionLimit != 10 || !slices.Equal(got.Listeners[0].AllowedCIDRs, cidrs) ||
		got.Pools[0].LBAlgorithm != "ROUND_ROBIN" || got.Pools[0].SessionPersistence != "SOURCE_IP" || got.Pools[0].HealthMonitor.Type != "HTTP" {
		t.Errorf("load balancer = %+v", got)
	}
	if _, err := pools.Update(ctx, c.octavia, p.ID, pools.UpdateOpts{Persistence: &pools.SessionPersistence{}}).Extract(); err != nil {
		t.Fatal(err)
	}
	if err := pools.Delete(ctx, c.octavia, p.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := listeners.Delete(ctx, c.octavia, l.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := loadbalancers.Delete(ctx, c.octavia, lb.ID, nil).ExtractErr(); err != nil {
		t.Errorf("deleting the emptied load balancer: %v", err)
	}
	if lbs := c.LoadBalancers(); len(lbs) != 0 {
		t.Errorf("left: %+v", lbs)
	}
}

// TestOctaviaFailures: FailProvisioning makes a load balancer go into
// ERROR, which is not changed but may be deleted; SetProvisioningStatus
// holds one PENDING_UPDATE; faults answer in Octavia's format.
func TestOctaviaFailures(t *testing.T) {
	c := newLBCloud(t, emulator.Options{})
	ctx := t.Context()
	c.FailProvisioning(1)
	lb, err := loadbalancers.Create(ctx, c.octavia, loadbalancers.CreateOpts{Name: "lb", VipSubnetID: c.privateSubnet.ID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if got := getLB(ctx, t, c.octavia, lb.ID); got.ProvisioningStatus != "ERROR" {
		t.Errorf("status %s, want ERROR", got.ProvisioningStatus)
	}
	if err := loadbalancers.Update(ctx, c.octavia, lb.ID, loadbalancers.UpdateOpts{Name: ptr.To("x")}).Err; !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("updating a load balancer in ERROR: %v, want 409", err)
	}
	if err := loadbalancers.Delete(ctx, c.octavia, lb.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
		t.Errorf("deleting a load balancer in ERROR: %v", err)
	}

	ok, err := loadbalancers.Create(ctx, c.octavia, loadbalancers.CreateOpts{Name: "ok", VipSubnetID: c.privateSubnet.ID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetProvisioningStatus(ok.ID, "PENDING_UPDATE"); err != nil {
		t.Fatal(err)
	}
	if err := loadbalancers.Delete(ctx, c.octavia, ok.ID, nil).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("deleting a load balancer held PENDING_UPDATE: %v, want 409", err)
	}
	c.AddFault(emulator.Fault{Service: emulator.LoadBalancer, Path: "v2.0/lbaas/loadbalancers", Status: http.StatusServiceUnavailable, Count: 1})
	var code gophercloud.ErrUnexpectedResponseCode
	err = loadbalancers.Get(ctx, c.octavia, ok.ID).Err
	if !errors.As(err, &code) || code.Actual != http.StatusServiceUnavailable || !strings.Contains(string(code.Body), "faultstring") {
		t.Errorf("with a 503 fault: %v, want a 503 in Octavia's format", err)
	}
}
