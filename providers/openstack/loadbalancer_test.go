package openstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
)

const testCluster = "kubernetes"

// lbTest is a cloud with networks, three running servers on the private
// network, their Nodes and a provider.
type lbTest struct {
	*testCloud
	nets  lbNetworks
	nodes []*v1.Node
	lb    *loadBalancers
	ctx   context.Context
}

func newLBTest(t *testing.T, opts emulator.Options, lbConf ...string) *lbTest {
	t.Helper()
	c := newTestCloud(t, opts)
	nets := c.addLBNetworks(t)
	conf := c.conf()
	if len(lbConf) > 0 {
		conf = c.conf(append([]string{"[LoadBalancer]"}, lbConf...)...)
	}
	p := newTestProvider(t, conf)
	lt := &lbTest{testCloud: c, nets: nets, lb: p.loadBalancers}
	_, lt.ctx = ktesting.NewTestContext(t)
	for i := 1; i <= 3; i++ {
		lt.addNode(t, fmt.Sprintf("node-%d", i), fmt.Sprintf("10.0.0.%d", 10+i))
	}
	return lt
}

func (lt *lbTest) addNode(t *testing.T, name, addr string) *v1.Node {
	t.Helper()
	s := lt.addServer(t, emulator.Server{Name: name, Addresses: map[string][]emulator.Address{"private": {{Addr: addr}}}})
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.NodeSpec{ProviderID: providerID(s.ID)},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: addr}, {Type: v1.NodeHostName, Address: name}}},
	}
	lt.nodes = append(lt.nodes, n)
	return n
}

// service is a LoadBalancer Service in namespace "default" with a TCP
// port 80 (node port 30080), and the annotations given as key, value.
func service(name string, annotations ...string) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: map[string]string{}},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeLoadBalancer,
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for i := 0; i+1 < len(annotations); i += 2 {
		svc.Annotations[annotations[i]] = annotations[i+1]
	}
	return svc
}

// mutations are the changing requests (not GET) to Neutron and Octavia
// since the last ResetRequests, as "METHOD path".
func (lt *lbTest) mutations() []string {
	var out []string
	for _, r := range lt.Requests(emulator.Network, emulator.LoadBalancer) {
		if r.Method != http.MethodGet {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}

// only is the one load balancer in the cloud.
func (lt *lbTest) only(t *testing.T) emulator.Balancer {
	t.Helper()
	lbs := lt.LoadBalancers()
	if len(lbs) != 1 {
		t.Fatalf("%d load balancers in the cloud, want 1: %+v", len(lbs), lbs)
	}
	return lbs[0]
}

func (lt *lbTest) ensure(t *testing.T, svc *v1.Service, nodes []*v1.Node) *v1.LoadBalancerStatus {
	t.Helper()
	st, err := lt.lb.EnsureLoadBalancer(lt.ctx, testCluster, svc, nodes)
	if err != nil {
		t.Fatalf("EnsureLoadBalancer: %v", err)
	}
	return st
}

func ipOf(st *v1.LoadBalancerStatus) string {
	if st == nil || len(st.Ingress) != 1 {
		return fmt.Sprintf("<%+v>", st)
	}
	return st.Ingress[0].IP
}

// memberAddrs are a pool's members as name=address:port.
func memberAddrs(p emulator.Pool) []string {
	var out []string
	for _, m := range p.Members {
		out = append(out, fmt.Sprintf("%s=%s:%d", m.Name, m.Address, m.ProtocolPort))
	}
	slices.Sort(out)
	return out
}

// poolOf is the default pool of the listener of a protocol and port.
func poolOf(t *testing.T, lb emulator.Balancer, protocol string, port int) (emulator.Listener, emulator.Pool) {
	t.Helper()
	for _, l := range lb.Listeners {
		if l.Protocol == protocol && l.ProtocolPort == port {
			for _, p := range lb.Pools {
				if p.ID == l.DefaultPoolID {
					return l, p
				}
			}
			t.Fatalf("listener %s/%d has no pool", protocol, port)
		}
	}
	t.Fatalf("no listener %s/%d in %+v", protocol, port, lb.Listeners)
	return emulator.Listener{}, emulator.Pool{}
}

// TestEnsureCreatesInOneRequest: a new load balancer, with a listener,
// pool and members per port, TCP and UDP, is one Octavia request; its
// floating IP is allocated on the VIP port with ccmkit's description, and
// is the Service's address.
func TestEnsureCreatesInOneRequest(t *testing.T) {
	lt := newLBTest(t, emulator.Options{OctaviaDelay: 20 * time.Millisecond})
	svc := service("web")
	svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 30053})
	lt.ResetRequests()

	st := lt.ensure(t, svc, lt.nodes)

	want := []string{"POST v2.0/lbaas/loadbalancers", "POST v2.0/floatingips"}
	if got := lt.mutations(); !slices.Equal(got, want) {
		t.Errorf("changing requests = %v, want %v", got, want)
	}
	lb := lt.only(t)
	if lb.Name != "kube_service_kubernetes_default_web" || !slices.Contains(lb.Tags, lb.Name) || lb.ProvisioningStatus != emulator.StatusActive {
		t.Errorf("load balancer %s, tags %v, %s", lb.Name, lb.Tags, lb.ProvisioningStatus)
	}
	if lb.VIPSubnetID != lt.nets.privateSubnet.ID {
		t.Errorf("VIP on subnet %s, want the nodes' %s", lb.VIPSubnetID, lt.nets.privateSubnet.ID)
	}
	for _, tc := range []struct {
		protocol string
		port     int
		nodePort int
	}{{"TCP", 80, 30080}, {"UDP", 53, 30053}} {
		l, p := poolOf(t, lb, tc.protocol, tc.port)
		if p.Protocol != tc.protocol || p.LBAlgorithm != "ROUND_ROBIN" || p.HealthMonitor != nil || l.ConnectionLimit != -1 || l.AllowedCIDRs != nil {
			t.Errorf("%s/%d: listener %+v, pool %+v", tc.protocol, tc.port, l, p)
		}
		wantMembers := []string{
			fmt.Sprintf("node-1=10.0.0.11:%d", tc.nodePort), fmt.Sprintf("node-2=10.0.0.12:%d", tc.nodePort), fmt.Sprintf("node-3=10.0.0.13:%d", tc.nodePort),
		}
		if got := memberAddrs(p); !slices.Equal(got, wantMembers) {
			t.Errorf("%s/%d members = %v, want %v", tc.protocol, tc.port, got, wantMembers)
		}
	}
	fips := lt.FloatingIPs()
	if len(fips) != 1 || fips[0].PortID != lb.VIPPortID || fips[0].FloatingNetworkID != lt.nets.public.ID ||
		fips[0].Description != fipDescription(testCluster, svc) {
		t.Fatalf("floating IPs = %+v, want one of the public network on VIP port %s", fips, lb.VIPPortID)
	}
	wantStatus := &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: fips[0].FloatingIPAddress, IPMode: ptr.To(v1.LoadBalancerIPModeVIP)}}}
	if !equality.Semantic.DeepEqual(st, wantStatus) {
		t.Errorf("status = %+v, want %+v", st, wantStatus)
	}
	got, exists, err := lt.lb.GetLoadBalancer(lt.ctx, testCluster, svc)
	if err != nil || !exists || !equality.Semantic.DeepEqual(got, wantStatus) {
		t.Errorf("GetLoadBalancer = %+v, %v, %v", got, exists, err)
	}
}

