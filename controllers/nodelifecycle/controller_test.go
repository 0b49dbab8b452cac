package nodelifecycle

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

const grace = 2 * time.Second

type env struct {
	ctx    context.Context
	client kubernetes.Interface
	cloud  *fake.Cloud
	events *record.FakeRecorder
}

func start(t *testing.T) *env {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	cp := harness.StartControlPlane(t)
	fc, err := fake.New(&fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	guard := cloud.New(fc, cloud.Options{CallTimeout: time.Second, DetachAfter: 200 * time.Millisecond})
	t.Cleanup(guard.Close)
	instances, _ := guard.InstancesV2()

	factory := informers.NewSharedInformerFactory(cp.Client, 0)
	events := record.NewFakeRecorder(100)
	c, err := New(ctx, cp.Client, factory.Core().V1().Nodes(), instances, events, Config{MonitorPeriod: 200 * time.Millisecond, DeletionGracePeriod: grace, Workers: 4})
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
	return &env{ctx: ctx, client: cp.Client, cloud: fc, events: events}
}

// createNode creates a Node with an instance of the same name and the given
// Ready condition status.
func (e *env) createNode(t *testing.T, name string, readiness v1.ConditionStatus) *v1.Node {
	t.Helper()
	if err := e.cloud.AddInstance(fake.Instance{Name: name, ID: "i-" + name}); err != nil {
		t.Fatal(err)
	}
	node, err := e.client.CoreV1().Nodes().Create(e.ctx, &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.NodeSpec{ProviderID: "fake://i-" + name},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return e.setReady(t, node, readiness)
}

func (e *env) setReady(t *testing.T, node *v1.Node, status v1.ConditionStatus) *v1.Node {
	t.Helper()
	node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	updated, err := e.client.CoreV1().Nodes().UpdateStatus(e.ctx, node, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
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

func (e *env) poll(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// firstCheck returns when InstanceExists was first called for name.
func (e *env) firstCheck(name string) (time.Time, bool) {
	for _, call := range e.cloud.Calls() {
		if call.Method == "InstanceExists" && call.Object == name {
			return call.Start, true
		}
	}
	return time.Time{}, false
}

func TestGoneInstanceDeletedAfterGracePeriod(t *testing.T) {
	e := start(t)
	e.createNode(t, "gone", v1.ConditionFalse)
	e.createNode(t, "ready-gone", v1.ConditionTrue)
	e.cloud.DeleteInstance("gone")
	e.cloud.DeleteInstance("ready-gone")

	var first time.Time
	e.poll(t, "the first check of the vanished instance", 10*time.Second, func() bool {
		var ok bool
		first, ok = e.firstCheck("gone")
		return ok
	})
	if _, exists := e.get(t, "gone"); !exists {
		t.Fatal("the Node was deleted on the first observation")
	}
	e.poll(t, "the Node to be deleted", 15*time.Second, func() bool {
		_, exists := e.get(t, "gone")
		return !exists
	})
	if elapsed := time.Since(first); elapsed < grace {
		t.Errorf("deleted %s after the first gone-observation, want at least the %s grace period", elapsed, grace)
	}
	if _, exists := e.get(t, "ready-gone"); !exists {
		t.Error("a Ready Node was deleted")
	}
	if _, ok := e.firstCheck("ready-gone"); ok {
		t.Error("a Ready Node's instance was checked")
	}
}

func TestErrorsNeverDelete(t *testing.T) {
	e := start(t)
	e.createNode(t, "flaky", v1.ConditionUnknown)
	e.createNode(t, "hung", v1.ConditionFalse)
	if _, err := e.cloud.AddFault(fake.Fault{Method: "InstanceExists", Object: "flaky", Error: "cloud API unavailable"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cloud.AddFault(fake.Fault{Method: "InstanceExists", Object: "hung", Hang: fake.HangRespectContext}); err != nil {
		t.Fatal(err)
	}
	e.cloud.DeleteInstance("flaky")
	e.cloud.DeleteInstance("hung")

	// Several checks over more than the grace period, all failing.
	e.poll(t, "failing checks across the grace period", 20*time.Second, func() bool {
		first, ok := e.firstCheck("flaky")
		hungFirst, hungOK := e.firstCheck("hung")
		return ok && hungOK && time.Since(first) > 2*grace && time.Since(hungFirst) > 2*grace && e.cloud.CallCount("InstanceExists") >= 6
	})
	for _, name := range []string{"flaky", "hung"} {
		if _, exists := e.get(t, name); !exists {
			t.Errorf("%s deleted although every check failed", name)
		}
	}

	// Once the cloud answers, the absence is confirmed and the Node goes.
	e.cloud.ClearFaults()
	e.poll(t, "deletion once the cloud answers", 20*time.Second, func() bool {
		_, flaky := e.get(t, "flaky")
		_, hung := e.get(t, "hung")
		return !flaky && !hung
	})
}

func TestShutdownTaint(t *testing.T) {
	e := start(t)
	node := e.createNode(t, "sleepy", v1.ConditionFalse)
	// Another writer's taint, which must survive both patches.
	node.Spec.Taints = []v1.Taint{{Key: "example.com/other", Effect: v1.TaintEffectNoSchedule}}
	if _, err := e.client.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.cloud.SetInstanceState("sleepy", fake.StateStopped); err != nil {
		t.Fatal(err)
	}
	e.poll(t, "the shutdown taint", 10*time.Second, func() bool {
		n, _ := e.get(t, "sleepy")
		return hasTaint(n, taintShutdown)
	})
	n, _ := e.get(t, "sleepy")
	if !hasTaint(n, "example.com/other") {
		t.Errorf("taints %v: another writer's taint was dropped", n.Spec.Taints)
	}
	for _, taint := range n.Spec.Taints {
		if taint.Key == taintShutdown && taint.Effect != v1.TaintEffectNoSchedule {
			t.Errorf("shutdown taint effect %s, want NoSchedule", taint.Effect)
		}
	}

	if err := e.cloud.SetInstanceState("sleepy", fake.StateRunning); err != nil {
		t.Fatal(err)
	}
	e.setReady(t, n, v1.ConditionTrue)
	e.poll(t, "the shutdown taint to go", 10*time.Second, func() bool {
		n, _ := e.get(t, "sleepy")
		return !hasTaint(n, taintShutdown)
	})
	n, _ = e.get(t, "sleepy")
	if !hasTaint(n, "example.com/other") {
		t.Errorf("taints %v: another writer's taint was dropped", n.Spec.Taints)
	}
	if _, exists := e.get(t, "sleepy"); !exists {
		t.Error("a shut-down Node was deleted")
	}
}

func TestRecreatedNodeWithInstanceIsKept(t *testing.T) {
	e := start(t)
	old := e.createNode(t, "phoenix", v1.ConditionFalse)
	e.cloud.DeleteInstance("phoenix")
	e.poll(t, "the first gone-observation", 10*time.Second, func() bool {
		_, ok := e.firstCheck("phoenix")
		return ok
	})
	// The Node is replaced by a new one of the same name, whose instance exists.
	if err := e.client.CoreV1().Nodes().Delete(e.ctx, "phoenix", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createNode(t, "phoenix", v1.ConditionFalse)
	calls := e.cloud.CallCount("InstanceExists")
	e.poll(t, "checks across the grace period", 20*time.Second, func() bool {
		first, _ := e.firstCheck("phoenix")
		return time.Since(first) > 2*grace && e.cloud.CallCount("InstanceExists") > calls+3
	})
	n, exists := e.get(t, "phoenix")
	if !exists || n.UID == old.UID {
		t.Fatalf("the recreated Node was deleted (exists %v)", exists)
	}
}
