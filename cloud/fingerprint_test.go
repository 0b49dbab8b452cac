package cloud

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
)

func lbNode(name string) *v1.Node {
	n := node(name)
	n.Spec.ProviderID = "fake://" + name
	n.Labels = map[string]string{"topology.kubernetes.io/zone": "z1", "kubernetes.io/hostname": name}
	n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: name}}
	n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	return n
}

// TestServiceFingerprintCoversWhatProvidersRead: each field a provider
// builds a load balancer from changes the fingerprint; a status heartbeat and
// the order of a label map do not.
func TestServiceFingerprintCoversWhatProvidersRead(t *testing.T) {
	svc := service("web")
	base := []*v1.Node{lbNode("a"), lbNode("b")}
	want := serviceFingerprint(svc, base)

	same := map[string]func(ns []*v1.Node){
		"heartbeat": func(ns []*v1.Node) { ns[0].Status.Conditions[0].Reason = "KubeletReady" },
		"labels rebuilt": func(ns []*v1.Node) {
			ns[0].Labels = map[string]string{"kubernetes.io/hostname": "a", "topology.kubernetes.io/zone": "z1"}
		},
		"resourceVersion": func(ns []*v1.Node) { ns[1].ResourceVersion = "42" },
	}
	for name, change := range same {
		ns := []*v1.Node{base[0].DeepCopy(), base[1].DeepCopy()}
		change(ns)
		if got := serviceFingerprint(svc, ns); got != want {
			t.Errorf("%s changed the fingerprint", name)
		}
	}

	differ := map[string]func(ns []*v1.Node) []*v1.Node{
		"name":            func(ns []*v1.Node) []*v1.Node { ns[0].Name = "c"; return ns },
		"providerID":      func(ns []*v1.Node) []*v1.Node { ns[1].Spec.ProviderID = "fake://x"; return ns },
		"address":         func(ns []*v1.Node) []*v1.Node { ns[0].Status.Addresses[0].Address = "10.0.0.2"; return ns },
		"address type":    func(ns []*v1.Node) []*v1.Node { ns[0].Status.Addresses[0].Type = v1.NodeExternalIP; return ns },
		"address dropped": func(ns []*v1.Node) []*v1.Node { ns[0].Status.Addresses = ns[0].Status.Addresses[:1]; return ns },
		"label value":     func(ns []*v1.Node) []*v1.Node { ns[1].Labels["topology.kubernetes.io/zone"] = "z2"; return ns },
		"label added":     func(ns []*v1.Node) []*v1.Node { ns[1].Labels["x"] = ""; return ns },
		"node dropped":    func(ns []*v1.Node) []*v1.Node { return ns[:1] },
		"order":           func(ns []*v1.Node) []*v1.Node { return []*v1.Node{ns[1], ns[0]} },
		// The same bytes split differently between fields.
		"field boundary": func(ns []*v1.Node) []*v1.Node {
			ns[0].Name, ns[0].Spec.ProviderID = "afake:/", "/a"
			return ns
		},
	}
	for name, change := range differ {
		ns := change([]*v1.Node{base[0].DeepCopy(), base[1].DeepCopy()})
		if got := serviceFingerprint(svc, ns); got == want {
			t.Errorf("%s did not change the fingerprint", name)
		}
	}

	other := svc.DeepCopy()
	other.Spec.Ports = []v1.ServicePort{{Port: 443}}
	if serviceFingerprint(other, base) == want {
		t.Error("the Service's spec did not change the fingerprint")
	}
}

// recordingBalancer remembers the node list each load-balancer call got.
type recordingBalancer struct {
	*stubCloud
	got chan []*v1.Node
}

func (r recordingBalancer) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return r, true }

func (r recordingBalancer) EnsureLoadBalancer(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	r.got <- nodes
	return r.stubCloud.EnsureLoadBalancer(ctx, cluster, svc, nodes)
}

// TestLoadBalancerNodesAreShared: the provider gets the caller's Nodes
// themselves, not copies (thousands of copies per call cost more than the
// node cache), in a slice of its own.
func TestLoadBalancerNodesAreShared(t *testing.T) {
	rec := recordingBalancer{stubCloud: newStub(t, nil), got: make(chan []*v1.Node, 1)}
	g := New(rec, Options{})
	defer g.Close()
	lb, _ := g.LoadBalancer()
	nodes := []*v1.Node{lbNode("a"), lbNode("b")}
	if _, err := lb.EnsureLoadBalancer(t.Context(), "c", service("web"), nodes); err != nil {
		t.Fatal(err)
	}
	got := <-rec.got
	if len(got) != 2 || got[0] != nodes[0] || got[1] != nodes[1] {
		t.Fatalf("provider got %v, want the caller's Nodes", got)
	}
	got[0] = nil
	if nodes[0] == nil {
		t.Error("the provider's slice is the caller's: a detached call could see it change")
	}
}

// BenchmarkServiceFingerprint measures the fingerprint of a load-balancer
// call with a cluster's worth of Nodes, and reports its cost per Node.
func BenchmarkServiceFingerprint(b *testing.B) {
	for _, n := range []int{20, 3000} {
		nodes := make([]*v1.Node, n)
		for i := range nodes {
			nodes[i] = lbNode(fmt.Sprintf("node-%05d", i))
		}
		svc := service("web")
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				serviceFingerprint(svc, nodes)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/node")
		})
	}
}