// TestEnsureIsIdempotent: a second Ensure of an unchanged Service returns
// the same address and changes nothing.
func TestEnsureIsIdempotent(t *testing.T) {
	lt := newLBTest(t, emulator.Options{}, "create-monitor = true")
	svc := service("web", AnnotationTimeoutClientData, "60000")
	svc.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
	svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	first := lt.ensure(t, svc, lt.nodes)
	lt.ResetRequests()
	second := lt.ensure(t, svc, lt.nodes)
	if !equality.Semantic.DeepEqual(first, second) {
		t.Errorf("second Ensure = %+v, first %+v", second, first)
	}
	if got := lt.mutations(); len(got) != 0 {
		t.Errorf("the second Ensure changed %v", got)
	}
}

// TestUpdateChangesOnlyMembers: new nodes are one batch member update of
// the pool; the same nodes again are none.
func TestUpdateChangesOnlyMembers(t *testing.T) {
	lt := newLBTest(t, emulator.Options{OctaviaDelay: 10 * time.Millisecond})
	svc := service("web")
	lt.ensure(t, svc, lt.nodes)
	extra := lt.addNode(t, "node-4", "10.0.0.14")
	nodes := []*v1.Node{lt.nodes[0], lt.nodes[2], extra}
	_, pool := poolOf(t, lt.only(t), "TCP", 80)

	lt.ResetRequests()
	if err := lt.lb.UpdateLoadBalancer(lt.ctx, testCluster, svc, nodes); err != nil {
		t.Fatalf("UpdateLoadBalancer: %v", err)
	}
	if got, want := lt.mutations(), []string{"PUT v2.0/lbaas/pools/" + pool.ID + "/members"}; !slices.Equal(got, want) {
		t.Errorf("changing requests = %v, want %v", got, want)
	}
	lb := lt.only(t)
	_, pool = poolOf(t, lb, "TCP", 80)
	if got, want := memberAddrs(pool), []string{"node-1=10.0.0.11:30080", "node-3=10.0.0.13:30080", "node-4=10.0.0.14:30080"}; !slices.Equal(got, want) {
		t.Errorf("members = %v, want %v", got, want)
	}
	if lb.ProvisioningStatus != emulator.StatusActive {
		t.Errorf("UpdateLoadBalancer returned with the load balancer %s", lb.ProvisioningStatus)
	}

	lt.ResetRequests()
	if err := lt.lb.UpdateLoadBalancer(lt.ctx, testCluster, svc, nodes); err != nil {
		t.Fatalf("UpdateLoadBalancer again: %v", err)
	}
	if got := lt.mutations(); len(got) != 0 {
		t.Errorf("UpdateLoadBalancer with the same nodes changed %v", got)
	}
	// Ensure with the same nodes as well.
	lt.ResetRequests()
	lt.ensure(t, svc, nodes)
	if got := lt.mutations(); len(got) != 0 {
		t.Errorf("Ensure with the same nodes changed %v", got)
	}
	// Ensure with other nodes: the same one batch update.
	lt.ResetRequests()
	lt.ensure(t, svc, nodes[:1])
	if got, want := lt.mutations(), []string{"PUT v2.0/lbaas/pools/" + pool.ID + "/members"}; !slices.Equal(got, want) {
		t.Errorf("Ensure with other nodes: changing requests = %v, want %v", got, want)
	}
}

