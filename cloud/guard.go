package cloud

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
)

// Kind names the kind of object a call is about. Kept results, fences and
// callbacks are per object, and an object is a Kind and a key.
type Kind string

const (
	// KindNode: instance calls; the key is the Node's name.
	KindNode Kind = "node"
	// KindService: load-balancer calls; the key is the Service's "namespace/name".
	KindService Kind = "service"
	// KindRoute: route calls; the key is the route's destination CIDR
	// (ListRoutes: the cluster name).
	KindRoute Kind = "route"
)

// Options configure a Guard. Zero values take the defaults of DefaultOptions.
type Options struct {
	// CallTimeout is the deadline of every call but the load-balancer mutations.
	CallTimeout time.Duration
	// LBCallTimeout is the deadline of EnsureLoadBalancer, UpdateLoadBalancer
	// and EnsureLoadBalancerDeleted.
	LBCallTimeout time.Duration
	// DetachAfter is the longest a caller waits for a call.
	DetachAfter time.Duration
	// MaxInflight bounds the calls in the provider at once (attached,
	// detached and abandoned).
	MaxInflight int
	// MaxAbandoned bounds the calls past their deadline that have not returned.
	MaxAbandoned int
	// MaxPerMethod bounds the calls of one method in the provider at once,
	// so one slow method cannot take all of MaxInflight. Default MaxInflight/2.
	MaxPerMethod int
	// FenceTimeout is how long past its deadline an abandoned mutating call
	// still fences its object.
	FenceTimeout time.Duration
	// QPS and Burst limit the rate of calls to the provider; QPS 0 is unlimited.
	QPS   float32
	Burst int
	// KeepResultFor is how long the result of a detached call waits for the
	// object's next call before it is dropped.
	KeepResultFor time.Duration
}

