package openstack

import (
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
)

// TestLongLoadBalancerNamesAreRefused: a Service whose load-balancer name
// would be cut to Octavia's 255 characters is refused before anything is
// made, so two Services can never share a cut name; a short one is made.
func TestLongLoadBalancerNamesAreRefused(t *testing.T) {
	lt := newLBTest(t, emulator.Options{})
	long := strings.Repeat("c", 180)
	a, b := service(strings.Repeat("a", 62)+"1"), service(strings.Repeat("a", 62)+"2")
	if loadBalancerName(long, a) != loadBalancerName(long, b) {
		t.Fatal("the test's two Services do not share a cut name")
	}
	for _, svc := range []*v1.Service{a, b} {
		_, err := lt.lb.EnsureLoadBalancer(lt.ctx, long, svc, lt.nodes)
		if err == nil || !strings.Contains(err.Error(), "--cluster-name") {
			t.Errorf("Service %s: error = %v, want one naming --cluster-name", svc.Name, err)
		}
	}
	if got := lt.mutations(); len(got) != 0 {
		t.Errorf("refused Services changed %v", got)
	}
	if _, err := lt.lb.EnsureLoadBalancer(lt.ctx, long, service("web"), lt.nodes); err != nil {
		t.Errorf("a Service whose name fits: %v", err)
	}
}

// TestAnotherServicesLoadBalancerIsNotAdopted: a load balancer under the
// Service's name whose description, in ccmkit's or upstream's words, names
// another Service is neither changed, nor reported, nor deleted; one that
// upstream made for the same Service is adopted.
func TestAnotherServicesLoadBalancerIsNotAdopted(t *testing.T) {
	for _, desc := range []string{
		lbDescription(testCluster, service("other")),
		upstreamLBDescription(testCluster, service("other")),
		upstreamLBDescription("another-cluster", service("web")),
	} {
		t.Run(desc, func(t *testing.T) {
			lt := newLBTest(t, emulator.Options{})
			web := service("web")
			foreign := lt.createLB(t, loadBalancerName(testCluster, web), desc)
			lt.ResetRequests()

			_, err := lt.lb.EnsureLoadBalancer(lt.ctx, testCluster, web, lt.nodes)
			if err == nil || !strings.Contains(err.Error(), "is not Service default/web's") {
				t.Errorf("Ensure: error = %v, want a refusal", err)
			}
			if err := lt.lb.UpdateLoadBalancer(lt.ctx, testCluster, web, lt.nodes); err == nil {
				t.Error("Update: no error")
			}
			if st, exists, err := lt.lb.GetLoadBalancer(lt.ctx, testCluster, web); err != nil || exists || st != nil {
				t.Errorf("Get = %+v, %v, %v; want not found", st, exists, err)
			}
			if err := lt.lb.EnsureLoadBalancerDeleted(lt.ctx, testCluster, web); err != nil {
				t.Errorf("Delete: %v", err)
			}
			if got := lt.mutations(); len(got) != 0 {
				t.Errorf("another Service's load balancer was changed: %v", got)
			}
			if lb := lt.only(t); lb.ID != foreign {
				t.Errorf("the load balancer in the cloud is %s, want the other Service's %s", lb.ID, foreign)
			}
		})
	}

	lt := newLBTest(t, emulator.Options{})
	web := service("web")
	adopted := lt.createLB(t, loadBalancerName(testCluster, web), upstreamLBDescription(testCluster, web))
	lt.ensure(t, web, lt.nodes)
	if lb := lt.only(t); lb.ID != adopted {
		t.Errorf("upstream's load balancer of the same Service was not adopted: %s in the cloud, want %s", lb.ID, adopted)
	}
}

// createLB makes a load balancer with no children, as another controller
// would have, and waits until it is ACTIVE.
func (lt *lbTest) createLB(t *testing.T, name, description string) string {
	t.Helper()
	oc, _, err := lt.lb.services(lt.ctx)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := loadbalancers.Create(lt.ctx, oc, loadbalancers.CreateOpts{Name: name, Description: description, VipSubnetID: lt.nets.privateSubnet.ID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lt.lb.waitActive(lt.ctx, oc, lb.ID); err != nil {
		t.Fatal(err)
	}
	return lb.ID
}
