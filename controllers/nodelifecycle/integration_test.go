package nodelifecycle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

const (
	period = 200 * time.Millisecond
	grace  = 1500 * time.Millisecond
	// testLabel marks each subtest's Nodes; each subtest's controller
	// watches only its own, so the subtests share one apiserver.
	testLabel = "test.ccmkit.io/case"
	// waitTimeout bounds every wait; generous for a loaded 2-core -race run.
	waitTimeout = 30 * time.Second
)

// timedRecorder records Events with the time they were emitted, so a test
// can tell when the controller decided to delete a Node.
type timedRecorder struct {
	mu     sync.Mutex
	events []timedEvent
}

type timedEvent struct {
	at                time.Time
	node              string
	eventType, reason string
	message           string
}

var _ record.EventRecorder = (*timedRecorder)(nil)

func (r *timedRecorder) Event(obj runtime.Object, eventType, reason, message string) {
	r.record(obj, eventType, reason, message)
}

func (r *timedRecorder) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	r.record(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func (r *timedRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	r.record(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func (r *timedRecorder) record(obj runtime.Object, eventType, reason, message string) {
	at := time.Now()
	name := ""
	if m, err := meta.Accessor(obj); err == nil {
		name = m.GetName()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, timedEvent{at: at, node: name, eventType: eventType, reason: reason, message: message})
}

// of returns the Events about one Node.
func (r *timedRecorder) of(node string) []timedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []timedEvent
	for _, e := range r.events {
		if e.node == node {
			out = append(out, e)
		}
	}
	return out
}

// env is one subtest's controller: its own fake cloud behind a real guard,
// its own informer factory (seeing only Nodes labelled with its case), and
// the shared apiserver.
type env struct {
	ctx    context.Context
	client kubernetes.Interface
	cloud  *fake.Cloud
	events *timedRecorder
	label  string
}

func startEnv(t *testing.T, cp *harness.ControlPlane, label string, workers int) *env {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	fc, err := fake.New(&fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	guard := cloud.New(fc, cloud.Options{CallTimeout: time.Second, DetachAfter: period})
	t.Cleanup(guard.Close)

	factory := informers.NewSharedInformerFactoryWithOptions(cp.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = testLabel + "=" + label
	}))
	events := &timedRecorder{}
	c, err := New(ctx, cp.Client, factory.Core().V1().Nodes(), guard, events, Config{MonitorPeriod: period, DeletionGracePeriod: grace, Workers: workers})
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
	return &env{ctx: ctx, client: cp.Client, cloud: fc, events: events, label: label}
}

// createNode creates a Node of this env with the given Ready status and
// taints, with an instance in the given state ("" for none).
func (e *env) createNode(t *testing.T, name string, readiness v1.ConditionStatus, state string, taints ...v1.Taint) *v1.Node {
	t.Helper()
	if state != "" {
		if err := e.cloud.AddInstance(fake.Instance{Name: name, ID: "i-" + name, State: state}); err != nil {
			t.Fatal(err)
		}
	}
	// The status comes with the create, as the kubelet registers a Node, so
	// that the Node is never seen without its Ready condition.
	now := metav1.Now()
	node, err := e.client.CoreV1().Nodes().Create(e.ctx, &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{testLabel: e.label}},
		Spec:       v1.NodeSpec{ProviderID: "fake://i-" + name, Taints: taints},
		Status:     v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: readiness, LastHeartbeatTime: now, LastTransitionTime: now}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ready(node) != (readiness == v1.ConditionTrue) {
		t.Fatalf("created Node %s has conditions %+v, want Ready=%s", name, node.Status.Conditions, readiness)
	}
	return node
}

// setReady sets the Node's Ready condition through the status subresource.
func (e *env) setReady(t *testing.T, name string, status v1.ConditionStatus) *v1.Node {
	t.Helper()
	var updated *v1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := e.client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: status, LastHeartbeatTime: now, LastTransitionTime: now}}
		updated, err = e.client.CoreV1().Nodes().UpdateStatus(e.ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("setting Node %s Ready=%s: %v", name, status, err)
	}
	return updated
}

