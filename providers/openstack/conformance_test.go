package openstack

import (
	"context"
	"fmt"
	"sync"
	"testing"

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

// The emulator has no Octavia and the provider no LoadBalancer yet: the
// suite skips the load-balancer tests, and the cloud has nothing to show.

func (c *control) LoadBalancers(context.Context) ([]string, error) { return nil, nil }

func (c *control) Members(context.Context, *v1.Service) ([]string, error) { return nil, nil }

func (c *control) Addresses(context.Context) ([]string, error) { return nil, nil }

func TestConformance(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	p := newTestProvider(t, c.conf())
	providertest.Run(t, providertest.Suite{Provider: p, Cloud: &control{e: c.Emulator}})
}