// DefaultOptions are the defaults of the command-line flags.
func DefaultOptions() Options {
	return Options{
		CallTimeout:   60 * time.Second,
		LBCallTimeout: 10 * time.Minute,
		DetachAfter:   10 * time.Second,
		MaxInflight:   256,
		MaxAbandoned:  64,
		FenceTimeout:  5 * time.Minute,
		KeepResultFor: 10 * time.Minute,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.CallTimeout <= 0 {
		o.CallTimeout = d.CallTimeout
	}
	if o.LBCallTimeout <= 0 {
		o.LBCallTimeout = d.LBCallTimeout
	}
	if o.DetachAfter <= 0 {
		o.DetachAfter = d.DetachAfter
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = d.MaxInflight
	}
	if o.MaxAbandoned <= 0 {
		o.MaxAbandoned = d.MaxAbandoned
	}
	if o.MaxPerMethod <= 0 {
		o.MaxPerMethod = max(1, o.MaxInflight/2)
	}
	if o.FenceTimeout <= 0 {
		o.FenceTimeout = d.FenceTimeout
	}
	if o.KeepResultFor <= 0 {
		o.KeepResultFor = d.KeepResultFor
	}
	if o.QPS > 0 && o.Burst <= 0 {
		o.Burst = 1
	}
	return o
}

// Throttle back-off bounds: a throttled call pauses every call for at least
// the back-off, which doubles per throttle and resets on a success.
const (
	minThrottleBackoff = time.Second
	maxThrottleBackoff = 30 * time.Second
)

// Guard stands between the controllers and a cloudprovider.Interface. Every
// call gets a deadline, runs in its own goroutine, and releases its caller
// after at most the detach window; the README's "Cloud calls: the guard"
// states the contract.
//
// Guard implements cloudprovider.Interface, offering InstancesV2,
// LoadBalancer and Routes in guarded form; the deprecated Instances, Zones
// and Clusters are not offered.
//
// A Guard is a view of the state it shares with the other views of the same
// guard (New makes the first, For the others): limits, fences and the
// throttle back-off are common to all, while kept results and OnResult
// callbacks belong to the view that made the call. Each controller gets a
// view of its own, so the result of one controller's detached call never
// re-enqueues an object in another controller.
type Guard struct {
	*shared
	owner    string
	recorder record.EventRecorder

	instances cloudprovider.InstancesV2
	lb        cloudprovider.LoadBalancer
	routes    cloudprovider.Routes
}

// shared is the state of one guard, common to all its views.
type shared struct {
	provider cloudprovider.Interface
	name     string
	opts     Options
	limiter  *rate.Limiter

	// base is cancelled by Close; it cancels the context of every call.
	base   context.Context
	cancel context.CancelFunc

	mu         sync.Mutex
	active     map[callKey]*call   // calls neither returned nor past deadline
	fences     map[objectKey]*call // mutating calls that fence their object
	kept       map[callKey]*keptResult
	perMethod  map[string]int
	inflight   int
	detached   int
	abandoned  int
	callbacks  map[callbackKey][]func(key string)
	backoff    time.Duration
	pauseTill  time.Time
	leaseCheck func() error
	latency    map[string]*latencies // by method
}

var _ cloudprovider.Interface = (*Guard)(nil)

type objectKey struct {
	kind Kind
	key  string
}

// callKey names a call: the view that made it, its object and its method.
type callKey struct {
	owner  string
	obj    objectKey
	method string
}

type callbackKey struct {
	owner string
	kind  Kind
}

type keptResult struct {
	fingerprint string
	res         any
	err         error
	at          time.Time
}

// call is one provider call. Its fields below mu are guarded by Guard.mu.
type call struct {
	key         callKey
	fingerprint string
	mutating    bool
	timeout     time.Duration
	start       time.Time
	// ref and recorder: the object to tell about the call, and how.
	ref      runtime.Object
	recorder record.EventRecorder
	logger   klog.Logger
	done     chan struct{} // closed when the provider returned
	expired  chan struct{} // closed when the deadline passed first

	res any
	err error

	returned   bool
	detached   bool // the caller was released; the result is kept
	abandoned  bool // past the deadline, not returned
	fenceNoted bool // a call refused by this one's fence was told about
	deadline   *time.Timer
	slowTimer  *time.Timer // tells about a released call at the detach window
}

// New wraps provider. The provider must already be initialised. The Guard
// returned is the guard's first view; For makes more.
func New(provider cloudprovider.Interface, opts Options) *Guard {
	RegisterMetrics()
	opts = opts.withDefaults()
	s := &shared{
		provider:  provider,
		name:      provider.ProviderName(),
		opts:      opts,
		active:    map[callKey]*call{},
		fences:    map[objectKey]*call{},
		kept:      map[callKey]*keptResult{},
		perMethod: map[string]int{},
		callbacks: map[callbackKey][]func(string){},
		latency:   map[string]*latencies{},
	}
	if opts.QPS > 0 {
		s.limiter = rate.NewLimiter(rate.Limit(opts.QPS), opts.Burst)
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	g := s.view("", nil)
	g.initMetrics()
	return g
}

// For returns a view of the guard for owner (a controller's name). Its
// calls share the guard's limits and fences, while the results of its
// detached calls are kept for it alone and reach only the callbacks
// registered on it. When recorder is not nil, the view tells the object a
// call is about, with a Warning event, when the call detaches, reaches its
// deadline, or fences off another call.
func (g *Guard) For(owner string, recorder record.EventRecorder) *Guard {
	return g.view(owner, recorder)
}

func (s *shared) view(owner string, recorder record.EventRecorder) *Guard {
	g := &Guard{shared: s, owner: owner, recorder: recorder}
	if i, ok := s.provider.InstancesV2(); ok && i != nil {
		g.instances = &instancesV2{g: g, p: i}
	}
	if lb, ok := s.provider.LoadBalancer(); ok && lb != nil {
		g.lb = &loadBalancer{g: g, p: lb}
	}
	if r, ok := s.provider.Routes(); ok && r != nil {
		g.routes = &routes{g: g, p: r}
	}
	return g
}

// RequireLease makes every mutating call run check first, right before the
// call reaches the provider, and fail with check's error instead when it
// fails: a process that can no longer prove it leads must not act on the
// cloud. It applies to every view and should be set before the first call.
func (g *Guard) RequireLease(check func() error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leaseCheck = check
}

// Saturated returns an error when the guard refuses new calls because as
// many calls as it allows are in the provider or past their deadline; /readyz
// reports it.
func (g *Guard) Saturated() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.inflight >= g.opts.MaxInflight:
		return fmt.Errorf("%w: %d calls in the cloud provider (--cloud-max-inflight-calls=%d), %d of them past their deadline", ErrSaturated, g.inflight, g.opts.MaxInflight, g.abandoned)
	case g.abandoned >= g.opts.MaxAbandoned:
		return fmt.Errorf("%w: %d calls past their deadline have not returned (--cloud-max-abandoned-calls=%d)", ErrSaturated, g.abandoned, g.opts.MaxAbandoned)
	}
	return nil
}

