package node

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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

// quirkyCloud is the fake cloud with two quirks of real providers: for
// Nodes named "nil-*" it first answers InstanceMetadata with nil metadata
// (twice), and for "noid-*" with metadata without a providerID.
type quirkyCloud struct {
	*fake.Cloud
	mu    sync.Mutex
	nils  map[string]int
	calls map[string]int
}

func (q *quirkyCloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return q, true }

func (q *quirkyCloud) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	q.mu.Lock()
	q.calls[node.Name]++
	nilAnswer := strings.HasPrefix(node.Name, "nil-") && q.nils[node.Name] < 2
	if nilAnswer {
		q.nils[node.Name]++
	}
	q.mu.Unlock()
	if nilAnswer {
		return nil, nil
	}
	md, err := q.Cloud.InstanceMetadata(ctx, node)
	if err == nil && strings.HasPrefix(node.Name, "noid-") {
		md.ProviderID = ""
	}
	return md, err
}

func (q *quirkyCloud) metadataCalls(name string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.calls[name]
}

type env struct {
	ctx    context.Context
	client kubernetes.Interface
	cloud  *quirkyCloud
}

// start runs the controller on a real apiserver, with the fake cloud behind
// the real guard.
func start(t *testing.T, refresh time.Duration) *env {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	cp := harness.StartControlPlane(t)

	fc, err := fake.New(&fake.Config{AutoInstances: fake.AutoInstances{Enabled: true, Region: "auto-region", Zones: []string{"auto-zone"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	q := &quirkyCloud{Cloud: fc, nils: map[string]int{}, calls: map[string]int{}}
	guard := cloud.New(q, cloud.Options{CallTimeout: 2 * time.Second, DetachAfter: 300 * time.Millisecond})
	t.Cleanup(guard.Close)

	factory := informers.NewSharedInformerFactory(cp.Client, 0)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cp.Client.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: Name})
	c, err := New(ctx, cp.Client, factory.Core().V1().Nodes(), guard, recorder, Config{Workers: 4, RefreshPeriod: refresh})
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
	return &env{ctx: ctx, client: cp.Client, cloud: q}
}

// createNode registers a Node the way kubelet --cloud-provider=external
// does: the uninitialized taint, no providerID, a Hostname address.
func (e *env) createNode(t *testing.T, name string, annotations map[string]string) {
	t.Helper()
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, Labels: map[string]string{"example.com/team": "kubelet"}},
		Spec: v1.NodeSpec{Taints: []v1.Taint{
			{Key: taintUninitialized, Value: "true", Effect: v1.TaintEffectNoSchedule},
			{Key: "example.com/other", Effect: v1.TaintEffectNoSchedule},
		}},
	}
	created, err := e.client.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeHostName, Address: name + ".kubelet"}}
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) waitNode(t *testing.T, name, what string, cond func(*v1.Node) bool) *v1.Node {
	t.Helper()
	var last *v1.Node
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = n
		return cond(n), nil
	})
	if err != nil {
		t.Fatalf("node %s: waiting for %s: %v\nlast seen: labels %v taints %v addresses %v", name, what, err, last.Labels, last.Spec.Taints, last.Status.Addresses)
	}
	return last
}

