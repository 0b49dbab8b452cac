// Package worker is the work loop every controller runs: a rate-limited
// queue of keys, a bounded number of workers, and one rule for what comes
// after a sync. A key is never synced by two workers at once.
package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/cloud"
)

// SyncFunc brings one key's object in line. It returns when the key is due
// again (0: only when an event or a callback adds it).
type SyncFunc func(ctx context.Context, key string) (next time.Duration, err error)

// Queue is a controller's queue of keys.
type Queue struct {
	workqueue.TypedRateLimitingInterface[string]
	logKey string
}

// New returns a queue whose workqueue metrics are named name. Its workers
// log the key they sync under logKey; "" leaves it out.
func New(name, logKey string, limiter workqueue.TypedRateLimiter[string]) *Queue {
	return &Queue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(limiter,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name}),
		logKey: logKey,
	}
}

// Run syncs keys on workers goroutines until ctx is done, then shuts the
// queue down and returns when the workers have stopped.
//
// After a sync, the key is:
//   - forgotten by the rate limiter on success, and added again after the
//     returned next if that is positive;
//   - left alone when the error is cloud.ErrInProgress: the guard calls the
//     controller's OnResult callback, which adds the key, when the call
//     returns or reaches its deadline; a timer of its own would sync it
//     again before that, or cut a failure's back-off short;
//   - added after the wait a retry-after error asks for (a fence, a
//     saturated guard, cloud throttling);
//   - added with the rate limiter's back-off after any other error.
func (q *Queue) Run(ctx context.Context, workers int, syncFn SyncFunc) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for q.Next(ctx, syncFn) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
}

// Next waits for a key, syncs it and requeues it as Run describes. It
// returns false when the queue is shut down.
func (q *Queue) Next(ctx context.Context, syncFn SyncFunc) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	if ctx.Err() != nil {
		// Shutting down: what is still queued is not started.
		return false
	}
	// A worker whose cloud call runs long while other keys wait is
	// released early by the guard; the call goes on in the background.
	ctx = cloud.WithWaitingWork(ctx, func() bool { return q.Len() > 0 })
	logger := klog.FromContext(ctx)
	if q.logKey != "" {
		logger = logger.WithValues(q.logKey, key)
		ctx = klog.NewContext(ctx, logger)
	}
	next, err := handle(ctx, key, syncFn)
	if err == nil {
		q.Forget(key)
		if next > 0 {
			q.AddAfter(key, next)
		}
		return true
	}
	if errors.Is(err, cloud.ErrInProgress) {
		logger.V(4).Info("Cloud call in progress, waiting for its result", "err", err)
		return true
	}
	if after, ok := cloud.RetryAfter(err); ok && after > 0 {
		logger.V(4).Info("Retrying later", "after", after, "err", err)
		q.AddAfter(key, after)
		return true
	}
	logger.V(2).Info("Sync failed, retrying with back-off", "err", err)
	q.AddRateLimited(key)
	return true
}

// handle runs sync and turns a panic into an error, so a bug in one
// object's sync backs that key off instead of crashing every controller.
func handle(ctx context.Context, key string, syncFn SyncFunc) (next time.Duration, err error) {
	defer func() {
		if p := recover(); p != nil {
			utilruntime.HandleErrorWithContext(ctx, nil, "Sync panicked", "panic", p)
			next, err = 0, errors.New("sync panicked")
		}
	}()
	return syncFn(ctx, key)
}