// Guarded methods, by the interface that has them.
var (
	instanceMethods = []string{"InstanceExists", "InstanceShutdown", "InstanceMetadata"}
	lbMethods       = []string{"GetLoadBalancer", "EnsureLoadBalancer", "UpdateLoadBalancer", "EnsureLoadBalancerDeleted"}
	routeMethods    = []string{"ListRoutes", "CreateRoute", "DeleteRoute"}
	results         = []string{ResultSuccess, ResultError, ResultNotFound, ResultTimeout, ResultThrottled, ResultSaturated, ResultFenced, ResultDetached}
)

// initMetrics creates the series of the provider's methods at zero, so the
// families show on /metrics before the first call and rates start from 0.
func (g *Guard) initMetrics() {
	var methods []string
	if g.instances != nil {
		methods = append(methods, instanceMethods...)
	}
	if g.lb != nil {
		methods = append(methods, lbMethods...)
	}
	if g.routes != nil {
		methods = append(methods, routeMethods...)
	}
	for _, m := range methods {
		for _, r := range results {
			requestsTotal.WithLabelValues(g.name, m, r)
		}
		requestDuration.WithLabelValues(g.name, m, ResultSuccess)
	}
	g.mu.Lock()
	g.setGaugesLocked()
	g.mu.Unlock()
}

// Close cancels the context of every call in flight. Calls that ignore
// their context still end at their deadline, as far as callers can tell.
func (g *Guard) Close() { g.cancel() }

// OnResult registers fn to be called with an object's key when a detached
// call that this view made about an object of that kind returns or reaches
// its deadline, so the controller can re-enqueue the object and take the
// kept result. Every function registered on the view for the kind is
// called; fn must not block.
func (g *Guard) OnResult(kind Kind, fn func(key string)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := callbackKey{owner: g.owner, kind: kind}
	g.callbacks[k] = append(g.callbacks[k], fn)
}

// ProviderName returns the provider's name.
func (g *Guard) ProviderName() string { return g.name }

// HasClusterID returns the provider's answer.
func (g *Guard) HasClusterID() bool { return g.provider.HasClusterID() }

// Initialize does nothing: the provider is initialised before it is guarded.
func (g *Guard) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

// InstancesV2 returns the guarded InstancesV2, if the provider has it.
func (g *Guard) InstancesV2() (cloudprovider.InstancesV2, bool) {
	return g.instances, g.instances != nil
}

// LoadBalancer returns the guarded LoadBalancer, if the provider has it.
func (g *Guard) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return g.lb, g.lb != nil }

// Routes returns the guarded Routes, if the provider has it.
func (g *Guard) Routes() (cloudprovider.Routes, bool) { return g.routes, g.routes != nil }

// Instances is not offered: controllers use InstancesV2.
func (g *Guard) Instances() (cloudprovider.Instances, bool) { return nil, false }

// Zones is not offered: controllers use InstancesV2.
func (g *Guard) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters is not offered.
func (g *Guard) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// request describes one call for do.
type request struct {
	method   string
	obj      objectKey
	mutating bool
	// fingerprint identifies the call's arguments: a kept result or an
	// active call is only reused for the same arguments.
	fingerprint string
	timeout     time.Duration
	// ref is the object events about the call go to; nil for none.
	ref runtime.Object
}

