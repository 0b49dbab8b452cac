package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
	"github.com/ccmkit/ccmkit/test/harness"
)

// openstackCloud starts the OpenStack API emulator with a user for the
// CCM and returns it with the path of a cloud.conf for it; extra are lines
// after [Global]'s.
func openstackCloud(t *testing.T, extra ...string) (*emulator.Emulator, string) {
	t.Helper()
	e := openstackEmulator(t, emulator.Options{})
	return e, openstackConf(t, e, extra...)
}

// openstackEmulator starts the OpenStack API emulator with opts and a user
// for the CCM.
func openstackEmulator(t *testing.T, opts emulator.Options) *emulator.Emulator {
	t.Helper()
	e := emulator.New(opts)
	t.Cleanup(e.Close)
	if _, err := e.AddUser(emulator.User{Name: "ccm", Password: "ccm-secret", Projects: []string{e.DefaultProject().ID}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// openstackConf writes a cloud.conf for the emulator's CCM user and
// returns its path; extra are lines after [Global]'s.
func openstackConf(t *testing.T, e *emulator.Emulator, extra ...string) string {
	t.Helper()
	conf := fmt.Sprintf(`[Global]
auth-url = %s
region = %s
username = ccm
password = ccm-secret
user-domain-name = Default
tenant-name = %s
tenant-domain-id = default
`, e.AuthURL(), e.Region(), e.DefaultProject().Name)
	conf += strings.Join(extra, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "cloud.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// addLBNetworks adds the network "private" (10.0.0.0/24) of the servers,
// whose ports hold the load balancers' VIPs, and the one external network
// "public" (172.24.4.0/24) of their floating IPs, and returns the subnet
// of "private". Only servers added after it get ports on "private".
func addLBNetworks(t *testing.T, cloud *emulator.Emulator) emulator.Subnet {
	t.Helper()
	private, err := cloud.AddNetwork(emulator.Net{Name: "private"})
	if err != nil {
		t.Fatal(err)
	}
	privateSubnet, err := cloud.AddSubnet(emulator.Subnet{Name: "private-subnet", NetworkID: private.ID, CIDR: "10.0.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	public, err := cloud.AddNetwork(emulator.Net{Name: "public", External: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cloud.AddSubnet(emulator.Subnet{Name: "public-subnet", NetworkID: public.ID, CIDR: floatingCIDR.String()}); err != nil {
		t.Fatal(err)
	}
	return privateSubnet
}

// floatingCIDR is the subnet of addLBNetworks' floating IPs.
var floatingCIDR = netip.MustParsePrefix("172.24.4.0/24")

// addOpenStackNode adds a running m1.large server in az-1 with the fixed
// address addr on "private", and its Node, tainted as a kubelet with
// --cloud-provider=external registers it, with the pod CIDR podCIDR
// unless it is empty.
func addOpenStackNode(t *testing.T, cloud *emulator.Emulator, cp *harness.ControlPlane, name, addr, podCIDR string) emulator.Server {
	t.Helper()
	srv, err := cloud.AddServer(emulator.Server{
		Name:             name,
		Flavor:           "m1.large",
		AvailabilityZone: "az-1",
		Addresses:        map[string][]emulator.Address{"private": {{Addr: addr}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	registerNode(t, cp, name, podCIDR)
	return srv
}

// startOpenStackCCM starts the CCM with the openstack provider and the
// cloud.conf at conf, routes off (unless extra has osRouteFlags), Node
// lifecycle checks every second and extra flags, and waits until it is
// healthy.
func startOpenStackCCM(t *testing.T, cp *harness.ControlPlane, conf string, extra ...string) *harness.CCM {
	t.Helper()
	args := append([]string{
		"--cloud-provider=openstack", "--cloud-config=" + conf, "--configure-cloud-routes=false",
		"--node-monitor-period=1s", "--node-deletion-grace-period=2s", "--v=2",
	}, extra...)
	ccm := harness.StartCCM(t, harness.CCMOptions{Kubeconfig: cp.Kubeconfig, Args: args})
	if err := ccm.WaitHealthy(t.Context()); err != nil {
		t.Fatal(err)
	}
	return ccm
}

// osClusterCIDR is the pod CIDR range of the OpenStack tests with routes;
// each of their Nodes has a /24 of it.
const osClusterCIDR = "10.244.0.0/16"

// osRouteFlags turn the route controller on, over startOpenStackCCM's
// --configure-cloud-routes=false: the last one counts.
var osRouteFlags = []string{"--configure-cloud-routes=true", "--cluster-cidr=" + osClusterCIDR}

// addOSRouter adds the cluster's router, with an interface on subnet: the
// emulator then refuses a route whose next hop is not on it, as Neutron
// does.
func addOSRouter(t *testing.T, cloud *emulator.Emulator, subnet emulator.Subnet) emulator.Router {
	t.Helper()
	router, err := cloud.AddRouter(emulator.Router{Name: "cluster", InterfaceSubnets: []string{subnet.ID}})
	if err != nil {
		t.Fatal(err)
	}
	return router
}

// osRoute is a route the router should have: a Node's pod CIDR via the
// Node's fixed address.
type osRoute struct{ node, podCIDR, nextHop string }

// checkOSRoutes returns nil when the router's routes are exactly want, the
// allowed address pairs of each port are exactly the destinations routed
// to its fixed addresses, and the Node of each route has
// NetworkUnavailable=False (RouteCreated); else an error saying what
// differs.
func checkOSRoutes(ctx context.Context, cloud *emulator.Emulator, cp *harness.ControlPlane, routerID string, want ...osRoute) error {
	router, ok := cloud.Router(routerID)
	if !ok {
		return fmt.Errorf("router %s is gone", routerID)
	}
	var have, wantRoutes []string
	for _, rt := range router.Routes {
		have = append(have, rt.Destination+" via "+rt.NextHop)
	}
	destinations := map[string][]string{} // by next hop
	for _, rt := range want {
		wantRoutes = append(wantRoutes, rt.podCIDR+" via "+rt.nextHop)
		destinations[rt.nextHop] = append(destinations[rt.nextHop], rt.podCIDR)
	}
	slices.Sort(have)
	slices.Sort(wantRoutes)
	if !slices.Equal(have, wantRoutes) {
		return fmt.Errorf("router routes %v, want %v", have, wantRoutes)
	}
	for _, p := range cloud.Ports() {
		var pairs, wantPairs []string
		for _, a := range p.AllowedAddressPairs {
			pairs = append(pairs, a.IPAddress)
		}
		for _, f := range p.FixedIPs {
			wantPairs = append(wantPairs, destinations[f.IPAddress]...)
		}
		slices.Sort(pairs)
		slices.Sort(wantPairs)
		if !slices.Equal(pairs, wantPairs) {
			return fmt.Errorf("port %s (%+v, device %s): allowed address pairs %v, want %v", p.ID, p.FixedIPs, p.DeviceID, pairs, wantPairs)
		}
	}
	for _, rt := range want {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, rt.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		i := slices.IndexFunc(n.Status.Conditions, func(c v1.NodeCondition) bool { return c.Type == v1.NodeNetworkUnavailable })
		if i < 0 {
			return fmt.Errorf("%s has no NetworkUnavailable condition", rt.node)
		}
		if c := n.Status.Conditions[i]; c.Status != v1.ConditionFalse || c.Reason != "RouteCreated" {
			return fmt.Errorf("%s: NetworkUnavailable=%s (%s), want False (RouteCreated)", rt.node, c.Status, c.Reason)
		}
	}
	return nil
}

// waitOSRoutes waits until checkOSRoutes holds.
func waitOSRoutes(t *testing.T, cloud *emulator.Emulator, cp *harness.ControlPlane, routerID string, want ...osRoute) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = checkOSRoutes(ctx, cloud, cp, routerID, want...)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("routes not as wanted: %v: %v", last, err)
	}
}

// TestOpenStackNodes runs the binary with --cloud-provider=openstack
// against the emulator: Nodes are initialised from their Nova servers, a
// Node whose server is shut off is tainted, and one whose server is
// deleted is deleted.
func TestOpenStackNodes(t *testing.T) {
	ctx := t.Context()
	cloud, conf := openstackCloud(t)
	cp := harness.StartControlPlane(t)

	servers := map[string]emulator.Server{}
	for i := range 3 {
		name := fmt.Sprintf("os-node-%d", i)
		servers[name] = addOpenStackNode(t, cloud, cp, name, fmt.Sprintf("10.0.0.%d", 10+i), "")
	}
	startOpenStackCCM(t, cp, conf)

	for name, srv := range servers {
		n := waitNode(t, cp, name, "initialised from Nova", initialised)
		if want := "openstack:///" + srv.ID; n.Spec.ProviderID != want {
			t.Errorf("%s: providerID %q, want %q", name, n.Spec.ProviderID, want)
		}
		if n.Labels[v1.LabelTopologyZone] != "az-1" || n.Labels[v1.LabelTopologyRegion] != cloud.Region() || n.Labels[v1.LabelInstanceTypeStable] != "m1.large" {
			t.Errorf("%s: labels %v, want zone az-1, region %s, instance type m1.large", name, n.Labels, cloud.Region())
		}
		if !slices.Contains(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: srv.Addresses["private"][0].Addr}) {
			t.Errorf("%s: addresses %v lack the server's fixed address", name, n.Status.Addresses)
		}
	}

	if err := cloud.SetStatus(servers["os-node-1"].ID, "SHUTOFF"); err != nil {
		t.Fatal(err)
	}
	waitNode(t, cp, "os-node-1", "tainted as shut down", func(n *v1.Node) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == cloudproviderapi.TaintNodeShutdown })
	})

	if err := cloud.DeleteServer(servers["os-node-2"].ID); err != nil {
		t.Fatal(err)
	}
	waitNodeGone(t, cp, "os-node-2")
	if _, err := cp.Client.CoreV1().Nodes().Get(ctx, "os-node-0", metav1.GetOptions{}); err != nil {
		t.Errorf("the Node of a running server: %v", err)
	}
}

// osLBService is the LoadBalancer Service of the OpenStack tests, in the
// default namespace, and osLBName the name of its Octavia load balancer
// (cluster "kubernetes").
const (
	osLBService = "web"
	osLBName    = "kube_service_kubernetes_default_" + osLBService
)

// createOSService creates osLBService with one TCP port, 80.
func createOSService(t *testing.T, cp *harness.ControlPlane) {
	t.Helper()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: osLBService, Namespace: metav1.NamespaceDefault},
		Spec: v1.ServiceSpec{
			Type:     v1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": osLBService},
			Ports:    []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := cp.Client.CoreV1().Services(metav1.NamespaceDefault).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// getOSService reads osLBService.
func getOSService(ctx context.Context, cp *harness.ControlPlane) (*v1.Service, error) {
	return cp.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, osLBService, metav1.GetOptions{})
}

// waitOSIngress waits until osLBService has an ingress IP and returns it.
func waitOSIngress(t *testing.T, cp *harness.ControlPlane, timeout time.Duration) *v1.Service {
	t.Helper()
	svc := &v1.Service{}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := getOSService(ctx, cp)
		if err != nil {
			return false, err
		}
		svc = got
		return ingressIP(*svc) != "", nil
	})
	if err != nil {
		t.Fatalf("Service %s has no ingress IP after %s (status %+v): %v", osLBService, timeout, svc.Status, err)
	}
	return svc
}

// osLoadBalancer returns the one load balancer named osLBName.
func osLoadBalancer(cloud *emulator.Emulator) (emulator.Balancer, error) {
	var found []emulator.Balancer
	for _, lb := range cloud.LoadBalancers() {
		if lb.Name == osLBName {
			found = append(found, lb)
		}
	}
	if len(found) != 1 {
		return emulator.Balancer{}, fmt.Errorf("%d load balancers named %s, want 1", len(found), osLBName)
	}
	return found[0], nil
}

// poolMembers lists the members of the load balancer's pools as
// name@address:port, sorted.
func poolMembers(lb emulator.Balancer) []string {
	var out []string
	for _, p := range lb.Pools {
		for _, m := range p.Members {
			out = append(out, fmt.Sprintf("%s@%s:%d", m.Name, m.Address, m.ProtocolPort))
		}
	}
	slices.Sort(out)
	return out
}

// nodeMembers lists what the pool members of the named Nodes are, in
// poolMembers' form: each Node's InternalIP and the Service's NodePort.
func nodeMembers(ctx context.Context, cp *harness.ControlPlane, nodePort int32, names ...string) ([]string, error) {
	var out []string
	for _, name := range names {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(n.Status.Addresses, func(a v1.NodeAddress) bool { return a.Type == v1.NodeInternalIP })
		if i < 0 {
			return nil, fmt.Errorf("node %s has no InternalIP", name)
		}
		out = append(out, fmt.Sprintf("%s@%s:%d", name, n.Status.Addresses[i].Address, nodePort))
	}
	slices.Sort(out)
	return out, nil
}

// waitMembers waits until the pool members of the Service's load balancer
// are the named Nodes.
func waitMembers(t *testing.T, cloud *emulator.Emulator, cp *harness.ControlPlane, svc *v1.Service, names ...string) {
	t.Helper()
	var got, want []string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if want, err = nodeMembers(ctx, cp, svc.Spec.Ports[0].NodePort, names...); err != nil {
			return false, err
		}
		lb, err := osLoadBalancer(cloud)
		if err != nil {
			return false, err
		}
		got = poolMembers(lb)
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("pool members %v, want %v: %v", got, want, err)
	}
}

// checkFloatingIP checks that the load balancer's VIP port, held by
// Octavia, carries the one floating IP, which is the Service's ingress IP
// and comes from the external network.
func checkFloatingIP(t *testing.T, cloud *emulator.Emulator, svc *v1.Service) emulator.Balancer {
	t.Helper()
	lb, err := osLoadBalancer(cloud)
	if err != nil {
		t.Fatal(err)
	}
	if port, ok := cloud.Port(lb.VIPPortID); !ok || port.DeviceOwner != emulator.DeviceOwnerOctavia {
		t.Errorf("VIP port %s of the load balancer: %+v, %v; want one owned by Octavia", lb.VIPPortID, port, ok)
	}
	fips := cloud.FloatingIPs()
	if len(fips) != 1 {
		t.Fatalf("floating IPs %+v, want one", fips)
	}
	fip := fips[0]
	addr, err := netip.ParseAddr(fip.FloatingIPAddress)
	if err != nil || !floatingCIDR.Contains(addr) {
		t.Errorf("floating IP %q is not from the external network's %s", fip.FloatingIPAddress, floatingCIDR)
	}
	if fip.PortID != lb.VIPPortID || fip.FixedIPAddress != lb.VIPAddress {
		t.Errorf("floating IP %s is on port %s (%s), want the VIP port %s (%s)", fip.FloatingIPAddress, fip.PortID, fip.FixedIPAddress, lb.VIPPortID, lb.VIPAddress)
	}
	if ip := ingressIP(*svc); ip != fip.FloatingIPAddress {
		t.Errorf("Service ingress IP %q, want the floating IP %s", ip, fip.FloatingIPAddress)
	}
	return lb
}

// TestOpenStackLoadBalancer runs the binary with --cloud-provider=openstack
// against the emulator: a LoadBalancer Service gets an Octavia load
// balancer whose pool members are the Nodes, initialised from Nova, and a
// floating IP as its address; the members follow a Node added and a Node
// whose server is deleted; deleting the Service leaves nothing in the
// cloud, and the Service goes only once its finalizer is gone. Routes to
// the Nodes' pod CIDRs, on a Neutron without the atomic route actions,
// follow the same Nodes.
func TestOpenStackLoadBalancer(t *testing.T) {
	ctx := t.Context()
	// Without extraroute-atomic the provider rewrites the router's routes,
	// guarded by its revision, while the route controller creates routes
	// concurrently.
	cloud := openstackEmulator(t, emulator.Options{NetworkExtensions: emulator.NetworkExtensionsWithout("extraroute-atomic")})
	router := addOSRouter(t, cloud, addLBNetworks(t, cloud))
	conf := openstackConf(t, cloud, "[LoadBalancer]", "create-monitor = true", "[Route]", "router-id = "+router.ID)
	cp := harness.StartControlPlane(t)
	servers := map[string]emulator.Server{}
	var routes []osRoute
	for i := range 2 {
		name, addr, podCIDR := fmt.Sprintf("os-node-%d", i), fmt.Sprintf("10.0.0.%d", 10+i), fmt.Sprintf("10.244.%d.0/24", i)
		servers[name] = addOpenStackNode(t, cloud, cp, name, addr, podCIDR)
		routes = append(routes, osRoute{node: name, podCIDR: podCIDR, nextHop: addr})
	}
	startOpenStackCCM(t, cp, conf, osRouteFlags...)
	for name := range servers {
		waitNode(t, cp, name, "initialised from Nova", initialised)
	}

	start := time.Now()
	createOSService(t, cp)
	svc := waitOSIngress(t, cp, 30*time.Second)
	t.Logf("the Service got its floating IP in %s", time.Since(start).Round(time.Millisecond))
	if !slices.Contains(svc.Finalizers, lbFinalizer) {
		t.Errorf("Service finalizers %v, want %s", svc.Finalizers, lbFinalizer)
	}
	lb := checkFloatingIP(t, cloud, svc)
	if lb.ProvisioningStatus != emulator.StatusActive {
		t.Errorf("load balancer %s is %s, want ACTIVE", lb.ID, lb.ProvisioningStatus)
	}
	if len(lb.Listeners) != 1 || lb.Listeners[0].Protocol != "TCP" || lb.Listeners[0].ProtocolPort != 80 {
		t.Errorf("listeners %+v, want one of TCP port 80", lb.Listeners)
	}
	if len(lb.Pools) != 1 || lb.Pools[0].HealthMonitor == nil || lb.Pools[0].HealthMonitor.Type != "TCP" {
		t.Errorf("pools %+v, want one with a TCP health monitor", lb.Pools)
	}
	waitMembers(t, cloud, cp, svc, "os-node-0", "os-node-1")
	waitOSRoutes(t, cloud, cp, router.ID, routes...)

	servers["os-node-2"] = addOpenStackNode(t, cloud, cp, "os-node-2", "10.0.0.12", "10.244.2.0/24")
	routes = append(routes, osRoute{node: "os-node-2", podCIDR: "10.244.2.0/24", nextHop: "10.0.0.12"})
	waitNode(t, cp, "os-node-2", "initialised from Nova", initialised)
	waitMembers(t, cloud, cp, svc, "os-node-0", "os-node-1", "os-node-2")
	waitOSRoutes(t, cloud, cp, router.ID, routes...)

	// The route to a Node whose server is deleted, and with it its port,
	// goes with the Node.
	if err := cloud.DeleteServer(servers["os-node-0"].ID); err != nil {
		t.Fatal(err)
	}
	waitNodeGone(t, cp, "os-node-0")
	waitMembers(t, cloud, cp, svc, "os-node-1", "os-node-2")
	waitOSRoutes(t, cloud, cp, router.ID, routes[1:]...)

	start = time.Now()
	if err := cp.Client.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, osLBService, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *v1.Service
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		svc, err := getOSService(ctx, cp)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		last = svc
		return false, err
	})
	if err != nil {
		t.Fatalf("the deleted Service is still there (finalizers %v): %v", last.Finalizers, err)
	}
	t.Logf("the Service and its load balancer were deleted in %s", time.Since(start).Round(time.Millisecond))
	// The finalizer goes only once the load balancer is deleted: the cloud
	// is clean the moment the Service is gone.
	if lbs := cloud.LoadBalancers(); len(lbs) != 0 {
		t.Errorf("load balancers left: %+v", lbs)
	}
	if l := cloud.Listeners(); len(l) != 0 {
		t.Errorf("listeners left: %+v", l)
	}
	if p := cloud.Pools(); len(p) != 0 {
		t.Errorf("pools left: %+v", p)
	}
	if m := cloud.HealthMonitors(); len(m) != 0 {
		t.Errorf("health monitors left: %+v", m)
	}
	for _, p := range cloud.Ports() {
		if p.DeviceOwner == emulator.DeviceOwnerOctavia {
			t.Errorf("Octavia VIP port left: %+v", p)
		}
	}
	if f := cloud.FloatingIPs(); len(f) != 0 {
		t.Errorf("floating IPs left: %+v", f)
	}
}

