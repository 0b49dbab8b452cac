package openstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
)

// routeCloud is a testCloud with the networks of addLBNetworks, a router
// with an interface on the private subnet, and two servers on it.
type routeCloud struct {
	*testCloud
	nets   lbNetworks
	router emulator.Router
}

// routePaths are the two ways of changing a router's routes.
var routePaths = []struct {
	name       string
	extensions []string
}{
	{name: "atomic"},
	{name: "revision", extensions: emulator.NetworkExtensionsWithout("extraroute-atomic")},
}

func newRouteCloud(t *testing.T, extensions []string) *routeCloud {
	t.Helper()
	c := &routeCloud{testCloud: newTestCloud(t, emulator.Options{NetworkExtensions: extensions})}
	c.nets = c.addLBNetworks(t)
	var err error
	if c.router, err = c.AddRouter(emulator.Router{Name: "cluster", InterfaceSubnets: []string{c.nets.privateSubnet.ID}}); err != nil {
		t.Fatal(err)
	}
	c.addServer(t, emulator.Server{Name: "node-1", Addresses: map[string][]emulator.Address{"private": {{Addr: "10.0.0.11"}}}})
	c.addServer(t, emulator.Server{Name: "node-2", Addresses: map[string][]emulator.Address{"private": {{Addr: "10.0.0.12"}}}})
	return c
}

// routes returns the Routes of a new provider of the cloud.
func (c *routeCloud) routes(t *testing.T) *routes {
	t.Helper()
	p := newTestProvider(t, c.conf("[Route]", "router-id = "+c.router.ID))
	r, ok := p.Routes()
	if !ok {
		t.Fatal("no Routes with [Route] router-id")
	}
	rt := r.(*routes)
	rt.retryDelay = time.Millisecond
	return rt
}

// table is the router's routes as "destination>nexthop", sorted.
func (c *routeCloud) table(t *testing.T) []string {
	t.Helper()
	r, ok := c.Router(c.router.ID)
	if !ok {
		t.Fatal("the router is gone")
	}
	var out []string
	for _, rt := range r.Routes {
		out = append(out, rt.Destination+">"+rt.NextHop)
	}
	slices.Sort(out)
	return out
}

// pairs are the allowed address pairs of the port holding addr.
func (c *routeCloud) pairs(t *testing.T, addr string) []string {
	t.Helper()
	for _, p := range c.Ports() {
		if slices.ContainsFunc(p.FixedIPs, func(f emulator.FixedIP) bool { return f.IPAddress == addr }) {
			var out []string
			for _, a := range p.AllowedAddressPairs {
				out = append(out, a.IPAddress)
			}
			slices.Sort(out)
			return out
		}
	}
	t.Fatalf("no port holds %s", addr)
	return nil
}

// count counts the Neutron requests of a method whose path ends with
// suffix and that were answered with status (any when 0).
func (c *routeCloud) count(method, suffix string, status int) int {
	n := 0
	for _, r := range c.Requests(emulator.Network) {
		if r.Method == method && strings.HasSuffix(r.Path, suffix) && (status == 0 || r.Status == status) {
			n++
		}
	}
	return n
}

func routeTo(nodeName, addr, cidr string) *cloudprovider.Route {
	r := &cloudprovider.Route{TargetNode: types.NodeName(nodeName), DestinationCIDR: cidr}
	if addr != "" {
		r.TargetNodeAddresses = []v1.NodeAddress{{Type: v1.NodeExternalIP, Address: "172.24.4.50"}, {Type: v1.NodeInternalIP, Address: addr}}
	}
	return r
}

func listed(ctx context.Context, t *testing.T, r *routes) []string {
	t.Helper()
	list, err := r.ListRoutes(ctx, "kubernetes")
	if err != nil {
		t.Fatalf("ListRoutes: %v", err)
	}
	var out []string
	for _, rt := range list {
		out = append(out, fmt.Sprintf("%s>%s blackhole=%v", rt.DestinationCIDR, rt.TargetNode, rt.Blackhole))
	}
	return out
}

func TestRoutesOfferedWithARouter(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	if _, ok := newTestProvider(t, c.conf()).Routes(); ok {
		t.Error("Routes offered without [Route] router-id")
	}
	if r, ok := newTestProvider(t, c.conf("[Route]", "router-id = r-1")).Routes(); !ok || r == nil {
		t.Error("Routes not offered with [Route] router-id")
	}
	if n := len(c.Requests()); n != 0 {
		t.Errorf("building the providers sent %d requests", n)
	}
}