func (e *env) waitEvent(t *testing.T, name, reason string) v1.Event {
	t.Helper()
	var found v1.Event
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := e.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
		if err != nil {
			return false, err
		}
		for _, ev := range events.Items {
			if ev.Reason == reason {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("node %s: no %s event: %v", name, reason, err)
	}
	return found
}

func initCount(t *testing.T) uint64 {
	t.Helper()
	vec, err := testutil.GetHistogramVecFromGatherer(legacyregistry.DefaultGatherer, "cloud_node_initialization_duration_seconds", nil)
	if err != nil {
		return 0 // no observation yet
	}
	return vec.GetAggregatedSampleCount()
}

func initialized(n *v1.Node) bool { return !uninitialized(n) }

func TestInitializeAndRefresh(t *testing.T) {
	e := start(t, time.Second)
	before := initCount(t)

	if err := e.cloud.AddInstance(fake.Instance{
		Name: "n-init", ID: "i-init", Type: "m1.large", Zone: "zone-1", Region: "region-1",
		Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeExternalIP, Address: "203.0.113.5"}},
		Labels: map[string]string{
			"example.com/rack":           "r1",
			"example.com/team":           "cloud", // the Node has it already: kept as is
			"node.kubernetes.io/special": "x",     // reserved domain: never set
			"sub.k8s.io/thing":           "y",     // reserved domain: never set
		},
	}); err != nil {
		t.Fatal(err)
	}
	e.createNode(t, "n-init", nil)
	node := e.waitNode(t, "n-init", "the taint to go", initialized)

	if node.Spec.ProviderID != "fake://i-init" {
		t.Errorf("providerID = %q", node.Spec.ProviderID)
	}
	wantLabels := map[string]string{
		"example.com/team":              "kubelet",
		"example.com/rack":              "r1",
		v1.LabelInstanceTypeStable:      "m1.large",
		v1.LabelInstanceType:            "m1.large",
		v1.LabelTopologyZone:            "zone-1",
		v1.LabelFailureDomainBetaZone:   "zone-1",
		v1.LabelTopologyRegion:          "region-1",
		v1.LabelFailureDomainBetaRegion: "region-1",
	}
	if fmt.Sprint(node.Labels) != fmt.Sprint(wantLabels) {
		t.Errorf("labels =\n%v\nwant\n%v", node.Labels, wantLabels)
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == "example.com/other" }) {
		t.Errorf("taints = %v: another writer's taint was dropped", node.Spec.Taints)
	}
	wantAddresses := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.0.0.5"},
		{Type: v1.NodeExternalIP, Address: "203.0.113.5"},
		{Type: v1.NodeHostName, Address: "n-init.kubelet"},
	}
	if !slices.Equal(node.Status.Addresses, wantAddresses) {
		t.Errorf("addresses = %v, want %v", node.Status.Addresses, wantAddresses)
	}
	e.waitEvent(t, "n-init", reasonSynced)
	if after := initCount(t); after <= before {
		t.Errorf("initialization histogram count %d -> %d, want an observation", before, after)
	}

	// Nothing changes in the cloud: refreshes call it but write nothing.
	rv := node.ResourceVersion
	calls := e.cloud.metadataCalls("n-init")
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return e.cloud.metadataCalls("n-init") >= calls+2, nil
	})
	if err != nil {
		t.Fatalf("no refresh within 30s at a 1s period: %v", err)
	}
	if n, _ := e.client.CoreV1().Nodes().Get(e.ctx, "n-init", metav1.GetOptions{}); n.ResourceVersion != rv {
		t.Errorf("a refresh without changes wrote the Node (resourceVersion %s -> %s)", rv, n.ResourceVersion)
	}

	// The cloud changes: the labels it set and the addresses follow, a label
	// set by someone else stays.
	n, _ := e.client.CoreV1().Nodes().Get(e.ctx, "n-init", metav1.GetOptions{})
	n.Labels["example.com/owner"] = "user"
	if _, err := e.client.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.cloud.DeleteInstance("n-init")
	if err := e.cloud.AddInstance(fake.Instance{
		Name: "n-init", ID: "i-init", Type: "m1.large", Zone: "zone-1", Region: "region-1",
		Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.6"}},
		Labels:    map[string]string{"example.com/pool": "blue", "example.com/owner": "cloud"},
	}); err != nil {
		t.Fatal(err)
	}
	node = e.waitNode(t, "n-init", "labels and addresses to follow the cloud", func(n *v1.Node) bool {
		return n.Labels["example.com/pool"] == "blue" && len(n.Status.Addresses) > 0 && n.Status.Addresses[0].Address == "10.0.0.6"
	})
	if _, still := node.Labels["example.com/rack"]; still {
		t.Errorf("a label the cloud dropped is still there: %v", node.Labels)
	}
	if node.Labels["example.com/owner"] != "user" || node.Labels["example.com/team"] != "kubelet" {
		t.Errorf("labels set by others changed: %v", node.Labels)
	}
	wantAddresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.6"}, {Type: v1.NodeHostName, Address: "n-init.kubelet"}}
	if !slices.Equal(node.Status.Addresses, wantAddresses) {
		t.Errorf("refreshed addresses = %v, want %v", node.Status.Addresses, wantAddresses)
	}
}

func TestProvidedNodeIP(t *testing.T) {
	e := start(t, time.Hour)
	if err := e.cloud.AddInstance(fake.Instance{
		Name: "n-ip", Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "10.0.0.7"},
			{Type: v1.NodeInternalIP, Address: "10.0.1.7"},
			{Type: v1.NodeExternalIP, Address: "203.0.113.7"},
			{Type: v1.NodeHostName, Address: "n-ip.cloud"},
		},
	}); err != nil {
		t.Fatal(err)
	}
	e.createNode(t, "n-ip", map[string]string{annotationProvidedNodeIP: "10.0.9.9"})

	// The provided IP is not one of the cloud's: a warning, and the taint stays.
	e.waitEvent(t, "n-ip", reasonAddressMismatch)
	if n, _ := e.client.CoreV1().Nodes().Get(e.ctx, "n-ip", metav1.GetOptions{}); !uninitialized(n) {
		t.Fatal("the Node was initialised with a provided IP the cloud does not have")
	}

	n, _ := e.client.CoreV1().Nodes().Get(e.ctx, "n-ip", metav1.GetOptions{})
	n.Annotations[annotationProvidedNodeIP] = "10.0.1.7"
	if _, err := e.client.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := e.waitNode(t, "n-ip", "the taint to go", initialized)
	want := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.0.1.7"},
		{Type: v1.NodeExternalIP, Address: "203.0.113.7"},
		{Type: v1.NodeHostName, Address: "n-ip.cloud"},
	}
	if !slices.Equal(node.Status.Addresses, want) {
		t.Errorf("addresses = %v, want the provided IP first and the only InternalIP: %v", node.Status.Addresses, want)
	}
}

