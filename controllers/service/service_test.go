package service

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func ptr[T any](v T) *T { return &v }

func lbService(mutate ...func(*v1.Service)) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1", Annotations: map[string]string{"a": "1"}},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeLoadBalancer,
			Ports:                 []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080, TargetPort: intstr.FromInt32(8080)}},
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster,
			IPFamilies:            []v1.IPFamily{v1.IPv4Protocol},
		},
	}
	for _, m := range mutate {
		m(svc)
	}
	return svc
}

func TestWantsLoadBalancerAndNeedsCleanup(t *testing.T) {
	now := metav1.Now()
	withFinalizer := func(s *v1.Service) { s.Finalizers = []string{"other", finalizerCleanup} }
	tests := []struct {
		name         string
		svc          *v1.Service
		class        string
		wants, clean bool
	}{
		{name: "no class", svc: lbService(), wants: true},
		{name: "ClusterIP", svc: lbService(func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeClusterIP })},
		{name: "NodePort", svc: lbService(func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort })},
		{name: "other class, no flag", svc: lbService(func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/other") })},
		{name: "other class, flag", class: "example.com/mine", svc: lbService(func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/other") })},
		{name: "our class", class: "example.com/mine", svc: lbService(func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/mine") }), wants: true},
		{name: "no class with flag", class: "example.com/mine", svc: lbService(), wants: true},
		{name: "finalizer, wanted", svc: lbService(withFinalizer), wants: true},
		{name: "finalizer, being deleted", svc: lbService(withFinalizer, func(s *v1.Service) { s.DeletionTimestamp = &now }), wants: true, clean: true},
		{name: "finalizer, type changed", svc: lbService(withFinalizer, func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeClusterIP }), clean: true},
		{name: "finalizer, class not ours", svc: lbService(withFinalizer, func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/other") }), clean: true},
		{name: "no finalizer, being deleted", svc: lbService(func(s *v1.Service) { s.DeletionTimestamp = &now }), wants: true},
		{name: "other finalizer only, type changed", svc: lbService(func(s *v1.Service) { s.Finalizers = []string{"other"}; s.Spec.Type = v1.ServiceTypeClusterIP })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wantsLoadBalancer(tt.svc, tt.class); got != tt.wants {
				t.Errorf("wantsLoadBalancer = %v, want %v", got, tt.wants)
			}
			if got := needsCleanup(tt.svc, tt.class); got != tt.clean {
				t.Errorf("needsCleanup = %v, want %v", got, tt.clean)
			}
		})
	}
}

// TestLBSpecChanges: each change upstream re-ensures for changes the spec;
// status, labels, clusterIP and other fields do not.
func TestLBSpecChanges(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*v1.Service)
		changed bool
	}{
		{"port number", func(s *v1.Service) { s.Spec.Ports[0].Port = 81 }, true},
		{"port name", func(s *v1.Service) { s.Spec.Ports[0].Name = "web" }, true},
		{"protocol", func(s *v1.Service) { s.Spec.Ports[0].Protocol = v1.ProtocolUDP }, true},
		{"node port", func(s *v1.Service) { s.Spec.Ports[0].NodePort = 30081 }, true},
		{"target port", func(s *v1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("http") }, true},
		{"app protocol", func(s *v1.Service) { s.Spec.Ports[0].AppProtocol = ptr("h2c") }, true},
		{"another port", func(s *v1.Service) { s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Port: 443}) }, true},
		{"source ranges", func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8"} }, true},
		{"session affinity", func(s *v1.Service) { s.Spec.SessionAffinity = v1.ServiceAffinityClientIP }, true},
		{"session affinity config", func(s *v1.Service) {
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr[int32](60)}}
		}, true},
		{"loadBalancerIP", func(s *v1.Service) { s.Spec.LoadBalancerIP = "192.0.2.9" }, true},
		{"external IPs", func(s *v1.Service) { s.Spec.ExternalIPs = []string{"198.51.100.1"} }, true},
		{"annotation", func(s *v1.Service) { s.Annotations["a"] = "2" }, true},
		{"UID", func(s *v1.Service) { s.UID = "uid-2" }, true},
		{"traffic policy", func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }, true},
		{"health check node port", func(s *v1.Service) { s.Spec.HealthCheckNodePort = 32000 }, true},
		{"IP families", func(s *v1.Service) { s.Spec.IPFamilies = append(s.Spec.IPFamilies, v1.IPv6Protocol) }, true},
		{"type", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }, true},
		{"class", func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/x") }, true},
		{"status", func(s *v1.Service) { s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "192.0.2.1"}} }, false},
		{"label", func(s *v1.Service) { s.Labels = map[string]string{"team": "x"} }, false},
		{"resource version", func(s *v1.Service) { s.ResourceVersion = "42" }, false},
		{"finalizers", func(s *v1.Service) { s.Finalizers = []string{finalizerCleanup} }, false},
		{"selector", func(s *v1.Service) { s.Spec.Selector = map[string]string{"app": "web"} }, false},
	}
	base := lbSpecOf(lbService())
	if !base.equal(lbSpecOf(lbService())) {
		t.Fatal("the same Service gives different specs")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := !base.equal(lbSpecOf(lbService(tt.mutate))); got != tt.changed {
				t.Errorf("spec changed = %v, want %v", got, tt.changed)
			}
		})
	}
}