// TestRoutes: a route is created (to a Node's InternalIP from the route,
// or looked up by the Node's name), listed with its Node, created again
// as a no-op, and deleted, twice; the Node's port gets the destination as
// an allowed address pair and loses it again. Each path reads Neutron's
// extensions once.
func TestRoutes(t *testing.T) {
	for _, tt := range routePaths {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			c := newRouteCloud(t, tt.extensions)
			r := c.routes(t)

			one := routeTo("node-1", "10.0.0.11", "10.244.1.0/24")
			two := routeTo("node-2", "", "10.244.2.0/24") // looked up by name
			for _, rt := range []*cloudprovider.Route{one, two, one} {
				if err := r.CreateRoute(ctx, "kubernetes", "uid", rt); err != nil {
					t.Fatalf("CreateRoute(%s): %v", rt.DestinationCIDR, err)
				}
			}
			if got, want := c.table(t), []string{"10.244.1.0/24>10.0.0.11", "10.244.2.0/24>10.0.0.12"}; !slices.Equal(got, want) {
				t.Errorf("router's routes = %v, want %v", got, want)
			}
			if got := c.pairs(t, "10.0.0.11"); !slices.Equal(got, []string{"10.244.1.0/24"}) {
				t.Errorf("pairs of node-1's port = %v, want [10.244.1.0/24]", got)
			}
			if got := c.pairs(t, "10.0.0.12"); !slices.Equal(got, []string{"10.244.2.0/24"}) {
				t.Errorf("pairs of node-2's port = %v, want [10.244.2.0/24]", got)
			}
			revision := func() int { rt, _ := c.Router(c.router.ID); return rt.RevisionNumber }
			before := revision()
			if err := r.CreateRoute(ctx, "kubernetes", "uid", one); err != nil {
				t.Fatalf("CreateRoute again: %v", err)
			}
			if after := revision(); after != before {
				t.Errorf("creating an existing route changed the router: revision %d, then %d", before, after)
			}
			atomic, rewrites := c.count(http.MethodPut, "/add_extraroutes", 0), c.count(http.MethodPut, "routers/"+c.router.ID, 0)
			if tt.extensions == nil && (atomic == 0 || rewrites != 0) {
				t.Errorf("with extraroute-atomic: %d add_extraroutes, %d rewrites of the router; want only add_extraroutes", atomic, rewrites)
			}
			if tt.extensions != nil && (atomic != 0 || rewrites != 2) {
				t.Errorf("without extraroute-atomic: %d add_extraroutes, %d rewrites of the router; want 2 rewrites", atomic, rewrites)
			}

			list, err := r.ListRoutes(ctx, "kubernetes")
			if err != nil {
				t.Fatalf("ListRoutes: %v", err)
			}
			if len(list) != 2 || list[0].TargetNode != "node-1" || list[0].DestinationCIDR != "10.244.1.0/24" || list[0].Blackhole ||
				list[1].TargetNode != "node-2" || list[1].Name != "10.244.2.0/24 via 10.0.0.12" {
				t.Errorf("ListRoutes = %+v %+v", list[0], list[1])
			}
			if !slices.ContainsFunc(list[0].TargetNodeAddresses, func(a v1.NodeAddress) bool {
				return a.Type == v1.NodeInternalIP && a.Address == "10.0.0.11"
			}) {
				t.Errorf("node-1's route has addresses %v, want its InternalIP 10.0.0.11", list[0].TargetNodeAddresses)
			}

			// As the route controller deletes: the listed route.
			for range 2 {
				if err := r.DeleteRoute(ctx, "kubernetes", list[0]); err != nil {
					t.Fatalf("DeleteRoute: %v", err)
				}
			}
			if got, want := c.table(t), []string{"10.244.2.0/24>10.0.0.12"}; !slices.Equal(got, want) {
				t.Errorf("router's routes after DeleteRoute = %v, want %v", got, want)
			}
			if got := c.pairs(t, "10.0.0.11"); len(got) != 0 {
				t.Errorf("pairs of node-1's port after DeleteRoute = %v, want none", got)
			}
			// A route built from the Node alone, without a name.
			if err := r.DeleteRoute(ctx, "kubernetes", routeTo("node-2", "", "10.244.2.0/24")); err != nil {
				t.Fatalf("DeleteRoute by Node: %v", err)
			}
			if got := c.table(t); len(got) != 0 {
				t.Errorf("router's routes after deleting both = %v, want none", got)
			}
			if got := c.pairs(t, "10.0.0.12"); len(got) != 0 {
				t.Errorf("pairs of node-2's port after DeleteRoute = %v, want none", got)
			}
			// A route taken off the router by someone else: DeleteRoute
			// still takes its pair off the port.
			if err := r.CreateRoute(ctx, "kubernetes", "uid", one); err != nil {
				t.Fatalf("CreateRoute: %v", err)
			}
			if err := c.UpdateRouter(c.router.ID, func(rt *emulator.Router) { rt.Routes = nil }); err != nil {
				t.Fatal(err)
			}
			if err := r.DeleteRoute(ctx, "kubernetes", &cloudprovider.Route{Name: "10.244.1.0/24 via 10.0.0.11", DestinationCIDR: "10.244.1.0/24"}); err != nil {
				t.Fatalf("DeleteRoute of a route the router lacks: %v", err)
			}
			if got := c.pairs(t, "10.0.0.11"); len(got) != 0 {
				t.Errorf("pairs of node-1's port after DeleteRoute of a route the router lacked = %v, want none", got)
			}
			if n := c.count(http.MethodGet, "v2.0/extensions", 0); n != 1 {
				t.Errorf("Neutron's extensions were listed %d times, want once", n)
			}
		})
	}
}