// do runs fn under the guard's contract and returns its result, or a guard
// error (ErrSaturated, ErrFenced, ErrInProgress wrapped in RetryAfterError,
// or ErrTimeout).
func do[T any](ctx context.Context, g *Guard, r request, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	res, err := g.do(ctx, r, func(ctx context.Context) (any, error) { return fn(ctx) })
	if v, ok := res.(T); ok {
		return v, err
	}
	return zero, err
}

func (g *Guard) do(ctx context.Context, r request, fn func(context.Context) (any, error)) (any, error) {
	ck := callKey{owner: g.owner, obj: r.obj, method: r.method}
	g.mu.Lock()
	if res, err, ok := g.takeKeptLocked(ck, r.fingerprint); ok {
		g.mu.Unlock()
		g.count(r.method, classify(err))
		return res, err
	}
	if c := g.active[ck]; c != nil && c.detached && c.fingerprint == r.fingerprint && !r.mutating {
		// The same question is already being asked in the background; its
		// answer will be kept and the object re-enqueued.
		g.mu.Unlock()
		g.count(r.method, ResultDetached)
		return nil, g.inProgress(r.method)
	}
	if r.mutating {
		if f := g.fences[r.obj]; f != nil {
			// A fence is told about once its call has run for the detach
			// window: before that it is an ordinary call, not a stuck one.
			first := !f.fenceNoted && (f.abandoned || time.Since(f.start) >= g.opts.DetachAfter)
			if first {
				f.fenceNoted = true
			}
			state := "in flight"
			if f.abandoned {
				state = "past its deadline and not returned"
			}
			g.mu.Unlock()
			g.count(r.method, ResultFenced)
			err := fmt.Errorf("%s %s %q: %w (%s, started %s ago, is %s)", r.method, r.obj.kind, r.obj.key, ErrFenced, f.key.method, time.Since(f.start).Round(time.Second), state)
			if first {
				klog.FromContext(ctx).Info("Cloud call refused: another mutating call for the object is still in the cloud", "method", r.method, "kind", r.obj.kind, "key", r.obj.key, "fencedBy", f.key.method, "since", f.start)
				g.event(r.ref, reasonFenced, "%s not started: %s, started %s ago, is %s", r.method, f.key.method, time.Since(f.start).Round(time.Second), state)
			} else {
				klog.FromContext(ctx).V(4).Info("Cloud call refused by a fence", "method", r.method, "kind", r.obj.kind, "key", r.obj.key, "fencedBy", f.key.method)
			}
			return nil, &RetryAfterError{RetryAfter: g.opts.DetachAfter, Err: err}
		}
	}
	if g.inflight >= g.opts.MaxInflight || g.abandoned >= g.opts.MaxAbandoned || g.perMethod[r.method] >= g.opts.MaxPerMethod {
		why := fmt.Sprintf("%d calls in flight, %d abandoned, %d of %s", g.inflight, g.abandoned, g.perMethod[r.method], r.method)
		g.mu.Unlock()
		g.count(r.method, ResultSaturated)
		return nil, &RetryAfterError{RetryAfter: g.opts.DetachAfter, Err: fmt.Errorf("%s: %w (%s)", r.method, ErrSaturated, why)}
	}
	c := g.startLocked(ctx, ck, r, fn)
	g.mu.Unlock()
	return g.wait(ctx, c)
}

