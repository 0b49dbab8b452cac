package openstack

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
	"github.com/ccmkit/ccmkit/providers/providertest"
)

// control is the conformance suite's view of the emulated cloud.
type control struct {
	e *emulator.Emulator

	mu   sync.Mutex
	next int // the last octet of the next server's address
}

var _ providertest.Cloud = (*control)(nil)

func (c *control) AddInstance(_ context.Context, name string) (*v1.Node, error) {
	c.mu.Lock()
	c.next++
	addr := fmt.Sprintf("10.0.0.%d", 10+c.next)
	c.mu.Unlock()
	_, err := c.e.AddServer(emulator.Server{Name: name, Flavor: "m1.small", AvailabilityZone: "nova",
		Addresses: map[string][]emulator.Address{"private": {{Addr: addr}}}})
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, err
}

// server is the one server named name.
func (c *control) server(name string) (emulator.Server, error) {
	list := c.e.ServersNamed(name)
	if len(list) != 1 {
		return emulator.Server{}, fmt.Errorf("%d servers named %s", len(list), name)
	}
	return list[0], nil
}

func (c *control) StopInstance(_ context.Context, name string) error {
	s, err := c.server(name)
	if err != nil {
		return err
	}
	return c.e.SetStatus(s.ID, "SHUTOFF")
}

func (c *control) DeleteInstance(_ context.Context, name string) error {
	s, err := c.server(name)
	if err != nil {
		return err
	}
	return c.e.DeleteServer(s.ID)
}

// serviceOf is the namespace/name of the Service of a load balancer
// named kube_service_<cluster>_<namespace>_<name>: namespaces and names
// have no underscores.
func serviceOf(lb emulator.Balancer, clusterName string) string {
	rest, ok := strings.CutPrefix(lb.Name, "kube_service_"+clusterName+"_")
	if !ok {
		return "?" + lb.Name
	}
	return strings.Replace(rest, "_", "/", 1)
}

func (c *control) LoadBalancers(context.Context) ([]string, error) {
	var out []string
	for _, lb := range c.e.LoadBalancers() {
		out = append(out, serviceOf(lb, "kubernetes"))
	}
	return out, nil
}

// Members are the names of the members of the Service's load balancer's
// pools.
func (c *control) Members(_ context.Context, svc *v1.Service) ([]string, error) {
	var lbs []emulator.Balancer
	for _, lb := range c.e.LoadBalancers() {
		if serviceOf(lb, "kubernetes") == svc.Namespace+"/"+svc.Name {
			lbs = append(lbs, lb)
		}
	}
	if len(lbs) != 1 {
		return nil, fmt.Errorf("%d load balancers of %s/%s", len(lbs), svc.Namespace, svc.Name)
	}
	var out []string
	for _, p := range lbs[0].Pools {
		for _, m := range p.Members {
			if !slices.Contains(out, m.Name) {
				out = append(out, m.Name)
			}
		}
	}
	return out, nil
}

// Addresses are the load balancers' VIPs, the ports Octavia holds them
// on and the floating IPs.
func (c *control) Addresses(context.Context) ([]string, error) {
	var out []string
	for _, lb := range c.e.LoadBalancers() {
		out = append(out, "vip "+lb.VIPAddress)
	}
	for _, p := range c.e.Ports() {
		if p.DeviceOwner == emulator.DeviceOwnerOctavia {
			out = append(out, "vip port "+p.ID)
		}
	}
	for _, f := range c.e.FloatingIPs() {
		out = append(out, "floating IP "+f.FloatingIPAddress)
	}
	return out, nil
}

// TestConformance runs the suite with a config that names no subnet and
// no floating network: the VIP goes on the subnet of the nodes' ports and
// floating IPs come from the one external network. Routes go on a router
// with an interface on the nodes' subnet, with Neutron's atomic route
// changes and without them.
func TestConformance(t *testing.T) {
	for _, tt := range []struct {
		name       string
		extensions []string
	}{
		{name: "atomic routes"},
		{name: "routes by revision", extensions: emulator.NetworkExtensionsWithout("extraroute-atomic")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestCloud(t, emulator.Options{OctaviaDelay: 5 * time.Millisecond, NetworkExtensions: tt.extensions})
			n := c.addLBNetworks(t)
			router, err := c.AddRouter(emulator.Router{Name: "cluster", InterfaceSubnets: []string{n.privateSubnet.ID}})
			if err != nil {
				t.Fatal(err)
			}
			p := newTestProvider(t, c.conf("[Route]", "router-id = "+router.ID))
			providertest.Run(t, providertest.Suite{Provider: p, Cloud: &control{e: c.Emulator}})
		})
	}
}
