package nodelifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/providers/fake"
)

const (
	unitGrace  = 30 * time.Second
	otherTaint = "example.com/other"
)

var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// fixture is the controller on a fake clientset, with Nodes pushed into the
// informer's indexer, the fake cloud behind the real guard, a FakeRecorder
// and a clock that moves only when told.
type fixture struct {
	ctx    context.Context
	c      *Controller
	client *k8sfake.Clientset
	cloud  *fake.Cloud
	events *record.FakeRecorder
	nodes  cache.Indexer
	clock  *testClock
}

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newFixture(t *testing.T, opts cloud.Options, nodes ...*v1.Node) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	objects := make([]runtime.Object, len(nodes))
	for i, n := range nodes {
		objects[i] = n.DeepCopy()
	}
	client := k8sfake.NewClientset(objects...)
	fc, err := fake.New(&fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	guard := cloud.New(fc, opts)
	t.Cleanup(guard.Close)
	informer := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes()
	events := record.NewFakeRecorder(100)
	c, err := New(ctx, client, informer, guard, events, Config{MonitorPeriod: time.Second, DeletionGracePeriod: unitGrace, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	clock := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c.now = clock.now
	for _, n := range nodes {
		if err := informer.Informer().GetIndexer().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return &fixture{ctx: ctx, c: c, client: client, cloud: fc, events: events, nodes: informer.Informer().GetIndexer(), clock: clock}
}

// testNode is a Node with the given Ready status ("" for no condition), a
// providerID of the fake cloud and resourceVersion 1.
func testNode(name string, readiness v1.ConditionStatus, taints ...v1.Taint) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid"), ResourceVersion: "1"},
		Spec:       v1.NodeSpec{ProviderID: "fake://i-" + name, Taints: taints},
	}
	if readiness != "" {
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: readiness}}
	}
	return n
}

func taintOther() v1.Taint { return v1.Taint{Key: otherTaint, Effect: v1.TaintEffectNoExecute} }

func (f *fixture) addInstance(t *testing.T, name, state string) {
	t.Helper()
	if err := f.cloud.AddInstance(fake.Instance{Name: name, ID: "i-" + name, State: state}); err != nil {
		t.Fatal(err)
	}
}

// remember records a gone-observation for node made ago before the clock.
func (f *fixture) remember(node *v1.Node, ago time.Duration) goneObservation {
	obs := goneObservation{uid: node.UID, providerID: node.Spec.ProviderID, at: f.clock.now().Add(-ago)}
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	f.c.goneSince[node.Name] = obs
	return obs
}

func (f *fixture) observation(name string) (goneObservation, bool) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	obs, ok := f.c.goneSince[name]
	return obs, ok
}

func (f *fixture) cloudCalls() []string {
	var out []string
	for _, call := range f.cloud.Calls() {
		out = append(out, call.Method+" "+call.Object)
	}
	return out
}

// writes returns the Node writes (and reads by Get) sent to the clientset,
// as "verb name".
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetResource() != nodesResource || a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		name := ""
		if named, ok := a.(interface{ GetName() string }); ok {
			name = named.GetName()
		}
		out = append(out, a.GetVerb()+" "+name)
	}
	return out
}

type taintPatch struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		Taints []v1.Taint `json:"taints"`
	} `json:"spec"`
}

// patches returns the taint patches sent to the clientset.
func (f *fixture) patches(t *testing.T) []taintPatch {
	t.Helper()
	var out []taintPatch
	for _, a := range f.client.Actions() {
		pa, ok := a.(k8stesting.PatchAction)
		if !ok {
			continue
		}
		if pa.GetPatchType() != types.MergePatchType {
			t.Errorf("patch type %s, want %s", pa.GetPatchType(), types.MergePatchType)
		}
		var p taintPatch
		if err := json.Unmarshal(pa.GetPatch(), &p); err != nil {
			t.Fatalf("patch %s: %v", pa.GetPatch(), err)
		}
		out = append(out, p)
	}
	return out
}

func (f *fixture) recordedEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func eventReasons(events []string) []string {
	var out []string
	for _, e := range events {
		var typ, reason string
		if _, err := fmt.Sscanf(e, "%s %s", &typ, &reason); err == nil {
			out = append(out, typ+" "+reason)
		}
	}
	return out
}

func taintKeys(taints []v1.Taint) []string {
	var out []string
	for _, t := range taints {
		out = append(out, t.Key+":"+string(t.Effect))
	}
	return out
}

