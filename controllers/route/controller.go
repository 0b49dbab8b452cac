package route

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/controllers/internal/worker"
)

// Name is the controller's name in --controllers.
const Name = "route"

const (
	// reconcileKey is the one queue item: every reconciliation covers the
	// whole cluster.
	reconcileKey = "routes"
	// eventWindow gathers the Node changes of a burst into one
	// reconciliation.
	eventWindow = 500 * time.Millisecond
	// Back-off of a failed create or delete, per route.
	minRetryDelay = time.Second
	maxRetryDelay = 5 * time.Minute
	// eventInterval: a route that keeps failing gets at most one
	// FailedToCreateRoute Event per interval.
	eventInterval = 5 * time.Minute
)

// Config configures the controller.
type Config struct {
	// ClusterName is passed to the provider (--cluster-name).
	ClusterName string
	// ClusterCIDRs are the pod CIDRs of the cluster (--cluster-cidr): one,
	// or an IPv4 and an IPv6 one. Only routes inside them are managed.
	ClusterCIDRs []netip.Prefix
	// Workers bound the creates and deletes in flight (--concurrent-route-syncs).
	Workers int
	// ResyncPeriod is the period of the full reconciliation
	// (--route-reconciliation-period).
	ResyncPeriod time.Duration
}

// Controller keeps the cloud's routes to the Nodes' pod CIDRs.
type Controller struct {
	client   kubernetes.Interface
	nodes    corelisters.NodeLister
	synced   cache.InformerSynced
	routes   cloudprovider.Routes
	recorder record.EventRecorder
	queue    *worker.Queue
	cfg      Config
	// slots bound the route calls in flight.
	slots chan struct{}
	tasks sync.WaitGroup

	mu sync.Mutex
	// busy holds the destinations with a create or delete in flight.
	busy map[string]bool
	// failures holds the back-off of the destinations whose last create or
	// delete failed.
	failures map[string]*failure
	// present maps each destination known to have a route to its Node.
	present map[string]string
	// settled holds when the last create or delete of a destination
	// returned, so that a reconciliation whose listing began earlier does
	// not act on the stale view.
	settled map[string]time.Time
	// nodeRoutes lists each Node's destinations (as of the last reconcile).
	nodeRoutes map[string][]string
	// written remembers the NetworkUnavailable status last written per
	// Node, so a lagging informer does not cause a second write.
	written map[string]v1.ConditionStatus
}

type failure struct {
	count     int
	retryAt   time.Time
	lastEvent time.Time
}

// New wires the controller onto the shared Node informer. It fails when
// the provider offers no Routes or when the cluster CIDRs are not one CIDR
// or a dual-stack pair.
func New(ctx context.Context, client kubernetes.Interface, nodes coreinformers.NodeInformer, guard *cloud.Guard, recorder record.EventRecorder, cfg Config) (*Controller, error) {
	routes, ok := guard.Routes()
	if !ok {
		return nil, fmt.Errorf("%s: routes are %w %q", Name, cloud.ErrNotSupported, guard.ProviderName())
	}
	if err := checkClusterCIDRs(cfg.ClusterCIDRs); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if cfg.Workers < 1 {
		cfg.Workers = 1
	}
	c := &Controller{
		client:     client,
		nodes:      nodes.Lister(),
		synced:     nodes.Informer().HasSynced,
		routes:     routes,
		recorder:   recorder,
		cfg:        cfg,
		slots:      make(chan struct{}, cfg.Workers),
		queue:      worker.New(Name, "", workqueue.NewTypedItemExponentialFailureRateLimiter[string](minRetryDelay, maxRetryDelay)),
		busy:       map[string]bool{},
		failures:   map[string]*failure{},
		present:    map[string]string{},
		settled:    map[string]time.Time{},
		nodeRoutes: map[string][]string{},
		written:    map[string]v1.ConditionStatus{},
	}
	logger := klog.FromContext(ctx)
	_, err := nodes.Informer().AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*v1.Node); ok && len(n.Spec.PodCIDRs) > 0 {
				c.trigger()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*v1.Node)
			n, ok2 := newObj.(*v1.Node)
			if ok1 && ok2 && (!slices.Equal(old.Spec.PodCIDRs, n.Spec.PodCIDRs) || !sameAddresses(old.Status.Addresses, n.Status.Addresses)) {
				c.trigger()
			}
		},
		DeleteFunc: func(any) { c.trigger() },
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return nil, fmt.Errorf("%s: adding Node event handler: %w", Name, err)
	}
	// A detached route call that returns settles its route at the next
	// reconciliation.
	guard.OnResult(cloud.KindRoute, func(string) { c.trigger() })
	return c, nil
}