func TestRetries(t *testing.T) {
	e := start(t, time.Hour)

	// Nil metadata twice, then an answer.
	e.createNode(t, "nil-1", nil)
	e.waitNode(t, "nil-1", "the taint to go after nil metadata", initialized)
	if got := e.cloud.metadataCalls("nil-1"); got < 3 {
		t.Errorf("InstanceMetadata calls = %d, want at least 3 (two nil answers retried)", got)
	}

	// Errors, then an answer.
	if _, err := e.cloud.AddFault(fake.Fault{Method: "InstanceMetadata", Object: "flaky-1", Error: "cloud is down", Count: 3}); err != nil {
		t.Fatal(err)
	}
	e.createNode(t, "flaky-1", nil)
	e.waitEvent(t, "flaky-1", reasonInitFailed)
	e.waitNode(t, "flaky-1", "the taint to go after errors", initialized)

	// No providerID anywhere: a clear event, and the taint stays.
	e.createNode(t, "noid-1", nil)
	ev := e.waitEvent(t, "noid-1", reasonInitFailed)
	if !strings.Contains(ev.Message, "providerID") {
		t.Errorf("event message %q does not name the providerID", ev.Message)
	}
	if n, _ := e.client.CoreV1().Nodes().Get(e.ctx, "noid-1", metav1.GetOptions{}); !uninitialized(n) {
		t.Error("a Node without providerID was initialised")
	}
}

func TestHungCallsDoNotHoldOthers(t *testing.T) {
	e := start(t, time.Hour)
	id, err := e.cloud.AddFault(fake.Fault{Method: "InstanceMetadata", Object: "hung-*", Hang: fake.HangIgnoreContext})
	if err != nil {
		t.Fatal(err)
	}
	// More hung Nodes than workers: the guard releases each worker.
	for i := range 6 {
		e.createNode(t, fmt.Sprintf("hung-%d", i), nil)
	}
	for i := range 10 {
		e.createNode(t, fmt.Sprintf("ok-%d", i), nil)
	}
	for i := range 10 {
		e.waitNode(t, fmt.Sprintf("ok-%d", i), "the taint to go beside hung calls", initialized)
	}
	for i := range 10 {
		if got := e.cloud.metadataCalls(fmt.Sprintf("ok-%d", i)); got != 1 {
			t.Errorf("ok-%d was initialised with %d InstanceMetadata calls, want 1", i, got)
		}
	}
	for i := range 6 {
		if n, _ := e.client.CoreV1().Nodes().Get(e.ctx, fmt.Sprintf("hung-%d", i), metav1.GetOptions{}); !uninitialized(n) {
			t.Errorf("hung-%d initialised while its call hangs", i)
		}
	}
	if !e.cloud.RemoveFault(id) {
		t.Fatal("fault gone")
	}
	for i := range 6 {
		e.waitNode(t, fmt.Sprintf("hung-%d", i), "the taint to go once the cloud answers", initialized)
	}
}

func TestRefreshesAreSpreadOverThePeriod(t *testing.T) {
	const period = 3 * time.Second
	e := start(t, period)
	// Initialised Nodes, as after a restart: each is refreshed at its own
	// point in the period, not all at once.
	const count = 30
	created := time.Now()
	for i := range count {
		_, err := e.client.CoreV1().Nodes().Create(e.ctx, &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("old-%d", i)},
			Spec:       v1.NodeSpec{ProviderID: fmt.Sprintf("fake://i-old-%d", i)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.cloud.AddInstance(fake.Instance{Name: fmt.Sprintf("old-%d", i), ID: fmt.Sprintf("i-old-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	firstCalls := map[string]time.Time{}
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, call := range e.cloud.Calls() {
			if _, seen := firstCalls[call.Object]; call.Method == "InstanceMetadata" && strings.HasPrefix(call.Object, "old-") && !seen {
				firstCalls[call.Object] = call.Start
			}
		}
		return len(firstCalls) == count, nil
	})
	if err != nil {
		t.Fatalf("only %d of %d Nodes refreshed: %v", len(firstCalls), count, err)
	}
	var earliest, latest time.Time
	for _, at := range firstCalls {
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
		if at.After(latest) {
			latest = at
		}
	}
	// Uniform points in a 3s period: 30 of them inside one second is
	// vanishingly unlikely; all at once is what a burst looks like.
	if spread := latest.Sub(earliest); spread < time.Second {
		t.Errorf("first refreshes of %d Nodes spread over %s, want them spread over the %s period", count, spread, period)
	}
	if late := latest.Sub(created); late > period+5*time.Second {
		t.Errorf("last first refresh %s after creation, want within the period", late)
	}
}