func TestSync(t *testing.T) {
	shutdown := shutdownTaint()
	tests := []struct {
		name     string
		node     *v1.Node
		instance string // its state; "" for none
		// goneFor, when set, is the age of an earlier gone-observation of
		// this Node; goneUID and goneProviderID make it about another Node.
		goneFor        time.Duration
		goneUID        types.UID
		goneProviderID string

		wantCalls  []string
		wantWrites []string
		wantTaints []string // of the one patch, when wantWrites has one
		wantEvents []string
		// wantGone: the observation after the sync: "none", "kept" (as it
		// was) or "new" (made by this sync).
		wantGone string
	}{
		{
			name:      "ready node: no cloud call",
			node:      testNode("n", v1.ConditionTrue),
			wantGone:  "none",
			wantCalls: nil,
		},
		{
			name:       "ready node with the shutdown taint: removed, other taints kept",
			node:       testNode("n", v1.ConditionTrue, taintOther(), shutdown),
			wantWrites: []string{"patch n"},
			wantTaints: []string{otherTaint + ":NoExecute"},
			wantGone:   "none",
		},
		{
			name:     "ready node forgets an earlier gone-observation",
			node:     testNode("n", v1.ConditionTrue),
			goneFor:  time.Hour,
			wantGone: "none",
		},
		{
			name:      "not ready, instance running: nothing to do",
			node:      testNode("n", v1.ConditionFalse),
			instance:  fake.StateRunning,
			wantCalls: []string{"InstanceExists n", "InstanceShutdown n"},
			wantGone:  "none",
		},
		{
			name:       "readiness unknown, instance stopped: shutdown taint added, other taints kept",
			node:       testNode("n", v1.ConditionUnknown, taintOther()),
			instance:   fake.StateStopped,
			wantCalls:  []string{"InstanceExists n", "InstanceShutdown n"},
			wantWrites: []string{"patch n"},
			wantTaints: []string{otherTaint + ":NoExecute", taintShutdown + ":NoSchedule"},
			wantGone:   "none",
		},
		{
			name:      "no Ready condition, instance stopped, already tainted: no patch",
			node:      testNode("n", "", shutdown),
			instance:  fake.StateStopped,
			wantCalls: []string{"InstanceExists n", "InstanceShutdown n"},
			wantGone:  "none",
		},
		{
			name:      "instance gone, first observation: remembered, not deleted",
			node:      testNode("n", v1.ConditionFalse),
			wantCalls: []string{"InstanceExists n"},
			wantGone:  "new",
		},
		{
			name:      "terminated instance is gone",
			node:      testNode("n", v1.ConditionUnknown),
			instance:  fake.StateTerminated,
			wantCalls: []string{"InstanceExists n"},
			wantGone:  "new",
		},
		{
			name:      "gone again within the grace period: not deleted",
			node:      testNode("n", v1.ConditionFalse),
			goneFor:   unitGrace - time.Millisecond,
			wantCalls: []string{"InstanceExists n"},
			wantGone:  "kept",
		},
		{
			name:       "gone again after the grace period: deleted",
			node:       testNode("n", v1.ConditionFalse),
			goneFor:    unitGrace,
			wantCalls:  []string{"InstanceExists n"},
			wantWrites: []string{"delete n"},
			wantEvents: []string{"Normal " + reasonDeletingNode},
			wantGone:   "none",
		},
		{
			name:      "observation about an older Node of the same name: starts afresh",
			node:      testNode("n", v1.ConditionFalse),
			goneFor:   time.Hour,
			goneUID:   "older-uid",
			wantCalls: []string{"InstanceExists n"},
			wantGone:  "new",
		},
		{
			name:           "observation about another instance: starts afresh",
			node:           testNode("n", v1.ConditionFalse),
			goneFor:        time.Hour,
			goneProviderID: "fake://i-before",
			wantCalls:      []string{"InstanceExists n"},
			wantGone:       "new",
		},
		{
			name:      "instance found again: observation cleared",
			node:      testNode("n", v1.ConditionFalse),
			instance:  fake.StateRunning,
			goneFor:   time.Hour,
			wantCalls: []string{"InstanceExists n", "InstanceShutdown n"},
			wantGone:  "none",
		},
		{
			name: "node being deleted: not checked",
			node: func() *v1.Node {
				n := testNode("n", v1.ConditionFalse)
				n.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				n.Finalizers = []string{"example.com/hold"}
				return n
			}(),
			goneFor:  time.Hour,
			wantGone: "kept",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, cloud.Options{}, tt.node)
			if tt.instance != "" {
				f.addInstance(t, tt.node.Name, tt.instance)
			}
			var before goneObservation
			if tt.goneFor > 0 {
				other := tt.node.DeepCopy()
				if tt.goneUID != "" {
					other.UID = tt.goneUID
				}
				if tt.goneProviderID != "" {
					other.Spec.ProviderID = tt.goneProviderID
				}
				before = f.remember(other, tt.goneFor)
			}

			if err := f.c.sync(f.ctx, tt.node.Name); err != nil {
				t.Fatalf("sync: %v", err)
			}

			if got := f.cloudCalls(); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("cloud calls %q, want %q", got, tt.wantCalls)
			}
			if got := f.writes(); !slices.Equal(got, tt.wantWrites) {
				t.Errorf("Node requests %q, want %q", got, tt.wantWrites)
			}
			if tt.wantTaints != nil {
				patches := f.patches(t)
				if len(patches) != 1 {
					t.Fatalf("%d patches, want 1", len(patches))
				}
				if got := taintKeys(patches[0].Spec.Taints); !slices.Equal(got, tt.wantTaints) {
					t.Errorf("patched taints %q, want %q", got, tt.wantTaints)
				}
				if patches[0].Metadata.ResourceVersion != tt.node.ResourceVersion {
					t.Errorf("patch precondition resourceVersion %q, want %q", patches[0].Metadata.ResourceVersion, tt.node.ResourceVersion)
				}
			}
			for _, a := range f.client.Actions() {
				if d, ok := a.(k8stesting.DeleteAction); ok {
					pre := d.GetDeleteOptions().Preconditions
					if pre == nil || pre.UID == nil || *pre.UID != tt.node.UID {
						t.Errorf("delete preconditions %+v, want UID %s", pre, tt.node.UID)
					}
				}
			}
			if got := eventReasons(f.recordedEvents()); !slices.Equal(got, tt.wantEvents) {
				t.Errorf("events %q, want %q", got, tt.wantEvents)
			}

			obs, ok := f.observation(tt.node.Name)
			switch tt.wantGone {
			case "none":
				if ok {
					t.Errorf("gone-observation %+v, want none", obs)
				}
			case "kept":
				if !ok || obs != before {
					t.Errorf("gone-observation %+v (present %v), want it kept as %+v", obs, ok, before)
				}
			case "new":
				want := goneObservation{uid: tt.node.UID, providerID: tt.node.Spec.ProviderID, at: f.clock.now()}
				if !ok || obs != want {
					t.Errorf("gone-observation %+v (present %v), want %+v", obs, ok, want)
				}
			}
		})
	}
}