// TestEnsureUpdatesByDifference: a changed Service changes the existing
// load balancer, only where it differs; it keeps its ID and address.
func TestEnsureUpdatesByDifference(t *testing.T) {
	lt := newLBTest(t, emulator.Options{OctaviaDelay: 5 * time.Millisecond})
	svc := service("web")
	svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: "https", Protocol: v1.ProtocolTCP, Port: 443, NodePort: 30443})
	first := lt.ensure(t, svc, lt.nodes)
	before := lt.only(t)
	_, pool443 := poolOf(t, before, "TCP", 443)

	changed := svc.DeepCopy()
	changed.Spec.Ports = []v1.ServicePort{
		{Name: "https", Protocol: v1.ProtocolTCP, Port: 443, NodePort: 30443},
		{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 30053},
	}
	changed.Annotations[AnnotationLBMethod] = "least_connections"
	changed.Annotations[AnnotationConnectionLimit] = "1000"
	changed.Annotations[AnnotationTimeoutMemberData] = "120000"
	changed.Annotations[AnnotationEnableHealthMonitor] = "true"
	changed.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24", "192.0.2.0/24"}
	lt.ResetRequests()
	st := lt.ensure(t, changed, lt.nodes)

	if !equality.Semantic.DeepEqual(st, first) {
		t.Errorf("address changed: %+v, was %+v", st, first)
	}
	lb := lt.only(t)
	if lb.ID != before.ID {
		t.Fatalf("the load balancer was made again: %s, was %s", lb.ID, before.ID)
	}
	if len(lb.Listeners) != 2 || len(lb.Pools) != 2 {
		t.Errorf("listeners %+v, pools %+v; want those of 443/TCP and 53/UDP", lb.Listeners, lb.Pools)
	}
	l443, p443 := poolOf(t, lb, "TCP", 443)
	if p443.ID != pool443.ID {
		t.Errorf("the pool of 443 was made again")
	}
	_, p53 := poolOf(t, lb, "UDP", 53)
	for _, tc := range []struct {
		l    emulator.Listener
		p    emulator.Pool
		kind string
	}{{l443, p443, "TCP"}, {emulator.Listener{}, p53, "UDP-CONNECT"}} {
		if tc.p.LBAlgorithm != "LEAST_CONNECTIONS" || tc.p.HealthMonitor == nil || tc.p.HealthMonitor.Type != tc.kind ||
			tc.p.HealthMonitor.Delay != 5 || tc.p.HealthMonitor.Timeout != 3 || tc.p.HealthMonitor.MaxRetries != 1 {
			t.Errorf("pool %s: algorithm %s, monitor %+v; want LEAST_CONNECTIONS and a %s monitor 5s/3s/1", tc.p.Name, tc.p.LBAlgorithm, tc.p.HealthMonitor, tc.kind)
		}
	}
	if l443.ConnectionLimit != 1000 || l443.TimeoutMemberData != 120000 || l443.TimeoutClientData != 50000 ||
		!slices.Equal(l443.AllowedCIDRs, []string{"192.0.2.0/24", "198.51.100.0/24"}) {
		t.Errorf("listener 443 = %+v", l443)
	}
	for _, m := range lt.mutations() {
		if strings.HasPrefix(m, "POST v2.0/lbaas/loadbalancers") || strings.Contains(m, "floatingips") {
			t.Errorf("an update by difference made %s", m)
		}
	}

	// Back: no monitors, no ranges, default method.
	lt.ResetRequests()
	lt.ensure(t, svc, lt.nodes)
	lb = lt.only(t)
	for _, p := range lb.Pools {
		if p.HealthMonitor != nil || p.LBAlgorithm != "ROUND_ROBIN" {
			t.Errorf("pool %s: monitor %+v, algorithm %s", p.Name, p.HealthMonitor, p.LBAlgorithm)
		}
	}
	for _, l := range lb.Listeners {
		if l.AllowedCIDRs != nil || l.ConnectionLimit != -1 || l.TimeoutMemberData != 50000 {
			t.Errorf("listener %s = %+v", l.Name, l)
		}
	}
}

