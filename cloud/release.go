package cloud

import (
	"context"
	"slices"
	"time"
)

// A worker that waits for a call while other work waits for it holds that
// work up. The guard releases such a worker early: once its call has run
// longer than calls of the method usually take, and its queue has work
// waiting, the call goes on in the background exactly as after the detach
// window. A healthy call is seldom released; a hung or slow one costs its
// worker about one healthy call's time instead of the detach window.

const (
	// latencySamples is how many of a method's latest successful calls its
	// release time is taken from.
	latencySamples = 128
	// minLatencySamples successful calls are needed before a method's calls
	// are released early.
	minLatencySamples = 4
	// minRelease is the shortest time a call is waited for.
	minRelease = 10 * time.Millisecond
	// releasePercentile of the latest successful calls, times releaseFactor,
	// is how long a call is waited for while other work waits.
	releasePercentile = 0.95
	releaseFactor     = 1.25
	// releaseRecheck is how often a waiting call looks again while its
	// method has too few calls on record.
	releaseRecheck = 100 * time.Millisecond
)

type waitingWorkKey struct{}

// WithWaitingWork returns a context that tells the guard whether the
// caller has other work waiting: waiting reports it, and must be cheap and
// safe to call from another goroutine. A call made with it may release its
// caller before the detach window (see the README's "Cloud calls: the
// guard").
func WithWaitingWork(ctx context.Context, waiting func() bool) context.Context {
	return context.WithValue(ctx, waitingWorkKey{}, waiting)
}

func waitingWork(ctx context.Context) func() bool {
	w, _ := ctx.Value(waitingWorkKey{}).(func() bool)
	return w
}

// latencies are a method's latest successful call durations.
type latencies struct {
	ring    [latencySamples]time.Duration
	n       int // samples recorded, up to latencySamples
	next    int // where the next sample goes
	fresh   int // samples since release was computed
	release time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.ring[l.next] = d
	l.next = (l.next + 1) % latencySamples
	l.n = min(l.n+1, latencySamples)
	l.fresh++
}

// releaseAfter is how long a call of the method is waited for while other
// work waits; detachAfter until the method has enough samples.
func (l *latencies) releaseAfter(detachAfter time.Duration) time.Duration {
	if l == nil || l.n < minLatencySamples {
		return detachAfter
	}
	if l.release == 0 || l.fresh >= latencySamples/16 {
		sorted := slices.Clone(l.ring[:l.n])
		slices.Sort(sorted)
		p := sorted[min(l.n-1, int(float64(l.n)*releasePercentile))]
		l.release = time.Duration(float64(p) * releaseFactor)
		l.fresh = 0
	}
	return min(max(l.release, minRelease), detachAfter)
}

// noteLatencyLocked records a successful call's duration.
func (g *Guard) noteLatencyLocked(method string, d time.Duration) {
	l := g.latency[method]
	if l == nil {
		l = &latencies{}
		g.latency[method] = l
	}
	l.add(d)
}

func (g *Guard) releaseAfter(method string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.latency[method].releaseAfter(g.opts.DetachAfter)
}