// TestGracePeriodMeasuredBetweenChecks follows one Node through a first
// gone-observation, checks inside the grace period, an error, and the
// confirming check.
func TestGracePeriodMeasuredBetweenChecks(t *testing.T) {
	node := testNode("n", v1.ConditionFalse)
	f := newFixture(t, cloud.Options{}, node)

	if err := f.c.sync(f.ctx, "n"); err != nil {
		t.Fatal(err)
	}
	first, ok := f.observation("n")
	if !ok {
		t.Fatal("first gone-observation not remembered")
	}
	f.clock.advance(unitGrace / 2)
	if err := f.c.sync(f.ctx, "n"); err != nil {
		t.Fatal(err)
	}
	// An error in between neither deletes nor clears the observation.
	if _, err := f.cloud.AddFault(fake.Fault{Method: "InstanceExists", Error: "boom", Count: 1}); err != nil {
		t.Fatal(err)
	}
	f.clock.advance(unitGrace)
	if err := f.c.sync(f.ctx, "n"); err == nil {
		t.Fatal("sync with a failing cloud: no error")
	}
	if obs, _ := f.observation("n"); obs != first {
		t.Fatalf("observation %+v after an error, want it kept as %+v", obs, first)
	}
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("Node requests %q before the confirming check", got)
	}
	// The next answer confirms the first observation, more than the grace
	// period after it.
	if err := f.c.sync(f.ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if got := f.writes(); !slices.Equal(got, []string{"delete n"}) {
		t.Fatalf("Node requests %q, want the delete", got)
	}
	if got := f.cloud.CallCount("InstanceExists"); got != 4 {
		t.Errorf("%d InstanceExists calls, want 4", got)
	}
}

