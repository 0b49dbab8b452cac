package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/controllers/internal/worker"
)

// Name is the controller's name in --controllers.
const Name = "service"

// Retry back-off of a failed sync, per Service.
const (
	minRetryDelay = 5 * time.Second
	maxRetryDelay = 5 * time.Minute
)

// Config configures the controller.
type Config struct {
	// ClusterName is passed to the provider (--cluster-name).
	ClusterName string
	// LoadBalancerClass is the spec.loadBalancerClass this controller also
	// handles, besides Services without a class (--load-balancer-class).
	LoadBalancerClass string
	// Workers sync Services in parallel (--concurrent-service-syncs).
	Workers int
	// NodeSyncCoalescePeriod is the shortest time between two
	// recomputations of the eligible node set (--node-sync-coalesce-period).
	NodeSyncCoalescePeriod time.Duration
	// ResyncPeriod is how often each load balancer is re-ensured to repair
	// drift; 0 disables it (--load-balancer-resync-period).
	ResyncPeriod time.Duration
}

// Controller keeps the cloud load balancers of LoadBalancer Services.
type Controller struct {
	client   kubernetes.Interface
	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	synced   []cache.InformerSynced
	balancer cloudprovider.LoadBalancer
	recorder record.EventRecorder
	queue    *worker.Queue
	cfg      Config

	// nodesDirty holds a mark when Nodes changed since the last
	// recomputation of the eligible node set.
	nodesDirty chan struct{}

	mu    sync.Mutex
	state map[string]*lbState // by "namespace/name"
}

// lbState is what the controller knows of one Service's load balancer.
// Only the worker syncing the Service writes it; the node-set loop reads it.
type lbState struct {
	// synced: spec and hosts are what the load balancer was last made from.
	synced bool
	spec   lbSpec
	hosts  string
	// ensureDue is when drift repair re-ensures the load balancer.
	ensureDue time.Time
	// retrying: the last sync failed and waits out its back-off; a node-set
	// change does not cut the back-off short (the retry uses the nodes of
	// its time).
	retrying bool
	// waiting: the last sync found a call for this Service still in the
	// cloud. It is synced again when the call returns; no new Events.
	waiting bool
}

// New wires the controller onto the shared Service and Node informers. It
// fails when the provider offers no LoadBalancer.
func New(ctx context.Context, client kubernetes.Interface, services coreinformers.ServiceInformer, nodes coreinformers.NodeInformer, guard *cloud.Guard, recorder record.EventRecorder, cfg Config) (*Controller, error) {
	balancer, ok := guard.LoadBalancer()
	if !ok {
		return nil, fmt.Errorf("%s: load balancers are %w %q", Name, cloud.ErrNotSupported, guard.ProviderName())
	}
	c := &Controller{
		client:     client,
		services:   services.Lister(),
		nodes:      nodes.Lister(),
		synced:     []cache.InformerSynced{services.Informer().HasSynced, nodes.Informer().HasSynced},
		balancer:   balancer,
		recorder:   recorder,
		cfg:        cfg,
		nodesDirty: make(chan struct{}, 1),
		state:      map[string]*lbState{},
		queue:      worker.New(Name, "service", workqueue.NewTypedItemExponentialFailureRateLimiter[string](minRetryDelay, maxRetryDelay)),
	}
	logger := klog.FromContext(ctx)
	_, err := services.Informer().AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onServiceAdd,
		UpdateFunc: c.onServiceUpdate,
		DeleteFunc: c.enqueue,
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return nil, fmt.Errorf("%s: adding Service event handler: %w", Name, err)
	}
	_, err = nodes.Informer().AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.markNodesDirty() },
		UpdateFunc: c.onNodeUpdate,
		DeleteFunc: func(any) { c.markNodesDirty() },
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return nil, fmt.Errorf("%s: adding Node event handler: %w", Name, err)
	}
	// A detached load-balancer call that returns brings its Service back.
	guard.OnResult(cloud.KindService, c.queue.Add)
	return c, nil
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) onServiceAdd(obj any) {
	svc, ok := obj.(*v1.Service)
	if ok && (wantsLoadBalancer(svc, c.cfg.LoadBalancerClass) || needsCleanup(svc, c.cfg.LoadBalancerClass)) {
		c.enqueue(svc)
	}
}