func testNode(name string, mutate ...func(*v1.Node)) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.NodeSpec{ProviderID: "fake://" + name},
		Status: v1.NodeStatus{
			Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: name}},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func TestEligible(t *testing.T) {
	now := metav1.Now()
	label := func(v string) func(*v1.Node) {
		return func(n *v1.Node) { n.Labels = map[string]string{v1.LabelNodeExcludeBalancers: v} }
	}
	tests := []struct {
		name string
		node *v1.Node
		want bool
	}{
		{"plain", testNode("n"), true},
		{"not ready", testNode("n", func(n *v1.Node) { n.Status.Conditions[0].Status = v1.ConditionFalse }), true},
		{"no conditions", testNode("n", func(n *v1.Node) { n.Status.Conditions = nil }), true},
		{"being deleted", testNode("n", func(n *v1.Node) { n.DeletionTimestamp = &now }), false},
		{"excluded true", testNode("n", label("true")), false},
		{"excluded empty", testNode("n", label("")), false},
		{"excluded garbage", testNode("n", label("yes please")), false},
		{"exclusion false", testNode("n", label("false")), true},
		{"exclusion False", testNode("n", label("False")), true},
		{"autoscaler taint", testNode("n", func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: taintToBeDeleted, Effect: v1.TaintEffectNoSchedule}}
		}), false},
		{"other taint", testNode("n", func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: "example.com/x", Effect: v1.TaintEffectNoSchedule}}
		}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := eligible(tt.node); got != tt.want {
				t.Errorf("eligible = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEligibleNodesSortedAndHostsKey(t *testing.T) {
	b, a, c := testNode("b"), testNode("a"), testNode("c", func(n *v1.Node) { n.Labels = map[string]string{v1.LabelNodeExcludeBalancers: "true"} })
	got := eligibleNodes([]*v1.Node{b, c, a})
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("eligibleNodes = %v, want [a b]", names(got))
	}
	key := hostsKey(got)
	if hostsKey(eligibleNodes([]*v1.Node{a, b})) != key {
		t.Error("the same set in another order gives another key")
	}
	changes := map[string][]*v1.Node{
		"a node more": {a, b, testNode("d")},
		"a node less": {a},
		"providerID":  {a, testNode("b", func(n *v1.Node) { n.Spec.ProviderID = "fake://other" })},
		"InternalIP":  {a, testNode("b", func(n *v1.Node) { n.Status.Addresses[0].Address = "10.0.0.2" })},
	}
	for name, nodes := range changes {
		if hostsKey(nodes) == key {
			t.Errorf("%s: same hosts key", name)
		}
	}
	same := []*v1.Node{a, testNode("b", func(n *v1.Node) {
		n.Status.Addresses[1].Address = "renamed"
		n.Status.Conditions = nil
		n.Labels = map[string]string{"x": "y"}
	})}
	if hostsKey(same) != key {
		t.Error("a hostname, condition or label change changed the hosts key")
	}
}

func TestHostChangeMatters(t *testing.T) {
	base := testNode("n")
	tests := []struct {
		name string
		cur  *v1.Node
		want bool
	}{
		{"heartbeat", testNode("n", func(n *v1.Node) { n.ResourceVersion = "2"; n.Status.Conditions[0].Reason = "x" }), false},
		{"readiness", testNode("n", func(n *v1.Node) { n.Status.Conditions[0].Status = v1.ConditionFalse }), false},
		{"excluded", testNode("n", func(n *v1.Node) { n.Labels = map[string]string{v1.LabelNodeExcludeBalancers: "true"} }), true},
		{"providerID", testNode("n", func(n *v1.Node) { n.Spec.ProviderID = "fake://x" }), true},
		{"InternalIP", testNode("n", func(n *v1.Node) { n.Status.Addresses[0].Address = "10.9.9.9" }), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hostChangeMatters(base, tt.cur); got != tt.want {
				t.Errorf("hostChangeMatters = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStatusEqual(t *testing.T) {
	ip := func(s string) *v1.LoadBalancerStatus {
		return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: s}}}
	}
	if !statusEqual(nil, &v1.LoadBalancerStatus{}) || !statusEqual(&v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{}}, nil) {
		t.Error("nil and empty statuses differ")
	}
	if !statusEqual(ip("192.0.2.1"), ip("192.0.2.1")) {
		t.Error("equal statuses differ")
	}
	if statusEqual(ip("192.0.2.1"), ip("192.0.2.2")) || statusEqual(nil, ip("192.0.2.1")) {
		t.Error("different statuses are equal")
	}
	mode := ip("192.0.2.1")
	mode.Ingress[0].IPMode = ptr(v1.LoadBalancerIPModeProxy)
	if statusEqual(mode, ip("192.0.2.1")) {
		t.Error("an ipMode change is not a change")
	}
	vip := ip("192.0.2.1")
	vip.Ingress[0].IPMode = ptr(v1.LoadBalancerIPModeVIP)
	bare := ip("192.0.2.1")
	if !statusEqual(vip, bare) || !statusEqual(bare, vip) {
		t.Error("a missing ipMode differs from the apiserver's default VIP")
	}
	if bare.Ingress[0].IPMode != nil {
		t.Error("statusEqual wrote the default into its argument")
	}
}

func TestNodeNamesForMessage(t *testing.T) {
	var nodes []*v1.Node
	for i := range 25 {
		nodes = append(nodes, testNode(fmt.Sprintf("n%02d", i)))
	}
	got := nodeNamesForMessage(nodes)
	if !strings.HasPrefix(got, "n00, n01") || !strings.HasSuffix(got, "n19, <5 more>") {
		t.Errorf("nodeNamesForMessage = %q", got)
	}
	if got := nodeNamesForMessage(nodes[:2]); got != "n00, n01" {
		t.Errorf("nodeNamesForMessage(2) = %q", got)
	}
}

func names(nodes []*v1.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return out
}