// stubInstances answers InstanceExists and InstanceShutdown per Node name.
type stubInstances struct {
	exists      map[string]bool
	existsErr   map[string]error
	shutdown    map[string]bool
	shutdownErr map[string]error
}

var _ cloudprovider.InstancesV2 = (*stubInstances)(nil)

func (s *stubInstances) InstanceExists(_ context.Context, node *v1.Node) (bool, error) {
	return s.exists[node.Name], s.existsErr[node.Name]
}

func (s *stubInstances) InstanceShutdown(_ context.Context, node *v1.Node) (bool, error) {
	return s.shutdown[node.Name], s.shutdownErr[node.Name]
}

func (s *stubInstances) InstanceMetadata(context.Context, *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	return nil, cloudprovider.NotImplemented
}

// TestErrorsNeverDelete: whatever error InstanceExists returns, the Node is
// not deleted, no gone-observation is made, and an earlier one stays as it
// was, even long past the grace period.
func TestErrorsNeverDelete(t *testing.T) {
	errs := []struct {
		name       string
		err        error
		retryAfter bool
	}{
		{name: "provider error", err: errors.New("cloud API unavailable")},
		{name: "guard timeout", err: fmt.Errorf("InstanceExists node %q: %w", "n", cloud.ErrTimeout)},
		{name: "context deadline", err: context.DeadlineExceeded},
		{name: "call in progress", err: &cloud.RetryAfterError{RetryAfter: time.Second, Err: cloud.ErrInProgress}, retryAfter: true},
		{name: "guard saturated", err: &cloud.RetryAfterError{RetryAfter: time.Second, Err: cloud.ErrSaturated}, retryAfter: true},
		{name: "fenced", err: &cloud.RetryAfterError{RetryAfter: time.Second, Err: cloud.ErrFenced}, retryAfter: true},
		{name: "throttled", err: &cloud.ThrottledError{RetryAfter: time.Second}, retryAfter: true},
		{name: "provider retry error", err: api.NewRetryError("not yet", time.Second), retryAfter: true},
	}
	for _, tt := range errs {
		for _, earlier := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, earlier observation %v", tt.name, earlier), func(t *testing.T) {
				node := testNode("n", v1.ConditionFalse)
				f := newFixture(t, cloud.Options{}, node)
				f.c.instances = &stubInstances{existsErr: map[string]error{"n": tt.err}}
				var before goneObservation
				if earlier {
					before = f.remember(node, 10*unitGrace)
				}
				err := f.c.sync(f.ctx, "n")
				if !errors.Is(err, tt.err) {
					t.Errorf("sync error %v, want it to wrap %v", err, tt.err)
				}
				if _, ok := cloud.RetryAfter(err); ok != tt.retryAfter {
					t.Errorf("retry-after %v, want %v", ok, tt.retryAfter)
				}
				if got := f.writes(); len(got) != 0 {
					t.Errorf("Node requests %q, want none", got)
				}
				if got := f.recordedEvents(); len(got) != 0 {
					t.Errorf("events %q, want none", got)
				}
				obs, ok := f.observation("n")
				if ok != earlier || obs != before {
					t.Errorf("observation %+v (present %v), want %+v (present %v)", obs, ok, before, earlier)
				}
			})
		}
	}
}