// trigger asks for a reconciliation at the end of the current window.
func (c *Controller) trigger() { c.queue.AddAfter(reconcileKey, eventWindow) }

// Run reconciles until ctx is done, then waits for the route calls in
// flight to return or detach.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting", "clusterCIDRs", c.cfg.ClusterCIDRs, "workers", c.cfg.Workers, "resyncPeriod", c.cfg.ResyncPeriod)
	defer logger.Info("Stopped")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	c.queue.Add(reconcileKey)
	// One worker reconciles; the route calls run on the task slots.
	c.queue.Run(ctx, 1, func(ctx context.Context, _ string) (time.Duration, error) { return c.reconcile(ctx) })
	c.tasks.Wait()
}

// desiredRoute is a route a Node should have.
type desiredRoute struct {
	node *v1.Node
	cidr string // as the Node has it
}

// task is the work on one destination: delete a wrong route, create the
// right one, or both in that order.
type task struct {
	dest   string
	delete *cloudprovider.Route
	create *desiredRoute
}

// reconcile compares the routes the cloud lists with the routes the Nodes
// need and starts the creates and deletes in the background. It returns
// when to reconcile next: the resync period, or earlier when a failed
// route's back-off ends.
func (c *Controller) reconcile(ctx context.Context) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	listedAt := time.Now()
	listed, err := c.routes.ListRoutes(ctx, c.cfg.ClusterName)
	if err != nil {
		return 0, fmt.Errorf("listing routes: %w", err)
	}

	desired := map[string]desiredRoute{}
	nodeRoutes := map[string][]string{}
	for _, n := range nodes {
		for _, cidr := range n.Spec.PodCIDRs {
			dest, ok := c.destination(cidr)
			if !ok {
				logger.V(4).Info("Pod CIDR outside the cluster CIDRs, no route", "node", klog.KObj(n), "podCIDR", cidr)
				continue
			}
			desired[dest] = desiredRoute{node: n, cidr: cidr}
			nodeRoutes[n.Name] = append(nodeRoutes[n.Name], dest)
		}
	}

	tasks := map[string]*task{}
	present := map[string]string{}
	for _, r := range listed {
		dest, ok := c.destination(r.DestinationCIDR)
		if !ok {
			continue // not ours
		}
		d, wanted := desired[dest]
		switch {
		case r.Blackhole, !wanted, string(r.TargetNode) != d.node.Name,
			r.EnableNodeAddresses && !sameAddresses(r.TargetNodeAddresses, d.node.Status.Addresses):
			tasks[dest] = &task{dest: dest, delete: r}
		default:
			present[dest] = d.node.Name
		}
	}
	for dest, d := range desired {
		if _, ok := present[dest]; ok {
			continue
		}
		t := tasks[dest]
		if t == nil {
			t = &task{dest: dest}
			tasks[dest] = t
		}
		t.create = &d
	}

	now := time.Now()
	next := c.cfg.ResyncPeriod
	var start []*task
	c.mu.Lock()
	for dest, at := range c.settled {
		if at.Before(listedAt) {
			delete(c.settled, dest) // the listing has it
			continue
		}
		// A call that returned after the listing began knows better.
		delete(present, dest)
		if node, ok := c.present[dest]; ok {
			present[dest] = node
		}
	}
	c.present, c.nodeRoutes = present, nodeRoutes
	for dest, t := range tasks {
		if _, settled := c.settled[dest]; settled || c.busy[dest] {
			continue
		}
		if f := c.failures[dest]; f != nil && now.Before(f.retryAt) {
			next = min(next, f.retryAt.Sub(now))
			continue
		}
		c.busy[dest] = true
		start = append(start, t)
	}
	for dest := range c.failures {
		if _, ok := tasks[dest]; !ok {
			delete(c.failures, dest) // settled some other way
		}
	}
	c.mu.Unlock()

	if len(start) > 0 {
		logger.V(2).Info("Reconciling routes", "listed", len(listed), "desired", len(desired), "changes", len(start))
	}
	for _, t := range start {
		c.tasks.Add(1)
		go c.run(ctx, t)
	}
	// Nodes whose routes all exist, or whose missing routes failed, get
	// their condition now; the others when their creates return.
	for _, n := range nodes {
		if len(nodeRoutes[n.Name]) == 0 {
			continue
		}
		if ok, failed := c.nodeState(n.Name); ok {
			c.setCondition(ctx, n, true)
		} else if failed {
			c.setCondition(ctx, n, false)
		}
	}
	c.forgetGoneNodes(nodes)
	return max(next, eventWindow), nil
}

