package cloud

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// TestViewsKeepTheirOwnResults: a detached call's result goes back to the
// view that made it, to its callbacks alone, and only it takes the result.
func TestViewsKeepTheirOwnResults(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	proceed := make(chan struct{})
	stub := newStub(t, func(_ context.Context, method, _ string) error {
		if method == "InstanceExists" {
			<-proceed
		}
		return nil
	})
	g := New(stub, Options{CallTimeout: time.Minute, DetachAfter: 50 * time.Millisecond})
	defer g.Close()
	lifecycle, nodes := g.For("lifecycle", nil), g.For("nodes", nil)
	toNodes, toLifecycle := make(chan string, 4), make(chan string, 4)
	// The other view registers first: were callbacks shared, it would be
	// called before the owner's.
	nodes.OnResult(KindNode, func(key string) { toNodes <- key })
	lifecycle.OnResult(KindNode, func(key string) { toLifecycle <- key })

	inst, _ := lifecycle.InstancesV2()
	if _, err := inst.InstanceExists(ctx, node("n1")); !errors.Is(err, ErrInProgress) {
		t.Fatalf("error = %v, want ErrInProgress", err)
	}
	close(proceed)
	select {
	case key := <-toLifecycle:
		if key != "n1" {
			t.Fatalf("owner called back with %q, want n1", key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the view that made the call was not called back")
	}
	select {
	case key := <-toNodes:
		t.Fatalf("another view was called back with %q", key)
	default:
	}

	// Another view asking the same question gets its own answer from the
	// provider; the owner takes the kept one.
	other, _ := nodes.InstancesV2()
	if _, err := other.InstanceExists(ctx, node("n1")); err != nil {
		t.Fatal(err)
	}
	if got := stub.count("InstanceExists"); got != 2 {
		t.Errorf("provider called %d times, want 2 (the other view must not take the kept result)", got)
	}
	if _, err := inst.InstanceExists(ctx, node("n1")); err != nil {
		t.Fatal(err)
	}
	if got := stub.count("InstanceExists"); got != 2 {
		t.Errorf("provider called %d times, want 2 (the owner takes its kept result)", got)
	}
}

// TestHungCallIsLoggedAndToldAbout: detaching, reaching the deadline and
// fencing off another call each log at -v=2 and tell the object once.
func TestHungCallIsLoggedAndToldAbout(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	logs := func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
	release := make(chan struct{})
	defer close(release)
	stub := newStub(t, hangIgnoringContext(release))
	g := New(stub, Options{LBCallTimeout: 300 * time.Millisecond, DetachAfter: 50 * time.Millisecond, FenceTimeout: time.Minute})
	defer g.Close()
	recorder := record.NewFakeRecorder(10)
	lb, _ := g.For("service", recorder).LoadBalancer()

	nextEvent := func(want ...string) {
		t.Helper()
		select {
		case e := <-recorder.Events:
			for _, w := range want {
				if !strings.Contains(e, w) {
					t.Errorf("event %q does not contain %q", e, w)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event with %q", want)
		}
	}

	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("web"), nil); !errors.Is(err, ErrInProgress) {
		t.Fatalf("error = %v, want ErrInProgress", err)
	}
	nextEvent("Warning", reasonDetached, "EnsureLoadBalancer has not returned after 50ms")
	if !strings.Contains(logs(), "Cloud call has not returned, going on in the background") {
		t.Errorf("no log of the detach at -v=2:\n%s", logs())
	}

	nextEvent("Warning", reasonTimedOut, "EnsureLoadBalancer did not return by its deadline of 300ms")
	eventually(t, "the deadline's log", func() bool { return strings.Contains(logs(), "Cloud call did not return by its deadline") })

	for range 2 {
		if err := lb.UpdateLoadBalancer(ctx, "c", service("web"), nil); !errors.Is(err, ErrFenced) {
			t.Fatalf("error = %v, want ErrFenced", err)
		}
	}
	nextEvent("Warning", reasonFenced, "UpdateLoadBalancer not started: EnsureLoadBalancer")
	select {
	case e := <-recorder.Events:
		t.Errorf("a second refusal by the same fence told the object again: %q", e)
	default:
	}
	if got := strings.Count(logs(), "Cloud call refused"); got != 1 {
		t.Errorf("the fence's refusals logged %d times at -v=2, want once:\n%s", got, logs())
	}
}

// TestLeaseCheckStopsMutatingCalls: once the lease check fails, no
// mutating call reaches the provider; reading calls still do.
func TestLeaseCheckStopsMutatingCalls(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	stub := newStub(t, nil)
	g := New(stub, Options{})
	defer g.Close()
	errLost := errors.New("the Lease is not held")
	var lost atomic.Bool
	g.RequireLease(func() error {
		if lost.Load() {
			return errLost
		}
		return nil
	})
	view := g.For("route", nil)
	routes, _ := view.Routes()
	route := &cloudprovider.Route{DestinationCIDR: "10.0.1.0/24", TargetNode: "n1"}
	if err := routes.CreateRoute(ctx, "c", "hint", route); err != nil {
		t.Fatalf("while leading: %v", err)
	}
	lost.Store(true)
	if err := routes.CreateRoute(ctx, "c", "hint", route); !errors.Is(err, errLost) {
		t.Fatalf("CreateRoute error = %v, want the lease check's", err)
	}
	if err := routes.DeleteRoute(ctx, "c", route); !errors.Is(err, errLost) {
		t.Fatalf("DeleteRoute error = %v, want the lease check's", err)
	}
	if got := stub.count("CreateRoute") + stub.count("DeleteRoute"); got != 1 {
		t.Errorf("provider got %d mutating calls, want 1 (before the Lease was lost)", got)
	}
	if _, err := routes.ListRoutes(ctx, "c"); err != nil {
		t.Errorf("ListRoutes: %v", err)
	}
}

// TestSaturatedReportsTheBound: Saturated says which bound is reached, and
// nothing once the calls have returned.
func TestSaturatedReportsTheBound(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	release := make(chan struct{})
	stub := newStub(t, hangIgnoringContext(release))
	g := New(stub, Options{CallTimeout: 50 * time.Millisecond, DetachAfter: time.Minute, MaxAbandoned: 1})
	defer g.Close()
	if err := g.Saturated(); err != nil {
		t.Fatalf("idle guard: %v", err)
	}
	inst, _ := g.InstancesV2()
	if _, err := inst.InstanceExists(ctx, node("a")); !errors.Is(err, ErrTimeout) {
		t.Fatalf("error = %v, want ErrTimeout", err)
	}
	err := g.Saturated()
	if !errors.Is(err, ErrSaturated) || !strings.Contains(err.Error(), "--cloud-max-abandoned-calls=1") {
		t.Fatalf("Saturated() = %v, want the abandoned bound", err)
	}
	close(release)
	eventually(t, "the guard to take calls again", func() bool { return g.Saturated() == nil })
}

// TestYoungFenceIsNotToldAbout: a call refused by a fence whose call is
// still within the detach window is not told to the object.
func TestYoungFenceIsNotToldAbout(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	release := make(chan struct{})
	stub := newStub(t, hangIgnoringContext(release))
	g := New(stub, Options{DetachAfter: time.Minute, LBCallTimeout: time.Minute})
	defer g.Close()
	recorder := record.NewFakeRecorder(10)
	lb, _ := g.For("service", recorder).LoadBalancer()
	returned := make(chan error, 1)
	go func() {
		_, err := lb.EnsureLoadBalancer(ctx, "c", service("web"), nil)
		returned <- err
	}()
	eventually(t, "the first call to start", func() bool { return stub.count("EnsureLoadBalancer") == 1 })
	if err := lb.UpdateLoadBalancer(ctx, "c", service("web"), nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("error = %v, want ErrFenced", err)
	}
	select {
	case e := <-recorder.Events:
		t.Errorf("a fence within the detach window told the object: %q", e)
	default:
	}
	close(release)
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
}