// TestGuardErrorsNeverDelete runs the errors of the real guard: a timeout,
// a call released after the detach window, and a saturated guard.
func TestGuardErrorsNeverDelete(t *testing.T) {
	tests := []struct {
		name   string
		opts   cloud.Options
		faults []fake.Fault
		// first, when set, is checked before the Node under test, to fill the guard.
		first string
		check func(error) bool
	}{
		{
			name:   "hung call reaches its deadline",
			opts:   cloud.Options{CallTimeout: 50 * time.Millisecond, DetachAfter: time.Minute},
			faults: []fake.Fault{{Method: "InstanceExists", Hang: fake.HangRespectContext}},
			check:  func(err error) bool { return errors.Is(err, cloud.ErrTimeout) },
		},
		{
			name:   "hung call detached",
			opts:   cloud.Options{CallTimeout: time.Minute, DetachAfter: 20 * time.Millisecond},
			faults: []fake.Fault{{Method: "InstanceExists", Hang: fake.HangIgnoreContext}},
			check:  func(err error) bool { return errors.Is(err, cloud.ErrInProgress) },
		},
		{
			name:   "guard saturated by another hung call",
			opts:   cloud.Options{CallTimeout: time.Minute, DetachAfter: 20 * time.Millisecond, MaxInflight: 1},
			faults: []fake.Fault{{Method: "InstanceExists", Object: "hog", Hang: fake.HangIgnoreContext}},
			first:  "hog",
			check:  func(err error) bool { return errors.Is(err, cloud.ErrSaturated) },
		},
		{
			name:   "provider error",
			faults: []fake.Fault{{Method: "InstanceExists", Error: "internal error"}},
			check:  func(err error) bool { _, retry := cloud.RetryAfter(err); return err != nil && !retry },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := testNode("n", v1.ConditionFalse)
			f := newFixture(t, tt.opts, node, testNode("hog", v1.ConditionFalse))
			for _, fault := range tt.faults {
				if _, err := f.cloud.AddFault(fault); err != nil {
					t.Fatal(err)
				}
			}
			if tt.first != "" {
				if err := f.c.sync(f.ctx, tt.first); !errors.Is(err, cloud.ErrInProgress) {
					t.Fatalf("first check: %v, want a call in progress", err)
				}
			}
			before := f.remember(node, 10*unitGrace)
			err := f.c.sync(f.ctx, "n")
			if !tt.check(err) {
				t.Fatalf("sync error %v", err)
			}
			if got := f.writes(); len(got) != 0 {
				t.Errorf("Node requests %q, want none", got)
			}
			if obs, _ := f.observation("n"); obs != before {
				t.Errorf("observation %+v, want it kept as %+v", obs, before)
			}
		})
	}
}

func TestShutdownCheck(t *testing.T) {
	tests := []struct {
		name        string
		shutdown    bool
		shutdownErr error
		wantErr     bool
		wantPatch   bool
	}{
		{name: "shut down: tainted", shutdown: true, wantPatch: true},
		{name: "running: nothing", shutdown: false},
		{name: "provider does not implement shutdown: nothing", shutdownErr: cloudprovider.NotImplemented},
		{name: "instance vanished between the calls: nothing now", shutdownErr: cloudprovider.InstanceNotFound},
		{name: "error: retried, no taint", shutdown: true, shutdownErr: errors.New("boom"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, cloud.Options{}, testNode("n", v1.ConditionFalse))
			f.c.instances = &stubInstances{
				exists:      map[string]bool{"n": true},
				shutdown:    map[string]bool{"n": tt.shutdown},
				shutdownErr: map[string]error{"n": tt.shutdownErr},
			}
			err := f.c.sync(f.ctx, "n")
			if (err != nil) != tt.wantErr {
				t.Errorf("sync error %v, want error %v", err, tt.wantErr)
			}
			if got := len(f.patches(t)) == 1; got != tt.wantPatch {
				t.Errorf("patched %v, want %v", got, tt.wantPatch)
			}
		})
	}
}

func TestDeleteOutcomes(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantErr    bool
		wantEvents []string
		wantKept   bool
	}{
		{name: "deleted", wantEvents: []string{"Normal " + reasonDeletingNode}},
		{
			name:       "already gone",
			err:        apierrors.NewNotFound(nodesResource.GroupResource(), "n"),
			wantEvents: []string{"Normal " + reasonDeletingNode},
		},
		{
			name:       "UID precondition failed: the Node was replaced",
			err:        apierrors.NewConflict(nodesResource.GroupResource(), "n", errors.New("Precondition failed: UID in precondition: n-uid, UID in object meta: new-uid")),
			wantEvents: []string{"Normal " + reasonDeletingNode},
		},
		{
			name:       "failure: Warning, observation kept for the next try",
			err:        apierrors.NewInternalError(errors.New("etcd down")),
			wantErr:    true,
			wantEvents: []string{"Normal " + reasonDeletingNode, "Warning " + reasonDeletingNodeFailed},
			wantKept:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := testNode("n", v1.ConditionFalse)
			f := newFixture(t, cloud.Options{}, node)
			if tt.err != nil {
				f.client.PrependReactor("delete", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tt.err
				})
			}
			f.remember(node, unitGrace)
			err := f.c.sync(f.ctx, "n")
			if (err != nil) != tt.wantErr {
				t.Errorf("sync error %v, want error %v", err, tt.wantErr)
			}
			if got := eventReasons(f.recordedEvents()); !slices.Equal(got, tt.wantEvents) {
				t.Errorf("events %q, want %q", got, tt.wantEvents)
			}
			if _, kept := f.observation("n"); kept != tt.wantKept {
				t.Errorf("observation kept %v, want %v", kept, tt.wantKept)
			}
		})
	}
}