// run performs one task in a slot and records its outcome once the slot
// is free again, so that Node condition patches never hold up route calls.
func (c *Controller) run(ctx context.Context, t *task) {
	defer c.tasks.Done()
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		c.done(ctx, t, ctx.Err(), false)
		return
	}
	creating, err := c.call(ctx, t)
	<-c.slots
	c.done(ctx, t, err, creating)
}

// call makes a task's cloud calls; creating tells that a failure was the
// create's.
func (c *Controller) call(ctx context.Context, t *task) (creating bool, err error) {
	logger := klog.FromContext(ctx).WithValues("destination", t.dest)
	if t.delete != nil {
		logger.V(2).Info("Deleting route", "name", t.delete.Name, "targetNode", t.delete.TargetNode, "blackhole", t.delete.Blackhole)
		if err := c.routes.DeleteRoute(ctx, c.cfg.ClusterName, t.delete); err != nil {
			return false, fmt.Errorf("deleting route %s to %s: %w", t.dest, t.delete.TargetNode, err)
		}
	}
	if t.create != nil {
		n := t.create.node
		route := &cloudprovider.Route{
			TargetNode:          types.NodeName(n.Name),
			TargetNodeAddresses: n.Status.Addresses,
			DestinationCIDR:     t.create.cidr,
		}
		logger.V(2).Info("Creating route", "node", klog.KObj(n))
		if err := c.routes.CreateRoute(ctx, c.cfg.ClusterName, string(n.UID), route); err != nil {
			return true, fmt.Errorf("creating route %s to %s: %w", t.dest, n.Name, err)
		}
	}
	return false, nil
}

