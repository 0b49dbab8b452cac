package aws

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// batchOptions shape the batching of instance look-ups.
type batchOptions struct {
	// window is how long the first look-up of a batch waits for others.
	window time.Duration
	// maxIDs sends a batch at once when it has this many instance IDs.
	maxIDs int
	// timeout bounds a batch's request, whoever waits for it.
	timeout time.Duration
	// afterFunc runs f after d (time.AfterFunc); tests end windows themselves.
	afterFunc func(d time.Duration, f func())
}

var defaultBatchOptions = batchOptions{
	window:    50 * time.Millisecond,
	maxIDs:    100,
	timeout:   60 * time.Second,
	afterFunc: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
}

// describeFunc describes instances by ID. An ID that names no instance is
// missing from the result; it is not an error.
type describeFunc func(ctx context.Context, ids []string) ([]ec2types.Instance, error)

// instanceBatcher gathers the look-ups of instances by ID that arrive
// within a short window into one request. The request runs under a
// context of its own, bounded by the batcher's timeout and the provider's
// life, not under any caller's: each caller waits only as long as its own
// context allows and leaves at once when it ends, and the request goes on
// for the others. When every caller of a batch has left, its request is
// cancelled (or, still in its window, never sent).
type instanceBatcher struct {
	describe describeFunc
	opts     batchOptions
	// ctx is the provider's life.
	ctx context.Context

	mu      sync.Mutex
	pending *instanceBatch
}

// instanceBatch is one request's worth of look-ups.
type instanceBatch struct {
	// Guarded by the batcher's mu.
	ids     []string
	waiters int
	sent    bool
	cancel  context.CancelFunc

	// done is closed once found and err are set.
	done  chan struct{}
	found map[string]ec2types.Instance
	err   error
}

func newInstanceBatcher(ctx context.Context, describe describeFunc, opts batchOptions) *instanceBatcher {
	return &instanceBatcher{describe: describe, opts: opts, ctx: ctx}
}

// get returns the instance with the ID, nil when there is none.
func (b *instanceBatcher) get(ctx context.Context, id string) (*ec2types.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	batch := b.pending
	if batch == nil {
		batch = &instanceBatch{done: make(chan struct{})}
		b.pending = batch
		b.opts.afterFunc(b.opts.window, func() { b.send(batch) })
	}
	if !slices.Contains(batch.ids, id) {
		batch.ids = append(batch.ids, id)
	}
	batch.waiters++
	full := len(batch.ids) >= b.opts.maxIDs
	if full {
		b.pending = nil
	}
	b.mu.Unlock()
	if full {
		go b.send(batch)
	}

	select {
	case <-batch.done:
		if batch.err != nil {
			return nil, batch.err
		}
		in, ok := batch.found[id]
		if !ok {
			return nil, nil
		}
		return &in, nil
	case <-ctx.Done():
		b.mu.Lock()
		batch.waiters--
		if batch.waiters == 0 && batch.cancel != nil {
			batch.cancel()
		}
		b.mu.Unlock()
		return nil, ctx.Err()
	}
}

// send makes the batch's request, once, unless every caller has left.
func (b *instanceBatcher) send(batch *instanceBatch) {
	b.mu.Lock()
	if b.pending == batch {
		b.pending = nil
	}
	if batch.sent {
		b.mu.Unlock()
		return
	}
	batch.sent = true
	if batch.waiters == 0 {
		b.mu.Unlock()
		batch.err = context.Canceled
		close(batch.done)
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.opts.timeout)
	batch.cancel = cancel
	ids := slices.Clone(batch.ids)
	b.mu.Unlock()
	defer cancel()

	list, err := b.describe(ctx, ids)
	found := make(map[string]ec2types.Instance, len(list))
	for _, in := range list {
		found[aws.ToString(in.InstanceId)] = in
	}
	batch.found, batch.err = found, err
	close(batch.done)
}
