package aws

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// manualWindows replaces the batcher's timer: a window ends when the test
// calls end.
type manualWindows struct {
	mu  sync.Mutex
	fns []func()
}

func (w *manualWindows) afterFunc(_ time.Duration, f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fns = append(w.fns, f)
}

// end ends every open window, sending their batches.
func (w *manualWindows) end() {
	w.mu.Lock()
	fns := w.fns
	w.fns = nil
	w.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

func manualBatches(maxIDs int) (batchOptions, *manualWindows) {
	w := &manualWindows{}
	opts := defaultBatchOptions
	opts.afterFunc = w.afterFunc
	opts.maxIDs = maxIDs
	return opts, w
}

// pendingIDs is how many IDs wait in the batch not yet sent.
func (b *instanceBatcher) pendingIDs() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == nil {
		return 0
	}
	return len(b.pending.ids)
}

// runInstances runs n instances of the test cluster and returns their IDs.
func (c *testCloud) runInstances(t *testing.T, n int) []string {
	t.Helper()
	out, err := c.ec2.RunInstances(t.Context(), &ec2.RunInstancesInput{
		ImageId: aws.String(testAMI), MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n)),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{
			{Key: aws.String(tagClusterPrefix + testCluster), Value: aws.String("owned")},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, n)
	for _, in := range out.Instances {
		ids = append(ids, aws.ToString(in.InstanceId))
	}
	return ids
}

type existsResult struct {
	id     string
	exists bool
	err    error
}

// existsAsync asks whether the instance exists, by providerID, in the
// background.
func existsAsync(ctx context.Context, p *Cloud, id string, results chan<- existsResult) {
	go func() {
		exists, err := p.instances.InstanceExists(ctx, node("node-"+id, "aws:///us-east-1a/"+id))
		results <- existsResult{id, exists, err}
	}()
}

func TestBatchOneRequestForManyCallers(t *testing.T) {
	c := newTestCloud(t)
	opts, windows := manualBatches(100)
	p := newTestProvider(t, c.conf(), opts)
	ids := c.runInstances(t, 20)

	results := make(chan existsResult, len(ids))
	for _, id := range ids {
		existsAsync(t.Context(), p, id, results)
	}
	eventually(t, "every look-up to join the batch", func() bool { return p.instances.batcher.pendingIDs() == len(ids) })
	windows.end()
	for range ids {
		r := receive(t, results, "a look-up")
		if r.err != nil || !r.exists {
			t.Errorf("InstanceExists(%s) = %v, %v; want true", r.id, r.exists, r.err)
		}
	}
	if n := c.proxy.count("DescribeInstances"); n != 1 {
		t.Errorf("%d callers made %d DescribeInstances requests; want 1", len(ids), n)
	}
}

func TestBatchFullIsSentAtOnce(t *testing.T) {
	c := newTestCloud(t)
	opts, _ := manualBatches(5)
	p := newTestProvider(t, c.conf(), opts)
	ids := c.runInstances(t, 10)

	// No window ever ends: only full batches are sent.
	results := make(chan existsResult, len(ids))
	for _, id := range ids {
		existsAsync(t.Context(), p, id, results)
	}
	for range ids {
		if r := receive(t, results, "a look-up"); r.err != nil || !r.exists {
			t.Errorf("InstanceExists(%s) = %v, %v; want true", r.id, r.exists, r.err)
		}
	}
	if n := c.proxy.count("DescribeInstances"); n != 2 {
		t.Errorf("10 look-ups in batches of 5 made %d requests; want 2", n)
	}
}

// TestBatchWithMissingInstance: one ID that names no instance fails a
// request by IDs as a whole; the batch asks again by filter, and only
// that caller learns its instance is gone.
func TestBatchWithMissingInstance(t *testing.T) {
	c := newTestCloud(t)
	opts, windows := manualBatches(100)
	p := newTestProvider(t, c.conf(), opts)
	ids := c.runInstances(t, 2)
	missing := "i-0123456789abcdef0"

	results := make(chan existsResult, 3)
	for _, id := range append(ids, missing) {
		existsAsync(t.Context(), p, id, results)
	}
	eventually(t, "every look-up to join the batch", func() bool { return p.instances.batcher.pendingIDs() == 3 })
	windows.end()
	for range 3 {
		r := receive(t, results, "a look-up")
		if want := r.id != missing; r.err != nil || r.exists != want {
			t.Errorf("InstanceExists(%s) = %v, %v; want %v", r.id, r.exists, r.err, want)
		}
	}
	if n := c.proxy.count("DescribeInstances"); n != 2 {
		t.Errorf("the batch made %d requests; want 2 (by IDs, then by filter)", n)
	}
}