// startLocked starts fn in its own goroutine with its own deadline.
func (g *Guard) startLocked(ctx context.Context, ck callKey, r request, fn func(context.Context) (any, error)) *call {
	c := &call{
		key:         ck,
		fingerprint: r.fingerprint,
		mutating:    r.mutating,
		timeout:     r.timeout,
		start:       time.Now(),
		ref:         r.ref,
		recorder:    g.recorder,
		logger:      klog.FromContext(ctx),
		done:        make(chan struct{}),
		expired:     make(chan struct{}),
	}
	g.inflight++
	g.perMethod[r.method]++
	g.active[ck] = c
	if r.mutating {
		g.fences[r.obj] = c
	}
	g.setGaugesLocked()

	// The call keeps the caller's values (logger) but not its cancellation:
	// a released caller must not cancel the call it left behind.
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	stop := context.AfterFunc(g.base, cancel)
	c.deadline = time.AfterFunc(r.timeout, func() { g.expire(c) })
	go func() {
		defer func() {
			if p := recover(); p != nil {
				utilruntime.HandleErrorWithContext(ctx, nil, "Cloud provider panicked", "method", ck.method, "panic", p)
				c.res, c.err = nil, fmt.Errorf("%s: cloud provider panicked: %v", ck.method, p)
			}
			stop()
			cancel()
			g.finish(c)
		}()
		if err := g.waitTurn(callCtx); err != nil {
			c.err = err
			return
		}
		if c.mutating {
			if err := g.checkLease(); err != nil {
				c.err = fmt.Errorf("%s %s %q not started: %w", ck.method, ck.obj.kind, ck.obj.key, err)
				return
			}
		}
		c.res, c.err = fn(callCtx)
		if c.err != nil && callCtx.Err() != nil && errors.Is(c.err, callCtx.Err()) && errors.Is(callCtx.Err(), context.DeadlineExceeded) {
			c.err = fmt.Errorf("%s: %w", ck.method, ErrTimeout)
		}
	}()
	return c
}

// wait holds the caller until the call returns, its deadline passes or the
// detach window ends, whichever is first; or, when the caller has other
// work waiting, until the call has run as long as the method's calls
// usually take (release.go).
func (g *Guard) wait(ctx context.Context, c *call) (any, error) {
	window := time.NewTimer(g.opts.DetachAfter)
	defer window.Stop()
	var (
		check  *time.Timer
		checkC <-chan time.Time
		after  time.Duration
	)
	waiting := waitingWork(ctx)
	if waiting != nil {
		check = time.NewTimer(minRelease)
		defer check.Stop()
		checkC = check.C
	}
	var ctxErr error
	released := false
wait:
	for {
		select {
		case <-c.done:
			break wait
		case <-c.expired:
			break wait
		case <-window.C:
			break wait
		case <-ctx.Done():
			ctxErr = ctx.Err()
			break wait
		case <-checkC:
			// The release time is looked up at every check: the method's
			// first calls may still be adding to its record.
			after = g.releaseAfter(c.key.method)
			ran := time.Since(c.start)
			if ran >= after && waiting() {
				released = true
				break wait
			}
			switch {
			case after >= g.opts.DetachAfter:
				check.Reset(releaseRecheck) // no record of the method yet
			case ran < after:
				check.Reset(after - ran)
			default:
				check.Reset(max(after/4, minRelease)) // no work waits yet
			}
		}
	}

	g.mu.Lock()
	switch {
	case c.returned && !c.detached:
		g.mu.Unlock()
		g.count(c.key.method, classify(c.err))
		return c.res, c.err
	case c.abandoned && !c.detached:
		g.mu.Unlock()
		g.count(c.key.method, ResultTimeout)
		return nil, fmt.Errorf("%s %s %q: %w after %s", c.key.method, c.key.obj.kind, c.key.obj.key, ErrTimeout, time.Since(c.start).Round(time.Millisecond))
	}
	c.detached = true
	g.detached++
	g.setGaugesLocked()
	// The call is told about once it has run for the detach window, not
	// when a worker with other work waiting was released early.
	if slowIn := time.Until(c.start.Add(g.opts.DetachAfter)); slowIn > 0 {
		c.slowTimer = time.AfterFunc(slowIn, func() { g.tellSlow(c) })
		g.mu.Unlock()
	} else {
		g.mu.Unlock()
		g.tellSlow(c)
	}
	g.count(c.key.method, ResultDetached)
	if released {
		klog.FromContext(ctx).V(4).Info("Cloud call released to the background: other work waits", "method", c.key.method, "kind", c.key.obj.kind, "key", c.key.obj.key, "after", after)
	}
	if ctxErr != nil {
		return nil, ctxErr
	}
	return nil, g.inProgress(c.key.method)
}