// done records a task's outcome: on success the route is present (or
// gone); a failure backs the destination off and may tell the Node.
func (c *Controller) done(ctx context.Context, t *task, err error, creating bool) {
	logger := klog.FromContext(ctx).WithValues("destination", t.dest)
	waiting := errors.Is(err, cloud.ErrInProgress) || errors.Is(err, cloud.ErrFenced) || errors.Is(err, context.Canceled)
	// A saturated guard made no call: the route is not failing, it waits
	// its turn.
	saturated := errors.Is(err, cloud.ErrSaturated)
	var retry time.Duration
	tell := false
	c.mu.Lock()
	delete(c.busy, t.dest)
	c.settled[t.dest] = time.Now()
	switch {
	case err == nil:
		delete(c.failures, t.dest)
		if t.create != nil {
			c.present[t.dest] = t.create.node.Name
		} else {
			delete(c.present, t.dest)
		}
	case waiting:
		// The call goes on in the background; the guard triggers a
		// reconciliation when it returns. A fence says when to look again.
		if after, ok := cloud.RetryAfter(err); ok && errors.Is(err, cloud.ErrFenced) {
			retry = after
		}
	case saturated:
		retry = minRetryDelay
		if after, ok := cloud.RetryAfter(err); ok && after > 0 {
			retry = after
		}
	default:
		f := c.failures[t.dest]
		if f == nil {
			f = &failure{}
			c.failures[t.dest] = f
		}
		f.count++
		retry = min(minRetryDelay<<min(f.count-1, 20), maxRetryDelay)
		if after, ok := cloud.RetryAfter(err); ok && after > 0 {
			retry = after
		}
		f.retryAt = time.Now().Add(retry)
		if creating && time.Since(f.lastEvent) >= eventInterval {
			f.lastEvent, tell = time.Now(), true
		}
	}
	c.mu.Unlock()

	if retry > 0 {
		c.queue.AddAfter(reconcileKey, retry)
	}
	if saturated {
		logger.V(4).Info("Cloud saturated, route call deferred", "after", retry)
		return
	}
	if err != nil && !waiting {
		logger.V(2).Info("Route call failed, retrying with back-off", "after", retry, "err", err)
	}
	if t.create == nil || (err != nil && waiting) {
		return
	}
	n := t.create.node
	if tell {
		c.recorder.Eventf(n, v1.EventTypeWarning, reasonFailedToCreate, "Could not create route %s for node %s: %v", t.create.cidr, n.Name, err)
	}
	if err != nil {
		c.setCondition(ctx, n, false)
		return
	}
	if ok, _ := c.nodeState(n.Name); ok {
		c.setCondition(ctx, n, true)
	}
}

// nodeState reports whether all of a Node's routes exist, and whether a
// missing one failed.
func (c *Controller) nodeState(name string) (complete, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	complete = true
	for _, dest := range c.nodeRoutes[name] {
		if c.present[dest] != name {
			complete = false
			if c.failures[dest] != nil {
				failed = true
			}
		}
	}
	return complete, failed
}

// setCondition writes the Node's NetworkUnavailable condition when it
// differs: False/RouteCreated when all its routes exist, else
// True/NoRouteCreated.
func (c *Controller) setCondition(ctx context.Context, cached *v1.Node, routesCreated bool) {
	want := conditionFor(routesCreated)
	c.mu.Lock()
	current := conditionOf(cached)
	if current != nil && current.Status == want.Status && current.Reason == want.Reason {
		// The informer has caught up with what was written.
		delete(c.written, cached.Name)
		c.mu.Unlock()
		return
	}
	if c.written[cached.Name] == want.Status {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()

	want.LastTransitionTime = metav1.Now()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []v1.NodeCondition{want}}})
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Encoding the condition patch")
		return
	}
	// Conditions merge by type in a strategic merge patch.
	_, err = c.client.CoreV1().Nodes().Patch(ctx, cached.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		if !apierrors.IsNotFound(err) && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Patching the NetworkUnavailable condition failed", "node", klog.KObj(cached), "err", err)
			c.queue.AddAfter(reconcileKey, minRetryDelay)
		}
		return
	}
	klog.FromContext(ctx).V(2).Info("Set the NetworkUnavailable condition", "node", klog.KObj(cached), "status", want.Status, "reason", want.Reason)
	c.mu.Lock()
	c.written[cached.Name] = want.Status
	c.mu.Unlock()
}

func (c *Controller) forgetGoneNodes(nodes []*v1.Node) {
	names := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		names[n.Name] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.written {
		if !names[name] {
			delete(c.written, name)
		}
	}
}

// destination returns the canonical form of cidr when it lies inside one
// of the cluster CIDRs.
func (c *Controller) destination(cidr string) (string, bool) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return "", false
	}
	p = p.Masked()
	for _, cc := range c.cfg.ClusterCIDRs {
		if cc.Bits() <= p.Bits() && cc.Contains(p.Addr()) {
			return p.String(), true
		}
	}
	return "", false
}
