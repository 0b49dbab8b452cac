package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/cloud"
)

// TestNextRequeuesByResult: what follows a sync depends only on what it
// returned.
func TestNextRequeuesByResult(t *testing.T) {
	tests := []struct {
		name         string
		next         time.Duration
		err          error
		panics       bool
		wantRequeues int  // back-off requeues counted by the rate limiter
		wantBack     bool // the key comes back by itself
	}{
		{name: "success, not due again"},
		{name: "success, due again", next: 20 * time.Millisecond, wantBack: true},
		{name: "call in progress waits for the guard's callback", err: &cloud.RetryAfterError{RetryAfter: 20 * time.Millisecond, Err: cloud.ErrInProgress}},
		{name: "fenced retries when asked", err: &cloud.RetryAfterError{RetryAfter: 20 * time.Millisecond, Err: cloud.ErrFenced}, wantBack: true},
		{name: "failure backs off", err: errors.New("boom"), wantRequeues: 1, wantBack: true},
		{name: "panic backs off", panics: true, wantRequeues: 1, wantBack: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			q := New("test", "key", workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, time.Second))
			defer q.ShutDown()
			q.Add("k")
			synced := 0
			sync := func(context.Context, string) (time.Duration, error) {
				synced++
				if tt.panics {
					panic("bug")
				}
				return tt.next, tt.err
			}
			if !q.Next(ctx, sync) {
				t.Fatal("queue shut down")
			}
			if synced != 1 {
				t.Fatalf("synced %d times, want 1", synced)
			}
			if got := q.NumRequeues("k"); got != tt.wantRequeues {
				t.Errorf("back-off requeues = %d, want %d", got, tt.wantRequeues)
			}
			// A key that comes back is due within 20 ms; one that must not
			// is given five times that to show up.
			wait := 100 * time.Millisecond
			if tt.wantBack {
				wait = 10 * time.Second
			}
			back := make(chan bool, 1)
			go func() {
				key, quit := q.Get()
				if !quit {
					q.Done(key)
				}
				back <- !quit
			}()
			select {
			case got := <-back:
				if !tt.wantBack || !got {
					t.Errorf("key came back = %v, want %v", got, tt.wantBack)
				}
			case <-time.After(wait):
				if tt.wantBack {
					t.Error("key did not come back")
				}
				q.ShutDown()
				<-back
			}
		})
	}
}

// TestRunStopsAndSkipsWhatIsQueued: once ctx is done, Run returns after its
// workers stop, and keys still queued are not synced.
func TestRunStopsAndSkipsWhatIsQueued(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	q := New("test", "", workqueue.DefaultTypedControllerRateLimiter[string]())
	started := make(chan struct{})
	release := make(chan struct{})
	synced := make(chan string, 10)
	sync := func(_ context.Context, key string) (time.Duration, error) {
		synced <- key
		if key == "first" {
			close(started)
			<-release
		}
		return 0, nil
	}
	q.Add("first")
	done := make(chan struct{})
	go func() {
		q.Run(ctx, 1, sync)
		close(done)
	}()
	<-started
	q.Add("second")
	cancel()
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx was done")
	}
	close(synced)
	var got []string
	for k := range synced {
		got = append(got, k)
	}
	if len(got) != 1 || got[0] != "first" {
		t.Errorf("synced %q, want only the key that was running", got)
	}
}