// onServiceUpdate enqueues a Service when what its load balancer is made
// from changed, or when it needs cleanup. Status writes do not enqueue.
func (c *Controller) onServiceUpdate(oldObj, newObj any) {
	old, ok1 := oldObj.(*v1.Service)
	svc, ok2 := newObj.(*v1.Service)
	if !ok1 || !ok2 {
		return
	}
	class := c.cfg.LoadBalancerClass
	if needsCleanup(svc, class) ||
		((wantsLoadBalancer(old, class) || wantsLoadBalancer(svc, class)) && !lbSpecOf(old).equal(lbSpecOf(svc))) {
		c.enqueue(svc)
	}
}

func (c *Controller) onNodeUpdate(oldObj, newObj any) {
	old, ok1 := oldObj.(*v1.Node)
	node, ok2 := newObj.(*v1.Node)
	if ok1 && ok2 && hostChangeMatters(old, node) {
		c.markNodesDirty()
	}
}

func (c *Controller) markNodesDirty() {
	select {
	case c.nodesDirty <- struct{}{}:
	default:
	}
}

// Run runs the workers and the node-set loop until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting", "workers", c.cfg.Workers, "loadBalancerClass", c.cfg.LoadBalancerClass)
	defer logger.Info("Stopped")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return
	}
	// Every Service was enqueued by the informer's initial list, each with
	// the then complete node set: the marks of that list are stale.
	select {
	case <-c.nodesDirty:
	default:
	}
	go wait.UntilWithContext(ctx, c.watchNodeSet, time.Second)
	c.queue.Run(ctx, c.cfg.Workers, c.sync)
}

// watchNodeSet recomputes the eligible node set when Nodes changed, at most
// once per coalesce period, and enqueues the Services whose load balancer
// was made with another host set.
func (c *Controller) watchNodeSet(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.nodesDirty:
		}
		if wait := time.Until(last.Add(c.cfg.NodeSyncCoalescePeriod)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		// Changes until now are in this recomputation.
		select {
		case <-c.nodesDirty:
		default:
		}
		last = time.Now()
		c.enqueueChangedHosts(ctx)
	}
}

func (c *Controller) enqueueChangedHosts(ctx context.Context) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Listing Nodes")
		return
	}
	hosts := hostsKey(eligibleNodes(nodes))
	var keys []string
	c.mu.Lock()
	for key, st := range c.state {
		if st.synced && !st.retrying && !st.waiting && st.hosts != hosts {
			keys = append(keys, key)
		}
	}
	c.mu.Unlock()
	hostSetRecomputes.Inc()
	hostSetEnqueued.Add(float64(len(keys)))
	klog.FromContext(ctx).V(4).Info("Recomputed the eligible node set", "services", len(keys))
	for _, key := range keys {
		c.queue.Add(key)
	}
}

// sync brings one Service's load balancer in line. It returns when the
// Service is next due for drift repair (0: never).
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Bad queue key", "key", key)
		return 0, nil
	}
	cached, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	svc := cached.DeepCopy()
	class := c.cfg.LoadBalancerClass
	switch {
	case needsCleanup(svc, class):
		return 0, c.cleanup(ctx, key, svc)
	case !wantsLoadBalancer(svc, class), svc.DeletionTimestamp != nil:
		// Not ours, or deleted before it got the finalizer: the cloud
		// holds nothing for it.
		c.forget(key)
		return 0, nil
	}

	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	nodes := eligibleNodes(all)
	hosts := hostsKey(nodes)
	spec := lbSpecOf(svc)
	st := c.get(key)
	if st.synced && st.spec.equal(spec) && time.Now().Before(st.ensureDue) {
		if st.hosts != hosts {
			if err := c.updateHosts(ctx, key, svc, nodes, hosts); err != nil {
				return 0, err
			}
		}
		if c.cfg.ResyncPeriod == 0 {
			return 0, nil
		}
		return time.Until(st.ensureDue), nil
	}
	return c.ensure(ctx, key, svc, st, nodes, hosts)
}