// TestRoutesBlackhole: a route whose next hop is no server's address, or
// the address of a server that is gone, is a blackhole; DeleteRoute of
// the listed route removes it though the Node's port is gone.
func TestRoutesBlackhole(t *testing.T) {
	for _, tt := range routePaths {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			c := newRouteCloud(t, tt.extensions)
			c.addServer(t, emulator.Server{Name: "Node-3", Addresses: map[string][]emulator.Address{"private": {{Addr: "10.0.0.13"}}}})
			if err := c.UpdateRouter(c.router.ID, func(r *emulator.Router) {
				r.Routes = append(r.Routes, emulator.Route{Destination: "10.244.9.0/24", NextHop: "10.0.0.99"})
			}); err != nil {
				t.Fatal(err)
			}
			r := c.routes(t)
			for _, rt := range []*cloudprovider.Route{routeTo("node-2", "10.0.0.12", "10.244.2.0/24"), routeTo("node-3", "10.0.0.13", "10.244.3.0/24")} {
				if err := r.CreateRoute(ctx, "kubernetes", "uid", rt); err != nil {
					t.Fatal(err)
				}
			}
			want := []string{"10.244.2.0/24>node-2 blackhole=false", "10.244.3.0/24>node-3 blackhole=false", "10.244.9.0/24> blackhole=true"}
			if got := listed(ctx, t, r); !slices.Equal(got, want) {
				t.Errorf("ListRoutes = %v, want %v", got, want)
			}

			server := c.ServersNamed("node-2")[0]
			if err := c.DeleteServer(server.ID); err != nil {
				t.Fatal(err)
			}
			list, err := r.ListRoutes(ctx, "kubernetes")
			if err != nil {
				t.Fatal(err)
			}
			want = []string{"10.244.2.0/24> blackhole=true", "10.244.3.0/24>node-3 blackhole=false", "10.244.9.0/24> blackhole=true"}
			if got := listed(ctx, t, r); !slices.Equal(got, want) {
				t.Errorf("ListRoutes after node-2's server is gone = %v, want %v", got, want)
			}
			for _, rt := range list {
				if rt.Blackhole {
					if err := r.DeleteRoute(ctx, "kubernetes", rt); err != nil {
						t.Errorf("DeleteRoute(%s): %v", rt.Name, err)
					}
				}
			}
			if got, want := c.table(t), []string{"10.244.3.0/24>10.0.0.13"}; !slices.Equal(got, want) {
				t.Errorf("router's routes = %v, want %v", got, want)
			}
		})
	}
}