// tellSlow logs a detached call that has run for the detach window and
// tells its object, unless it has returned or reached its deadline.
func (g *Guard) tellSlow(c *call) {
	g.mu.Lock()
	over := c.returned || c.abandoned
	g.mu.Unlock()
	if over {
		return
	}
	c.logger.Info("Cloud call has not returned, going on in the background", "method", c.key.method, "kind", c.key.obj.kind, "key", c.key.obj.key, "after", g.opts.DetachAfter, "deadline", c.timeout)
	c.tell(reasonDetached, "%s has not returned after %s; it goes on in the background until it returns or its deadline of %s passes", c.key.method, g.opts.DetachAfter, c.timeout)
}

func (g *Guard) inProgress(method string) error {
	return &RetryAfterError{RetryAfter: g.opts.DetachAfter, Err: fmt.Errorf("%s: %w", method, ErrInProgress)}
}

// finish runs when the provider returned.
func (g *Guard) finish(c *call) {
	var notify []func(string)
	g.mu.Lock()
	c.returned = true
	c.deadline.Stop()
	if c.slowTimer != nil {
		c.slowTimer.Stop()
	}
	g.inflight--
	g.perMethod[c.key.method]--
	if g.active[c.key] == c {
		delete(g.active, c.key)
	}
	if g.fences[c.key.obj] == c {
		delete(g.fences, c.key.obj)
	}
	if c.abandoned {
		g.abandoned--
	} else {
		took := time.Since(c.start)
		requestDuration.WithLabelValues(g.name, c.key.method, classify(c.err)).Observe(took.Seconds())
		if c.err == nil {
			g.noteLatencyLocked(c.key.method, took)
		}
		g.noteThrottleLocked(c.err)
		if c.detached {
			g.detached--
			g.keepLocked(c.key, c.fingerprint, c.res, c.err)
			notify = g.callbacks[callbackKey{c.key.owner, c.key.obj.kind}]
		}
	}
	g.setGaugesLocked()
	g.mu.Unlock()
	close(c.done)
	for _, fn := range notify {
		fn(c.key.obj.key)
	}
}

// expire runs when a call's deadline passes.
func (g *Guard) expire(c *call) {
	var notify []func(string)
	g.mu.Lock()
	if c.returned {
		g.mu.Unlock()
		return
	}
	c.abandoned = true
	g.abandoned++
	if c.slowTimer != nil {
		c.slowTimer.Stop()
	}
	if g.active[c.key] == c {
		delete(g.active, c.key)
	}
	requestDuration.WithLabelValues(g.name, c.key.method, ResultTimeout).Observe(time.Since(c.start).Seconds())
	if c.detached {
		g.detached--
		g.keepLocked(c.key, c.fingerprint, nil, fmt.Errorf("%s %s %q: %w", c.key.method, c.key.obj.kind, c.key.obj.key, ErrTimeout))
		notify = g.callbacks[callbackKey{c.key.owner, c.key.obj.kind}]
	}
	fenced := ""
	if c.mutating {
		fenced = fmt.Sprintf("; no other mutating call for the object starts until it returns or %s pass", g.opts.FenceTimeout)
	}
	if c.mutating {
		// The fence outlives the deadline: the cloud may still be acting.
		time.AfterFunc(g.opts.FenceTimeout, func() { g.releaseFence(c) })
	}
	g.setGaugesLocked()
	g.mu.Unlock()
	close(c.expired)
	c.logger.Error(ErrTimeout, "Cloud call did not return by its deadline, giving up on it", "method", c.key.method, "kind", c.key.obj.kind, "key", c.key.obj.key, "deadline", c.timeout, "mutating", c.mutating)
	c.tell(reasonTimedOut, "%s did not return by its deadline of %s and was given up%s", c.key.method, c.timeout, fenced)
	for _, fn := range notify {
		fn(c.key.obj.key)
	}
}

