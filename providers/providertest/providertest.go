// Package providertest is the conformance suite of cloud providers: one set
// of tests, run against a provider and a small control of the cloud behind
// it, that checks what ccmkit's controllers rely on. Each provider's tests
// call Run. The load-balancer and route tests skip, saying so, when the
// provider does not offer LoadBalancer or Routes.
//
//	func TestConformance(t *testing.T) {
//		providertest.Run(t, providertest.Suite{Provider: p, Cloud: control})
//	}
package providertest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2/ktesting"
)

// Cloud controls and inspects the cloud behind the provider under test.
// The load-balancer methods are called only when the provider offers a
// LoadBalancer.
type Cloud interface {
	// AddInstance creates a running instance and returns the Node that the
	// kubelet of that instance registers (name, no providerID).
	AddInstance(ctx context.Context, name string) (*v1.Node, error)
	// StopInstance stops the instance; it still exists.
	StopInstance(ctx context.Context, name string) error
	// DeleteInstance deletes the instance.
	DeleteInstance(ctx context.Context, name string) error
	// LoadBalancers lists the load balancers in the cloud, each by the
	// namespace/name of its Service.
	LoadBalancers(ctx context.Context) ([]string, error)
	// Members lists the node names a Service's load balancer sends to.
	Members(ctx context.Context, svc *v1.Service) ([]string, error)
	// Addresses lists the load-balancer addresses allocated in the cloud
	// (VIPs, floating IPs), to show that deletes leak none.
	Addresses(ctx context.Context) ([]string, error)
}

// Suite is a provider and the control of its cloud.
type Suite struct {
	Provider cloudprovider.Interface
	Cloud    Cloud
	// ClusterName is passed to the provider; default "kubernetes".
	ClusterName string
	// PodCIDR returns the i-th pod CIDR for route tests; default
	// 10.244.i.0/24. Routes are skipped when the provider has none.
	PodCIDR func(i int) string
}

// Run runs every conformance test as a subtest.
func Run(t *testing.T, s Suite) {
	if s.ClusterName == "" {
		s.ClusterName = "kubernetes"
	}
	if s.PodCIDR == nil {
		s.PodCIDR = func(i int) string { return "10.244." + strconv.Itoa(i) + ".0/24" }
	}
	t.Run("Instances", s.testInstances)
	t.Run("LoadBalancer", s.testLoadBalancer)
	t.Run("Routes", s.testRoutes)
}

func (s Suite) testInstances(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	instances, ok := s.Provider.InstancesV2()
	if !ok {
		t.Fatal("the provider offers no InstancesV2")
	}
	node, err := s.Cloud.AddInstance(ctx, "conformance-a")
	if err != nil {
		t.Fatal(err)
	}

	md, err := instances.InstanceMetadata(ctx, node)
	if err != nil {
		t.Fatalf("InstanceMetadata of a running instance: %v", err)
	}
	if md.ProviderID == "" || len(md.NodeAddresses) == 0 {
		t.Errorf("metadata lacks a providerID or addresses: %+v", md)
	}
	// The Node as the cloud-node controller leaves it: with the providerID.
	initialised := node.DeepCopy()
	initialised.Spec.ProviderID = md.ProviderID
	initialised.Status.Addresses = md.NodeAddresses
	again, err := instances.InstanceMetadata(ctx, initialised)
	if err != nil || again.ProviderID != md.ProviderID {
		t.Errorf("InstanceMetadata by providerID = %+v, %v; want providerID %s", again, err, md.ProviderID)
	}
	if exists, err := instances.InstanceExists(ctx, initialised); err != nil || !exists {
		t.Errorf("InstanceExists(running) = %v, %v; want true", exists, err)
	}
	if off, err := instances.InstanceShutdown(ctx, initialised); err != nil || off {
		t.Errorf("InstanceShutdown(running) = %v, %v; want false", off, err)
	}

	if err := s.Cloud.StopInstance(ctx, node.Name); err != nil {
		t.Fatal(err)
	}
	if exists, err := instances.InstanceExists(ctx, initialised); err != nil || !exists {
		t.Errorf("InstanceExists(stopped) = %v, %v; want true", exists, err)
	}
	if off, err := instances.InstanceShutdown(ctx, initialised); err != nil || !off {
		t.Errorf("InstanceShutdown(stopped) = %v, %v; want true", off, err)
	}

	if err := s.Cloud.DeleteInstance(ctx, node.Name); err != nil {
		t.Fatal(err)
	}
	if exists, err := instances.InstanceExists(ctx, initialised); err != nil || exists {
		t.Errorf("InstanceExists(deleted) = %v, %v; want false", exists, err)
	}
	if _, err := instances.InstanceMetadata(ctx, initialised); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Errorf("InstanceMetadata(deleted, by providerID) = %v; want InstanceNotFound", err)
	}
	unknown := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "conformance-nobody"}}
	if _, err := instances.InstanceMetadata(ctx, unknown); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Errorf("InstanceMetadata(unknown name) = %v; want InstanceNotFound", err)
	}
}