// TestRoutesConcurrentRewrites: without extraroute-atomic, two providers
// (two CCMs, or a CCM and an operator's script) add routes to one router
// at once. Neutron refuses the writes of the one that read the router
// before the other wrote it (412), and it reads again: no route is lost.
// The pairs of the nodes' ports, which both change, survive likewise.
func TestRoutesConcurrentRewrites(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newRouteCloud(t, emulator.NetworkExtensionsWithout("extraroute-atomic"))
	providers := []*routes{c.routes(t), c.routes(t)}
	for _, r := range providers {
		// Connected, with the extensions read, both start at once.
		_, nc, err := r.clients(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.extensions(ctx, nc); err != nil {
			t.Fatal(err)
		}
	}
	// Writes of the router take a while (the delay comes before the
	// write), so that one provider reads the router while the other's
	// write is on its way.
	c.AddFault(emulator.Fault{Service: emulator.Network, Method: http.MethodPut, Path: "v2.0/routers/", Latency: 10 * time.Millisecond})
	const perProvider = 6
	start := make(chan struct{})
	errs := make(chan error, 2*perProvider)
	var wg sync.WaitGroup
	var want []string
	for p, r := range providers {
		for i := range perProvider {
			n := p*perProvider + i
			node, addr := "node-1", "10.0.0.11"
			if n%2 == 1 {
				node, addr = "node-2", "10.0.0.12"
			}
			cidr := fmt.Sprintf("10.244.%d.0/24", n)
			want = append(want, cidr+">"+addr)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- r.CreateRoute(ctx, "kubernetes", "uid", routeTo(node, addr, cidr))
			}()
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("CreateRoute: %v", err)
		}
	}
	slices.Sort(want)
	if got := c.table(t); !slices.Equal(got, want) {
		t.Errorf("router's routes = %v,\nwant %v", got, want)
	}
	for _, addr := range []string{"10.0.0.11", "10.0.0.12"} {
		if got := c.pairs(t, addr); len(got) != perProvider {
			t.Errorf("pairs of the port of %s = %v, want %d", addr, got, perProvider)
		}
	}
	if n := c.count(http.MethodPut, "routers/"+c.router.ID, http.StatusPreconditionFailed); n == 0 {
		t.Error("no write of the router was refused: the providers never collided, the test tests nothing")
	}
}

// TestRoutesRetryOnPreconditionFailed: a write refused with 412 is made
// again on a fresh read; one refused every time ends, after the attempts,
// in a retry-after error.
func TestRoutesRetryOnPreconditionFailed(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newRouteCloud(t, emulator.NetworkExtensionsWithout("extraroute-atomic"))
	r := c.routes(t)
	r.attempts = 3
	c.AddFault(emulator.Fault{Service: emulator.Network, Method: http.MethodPut, Path: "v2.0/routers/", Status: http.StatusPreconditionFailed, Count: 1})
	if err := r.CreateRoute(ctx, "kubernetes", "uid", routeTo("node-1", "10.0.0.11", "10.244.1.0/24")); err != nil {
		t.Fatalf("CreateRoute after one 412: %v", err)
	}
	if got := c.table(t); !slices.Equal(got, []string{"10.244.1.0/24>10.0.0.11"}) {
		t.Errorf("router's routes = %v", got)
	}
	if n := c.count(http.MethodGet, "routers/"+c.router.ID, 0); n != 2 {
		t.Errorf("the router was read %d times, want 2 (once more after the 412)", n)
	}

	c.AddFault(emulator.Fault{Service: emulator.Network, Method: http.MethodPut, Path: "v2.0/routers/", Status: http.StatusPreconditionFailed})
	err := r.CreateRoute(ctx, "kubernetes", "uid", routeTo("node-2", "10.0.0.12", "10.244.2.0/24"))
	var retry *api.RetryError
	if !errors.As(err, &retry) {
		t.Errorf("CreateRoute refused every time = %v, want a RetryError", err)
	}
	if n := c.count(http.MethodPut, "routers/"+c.router.ID, http.StatusPreconditionFailed); n != 1+3 {
		t.Errorf("%d writes refused, want 4 (1, then 3 attempts)", n)
	}
}

// TestRoutesHonourContext: a Neutron that hangs holds a call no longer
// than its context.
func TestRoutesHonourContext(t *testing.T) {
	for _, tt := range routePaths {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			c := newRouteCloud(t, tt.extensions)
			r := c.routes(t)
			if _, err := r.ListRoutes(ctx, "kubernetes"); err != nil {
				t.Fatal(err) // connected, extensions not read yet
			}
			c.AddFault(emulator.Fault{Service: emulator.Network, Hang: true})
			for name, call := range map[string]func(context.Context) error{
				"ListRoutes": func(ctx context.Context) error { _, err := r.ListRoutes(ctx, "kubernetes"); return err },
				"CreateRoute": func(ctx context.Context) error {
					return r.CreateRoute(ctx, "kubernetes", "uid", routeTo("node-1", "10.0.0.11", "10.244.1.0/24"))
				},
				"DeleteRoute": func(ctx context.Context) error {
					return r.DeleteRoute(ctx, "kubernetes", routeTo("node-1", "10.0.0.11", "10.244.1.0/24"))
				},
			} {
				callCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				err := call(callCtx)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s on a hung Neutron = %v, want the context's deadline", name, err)
				}
			}
		})
	}
}