// TestTaintPatchConflict: when another writer changed the Node after the
// cached read, the patch fails on its resourceVersion, and the retry starts
// from a fresh read, so the other writer's taint survives.
func TestTaintPatchConflict(t *testing.T) {
	tests := []struct {
		name string
		// meanwhile is what the other writer made of the Node.
		meanwhile   func(*v1.Node)
		wantWrites  []string
		wantTaints  []string
		wantVersion string
	}{
		{
			name: "another taint added meanwhile",
			meanwhile: func(n *v1.Node) {
				n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: "example.com/late", Effect: v1.TaintEffectNoSchedule})
			},
			wantWrites:  []string{"patch n", "get n", "patch n"},
			wantTaints:  []string{otherTaint + ":NoExecute", "example.com/late:NoSchedule", taintShutdown + ":NoSchedule"},
			wantVersion: "2",
		},
		{
			name:       "shutdown taint added meanwhile: nothing left to do",
			meanwhile:  func(n *v1.Node) { n.Spec.Taints = append(n.Spec.Taints, shutdownTaint()) },
			wantWrites: []string{"patch n", "get n"},
		},
		{
			name:       "Node replaced meanwhile: left to the next check",
			meanwhile:  func(n *v1.Node) { n.UID = "new-uid" },
			wantWrites: []string{"patch n", "get n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := testNode("n", v1.ConditionFalse, taintOther())
			f := newFixture(t, cloud.Options{}, node)
			f.addInstance(t, "n", fake.StateStopped)
			newer := node.DeepCopy()
			newer.ResourceVersion = "2"
			tt.meanwhile(newer)
			if err := f.client.Tracker().Update(nodesResource, newer, ""); err != nil {
				t.Fatal(err)
			}
			conflicts := 0
			f.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				var p taintPatch
				if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &p); err != nil {
					return true, nil, err
				}
				if p.Metadata.ResourceVersion != "2" {
					conflicts++
					return true, nil, apierrors.NewConflict(nodesResource.GroupResource(), "n", errors.New("the object has been modified"))
				}
				return false, nil, nil
			})

			if err := f.c.sync(f.ctx, "n"); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if conflicts != 1 {
				t.Errorf("%d conflicts, want 1", conflicts)
			}
			if got := f.writes(); !slices.Equal(got, tt.wantWrites) {
				t.Errorf("Node requests %q, want %q", got, tt.wantWrites)
			}
			if tt.wantTaints == nil {
				return
			}
			patches := f.patches(t)
			last := patches[len(patches)-1]
			if got := taintKeys(last.Spec.Taints); !slices.Equal(got, tt.wantTaints) {
				t.Errorf("taints %q, want %q", got, tt.wantTaints)
			}
			if last.Metadata.ResourceVersion != tt.wantVersion {
				t.Errorf("precondition resourceVersion %q, want %q", last.Metadata.ResourceVersion, tt.wantVersion)
			}
		})
	}
}

func TestScan(t *testing.T) {
	deleting := testNode("deleting", v1.ConditionFalse)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.Finalizers = []string{"example.com/hold"}
	f := newFixture(t, cloud.Options{},
		testNode("ready", v1.ConditionTrue),
		testNode("ready-tainted", v1.ConditionTrue, shutdownTaint()),
		testNode("not-ready", v1.ConditionFalse),
		testNode("unknown", v1.ConditionUnknown),
		testNode("no-condition", ""),
		deleting,
	)
	ready, _ := f.c.nodes.Get("ready")
	f.remember(ready, time.Minute)

	f.c.scan(f.ctx)
	want := []string{"no-condition", "not-ready", "ready-tainted", "unknown"}
	if got := pendingNodes(f.c); !slices.Equal(got, want) {
		t.Errorf("pending %q, want %q", got, want)
	}
	if got := f.c.queue.Len(); got != len(want) {
		t.Errorf("queue length %d, want %d", got, len(want))
	}
	if _, ok := f.observation("ready"); ok {
		t.Error("a Ready Node's gone-observation was kept")
	}
}

func pendingNodes(c *Controller) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(slices.Values(c.pending.UnsortedList()))
}