func (s Suite) testLoadBalancer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lb, ok := s.Provider.LoadBalancer()
	if !ok {
		t.Skip("the provider offers no LoadBalancer")
	}
	var nodes []*v1.Node
	for _, name := range []string{"conformance-lb-1", "conformance-lb-2", "conformance-lb-3"} {
		n, err := s.Cloud.AddInstance(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, s.initialised(ctx, t, n))
	}
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "conformance", Name: "web", UID: types.UID("conformance-web-uid")},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeLoadBalancer,
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080, TargetPort: intstr.FromInt32(8080)}},
		},
	}

	first, err := lb.EnsureLoadBalancer(ctx, s.ClusterName, svc, nodes)
	if err != nil {
		t.Fatalf("EnsureLoadBalancer: %v", err)
	}
	if first == nil || len(first.Ingress) == 0 {
		t.Fatalf("EnsureLoadBalancer status = %+v, want an ingress address", first)
	}
	second, err := lb.EnsureLoadBalancer(ctx, s.ClusterName, svc, nodes)
	if err != nil || second == nil || !equality.Semantic.DeepEqual(second.Ingress, first.Ingress) {
		t.Errorf("EnsureLoadBalancer again = %+v, %v; want the same address %+v", second, err, first.Ingress)
	}
	got, exists, err := lb.GetLoadBalancer(ctx, s.ClusterName, svc)
	if err != nil || !exists || got == nil || !equality.Semantic.DeepEqual(got.Ingress, first.Ingress) {
		t.Errorf("GetLoadBalancer = %+v, %v, %v; want %+v", got, exists, err, first.Ingress)
	}
	s.expectMembers(ctx, t, svc, nodes)
	if lbs, err := s.Cloud.LoadBalancers(ctx); err != nil || !slices.Equal(lbs, []string{"conformance/web"}) {
		t.Errorf("load balancers in the cloud = %v, %v; want [conformance/web]", lbs, err)
	}

	if err := lb.UpdateLoadBalancer(ctx, s.ClusterName, svc, nodes[:2]); err != nil {
		t.Fatalf("UpdateLoadBalancer: %v", err)
	}
	s.expectMembers(ctx, t, svc, nodes[:2])
	if got, _, err := lb.GetLoadBalancer(ctx, s.ClusterName, svc); err != nil || got == nil || !equality.Semantic.DeepEqual(got.Ingress, first.Ingress) {
		t.Errorf("after UpdateLoadBalancer the address is %+v, %v; want %+v", got, err, first.Ingress)
	}

	if err := lb.EnsureLoadBalancerDeleted(ctx, s.ClusterName, svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
	}
	if err := lb.EnsureLoadBalancerDeleted(ctx, s.ClusterName, svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted of a deleted load balancer: %v", err)
	}
	if _, exists, err := lb.GetLoadBalancer(ctx, s.ClusterName, svc); err != nil || exists {
		t.Errorf("GetLoadBalancer after delete = exists %v, %v", exists, err)
	}
	if lbs, err := s.Cloud.LoadBalancers(ctx); err != nil || len(lbs) != 0 {
		t.Errorf("load balancers left in the cloud: %v, %v", lbs, err)
	}
	if addrs, err := s.Cloud.Addresses(ctx); err != nil || len(addrs) != 0 {
		t.Errorf("addresses left allocated in the cloud: %v, %v", addrs, err)
	}
}

func (s Suite) testRoutes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	routes, ok := s.Provider.Routes()
	if !ok {
		t.Skip("the provider offers no Routes")
	}
	n, err := s.Cloud.AddInstance(ctx, "conformance-route")
	if err != nil {
		t.Fatal(err)
	}
	node := s.initialised(ctx, t, n)
	route := &cloudprovider.Route{TargetNode: types.NodeName(node.Name), TargetNodeAddresses: node.Status.Addresses, DestinationCIDR: s.PodCIDR(7)}
	for range 2 {
		if err := routes.CreateRoute(ctx, s.ClusterName, string(node.UID), route); err != nil {
			t.Fatalf("CreateRoute (twice is a no-op): %v", err)
		}
	}
	if got := s.routesTo(ctx, t, routes); !slices.Equal(got, []string{route.DestinationCIDR + ">" + node.Name}) {
		t.Errorf("routes after CreateRoute = %v, want [%s>%s]", got, route.DestinationCIDR, node.Name)
	}
	for range 2 {
		if err := routes.DeleteRoute(ctx, s.ClusterName, route); err != nil {
			t.Fatalf("DeleteRoute (twice is a no-op): %v", err)
		}
	}
	if got := s.routesTo(ctx, t, routes); len(got) != 0 {
		t.Errorf("routes after DeleteRoute = %v, want none", got)
	}
}

// initialised returns the Node as the cloud-node controller leaves it.
func (s Suite) initialised(ctx context.Context, t *testing.T, node *v1.Node) *v1.Node {
	t.Helper()
	instances, ok := s.Provider.InstancesV2()
	if !ok {
		t.Fatal("the provider offers no InstancesV2")
	}
	md, err := instances.InstanceMetadata(ctx, node)
	if err != nil {
		t.Fatalf("InstanceMetadata(%s): %v", node.Name, err)
	}
	n := node.DeepCopy()
	n.UID = types.UID("uid-" + n.Name)
	n.Spec.ProviderID = md.ProviderID
	n.Status.Addresses = md.NodeAddresses
	return n
}

func (s Suite) expectMembers(ctx context.Context, t *testing.T, svc *v1.Service, nodes []*v1.Node) {
	t.Helper()
	var want []string
	for _, n := range nodes {
		want = append(want, n.Name)
	}
	slices.Sort(want)
	got, err := s.Cloud.Members(ctx, svc)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("load-balancer members = %v, %v; want %v", got, err, want)
	}
}

// routesTo lists the routes as "destination>node", sorted.
func (s Suite) routesTo(ctx context.Context, t *testing.T, routes cloudprovider.Routes) []string {
	t.Helper()
	list, err := routes.ListRoutes(ctx, s.ClusterName)
	if err != nil {
		t.Fatalf("ListRoutes: %v", err)
	}
	var out []string
	for _, r := range list {
		out = append(out, r.DestinationCIDR+">"+string(r.TargetNode))
	}
	slices.Sort(out)
	return out
}