// ensure creates or updates the load balancer with every property of the
// Service, then writes its status.
func (c *Controller) ensure(ctx context.Context, key string, svc *v1.Service, st lbState, nodes []*v1.Node, hosts string) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	// The finalizer is in place before the cloud holds anything to clean up.
	if err := c.setFinalizer(ctx, svc, true); err != nil {
		return 0, fmt.Errorf("adding the finalizer: %w", err)
	}
	if !st.waiting {
		logger.V(2).Info("Ensuring load balancer", "nodes", len(nodes))
		c.recorder.Event(svc, v1.EventTypeNormal, reasonEnsuring, messageEnsuring)
		if len(nodes) == 0 {
			c.recorder.Event(svc, v1.EventTypeWarning, reasonUnavailable, messageNoNodes)
		}
	}
	status, err := c.balancer.EnsureLoadBalancer(ctx, c.cfg.ClusterName, svc, nodes)
	if errors.Is(err, cloudprovider.ImplementedElsewhere) {
		logger.V(4).Info("Load balancer implemented elsewhere")
		return c.ensured(key, lbSpecOf(svc), hosts), nil
	}
	if err == nil && status == nil {
		err = errors.New("the cloud provider returned no load-balancer status")
	}
	if err != nil {
		if c.failed(key, opEnsure, err) {
			c.recorder.Eventf(svc, v1.EventTypeWarning, reasonSyncFailed, "Error syncing load balancer: %v", err)
		}
		return 0, fmt.Errorf("ensuring the load balancer: %w", err)
	}
	if !statusEqual(&svc.Status.LoadBalancer, status) {
		if err := c.patchStatus(ctx, svc, status); err != nil {
			// The load balancer is right; the retry's Ensure is cheap.
			c.failed(key, opEnsure, err)
			return 0, err
		}
	}
	c.recorder.Event(svc, v1.EventTypeNormal, reasonEnsured, messageEnsured)
	logger.V(2).Info("Ensured load balancer", "ingress", status.Ingress)
	return c.ensured(key, lbSpecOf(svc), hosts), nil
}

// updateHosts points the load balancer at a new host set.
func (c *Controller) updateHosts(ctx context.Context, key string, svc *v1.Service, nodes []*v1.Node, hosts string) error {
	err := c.balancer.UpdateLoadBalancer(ctx, c.cfg.ClusterName, svc, nodes)
	if err != nil && !errors.Is(err, cloudprovider.ImplementedElsewhere) {
		if c.failed(key, opUpdate, err) {
			c.recorder.Eventf(svc, v1.EventTypeWarning, reasonUpdateFailed, "Error updating load balancer with new hosts %s [%d nodes]: %v", nodeNamesForMessage(nodes), len(nodes), err)
			// The retry ensures the whole load balancer: it may be gone.
			c.mu.Lock()
			c.state[key].synced = false
			c.mu.Unlock()
		}
		return fmt.Errorf("updating the load balancer's hosts: %w", err)
	}
	if len(nodes) == 0 {
		c.recorder.Event(svc, v1.EventTypeWarning, reasonUnavailable, messageNoNodes)
	} else {
		c.recorder.Event(svc, v1.EventTypeNormal, reasonUpdated, messageUpdatedHosts)
	}
	klog.FromContext(ctx).V(2).Info("Updated load balancer hosts", "nodes", len(nodes))
	loadBalancerSyncs.WithLabelValues(opUpdate, resultSuccess).Inc()
	c.mu.Lock()
	st := c.state[key]
	st.hosts, st.retrying, st.waiting = hosts, false, false
	c.mu.Unlock()
	return nil
}

// cleanup deletes the load balancer, clears the status and removes the
// finalizer, in that order: the Service stays until the cloud is clean.
func (c *Controller) cleanup(ctx context.Context, key string, svc *v1.Service) error {
	logger := klog.FromContext(ctx)
	if !c.get(key).waiting {
		logger.V(2).Info("Deleting load balancer")
		c.recorder.Event(svc, v1.EventTypeNormal, reasonDeleting, messageDeleting)
	}
	err := c.balancer.EnsureLoadBalancerDeleted(ctx, c.cfg.ClusterName, svc)
	if err != nil && !errors.Is(err, cloudprovider.ImplementedElsewhere) {
		if c.failed(key, opDelete, err) {
			c.recorder.Eventf(svc, v1.EventTypeWarning, reasonDeleteFailed, "Error deleting load balancer: %v", err)
		}
		return fmt.Errorf("deleting the load balancer: %w", err)
	}
	if svc.DeletionTimestamp == nil && !statusEqual(&svc.Status.LoadBalancer, nil) {
		if err := c.patchStatus(ctx, svc, &v1.LoadBalancerStatus{}); err != nil {
			c.failed(key, opDelete, err)
			return err
		}
	}
	if err := c.setFinalizer(ctx, svc, false); err != nil {
		c.failed(key, opDelete, err)
		return fmt.Errorf("removing the finalizer: %w", err)
	}
	loadBalancerSyncs.WithLabelValues(opDelete, resultSuccess).Inc()
	c.recorder.Event(svc, v1.EventTypeNormal, reasonDeleted, messageDeleted)
	logger.V(2).Info("Deleted load balancer")
	c.forget(key)
	return nil
}

