package route

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

type env struct {
	ctx    context.Context
	client kubernetes.Interface
	cloud  *fake.Cloud
}

// start runs the controller on a real apiserver with the fake cloud (which
// starts with routes) behind the real guard.
func start(t *testing.T, clusterCIDRs string, routes []fake.Route) *env {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	cp := harness.StartControlPlane(t)

	fc, err := fake.New(&fake.Config{Routes: routes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	guard := cloud.New(fc, cloud.Options{CallTimeout: 3 * time.Second, DetachAfter: 300 * time.Millisecond, FenceTimeout: time.Second})
	t.Cleanup(guard.Close)

	var cidrs []netip.Prefix
	for _, s := range strings.Split(clusterCIDRs, ",") {
		cidrs = append(cidrs, netip.MustParsePrefix(s))
	}
	factory := informers.NewSharedInformerFactory(cp.Client, 0)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cp.Client.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "route_controller"})
	c, err := New(ctx, cp.Client, factory.Core().V1().Nodes(), guard, recorder, Config{
		ClusterName: "test", ClusterCIDRs: cidrs, Workers: 4, ResyncPeriod: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
	})
	return &env{ctx: ctx, client: cp.Client, cloud: fc}
}

// addNode creates a Node with pod CIDRs and an InternalIP, and its running
// instance in the fake cloud.
func (e *env) addNode(t *testing.T, name string, podCIDRs ...string) {
	t.Helper()
	if err := e.cloud.AddInstance(fake.Instance{Name: name}); err != nil {
		t.Fatal(err)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{PodCIDRs: podCIDRs}}
	if len(podCIDRs) > 0 {
		node.Spec.PodCIDR = podCIDRs[0]
	}
	created, err := e.client.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}}
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// table renders the route table as "dest>node" strings, sorted.
func (e *env) table() []string {
	var out []string
	for _, r := range e.cloud.ListRouteTable() {
		out = append(out, r.DestinationCIDR+">"+r.TargetNode)
	}
	return out
}

func (e *env) waitTable(t *testing.T, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = e.table()
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("route table = %v, want %v", got, want)
	}
}

func (e *env) waitCondition(t *testing.T, name string, status v1.ConditionStatus, reason string) {
	t.Helper()
	var last *v1.NodeCondition
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = conditionOf(n)
		return last != nil && last.Status == status && last.Reason == reason, nil
	})
	if err != nil {
		t.Fatalf("node %s: NetworkUnavailable = %+v, want %s/%s", name, last, status, reason)
	}
}

func TestRoutesFollowNodes(t *testing.T) {
	e := start(t, "10.244.0.0/16", nil)
	e.addNode(t, "a", "10.244.1.0/24")
	e.addNode(t, "b", "10.244.2.0/24")
	e.addNode(t, "no-cidr")
	e.waitTable(t, "10.244.1.0/24>a", "10.244.2.0/24>b")
	e.waitCondition(t, "a", v1.ConditionFalse, reasonRouteCreated)
	e.waitCondition(t, "b", v1.ConditionFalse, reasonRouteCreated)
	if n, err := e.client.CoreV1().Nodes().Get(e.ctx, "no-cidr", metav1.GetOptions{}); err != nil || conditionOf(n) != nil {
		t.Errorf("a Node without pod CIDRs got a NetworkUnavailable condition: %v, %v", n.Status.Conditions, err)
	}
	if calls := e.cloud.CallCount("CreateRoute"); calls != 2 {
		t.Errorf("CreateRoute calls = %d, want 2", calls)
	}

	if err := e.client.CoreV1().Nodes().Delete(e.ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitTable(t, "10.244.2.0/24>b")
}

// TestStaleRoutesRemovedForeignKept: inside the cluster CIDR, a blackhole
// route, a route to no Node and a route to the wrong Node are removed (the
// last replaced); outside it, nothing is touched.
func TestStaleRoutesRemovedForeignKept(t *testing.T) {
	e := start(t, "10.244.0.0/16", []fake.Route{
		{Name: "blackhole", TargetNode: "a", DestinationCIDR: "10.244.9.0/24", Blackhole: true},
		{Name: "orphan", TargetNode: "gone", DestinationCIDR: "10.244.8.0/24"},
		{Name: "wrong", TargetNode: "b", DestinationCIDR: "10.244.1.0/24"},
		{Name: "outside", TargetNode: "gone", DestinationCIDR: "192.168.0.0/24"},
		{Name: "wider", TargetNode: "gone", DestinationCIDR: "10.0.0.0/8"},
	})
	e.addNode(t, "b", "10.244.2.0/24")
	e.addNode(t, "a", "10.244.1.0/24")
	e.waitTable(t, "10.244.1.0/24>a", "10.244.2.0/24>b", "192.168.0.0/24>gone", "10.0.0.0/8>gone")
	e.waitCondition(t, "a", v1.ConditionFalse, reasonRouteCreated)
}

// TestFailingCreateRetried: a failing CreateRoute leaves the Node
// NetworkUnavailable with a Warning Event, is retried with back-off, and
// succeeds once the fault is gone.
func TestFailingCreateRetried(t *testing.T) {
	e := start(t, "10.244.0.0/16", nil)
	id, err := e.cloud.AddFault(fake.Fault{Method: "CreateRoute", Object: "bad", Error: "quota exceeded"})
	if err != nil {
		t.Fatal(err)
	}
	e.addNode(t, "good", "10.244.1.0/24")
	e.addNode(t, "bad", "10.244.2.0/24")
	e.waitTable(t, "10.244.1.0/24>good")
	e.waitCondition(t, "bad", v1.ConditionTrue, reasonNoRouteCreated)
	e.waitCondition(t, "good", v1.ConditionFalse, reasonRouteCreated)
	err = wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := e.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "bad").String()})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, func(ev v1.Event) bool {
			return ev.Reason == reasonFailedToCreate && ev.Type == v1.EventTypeWarning && strings.Contains(ev.Message, "quota exceeded")
		}), nil
	})
	if err != nil {
		t.Fatalf("no FailedToCreateRoute Event: %v", err)
	}
	// The back-off spaces the retries: 1s, 2s, 4s, ...
	err = wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return failedCreates(e.cloud, "bad") >= 3, nil
	})
	if err != nil {
		t.Fatalf("CreateRoute not retried: %d calls", failedCreates(e.cloud, "bad"))
	}
	var starts []time.Time
	for _, c := range e.cloud.Calls() {
		if c.Method == "CreateRoute" && c.Object == "bad" {
			starts = append(starts, c.Start)
		}
	}
	if gap := starts[2].Sub(starts[1]); gap < 1500*time.Millisecond {
		t.Errorf("second retry %s after the first; want the back-off to double (>= 2s)", gap)
	}

	e.cloud.RemoveFault(id)
	e.waitTable(t, "10.244.1.0/24>good", "10.244.2.0/24>bad")
	e.waitCondition(t, "bad", v1.ConditionFalse, reasonRouteCreated)
}