// TestPendingIsRetryAfter: a load balancer Octavia is working on is not
// changed, nor deleted: the caller gets a retry-after error.
func TestPendingIsRetryAfter(t *testing.T) {
	lt := newLBTest(t, emulator.Options{})
	svc := service("web")
	lt.ensure(t, svc, lt.nodes)
	lb := lt.only(t)
	for _, status := range []string{emulator.StatusPendingUpdate, emulator.StatusPendingCreate} {
		if err := lt.SetProvisioningStatus(lb.ID, status); err != nil {
			t.Fatal(err)
		}
		lt.ResetRequests()
		changed := service("web", AnnotationLBMethod, "SOURCE_IP")
		_, errEnsure := lt.lb.EnsureLoadBalancer(lt.ctx, testCluster, changed, lt.nodes[:1])
		errUpdate := lt.lb.UpdateLoadBalancer(lt.ctx, testCluster, changed, lt.nodes[:1])
		errDelete := lt.lb.EnsureLoadBalancerDeleted(lt.ctx, testCluster, changed)
		for name, err := range map[string]error{"Ensure": errEnsure, "Update": errUpdate, "Delete": errDelete} {
			if after, ok := cloud.RetryAfter(err); !ok || after <= 0 {
				t.Errorf("%s with the load balancer %s: %v, want a retry-after error", name, status, err)
			}
		}
		if got := lt.mutations(); len(got) != 0 {
			t.Errorf("with the load balancer %s: changed %v", status, got)
		}
	}
}

// TestConflictIsRetryAfter: a 409 from Octavia (another writer made the
// load balancer busy between read and write) is a retry-after error, a
// 429 a throttle.
func TestConflictIsRetryAfter(t *testing.T) {
	lt := newLBTest(t, emulator.Options{})
	svc := service("web")
	lt.ensure(t, svc, lt.nodes)
	lt.AddFault(emulator.Fault{Service: emulator.LoadBalancer, Method: http.MethodPut, Status: http.StatusConflict, Count: 1})
	err := lt.lb.UpdateLoadBalancer(lt.ctx, testCluster, svc, lt.nodes[:1])
	if _, ok := cloud.RetryAfter(err); !ok {
		t.Errorf("UpdateLoadBalancer with Octavia answering 409: %v, want a retry-after error", err)
	}
	if err := lt.lb.UpdateLoadBalancer(lt.ctx, testCluster, svc, lt.nodes[:1]); err != nil {
		t.Errorf("UpdateLoadBalancer after the conflict: %v", err)
	}
	lt.AddFault(emulator.Fault{Service: emulator.LoadBalancer, Method: http.MethodPut, Status: http.StatusTooManyRequests, Count: 1})
	var throttled *cloud.ThrottledError
	if err := lt.lb.UpdateLoadBalancer(lt.ctx, testCluster, svc, lt.nodes); !errors.As(err, &throttled) {
		t.Errorf("UpdateLoadBalancer with Octavia answering 429: %v, want a throttle", err)
	}
}

// TestErrorIsDeletedAndRetried: a load balancer that goes into ERROR is
// deleted and the error returned; the next Ensure creates it anew. One
// found in ERROR is treated alike.
func TestErrorIsDeletedAndRetried(t *testing.T) {
	lt := newLBTest(t, emulator.Options{OctaviaDelay: 5 * time.Millisecond})
	svc := service("web")
	lt.FailProvisioning(1)
	_, err := lt.lb.EnsureLoadBalancer(lt.ctx, testCluster, svc, lt.nodes)
	if err == nil || !strings.Contains(err.Error(), "ERROR") {
		t.Fatalf("Ensure of a load balancer that goes into ERROR: %v", err)
	}
	if _, ok := cloud.RetryAfter(err); ok {
		t.Errorf("the error is a retry-after one (%v); a failure backs off", err)
	}
	if lbs, fips := lt.LoadBalancers(), lt.FloatingIPs(); len(lbs) != 0 || len(fips) != 0 {
		t.Errorf("left after the failure: %+v, %+v", lbs, fips)
	}
	first := lt.ensure(t, svc, lt.nodes)
	lb := lt.only(t)

	if err := lt.SetProvisioningStatus(lb.ID, emulator.StatusError); err != nil {
		t.Fatal(err)
	}
	if _, err := lt.lb.EnsureLoadBalancer(lt.ctx, testCluster, svc, lt.nodes); err == nil || !strings.Contains(err.Error(), "ERROR") {
		t.Fatalf("Ensure of a load balancer in ERROR: %v", err)
	}
	if lbs := lt.LoadBalancers(); len(lbs) != 0 {
		t.Errorf("the load balancer in ERROR is still there: %+v", lbs)
	}
	again := lt.ensure(t, svc, lt.nodes)
	if lt.only(t).ID == lb.ID {
		t.Error("the load balancer was not made again")
	}
	if ipOf(again) != ipOf(first) || len(lt.FloatingIPs()) != 1 {
		t.Errorf("the new load balancer has %s (floating IPs %+v), want the old address %s", ipOf(again), lt.FloatingIPs(), ipOf(first))
	}
}

