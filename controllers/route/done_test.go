package route

import (
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/controllers/internal/worker"
)

// bareController is a Controller without informers, for the bookkeeping
// of done.
func bareController(t *testing.T) (*Controller, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	client := fake.NewClientset()
	recorder := record.NewFakeRecorder(10)
	c := &Controller{
		client:     client,
		recorder:   recorder,
		queue:      worker.New("test", "", workqueue.NewTypedItemExponentialFailureRateLimiter[string](minRetryDelay, maxRetryDelay)),
		busy:       map[string]bool{},
		failures:   map[string]*failure{},
		present:    map[string]string{},
		settled:    map[string]time.Time{},
		nodeRoutes: map[string][]string{},
		written:    map[string]v1.ConditionStatus{},
	}
	t.Cleanup(c.queue.ShutDown)
	return c, client, recorder
}

func createTask(dest string) *task {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1"}}
	return &task{dest: dest, create: &desiredRoute{node: n, cidr: dest}}
}

func TestSaturatedCallIsNotAFailure(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c, client, recorder := bareController(t)
	tk := createTask("10.244.1.0/24")
	c.busy[tk.dest] = true

	c.done(ctx, tk, &cloud.RetryAfterError{RetryAfter: time.Second, Err: cloud.ErrSaturated}, true)

	if c.busy[tk.dest] {
		t.Error("the destination is still busy")
	}
	if f := c.failures[tk.dest]; f != nil {
		t.Errorf("a saturated guard counted as failure %d", f.count)
	}
	if n := len(recorder.Events); n != 0 {
		t.Errorf("%d Events for a call that was never made", n)
	}
	if a := client.Actions(); len(a) != 0 {
		t.Errorf("the Node was written: %v", a)
	}
}

func TestFailedCreateBacksOffAndTells(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c, client, recorder := bareController(t)
	tk := createTask("10.244.1.0/24")
	c.nodeRoutes["n1"] = []string{tk.dest}

	c.done(ctx, tk, errors.New("quota exceeded"), true)

	f := c.failures[tk.dest]
	if f == nil || f.count != 1 {
		t.Fatalf("failure = %+v, want one", f)
	}
	if wait := time.Until(f.retryAt); wait <= 0 || wait > minRetryDelay {
		t.Errorf("retry in %s, want within the first back-off step %s", wait, minRetryDelay)
	}
	if n := len(recorder.Events); n != 1 {
		t.Errorf("%d Events, want one FailedToCreateRoute", n)
	}
	patched := false
	for _, a := range client.Actions() {
		patched = patched || (a.GetVerb() == "patch" && a.GetSubresource() == "status")
	}
	if !patched {
		t.Errorf("NetworkUnavailable not written: %v", client.Actions())
	}
}