// get returns a copy of the Service's state (the zero state if none).
func (c *Controller) get(key string) lbState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.state[key]; st != nil {
		return *st
	}
	return lbState{}
}

func (c *Controller) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.state, key)
}

// ensured records a successful Ensure and returns the time to the drift
// repair, at a point of its own in (period/2, 3·period/2) so that load
// balancers ensured together spread out.
func (c *Controller) ensured(key string, spec lbSpec, hosts string) time.Duration {
	loadBalancerSyncs.WithLabelValues(opEnsure, resultSuccess).Inc()
	var next time.Duration
	st := &lbState{synced: true, spec: spec, hosts: hosts}
	if c.cfg.ResyncPeriod > 0 {
		next = wait.Jitter(c.cfg.ResyncPeriod/2, 2)
		st.ensureDue = time.Now().Add(next)
	} else {
		st.ensureDue = time.Now().Add(100 * 365 * 24 * time.Hour)
	}
	c.mu.Lock()
	c.state[key] = st
	c.mu.Unlock()
	return next
}

// failed records a failed sync and reports whether it is a failure to
// tell about: a call still in the cloud for the Service (detached, or
// fencing it) is not, and the Service comes back when the call returns.
func (c *Controller) failed(key, op string, err error) bool {
	waiting := errors.Is(err, cloud.ErrInProgress) || errors.Is(err, cloud.ErrFenced)
	c.mu.Lock()
	st := c.state[key]
	if st == nil {
		st = &lbState{}
		c.state[key] = st
	}
	st.waiting, st.retrying = waiting, !waiting
	c.mu.Unlock()
	result := resultError
	if waiting {
		result = resultWaiting
	}
	loadBalancerSyncs.WithLabelValues(op, result).Inc()
	return !waiting
}

// setFinalizer adds or removes the cleanup finalizer with a merge patch
// that has the resourceVersion as a precondition, so that another
// writer's finalizer is never dropped; on a conflict it reads the Service
// again and retries.
func (c *Controller) setFinalizer(ctx context.Context, svc *v1.Service, present bool) error {
	cur := svc
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		finalizers := slices.DeleteFunc(slices.Clone(cur.Finalizers), func(f string) bool { return f == finalizerCleanup })
		if present {
			finalizers = append(finalizers, finalizerCleanup)
		}
		if slices.Equal(finalizers, cur.Finalizers) {
			return nil
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": cur.ResourceVersion,
			"finalizers":      finalizers,
		}})
		if err != nil {
			return err
		}
		patched, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err == nil:
			// Later patches of this sync start from the new version.
			svc.ResourceVersion, svc.Finalizers = patched.ResourceVersion, patched.Finalizers
			return nil
		case apierrors.IsNotFound(err) && !present:
			return nil
		case apierrors.IsConflict(err):
			fresh, getErr := c.client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
			if getErr != nil {
				return getErr
			}
			if fresh.UID != svc.UID {
				return fmt.Errorf("service %s was replaced (UID %s, was %s)", serviceKey(svc), fresh.UID, svc.UID)
			}
			cur = fresh
		}
		return err
	})
}

// patchStatus writes status.loadBalancer through the status subresource.
// A JSON merge patch replaces the ingress list whole.
func (c *Controller) patchStatus(ctx context.Context, svc *v1.Service, status *v1.LoadBalancerStatus) error {
	var ingress any // null clears the list
	if len(status.Ingress) > 0 {
		ingress = status.Ingress
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"loadBalancer": map[string]any{"ingress": ingress}}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching the load-balancer status: %w", err)
	}
	return nil
}

func serviceKey(svc *v1.Service) string { return svc.Namespace + "/" + svc.Name }