func (e *env) get(t *testing.T, name string) (*v1.Node, bool) {
	t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return n, true
}

func (e *env) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (e *env) waitDeleted(t *testing.T, name string) {
	t.Helper()
	e.waitFor(t, "Node "+name+" to be deleted", func() bool {
		_, exists := e.get(t, name)
		return !exists
	})
}

// existsCalls returns the InstanceExists calls for a Node that have
// returned, in the order they returned.
func (e *env) existsCalls(name string) []fake.CallRecord {
	var out []fake.CallRecord
	for _, call := range e.cloud.Calls() {
		if call.Method == "InstanceExists" && call.Object == name {
			out = append(out, call)
		}
	}
	return out
}

func (e *env) event(t *testing.T, node, reason string) timedEvent {
	t.Helper()
	for _, ev := range e.events.of(node) {
		if ev.reason == reason {
			return ev
		}
	}
	t.Fatalf("no %s Event for Node %s; Events: %+v", reason, node, e.events.of(node))
	return timedEvent{}
}

func (e *env) noWarnings(t *testing.T, node string) {
	t.Helper()
	for _, ev := range e.events.of(node) {
		if ev.eventType == v1.EventTypeWarning {
			t.Errorf("Warning Event for Node %s: %+v", node, ev)
		}
	}
}

func hasShutdownTaint(n *v1.Node) bool { return n != nil && hasTaint(n, taintShutdown) }