// TestFloatingIPOwnership: a floating IP named in spec.loadBalancerIP is
// adopted and survives the load balancer; one ccmkit allocated does not,
// unless keep-floatingip is set.
func TestFloatingIPOwnership(t *testing.T) {
	lt := newLBTest(t, emulator.Options{})
	reserved, err := lt.AddFloatingIP(emulator.FloatingIP{FloatingNetworkID: lt.nets.public.ID, FloatingIPAddress: "172.24.4.100", Description: "reserved by the operators"})
	if err != nil {
		t.Fatal(err)
	}
	adopted := service("adopted")
	adopted.Spec.LoadBalancerIP = reserved.FloatingIPAddress
	if st := lt.ensure(t, adopted, lt.nodes); ipOf(st) != reserved.FloatingIPAddress {
		t.Errorf("status %+v, want the reserved address", st)
	}
	lb := lt.only(t)
	fips := lt.FloatingIPs()
	if len(fips) != 1 || fips[0].ID != reserved.ID || fips[0].PortID != lb.VIPPortID || fips[0].Description != reserved.Description {
		t.Fatalf("floating IPs = %+v, want the reserved one on the VIP port, its description kept", fips)
	}
	if err := lt.lb.EnsureLoadBalancerDeleted(lt.ctx, testCluster, adopted); err != nil {
		t.Fatal(err)
	}
	if fips := lt.FloatingIPs(); len(fips) != 1 || fips[0].ID != reserved.ID || fips[0].PortID != "" {
		t.Errorf("after delete: %+v, want the reserved floating IP, free", fips)
	}

	kept := service("kept", AnnotationKeepFloatingIP, "true")
	lt.ensure(t, kept, lt.nodes)
	owned := service("owned")
	lt.ensure(t, owned, lt.nodes)
	if n := len(lt.FloatingIPs()); n != 3 {
		t.Fatalf("%d floating IPs, want 3", n)
	}
	for _, svc := range []*v1.Service{kept, owned} {
		if err := lt.lb.EnsureLoadBalancerDeleted(lt.ctx, testCluster, svc); err != nil {
			t.Fatal(err)
		}
		if err := lt.lb.EnsureLoadBalancerDeleted(lt.ctx, testCluster, svc); err != nil {
			t.Errorf("deleting %s again: %v", svc.Name, err)
		}
	}
	var left []string
	for _, f := range lt.FloatingIPs() {
		left = append(left, f.Description)
	}
	slices.Sort(left)
	if want := []string{fipDescription(testCluster, kept), "reserved by the operators"}; !slices.Equal(left, want) {
		t.Errorf("floating IPs left: %q, want %q", left, want)
	}
	if lbs := lt.LoadBalancers(); len(lbs) != 0 {
		t.Errorf("load balancers left: %+v", lbs)
	}
	for _, p := range lt.Ports() {
		if p.DeviceOwner == emulator.DeviceOwnerOctavia {
			t.Errorf("VIP port left: %+v", p)
		}
	}
}

// TestInternalLoadBalancer: an internal load balancer has no floating IP
// and the VIP is the address; turning a Service internal releases the
// floating IP it had.
func TestInternalLoadBalancer(t *testing.T) {
	lt := newLBTest(t, emulator.Options{})
	svc := service("web")
	external := lt.ensure(t, svc, lt.nodes)
	internal := service("web", AnnotationInternal, "true")
	st := lt.ensure(t, internal, lt.nodes)
	lb := lt.only(t)
	if ipOf(st) != lb.VIPAddress || ipOf(st) == ipOf(external) {
		t.Errorf("internal status %+v, want the VIP %s", st, lb.VIPAddress)
	}
	if fips := lt.FloatingIPs(); len(fips) != 0 {
		t.Errorf("floating IPs of an internal load balancer: %+v", fips)
	}

	other := service("other", AnnotationInternal, "true")
	other.Spec.LoadBalancerIP = "10.0.0.200"
	if st := lt.ensure(t, other, lt.nodes); ipOf(st) != "10.0.0.200" {
		t.Errorf("internal with spec.loadBalancerIP: %+v, want the VIP 10.0.0.200", st)
	}
	if fips := lt.FloatingIPs(); len(fips) != 0 {
		t.Errorf("floating IPs of internal load balancers: %+v", fips)
	}
}

// TestInternalByConfig: [LoadBalancer] internal-lb makes every load
// balancer internal.
func TestInternalByConfig(t *testing.T) {
	lt := newLBTest(t, emulator.Options{}, "internal-lb = true")
	st := lt.ensure(t, service("web", AnnotationInternal, "false"), lt.nodes)
	if ipOf(st) != lt.only(t).VIPAddress || len(lt.FloatingIPs()) != 0 {
		t.Errorf("status %+v, floating IPs %+v; want the VIP and none", st, lt.FloatingIPs())
	}
}