// Reasons of the guard's Warning events.
const (
	reasonDetached = "CloudCallDetached"
	reasonTimedOut = "CloudCallTimedOut"
	reasonFenced   = "CloudCallFenced"
)

// tell tells the object of call c, through the recorder of the view that
// made it.
func (c *call) tell(reason, format string, args ...any) {
	if c.recorder != nil && c.ref != nil {
		c.recorder.Eventf(c.ref, v1.EventTypeWarning, reason, format, args...)
	}
}

// event tells ref through this view's recorder.
func (g *Guard) event(ref runtime.Object, reason, format string, args ...any) {
	if g.recorder != nil && ref != nil {
		g.recorder.Eventf(ref, v1.EventTypeWarning, reason, format, args...)
	}
}

// checkLease runs the lease check, if one is set.
func (g *Guard) checkLease() error {
	g.mu.Lock()
	check := g.leaseCheck
	g.mu.Unlock()
	if check == nil {
		return nil
	}
	return check()
}

func (g *Guard) releaseFence(c *call) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fences[c.key.obj] == c {
		delete(g.fences, c.key.obj)
	}
}

func (g *Guard) keepLocked(ck callKey, fingerprint string, res any, err error) {
	now := time.Now()
	for k, v := range g.kept {
		if now.Sub(v.at) > g.opts.KeepResultFor {
			delete(g.kept, k)
		}
	}
	g.kept[ck] = &keptResult{fingerprint: fingerprint, res: res, err: err, at: now}
}

// takeKeptLocked hands out the kept result of a detached call with the same
// arguments, once. A kept result for other arguments is stale and dropped.
func (g *Guard) takeKeptLocked(ck callKey, fingerprint string) (any, error, bool) {
	k := g.kept[ck]
	if k == nil {
		return nil, nil, false
	}
	delete(g.kept, ck)
	if k.fingerprint != fingerprint || time.Since(k.at) > g.opts.KeepResultFor {
		return nil, nil, false
	}
	return k.res, k.err, true
}

// waitTurn waits out a throttle back-off and the rate limit.
func (g *Guard) waitTurn(ctx context.Context) error {
	g.mu.Lock()
	pause := time.Until(g.pauseTill)
	g.mu.Unlock()
	if pause > 0 {
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting out cloud throttling: %w", ErrTimeout)
		}
	}
	if g.limiter == nil {
		return nil
	}
	if err := g.limiter.Wait(ctx); err != nil {
		return fmt.Errorf("waiting for the cloud rate limit: %w: %w", ErrTimeout, err)
	}
	return nil
}

// noteThrottleLocked backs the limiter off after a throttled call and
// resets the back-off after a success.
func (g *Guard) noteThrottleLocked(err error) {
	if err == nil {
		g.backoff = 0
		return
	}
	if !isThrottled(err) {
		return
	}
	g.backoff = min(max(2*g.backoff, minThrottleBackoff), maxThrottleBackoff)
	wait := g.backoff
	if after, ok := RetryAfter(err); ok && after > wait {
		wait = after
	}
	if till := time.Now().Add(wait); till.After(g.pauseTill) {
		g.pauseTill = till
	}
}

func (g *Guard) setGaugesLocked() {
	inflightCalls.WithLabelValues(g.name).Set(float64(g.inflight))
	detachedCalls.WithLabelValues(g.name).Set(float64(g.detached))
	abandonedCalls.WithLabelValues(g.name).Set(float64(g.abandoned))
}

func (g *Guard) count(method, result string) {
	requestsTotal.WithLabelValues(g.name, method, result).Inc()
}

func isThrottled(err error) bool {
	var te *ThrottledError
	return errors.As(err, &te)
}

// classify maps a provider result to its metric label.
func classify(err error) string {
	switch {
	case err == nil:
		return ResultSuccess
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return ResultTimeout
	case errors.Is(err, cloudprovider.InstanceNotFound):
		return ResultNotFound
	case isThrottled(err):
		return ResultThrottled
	default:
		return ResultError
	}
}