func TestIntegration(t *testing.T) {
	cp := harness.StartControlPlane(t)

	t.Run("vanished instance: Node deleted, not before the grace period", func(t *testing.T) {
		t.Parallel()
		e := startEnv(t, cp, "vanished", 4)
		const name = "vanished-1"
		e.createNode(t, name, v1.ConditionTrue, fake.StateRunning)
		e.cloud.DeleteInstance(name)
		e.setReady(t, name, v1.ConditionFalse)

		var first fake.CallRecord
		e.waitFor(t, "the first check of the vanished instance", func() bool {
			calls := e.existsCalls(name)
			if len(calls) > 0 {
				first = calls[0]
			}
			return len(calls) > 0
		})
		if first.Error != "" {
			t.Fatalf("first check failed: %s", first.Error)
		}
		if _, exists := e.get(t, name); !exists && time.Since(first.End) < grace {
			t.Fatal("Node deleted on the first gone-observation")
		}

		e.waitDeleted(t, name)
		deleting := e.event(t, name, reasonDeletingNode)
		if d := deleting.at.Sub(first.End); d < grace {
			t.Errorf("Node deleted %s after the first gone-observation, want at least the grace period %s", d, grace)
		}
		// The confirming check started at least the grace period after the
		// first one returned, and returned before the delete.
		confirmed := false
		for _, call := range e.existsCalls(name) {
			if call.Error == "" && !call.Start.Before(first.End.Add(grace)) && !call.End.After(deleting.at) {
				confirmed = true
			}
		}
		if !confirmed {
			t.Errorf("no check started %s after the first and returned before the delete; checks: %+v", grace, e.existsCalls(name))
		}
		e.noWarnings(t, name)
	})

	t.Run("errors, timeouts and hung calls never delete", func(t *testing.T) {
		t.Parallel()
		e := startEnv(t, cp, "errors", 4)
		const flaky, hung = "errors-flaky", "errors-hung"
		e.createNode(t, flaky, v1.ConditionUnknown, fake.StateRunning)
		e.createNode(t, hung, v1.ConditionFalse, fake.StateRunning)
		faultsFrom := time.Now()
		if _, err := e.cloud.AddFault(fake.Fault{Method: "InstanceExists", Object: flaky, Error: "cloud API unavailable"}); err != nil {
			t.Fatal(err)
		}
		// Respecting its context: the guard releases the worker after the
		// detach window and the call ends at its deadline with a timeout.
		if _, err := e.cloud.AddFault(fake.Fault{Method: "InstanceExists", Object: hung, Hang: fake.HangRespectContext}); err != nil {
			t.Fatal(err)
		}
		e.cloud.DeleteInstance(flaky)
		e.cloud.DeleteInstance(hung)

		// failedSpan is how long the failed checks since the faults span.
		failedSpan := func(name string) (time.Duration, int) {
			var firstStart, lastEnd time.Time
			n := 0
			for _, call := range e.existsCalls(name) {
				if call.Start.Before(faultsFrom) {
					continue
				}
				if call.Error == "" {
					t.Fatalf("check of %s succeeded despite the fault: %+v", name, call)
				}
				if n == 0 {
					firstStart = call.Start
				}
				lastEnd = call.End
				n++
			}
			return lastEnd.Sub(firstStart), n
		}
		e.waitFor(t, "failing checks spanning twice the grace period", func() bool {
			for _, name := range []string{flaky, hung} {
				if _, exists := e.get(t, name); !exists {
					t.Fatalf("Node %s deleted although every check failed; Events: %+v", name, e.events.of(name))
				}
			}
			flakySpan, flakyN := failedSpan(flaky)
			hungSpan, hungN := failedSpan(hung)
			return flakyN >= 3 && hungN >= 3 && flakySpan > 2*grace && hungSpan > 2*grace
		})
		for _, name := range []string{flaky, hung} {
			if _, exists := e.get(t, name); !exists {
				t.Errorf("Node %s deleted although every check failed", name)
			}
			if evs := e.events.of(name); len(evs) != 0 {
				t.Errorf("Events for Node %s although every check failed: %+v", name, evs)
			}
		}

		// Once the cloud answers, the absence is observed afresh and
		// confirmed a grace period later: the errors did not count.
		cleared := time.Now()
		e.cloud.ClearFaults()
		for _, name := range []string{flaky, hung} {
			e.waitDeleted(t, name)
			if d := e.event(t, name, reasonDeletingNode).at.Sub(cleared); d < grace {
				t.Errorf("Node %s deleted %s after the cloud recovered, want at least the grace period %s", name, d, grace)
			}
			e.noWarnings(t, name)
		}
	})

	t.Run("Ready Node whose instance is gone is left alone", func(t *testing.T) {
		t.Parallel()
		e := startEnv(t, cp, "ready", 4)
		const ready, witness = "ready-1", "ready-witness"
		// Neither has an instance; the NotReady witness is deleted after the
		// grace period, by when the Ready Node would have been too.
		e.createNode(t, ready, v1.ConditionTrue, "")
		e.createNode(t, witness, v1.ConditionFalse, "")
		e.waitDeleted(t, witness)
		if _, exists := e.get(t, ready); !exists {
			t.Fatal("Ready Node deleted")
		}
		if calls := e.existsCalls(ready); len(calls) != 0 {
			t.Errorf("Ready Node's instance checked: %+v", calls)
		}
		if evs := e.events.of(ready); len(evs) != 0 {
			t.Errorf("Events for the Ready Node: %+v", evs)
		}
	})

	t.Run("shutdown taint added for a stopped instance, removed when Ready", func(t *testing.T) {
		t.Parallel()
		e := startEnv(t, cp, "shutdown", 4)
		const name = "shutdown-1"
		other := v1.Taint{Key: "example.com/other", Effect: v1.TaintEffectNoSchedule}
		e.createNode(t, name, v1.ConditionFalse, fake.StateStopped, other)

		var node *v1.Node
		e.waitFor(t, "the shutdown taint", func() bool {
			node, _ = e.get(t, name)
			return hasShutdownTaint(node)
		})
		for _, taint := range node.Spec.Taints {
			if taint.Key == taintShutdown && (taint.Effect != v1.TaintEffectNoSchedule || taint.Value != "") {
				t.Errorf("shutdown taint %+v, want effect NoSchedule", taint)
			}
		}
		if !hasTaint(node, other.Key) {
			t.Errorf("taints %+v: another writer's taint dropped when tainting", node.Spec.Taints)
		}

		// Another writer adds a taint while the Node is shut down; the
		// removal must keep it.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := e.client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: "example.com/later", Effect: v1.TaintEffectPreferNoSchedule})
			_, err = e.client.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.cloud.SetInstanceState(name, fake.StateRunning); err != nil {
			t.Fatal(err)
		}
		e.setReady(t, name, v1.ConditionTrue)
		e.waitFor(t, "the shutdown taint to be removed", func() bool {
			node, _ = e.get(t, name)
			return node != nil && !hasShutdownTaint(node)
		})
		for _, key := range []string{other.Key, "example.com/later"} {
			if !hasTaint(node, key) {
				t.Errorf("taints %+v: taint %s dropped when removing the shutdown taint", node.Spec.Taints, key)
			}
		}
		e.noWarnings(t, name)
	})

	t.Run("a hung check does not hold up the others", func(t *testing.T) {
		t.Parallel()
		// One worker: without the guard's detach window, the hung check
		// would hold it for good.
		e := startEnv(t, cp, "hung", 1)
		const stuck, vanished = "hung-stuck", "hung-vanished"
		if _, err := e.cloud.AddFault(fake.Fault{Method: "*", Object: stuck, Hang: fake.HangIgnoreContext}); err != nil {
			t.Fatal(err)
		}
		e.createNode(t, stuck, v1.ConditionFalse, "")
		e.createNode(t, vanished, v1.ConditionFalse, "")
		e.waitDeleted(t, vanished)
		if _, exists := e.get(t, stuck); !exists {
			t.Error("Node with a hung check deleted")
		}
	})

	t.Run("UID precondition: a stale decision does not delete a re-registered Node", func(t *testing.T) {
		t.Parallel()
		_, ctx := ktesting.NewTestContext(t)
		fc, err := fake.New(&fake.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(fc.Close)
		guard := cloud.New(fc, cloud.Options{CallTimeout: time.Second, DetachAfter: period})
		t.Cleanup(guard.Close)
		// An informer that is never started: its cache holds what the test
		// puts there, a Node the apiserver no longer has.
		informer := informers.NewSharedInformerFactory(cp.Client, 0).Core().V1().Nodes()
		events := &timedRecorder{}
		c, err := New(ctx, cp.Client, informer, guard, events, Config{MonitorPeriod: period, DeletionGracePeriod: grace, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.queue.ShutDown)
		clock := &testClock{t: time.Now()}
		c.now = clock.now

		const name = "uid-phoenix"
		e := &env{ctx: ctx, client: cp.Client, cloud: fc, events: events, label: "uid"}
		old := e.createNode(t, name, v1.ConditionFalse, "")
		if err := cp.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		replacement := e.createNode(t, name, v1.ConditionFalse, "")
		if err := informer.Informer().GetIndexer().Add(old); err != nil {
			t.Fatal(err)
		}

		if err := c.sync(ctx, name); err != nil {
			t.Fatalf("first check: %v", err)
		}
		clock.advance(grace)
		if err := c.sync(ctx, name); err != nil {
			t.Fatalf("confirming check: %v", err)
		}
		e.event(t, name, reasonDeletingNode) // the delete was tried
		e.noWarnings(t, name)
		node, exists := e.get(t, name)
		if !exists || node.UID != replacement.UID {
			t.Fatalf("the re-registered Node was deleted by a decision about the old one (exists %v)", exists)
		}
		c.mu.Lock()
		_, kept := c.goneSince[name]
		c.mu.Unlock()
		if kept {
			t.Error("gone-observation of the replaced Node kept")
		}
	})
}