// Series of the CCM's /metrics that show the guard releasing a worker from
// a hung EnsureLoadBalancer and ending the call at its deadline.
const (
	osEnsureDetached = `cloudprovider_api_requests_total{method="EnsureLoadBalancer",provider="openstack",result="detached"}`
	osEnsureTimeout  = `cloudprovider_api_requests_total{method="EnsureLoadBalancer",provider="openstack",result="timeout"}`
)

// TestOpenStackOctaviaHang: Octavia accepts requests and never answers.
// Meanwhile a new Node is initialised from Nova, every Node (the new one
// too) gets its route on the Neutron router, its pod CIDR as an allowed
// address pair of its port and NetworkUnavailable=False, the CCM stays
// healthy, and the hung EnsureLoadBalancer of a Service created during
// the hang releases its worker and ends at its deadline. Once Octavia
// answers again, the Service gets its floating IP, with the Node added
// during the hang among the members. Deleting a Node then takes its route
// off the router and its pod CIDR off its server's port.
func TestOpenStackOctaviaHang(t *testing.T) {
	ctx := t.Context()
	cloud := openstackEmulator(t, emulator.Options{})
	router := addOSRouter(t, cloud, addLBNetworks(t, cloud))
	conf := openstackConf(t, cloud, "[Route]", "router-id = "+router.ID)
	cp := harness.StartControlPlane(t)
	routes := []osRoute{
		{node: "os-node-0", podCIDR: "10.244.0.0/24", nextHop: "10.0.0.10"},
		{node: "os-node-1", podCIDR: "10.244.1.0/24", nextHop: "10.0.0.11"},
	}
	addOpenStackNode(t, cloud, cp, routes[0].node, routes[0].nextHop, routes[0].podCIDR)
	// The deadline leaves room for a create (the provider reads a new load
	// balancer a second after it asked for it) and is short, so that the
	// hung calls end soon: one for each node set the Service sees during
	// the hang, as a call with other nodes does not take a kept result.
	// The retry then comes after the first back-off of a failure (5s).
	// The Node added during the hang is routed well before the first hung
	// call's deadline.
	ccm := startOpenStackCCM(t, cp, conf, append(slices.Clone(osRouteFlags),
		"--cloud-call-detach-after=500ms", "--cloud-call-timeout=4s", "--cloud-lb-call-timeout=4s")...)
	waitNode(t, cp, "os-node-0", "initialised from Nova", initialised)
	token := cp.MetricsToken(ctx, t)

	hang := cloud.AddFault(emulator.Fault{Service: emulator.LoadBalancer, Hang: true})
	hungAt := time.Now()
	createOSService(t, cp)
	addOpenStackNode(t, cloud, cp, routes[1].node, routes[1].nextHop, routes[1].podCIDR)

	var (
		sawHung           bool
		node              *v1.Node
		detached, timeout float64
		routed            bool
		routesErr         error
	)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if status, body, err := ccm.Get(ctx, "/healthz", ""); err != nil || status != http.StatusOK {
			return false, fmt.Errorf("GET /healthz while Octavia hangs = %d %q, %w", status, body, err)
		}
		svc, err := getOSService(ctx, cp)
		if err != nil {
			return false, err
		}
		if ip := ingressIP(*svc); ip != "" {
			return false, fmt.Errorf("Service has ingress IP %s while Octavia hangs", ip)
		}
		sawHung = sawHung || cloud.Hung() > 0
		if node, err = cp.Client.CoreV1().Nodes().Get(ctx, "os-node-1", metav1.GetOptions{}); err != nil {
			return false, err
		}
		// The routes are read before the metrics: routes that waited on
		// the hung Octavia would come only once its first call ended.
		routesErr = checkOSRoutes(ctx, cloud, cp, router.ID, routes...)
		routed = routed || routesErr == nil
		status, body, err := ccm.Get(ctx, "/metrics", token)
		if err != nil || status != http.StatusOK {
			return false, fmt.Errorf("GET /metrics: %d, %w", status, err)
		}
		detached, timeout = metricValue(body, osEnsureDetached), metricValue(body, osEnsureTimeout)
		if timeout >= 1 && !routed {
			return false, fmt.Errorf("the Nodes were not routed (%w) when the first hung EnsureLoadBalancer reached its deadline, %s into the hang", routesErr, time.Since(hungAt).Round(time.Millisecond))
		}
		return sawHung && initialised(node) && detached >= 1 && timeout >= 1, nil
	})
	if err != nil {
		t.Fatalf("while Octavia hangs (a request held: %v, os-node-1 initialised: %v, EnsureLoadBalancer detached %v and timed out %v times, routes: %v): %v",
			sawHung, node != nil && initialised(node), detached, timeout, routesErr, err)
	}
	t.Logf("a Node was initialised and routed, and a hung EnsureLoadBalancer timed out %s into the hang", time.Since(hungAt).Round(time.Millisecond))
	if status, body, err := ccm.Get(ctx, "/readyz", ""); err != nil || status != http.StatusOK {
		t.Errorf("GET /readyz while Octavia hangs = %d %q, %v; want 200", status, body, err)
	}

	cloud.RemoveFault(hang)
	start := time.Now()
	svc := waitOSIngress(t, cp, 30*time.Second)
	t.Logf("the Service got its floating IP %s after Octavia answered again", time.Since(start).Round(time.Millisecond))
	checkFloatingIP(t, cloud, svc)
	waitMembers(t, cloud, cp, svc, "os-node-0", "os-node-1")

	// The server of the deleted Node stays, and so does its port.
	start = time.Now()
	if err := cp.Client.CoreV1().Nodes().Delete(ctx, routes[1].node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitOSRoutes(t, cloud, cp, router.ID, routes[0])
	t.Logf("the route of a deleted Node was deleted in %s", time.Since(start).Round(time.Millisecond))
}