func failedCreates(c *fake.Cloud, node string) int {
	n := 0
	for _, call := range c.Calls() {
		if call.Method == "CreateRoute" && call.Object == node && call.Error != "" {
			n++
		}
	}
	return n
}

// TestHungCreateDelaysNoOther: CreateRoute for one Node hangs ignoring its
// context; the other Nodes' routes are created meanwhile, and no second
// create of the hung route overlaps the first.
func TestHungCreateDelaysNoOther(t *testing.T) {
	e := start(t, "10.244.0.0/16", nil)
	id, err := e.cloud.AddFault(fake.Fault{Method: "CreateRoute", Object: "hung", Hang: fake.HangIgnoreContext})
	if err != nil {
		t.Fatal(err)
	}
	e.addNode(t, "hung", "10.244.1.0/24")
	var want []string
	for i := range 10 {
		e.addNode(t, fmt.Sprintf("n%d", i), fmt.Sprintf("10.244.%d.0/24", 10+i))
		want = append(want, fmt.Sprintf("10.244.%d.0/24>n%d", 10+i, i))
	}
	e.waitTable(t, want...)
	e.cloud.RemoveFault(id)
	e.waitTable(t, append(want, "10.244.1.0/24>hung")...)
	e.waitCondition(t, "hung", v1.ConditionFalse, reasonRouteCreated)
	if o := e.cloud.Overlaps(); o != 0 {
		t.Errorf("overlapping route calls: %d", o)
	}
}

func TestDualStack(t *testing.T) {
	e := start(t, "10.244.0.0/16,fd00:10:244::/56", nil)
	e.addNode(t, "a", "10.244.1.0/24", "fd00:10:244:1::/64")
	e.addNode(t, "b", "10.244.2.0/24", "fd00:10:244:2::/64")
	e.waitTable(t, "10.244.1.0/24>a", "10.244.2.0/24>b", "fd00:10:244:1::/64>a", "fd00:10:244:2::/64>b")
	e.waitCondition(t, "a", v1.ConditionFalse, reasonRouteCreated)
	e.waitCondition(t, "b", v1.ConditionFalse, reasonRouteCreated)
}

func TestCheckClusterCIDRs(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		name  string
		cidrs []netip.Prefix
		ok    bool
	}{
		{"one", []netip.Prefix{p("10.0.0.0/8")}, true},
		{"dual", []netip.Prefix{p("10.0.0.0/8"), p("fd00::/48")}, true},
		{"none", nil, false},
		{"two IPv4", []netip.Prefix{p("10.0.0.0/8"), p("11.0.0.0/8")}, false},
		{"three", []netip.Prefix{p("10.0.0.0/8"), p("fd00::/48"), p("11.0.0.0/8")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := checkClusterCIDRs(tt.cidrs); (err == nil) != tt.ok {
				t.Errorf("checkClusterCIDRs = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