// TestSourceRanges: loadBalancerSourceRanges (or the annotation) become
// the listeners' allowed_cidrs; ranges of the other family only are an
// error, as an empty list would allow everyone.
func TestSourceRanges(t *testing.T) {
	lt := newLBTest(t, emulator.Options{})
	svc := service("web", v1.AnnotationLoadBalancerSourceRangesKey, "203.0.113.0/24, 192.0.2.7/32")
	lt.ensure(t, svc, lt.nodes)
	l, _ := poolOf(t, lt.only(t), "TCP", 80)
	if want := []string{"192.0.2.7/32", "203.0.113.0/24"}; !slices.Equal(l.AllowedCIDRs, want) {
		t.Errorf("allowed_cidrs = %v, want %v", l.AllowedCIDRs, want)
	}
	v6 := service("web")
	v6.Spec.LoadBalancerSourceRanges = []string{"2001:db8::/32"}
	lt.ResetRequests()
	if _, err := lt.lb.EnsureLoadBalancer(lt.ctx, testCluster, v6, lt.nodes); err == nil || !strings.Contains(err.Error(), "loadBalancerSourceRanges") {
		t.Errorf("IPv6 ranges on an IPv4 load balancer: %v", err)
	}
	if got := lt.mutations(); len(got) != 0 {
		t.Errorf("changed %v", got)
	}
}

// TestLocalTrafficPolicyMonitor: externalTrafficPolicy Local is an HTTP
// monitor of /healthz on the health-check node port, which the members
// are monitored on.
func TestLocalTrafficPolicyMonitor(t *testing.T) {
	lt := newLBTest(t, emulator.Options{})
	svc := service("web", AnnotationHealthMonitorDelay, "10", AnnotationHealthMonitorTimeout, "4", AnnotationHealthMonitorMaxRetries, "2")
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	svc.Spec.HealthCheckNodePort = 32100
	lt.ensure(t, svc, lt.nodes)
	_, p := poolOf(t, lt.only(t), "TCP", 80)
	m := p.HealthMonitor
	if m == nil || m.Type != "HTTP" || m.URLPath != "/healthz" || m.HTTPMethod != "GET" || m.ExpectedCodes != "200" ||
		m.Delay != 10 || m.Timeout != 4 || m.MaxRetries != 2 {
		t.Fatalf("monitor = %+v, want HTTP GET /healthz 200, 10s/4s/2", m)
	}
	for _, mem := range p.Members {
		if mem.MonitorPort != 32100 {
			t.Errorf("member %s monitored on port %d, want 32100", mem.Name, mem.MonitorPort)
		}
	}

	// Back to Cluster: a TCP monitor only when asked for, no monitor port.
	cluster := service("web")
	lt.ensure(t, cluster, lt.nodes)
	_, p = poolOf(t, lt.only(t), "TCP", 80)
	if p.HealthMonitor != nil {
		t.Errorf("monitor = %+v, want none", p.HealthMonitor)
	}
	for _, mem := range p.Members {
		if mem.MonitorPort != 0 {
			t.Errorf("member %s monitored on port %d", mem.Name, mem.MonitorPort)
		}
	}
}

// TestBadAnnotationsChangeNothing: a bad annotation value is an error
// that names it, and no request changes the cloud, for a new load
// balancer and for an existing one.
func TestBadAnnotationsChangeNothing(t *testing.T) {
	lt := newLBTest(t, emulator.Options{})
	bad := []struct{ key, value string }{
		{AnnotationInternal, "maybe"},
		{AnnotationKeepFloatingIP, "yes please"},
		{AnnotationLBMethod, "RANDOM"},
		{AnnotationConnectionLimit, "-2"},
		{AnnotationTimeoutClientData, "soon"},
		{AnnotationTimeoutMemberConnect, "-1"},
		{AnnotationTimeoutMemberData, "86400001"},
		{AnnotationEnableHealthMonitor, "on-ish"},
		{AnnotationHealthMonitorDelay, "0"},
		{AnnotationHealthMonitorMaxRetries, "11"},
		{AnnotationClass, "no-such-class"},
		{AnnotationFloatingNetworkID, "no-such-network"},
		{AnnotationFloatingNetworkID, lt.nets.private.ID},
		{AnnotationFloatingSubnetID, lt.nets.privateSubnet.ID},
		{AnnotationSubnetID, "no-such-subnet"},
		{AnnotationMemberSubnetID, "no-such-subnet"},
		{AnnotationNetworkID, "no-such-network"},
	}
	existing := service("existing")
	lt.ensure(t, existing, lt.nodes)
	before := lt.only(t)
	for _, tc := range bad {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			for _, name := range []string{"new", "existing"} {
				svc := service(name, tc.key, tc.value)
				lt.ResetRequests()
				_, err := lt.lb.EnsureLoadBalancer(lt.ctx, testCluster, svc, lt.nodes)
				if err == nil || !strings.Contains(err.Error(), tc.key) {
					t.Errorf("%s: Ensure = %v, want an error naming %s", name, err, tc.key)
				}
				if got := lt.mutations(); len(got) != 0 {
					t.Errorf("%s: changed %v", name, got)
				}
			}
		})
	}
	if got := lt.only(t); !equality.Semantic.DeepEqual(got, before) {
		t.Errorf("the existing load balancer changed:\n%+v\nwas\n%+v", got, before)
	}
	timeout := service("new", AnnotationHealthMonitorDelay, "3", AnnotationHealthMonitorTimeout, "5")
	if _, err := lt.lb.EnsureLoadBalancer(lt.ctx, testCluster, timeout, lt.nodes); err == nil || !strings.Contains(err.Error(), AnnotationHealthMonitorTimeout) {
		t.Errorf("a timeout over the delay: %v", err)
	}
	sctp := service("new")
	sctp.Spec.Ports[0].Protocol = v1.ProtocolSCTP
	if _, err := lt.lb.EnsureLoadBalancer(lt.ctx, testCluster, sctp, lt.nodes); err == nil || !strings.Contains(err.Error(), "SCTP") {
		t.Errorf("an SCTP port: %v", err)
	}
	if err := lt.lb.EnsureLoadBalancerDeleted(lt.ctx, testCluster, service("existing", AnnotationKeepFloatingIP, "perhaps")); err == nil ||
		!strings.Contains(err.Error(), AnnotationKeepFloatingIP) {
		t.Errorf("delete with a bad keep-floatingip: %v", err)
	}
	if len(lt.LoadBalancers()) != 1 {
		t.Errorf("load balancers: %+v", lt.LoadBalancers())
	}
}

