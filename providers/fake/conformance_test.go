package fake

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ccmkit/ccmkit/providers/providertest"
)

// control is the conformance suite's view of the fake cloud.
type control struct{ c *Cloud }

func (c control) AddInstance(_ context.Context, name string) (*v1.Node, error) {
	err := c.c.AddInstance(Instance{Name: name, Zone: "zone-a", Type: "fake.small",
		Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.9"}}})
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, err
}

func (c control) StopInstance(_ context.Context, name string) error {
	return c.c.SetInstanceState(name, StateStopped)
}

func (c control) DeleteInstance(_ context.Context, name string) error {
	c.c.DeleteInstance(name)
	return nil
}

func (c control) LoadBalancers(context.Context) ([]string, error) {
	var out []string
	for _, lb := range c.c.ListLoadBalancers() {
		out = append(out, lb.Service)
	}
	return out, nil
}

func (c control) Members(_ context.Context, svc *v1.Service) ([]string, error) {
	for _, lb := range c.c.ListLoadBalancers() {
		if lb.Service == svc.Namespace+"/"+svc.Name {
			return lb.Nodes, nil
		}
	}
	return nil, nil
}

func (c control) Addresses(context.Context) ([]string, error) { return c.c.AllocatedVIPs(), nil }

func TestConformance(t *testing.T) {
	c, err := New(&Config{LoadBalancers: LoadBalancerConfig{VIPCIDR: "192.0.2.0/24"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	providertest.Run(t, providertest.Suite{Provider: c, Cloud: control{c}})
}