// TestBatchCallerContext: a caller whose context ends returns at once,
// and the batch's request goes on for the others, even when the caller
// that left was the one that opened the batch.
func TestBatchCallerContext(t *testing.T) {
	c := newTestCloud(t)
	opts, windows := manualBatches(100)
	p := newTestProvider(t, c.conf(), opts)
	ids := c.runInstances(t, 2)
	release := c.proxy.holdAction(t, "DescribeInstances")

	first, cancelFirst := context.WithCancel(t.Context())
	defer cancelFirst()
	firstResult, otherResult := make(chan existsResult, 1), make(chan existsResult, 1)
	existsAsync(first, p, ids[0], firstResult)
	eventually(t, "the first look-up to open the batch", func() bool { return p.instances.batcher.pendingIDs() == 1 })
	existsAsync(t.Context(), p, ids[1], otherResult)
	eventually(t, "the second look-up to join the batch", func() bool { return p.instances.batcher.pendingIDs() == 2 })
	go windows.end()
	receive(t, c.proxy.held, "the batch's request to reach the cloud")

	cancelFirst()
	if r := receive(t, firstResult, "the cancelled caller to return"); !errors.Is(r.err, context.Canceled) {
		t.Errorf("the cancelled caller got %v, %v; want context.Canceled", r.exists, r.err)
	}
	select {
	case r := <-otherResult:
		t.Fatalf("the other caller returned %+v while its request was still held", r)
	default:
	}
	release()
	if r := receive(t, otherResult, "the other caller's answer"); r.err != nil || !r.exists {
		t.Errorf("the other caller got %v, %v; want true", r.exists, r.err)
	}
	select {
	case a := <-c.proxy.abandoned:
		t.Errorf("the batch's %s request was cancelled when one of its callers left", a)
	default:
	}
}

// TestBatchEveryCallerLeaves: a request nobody waits for is cancelled, or,
// still in its window, never sent.
func TestBatchEveryCallerLeaves(t *testing.T) {
	c := newTestCloud(t)
	opts, windows := manualBatches(100)
	p := newTestProvider(t, c.conf(), opts)
	ids := c.runInstances(t, 1)

	t.Run("in flight", func(t *testing.T) {
		c.proxy.holdAction(t, "DescribeInstances")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		results := make(chan existsResult, 1)
		existsAsync(ctx, p, ids[0], results)
		eventually(t, "the look-up to open a batch", func() bool { return p.instances.batcher.pendingIDs() == 1 })
		go windows.end()
		receive(t, c.proxy.held, "the request to reach the cloud")
		cancel()
		if r := receive(t, results, "the caller to return"); !errors.Is(r.err, context.Canceled) {
			t.Errorf("the caller got %v, %v; want context.Canceled", r.exists, r.err)
		}
		receive(t, c.proxy.abandoned, "the request to be cancelled")
	})

	t.Run("in its window", func(t *testing.T) {
		before := c.proxy.count("DescribeInstances")
		ctx, cancel := context.WithCancel(t.Context())
		results := make(chan existsResult, 1)
		existsAsync(ctx, p, ids[0], results)
		eventually(t, "the look-up to open a batch", func() bool { return p.instances.batcher.pendingIDs() == 1 })
		cancel()
		if r := receive(t, results, "the caller to return"); !errors.Is(r.err, context.Canceled) {
			t.Errorf("the caller got %v, %v; want context.Canceled", r.exists, r.err)
		}
		windows.end()
		if n := c.proxy.count("DescribeInstances") - before; n != 0 {
			t.Errorf("a batch every caller had left made %d requests; want none", n)
		}
	})
}

func TestBatchWindowEndsByItself(t *testing.T) {
	c := newTestCloud(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	ids := c.runInstances(t, 1)
	// The real timer: a lone look-up is sent when its window ends.
	if exists, err := p.instances.InstanceExists(t.Context(), node("n", ids[0])); err != nil || !exists {
		t.Errorf("InstanceExists = %v, %v; want true", exists, err)
	}
}