// TestHungOctaviaReturnsAtTheDeadline: an Octavia that accepts requests
// and never answers, or a load balancer that stays PENDING_CREATE, holds
// a call no longer than its context; a load balancer still being created
// is a retry-after error for the next call.
func TestHungOctaviaReturnsAtTheDeadline(t *testing.T) {
	lt := newLBTest(t, emulator.Options{})
	// Locate Octavia first, so that the hang meets a load-balancer request.
	if _, _, err := lt.lb.services(lt.ctx); err != nil {
		t.Fatal(err)
	}
	hang := lt.AddFault(emulator.Fault{Service: emulator.LoadBalancer, Path: "v2.0/lbaas", Hang: true})
	svc := service("web")
	for _, call := range []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"Ensure", func(ctx context.Context) error {
			_, err := lt.lb.EnsureLoadBalancer(ctx, testCluster, svc, lt.nodes)
			return err
		}},
		{"Update", func(ctx context.Context) error { return lt.lb.UpdateLoadBalancer(ctx, testCluster, svc, lt.nodes) }},
		{"Delete", func(ctx context.Context) error { return lt.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc) }},
		{"Get", func(ctx context.Context) error {
			_, _, err := lt.lb.GetLoadBalancer(ctx, testCluster, svc)
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(lt.ctx, 200*time.Millisecond)
		start := time.Now()
		err := call.run(ctx)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || took > 2*time.Second {
			t.Errorf("%s with Octavia hung: %v after %s, want the deadline after 200ms", call.name, err, took)
		}
	}
	lt.RemoveFault(hang)

	lt.SetOctaviaDelay(time.Hour)
	ctx, cancel := context.WithTimeout(lt.ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := lt.lb.EnsureLoadBalancer(ctx, testCluster, svc, lt.nodes)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("Ensure with the load balancer PENDING_CREATE for an hour: %v after %s", err, time.Since(start))
	}
	if _, err := lt.lb.EnsureLoadBalancer(lt.ctx, testCluster, svc, lt.nodes); !isRetryAfter(err) {
		t.Errorf("Ensure of the load balancer still PENDING_CREATE: %v, want a retry-after error", err)
	}
}

func isRetryAfter(err error) bool {
	_, ok := cloud.RetryAfter(err)
	return ok
}

// TestDeleteWithoutCascade: with cascade-delete = false the monitors,
// pools and listeners go one by one before the load balancer; deleting
// what is gone is a success.
func TestDeleteWithoutCascade(t *testing.T) {
	lt := newLBTest(t, emulator.Options{OctaviaDelay: 2 * time.Millisecond}, "cascade-delete = false", "create-monitor = true")
	svc := service("web")
	svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 30053})
	lt.ensure(t, svc, lt.nodes)
	lb := lt.only(t)
	lt.ResetRequests()
	if err := lt.lb.EnsureLoadBalancerDeleted(lt.ctx, testCluster, svc); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, m := range lt.mutations() {
		method, path, _ := strings.Cut(m, " ")
		parts := strings.Split(path, "/")
		kinds = append(kinds, method+" "+parts[len(parts)-2])
	}
	want := []string{"DELETE floatingips", "DELETE healthmonitors", "DELETE healthmonitors", "DELETE pools", "DELETE pools",
		"DELETE listeners", "DELETE listeners", "DELETE loadbalancers"}
	if !slices.Equal(kinds, want) {
		t.Errorf("requests %v, want %v", lt.mutations(), want)
	}
	for _, r := range lt.Requests(emulator.LoadBalancer) {
		if r.Method == http.MethodDelete && strings.HasSuffix(r.Path, lb.ID) && r.Query.Get("cascade") == "true" {
			t.Errorf("cascade delete with cascade-delete = false: %+v", r)
		}
	}
	if lbs := lt.LoadBalancers(); len(lbs) != 0 {
		t.Errorf("left: %+v", lbs)
	}
	lt.ResetRequests()
	if err := lt.lb.EnsureLoadBalancerDeleted(lt.ctx, testCluster, svc); err != nil || len(lt.mutations()) != 0 {
		t.Errorf("deleting again: %v, %v", err, lt.mutations())
	}
	if _, exists, err := lt.lb.GetLoadBalancer(lt.ctx, testCluster, svc); exists || err != nil {
		t.Errorf("GetLoadBalancer after delete: %v, %v", exists, err)
	}
}

