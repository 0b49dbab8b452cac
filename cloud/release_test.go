package cloud

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
)

// TestWaitingWorkReleasesTheCallerEarly: once a method has a record of
// quick calls, a call that runs well past them releases its caller at once
// if other work waits, quietly, and tells its object only at the detach
// window. Without waiting work the caller waits for the result.
func TestWaitingWorkReleasesTheCallerEarly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var slow atomic.Int64 // how long the next calls take
	slow.Store(int64(time.Millisecond))
	release := make(chan struct{})
	stub := newStub(t, func(ctx context.Context, _, object string) error {
		if object == "default/hung" {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
		// The provider's latency, the thing under test; it ends early
		// if the call's context does.
		select {
		case <-time.After(time.Duration(slow.Load())):
		case <-ctx.Done():
		}
		return nil
	})
	g := New(stub, Options{DetachAfter: 2 * time.Second, LBCallTimeout: time.Minute})
	defer g.Close()
	recorder := record.NewFakeRecorder(10)
	view := g.For("service", recorder)
	requeued := make(chan string, 1)
	view.OnResult(KindService, func(key string) { requeued <- key })
	lb, _ := view.LoadBalancer()

	busy := WithWaitingWork(ctx, func() bool { return true })
	// Too few calls on record: the caller waits for its result.
	slow.Store(int64(100 * time.Millisecond))
	if _, err := lb.EnsureLoadBalancer(busy, "c", service("first"), nil); err != nil {
		t.Fatalf("with no record of the method: %v, want the result", err)
	}
	slow.Store(int64(time.Millisecond))
	for range minLatencySamples {
		if _, err := lb.EnsureLoadBalancer(busy, "c", service("quick"), nil); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	_, err := lb.EnsureLoadBalancer(busy, "c", service("hung"), nil)
	if !errors.Is(err, ErrInProgress) {
		t.Fatalf("error = %v, want ErrInProgress", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("released after %s, want well before the 2s detach window", took)
	}
	select {
	case e := <-recorder.Events:
		t.Errorf("an early release told the object: %q", e)
	default:
	}
	select {
	case e := <-recorder.Events:
		if want := reasonDetached; !strings.Contains(e, want) {
			t.Errorf("event %q, want %s", e, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event once the call ran for the detach window")
	}
	close(release)
	select {
	case key := <-requeued:
		if key != "default/hung" {
			t.Errorf("called back with %q", key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no callback when the released call returned")
	}

	// Nothing waits: a slower call is waited for.
	idle := WithWaitingWork(ctx, func() bool { return false })
	slow.Store(int64(100 * time.Millisecond))
	if _, err := lb.EnsureLoadBalancer(idle, "c", service("slow"), nil); err != nil {
		t.Fatalf("with no work waiting: %v, want the result", err)
	}
}

func TestReleaseAfterFollowsTheMethodsLatency(t *testing.T) {
	var l *latencies
	if got := l.releaseAfter(10 * time.Second); got != 10*time.Second {
		t.Errorf("no record: %s, want the detach window", got)
	}
	l = &latencies{}
	for i := range 100 {
		l.add(time.Duration(40+i%20) * time.Millisecond) // 40ms .. 59ms
	}
	if got := l.releaseAfter(10 * time.Second); got < 70*time.Millisecond || got > 75*time.Millisecond {
		t.Errorf("calls of 40-59ms: release after %s, want 1.25 x p95 (~72ms)", got)
	}
	fast := &latencies{}
	for range 20 {
		fast.add(time.Millisecond)
	}
	if got := fast.releaseAfter(10 * time.Second); got != minRelease {
		t.Errorf("calls of 1ms: release after %s, want the floor %s", got, minRelease)
	}
	if got := l.releaseAfter(50 * time.Millisecond); got != 50*time.Millisecond {
		t.Errorf("a detach window below the release time: %s, want the window", got)
	}
}

// TestReleaseTimeIsLookedUpWhileWaiting: a call that began before its
// method had a record is released once the record is there.
func TestReleaseTimeIsLookedUpWhileWaiting(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	release := make(chan struct{})
	defer close(release)
	stub := newStub(t, func(ctx context.Context, _, object string) error {
		if object == "default/hung" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	g := New(stub, Options{DetachAfter: 5 * time.Second, LBCallTimeout: time.Minute})
	defer g.Close()
	lb, _ := g.LoadBalancer()
	busy := WithWaitingWork(ctx, func() bool { return true })

	returned := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := lb.EnsureLoadBalancer(busy, "c", service("hung"), nil)
		returned <- err
	}()
	eventually(t, "the hung call to start", func() bool { return stub.count("EnsureLoadBalancer") == 1 })
	for range minLatencySamples {
		if _, err := lb.EnsureLoadBalancer(ctx, "c", service("quick"), nil); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-returned:
		if !errors.Is(err, ErrInProgress) {
			t.Fatalf("error = %v, want ErrInProgress", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("released after %s, want soon after the record filled up, well before the 5s window", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call was not released")
	}
}