// TestPendingNotQueuedTwice: a Node whose check is queued, running or waiting
// for a retry is not queued again by the scan; one whose check succeeded is.
func TestPendingNotQueuedTwice(t *testing.T) {
	f := newFixture(t, cloud.Options{},
		testNode("in-progress", v1.ConditionFalse),
		testNode("failing", v1.ConditionFalse),
		testNode("fine", v1.ConditionFalse),
	)
	f.c.instances = &stubInstances{
		exists: map[string]bool{"fine": true},
		existsErr: map[string]error{
			"in-progress": &cloud.RetryAfterError{RetryAfter: time.Hour, Err: cloud.ErrInProgress},
			"failing":     errors.New("boom"),
		},
	}
	f.c.scan(f.ctx)
	f.c.scan(f.ctx)
	if got := f.c.queue.Len(); got != 3 {
		t.Fatalf("queue length %d after two scans, want 3", got)
	}
	for range 3 {
		f.c.queue.Next(f.ctx, f.c.check)
	}
	if got := pendingNodes(f.c); !slices.Equal(got, []string{"failing", "in-progress"}) {
		t.Errorf("pending %q, want the two waiting for a retry", got)
	}
	if got := f.c.queue.NumRequeues("failing"); got != 1 {
		t.Errorf("failing Node requeued %d times with back-off, want 1", got)
	}
	if got := f.c.queue.NumRequeues("in-progress"); got != 0 {
		t.Errorf("in-progress Node requeued %d times with back-off, want 0 (it waits as the guard asked)", got)
	}
	f.c.scan(f.ctx)
	if got := f.c.queue.Len(); got != 1 {
		t.Errorf("queue length %d after the next scan, want 1 (only the Node whose check succeeded)", got)
	}
}

func TestOnDelete(t *testing.T) {
	tests := []struct {
		name     string
		deleted  func(*v1.Node) any
		wantKept bool
	}{
		{name: "deleted Node", deleted: func(n *v1.Node) any { return n }},
		{name: "tombstone", deleted: func(n *v1.Node) any { return cache.DeletedFinalStateUnknown{Key: n.Name, Obj: n} }},
		{
			name: "an older Node of the same name",
			deleted: func(n *v1.Node) any {
				old := n.DeepCopy()
				old.UID = "older-uid"
				return old
			},
			wantKept: true,
		},
		{name: "tombstone without a Node", deleted: func(n *v1.Node) any { return cache.DeletedFinalStateUnknown{Key: n.Name} }, wantKept: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := testNode("n", v1.ConditionFalse)
			f := newFixture(t, cloud.Options{}, node)
			f.remember(node, time.Minute)
			f.c.onDelete(tt.deleted(node))
			if _, kept := f.observation("n"); kept != tt.wantKept {
				t.Errorf("observation kept %v, want %v", kept, tt.wantKept)
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := Config{MonitorPeriod: time.Second, DeletionGracePeriod: time.Second, Workers: 1}
	tests := []struct {
		name string
		cfg  func(*Config)
	}{
		{name: "zero monitor period", cfg: func(c *Config) { c.MonitorPeriod = 0 }},
		{name: "negative grace period", cfg: func(c *Config) { c.DeletionGracePeriod = -time.Second }},
		{name: "no workers", cfg: func(c *Config) { c.Workers = 0 }},
	}
	_, ctx := ktesting.NewTestContext(t)
	client := k8sfake.NewClientset()
	informer := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes()
	fc, err := fake.New(&fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	guard := cloud.New(fc, cloud.Options{})
	t.Cleanup(guard.Close)
	if _, err := New(ctx, client, informer, guard, record.NewFakeRecorder(1), good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	noInstances := cloud.New(withoutInstances{fc}, cloud.Options{})
	t.Cleanup(noInstances.Close)
	if _, err := New(ctx, client, informer, noInstances, record.NewFakeRecorder(1), good); err == nil {
		t.Error("no InstancesV2: no error")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.cfg(&cfg)
			if _, err := New(ctx, client, informer, guard, record.NewFakeRecorder(1), cfg); err == nil {
				t.Errorf("config %+v: no error", cfg)
			}
		})
	}
}

// withoutInstances is a provider that offers no InstancesV2.
type withoutInstances struct{ cloudprovider.Interface }

func (withoutInstances) InstancesV2() (cloudprovider.InstancesV2, bool) { return nil, false }