// TestIngressHostname: enable-ingress-hostname gives the Service a
// hostname of its address.
func TestIngressHostname(t *testing.T) {
	lt := newLBTest(t, emulator.Options{}, "enable-ingress-hostname = true", "ingress-hostname-suffix = lb.example")
	st := lt.ensure(t, service("web"), lt.nodes)
	fips := lt.FloatingIPs()
	if len(fips) != 1 || len(st.Ingress) != 1 || st.Ingress[0].Hostname != fips[0].FloatingIPAddress+".lb.example" || st.Ingress[0].IP != "" {
		t.Errorf("status %+v, want the hostname of %+v", st, fips)
	}
}

// TestClassesAndPlacement: a class picks the floating network and the
// VIP subnet, over the annotations; flavor and availability zone reach
// Octavia; member-subnet-id is the members' subnet.
func TestClassesAndPlacement(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	nets := c.addLBNetworks(t)
	dmz, err := c.AddNetwork(emulator.Net{Name: "dmz", External: true})
	if err != nil {
		t.Fatal(err)
	}
	dmzSubnet, err := c.AddSubnet(emulator.Subnet{NetworkID: dmz.ID, CIDR: "198.51.100.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	vipNet, err := c.AddNetwork(emulator.Net{Name: "vips"})
	if err != nil {
		t.Fatal(err)
	}
	vipSubnet, err := c.AddSubnet(emulator.Subnet{NetworkID: vipNet.ID, CIDR: "10.1.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t, c.conf("[LoadBalancer]", "floating-network-id = "+nets.public.ID, "flavor-id = small",
		fmt.Sprintf("[LoadBalancerClass %q]", "dmz"), "floating-network-id = "+dmz.ID, "floating-subnet-id = "+dmzSubnet.ID,
		"subnet-id = "+vipSubnet.ID, "member-subnet-id = "+nets.privateSubnet.ID))
	lt := &lbTest{testCloud: c, nets: nets, lb: p.loadBalancers}
	_, lt.ctx = ktesting.NewTestContext(t)
	lt.addNode(t, "node-1", "10.0.0.11")

	svc := service("web", AnnotationClass, "dmz", AnnotationFloatingNetworkID, nets.public.ID, AnnotationAvailabilityZone, "az-2")
	st := lt.ensure(t, svc, lt.nodes)
	lb := lt.only(t)
	if lb.VIPSubnetID != vipSubnet.ID || lb.FlavorID != "small" || lb.AvailabilityZone != "az-2" {
		t.Errorf("load balancer on subnet %s, flavor %q, zone %q", lb.VIPSubnetID, lb.FlavorID, lb.AvailabilityZone)
	}
	if !strings.HasPrefix(ipOf(st), "198.51.100.") {
		t.Errorf("address %s, want one of the class's floating subnet", ipOf(st))
	}
	_, pool := poolOf(t, lb, "TCP", 80)
	if len(pool.Members) != 1 || pool.Members[0].SubnetID != nets.privateSubnet.ID {
		t.Errorf("members %+v, want them on subnet %s", pool.Members, nets.privateSubnet.ID)
	}
}

// TestNoVIPSubnet: without a configured subnet and without node ports
// the error says what to set, and nothing is made.
func TestNoVIPSubnet(t *testing.T) {
	lt := newLBTest(t, emulator.Options{})
	nodes := []*v1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.7.7"}}}}}
	lt.ResetRequests()
	if _, err := lt.lb.EnsureLoadBalancer(lt.ctx, testCluster, service("web"), nodes); err == nil || !strings.Contains(err.Error(), "subnet-id") {
		t.Errorf("Ensure without a subnet: %v", err)
	}
	if got := lt.mutations(); len(got) != 0 {
		t.Errorf("changed %v", got)
	}
}

// TestLoadBalancerIPChange: a new spec.loadBalancerIP moves the Service to
// that address; the floating IP ccmkit allocated before is released.
func TestLoadBalancerIPChange(t *testing.T) {
	lt := newLBTest(t, emulator.Options{})
	svc := service("web")
	lt.ensure(t, svc, lt.nodes)
	moved := svc.DeepCopy()
	moved.Spec.LoadBalancerIP = "172.24.4.50"
	if st := lt.ensure(t, moved, lt.nodes); ipOf(st) != "172.24.4.50" {
		t.Errorf("status %+v, want 172.24.4.50", st)
	}
	fips := lt.FloatingIPs()
	if len(fips) != 1 || fips[0].FloatingIPAddress != "172.24.4.50" || fips[0].PortID != lt.only(t).VIPPortID {
		t.Errorf("floating IPs %+v, want only 172.24.4.50 on the VIP port", fips)
	}
}
