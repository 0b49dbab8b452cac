package nodelifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
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
const Name = "cloud-node-lifecycle"

// Config configures the controller.
type Config struct {
	// MonitorPeriod is how often the Nodes are scanned (--node-monitor-period).
	MonitorPeriod time.Duration
	// DeletionGracePeriod is how long after an instance was first seen gone
	// a check must start that still finds it gone before the Node is deleted
	// (--node-deletion-grace-period). Zero: any later check confirms.
	DeletionGracePeriod time.Duration
	// Workers is how many Nodes are checked at once
	// (--concurrent-node-lifecycle-syncs).
	Workers int
}

func (cfg Config) validate() error {
	var errs []error
	if cfg.MonitorPeriod <= 0 {
		errs = append(errs, fmt.Errorf("monitor period must be positive, got %s", cfg.MonitorPeriod))
	}
	if cfg.DeletionGracePeriod < 0 {
		errs = append(errs, fmt.Errorf("deletion grace period must not be negative, got %s", cfg.DeletionGracePeriod))
	}
	if cfg.Workers <= 0 {
		errs = append(errs, fmt.Errorf("workers must be positive, got %d", cfg.Workers))
	}
	return errors.Join(errs...)
}

// Controller deletes Nodes whose instance is gone from the cloud and taints
// Nodes whose instance is shut down.
type Controller struct {
	client    kubernetes.Interface
	nodes     corelisters.NodeLister
	synced    cache.InformerSynced
	instances cloudprovider.InstancesV2
	recorder  record.EventRecorder
	queue     *worker.Queue
	cfg       Config
	// now is the clock of the grace period; tests replace it.
	now func() time.Time

	mu sync.Mutex
	// pending holds the Nodes whose check is queued, waiting for a retry or
	// running: the scan does not queue them again.
	pending sets.Set[string]
	// goneSince holds, by Node name, the first observation that the Node's
	// instance is gone, until a check finds the instance, the Node is Ready,
	// deleted, or replaced.
	goneSince map[string]goneObservation
}

// New wires the controller onto the shared Node informer. It fails when the
// provider offers no InstancesV2.
func New(ctx context.Context, client kubernetes.Interface, nodes coreinformers.NodeInformer, guard *cloud.Guard, recorder record.EventRecorder, cfg Config) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	instances, ok := guard.InstancesV2()
	if !ok {
		return nil, fmt.Errorf("%s: cloud provider %q does not support InstancesV2", Name, guard.ProviderName())
	}
	c := &Controller{
		client:    client,
		nodes:     nodes.Lister(),
		synced:    nodes.Informer().HasSynced,
		instances: instances,
		recorder:  recorder,
		cfg:       cfg,
		now:       time.Now,
		pending:   sets.New[string](),
		goneSince: map[string]goneObservation{},
		queue: worker.New(Name, "node",
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.MonitorPeriod, maxRetryPeriods*cfg.MonitorPeriod)),
	}
	logger := klog.FromContext(ctx)
	// Nodes are queued by the periodic scan, not by events; only a deleted
	// Node matters here, to drop what is remembered about it.
	_, err := nodes.Informer().AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		DeleteFunc: c.onDelete,
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return nil, fmt.Errorf("%s: adding Node event handler: %w", Name, err)
	}
	// A detached instance call that returns brings its Node back.
	guard.OnResult(cloud.KindNode, c.queue.Add)
	return c, nil
}

// onDelete drops the gone-observation of a deleted Node. A check of it that
// waits for a retry is run now, so it finds the Node gone and clears its
// pending mark instead of holding back a Node re-registered under its name.
func (c *Controller) onDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if obs, ok := c.goneSince[node.Name]; ok && obs.uid == node.UID {
		delete(c.goneSince, node.Name)
	}
	if c.pending.Has(node.Name) {
		c.queue.Add(node.Name)
	}
}

// Run scans the Nodes every monitor period and checks them on the workers
// until ctx is done; it returns when the workers have stopped.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting", "workers", c.cfg.Workers, "monitorPeriod", c.cfg.MonitorPeriod, "deletionGracePeriod", c.cfg.DeletionGracePeriod)
	defer logger.Info("Stopped")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { wait.UntilWithContext(ctx, c.scan, c.cfg.MonitorPeriod) })
	c.queue.Run(ctx, c.cfg.Workers, c.check)
	wg.Wait()
}

// scan queues every Node that needs a look and is not pending: Nodes that
// are not Ready, and Ready Nodes that still carry the shutdown taint. A Ready
// Node's gone-observation is dropped: a machine is reporting for it.
func (c *Controller) scan(ctx context.Context) {
	logger := klog.FromContext(ctx)
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Listing Nodes")
		return
	}
	queued := 0
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, node := range nodes {
		if ready(node) {
			if obs, ok := c.goneSince[node.Name]; ok {
				delete(c.goneSince, node.Name)
				logger.V(2).Info("Node is Ready; forgetting that its instance was seen gone", "node", klog.KObj(node), "goneSince", obs.at)
			}
			if !hasTaint(node, taintShutdown) {
				continue
			}
		} else if node.DeletionTimestamp != nil {
			continue
		}
		if c.pending.Has(node.Name) {
			continue
		}
		c.pending.Insert(node.Name)
		c.queue.Add(node.Name)
		queued++
	}
	logger.V(4).Info("Scanned Nodes", "nodes", len(nodes), "queued", queued, "pending", c.pending.Len())
}

// check checks one Node. A Node stays pending while it waits for a retry:
// after a retry-after from the guard (call in progress, guard saturated,
// throttled) as long as asked, after another error with a back-off from one
// monitor period up to maxRetryPeriods of them.
func (c *Controller) check(ctx context.Context, name string) (time.Duration, error) {
	err := c.sync(ctx, name)
	if err == nil {
		c.mu.Lock()
		c.pending.Delete(name)
		c.mu.Unlock()
	}
	return 0, err
}

// sync checks one Node. It reads the Node from the lister and never
// modifies it: writes are patches built from copies.
func (c *Controller) sync(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx)
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		delete(c.goneSince, name)
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}

	if ready(node) {
		c.forgetGone(ctx, node, "Node is Ready")
		if !hasTaint(node, taintShutdown) {
			return nil
		}
		logger.V(2).Info("Node is Ready, removing the shutdown taint")
		return c.updateTaints(ctx, node, withoutShutdownTaint)
	}
	if node.DeletionTimestamp != nil {
		return nil
	}

	started := c.now()
	exists, err := c.instances.InstanceExists(ctx, node)
	if errors.Is(err, cloudprovider.InstanceNotFound) {
		exists, err = false, nil
	}
	if err != nil {
		// An error, a timeout, a call in progress or a saturated guard says
		// nothing about the instance: it is not a gone-observation, and an
		// earlier one stays as it was. Clearing it would let a flaky cloud
		// API put the deletion off for ever; the next check that gets an
		// answer confirms it or clears it.
		return fmt.Errorf("checking whether the instance exists: %w", err)
	}
	if !exists {
		return c.instanceGone(ctx, node, started)
	}
	c.forgetGone(ctx, node, "Instance found again")

	shutdown, err := c.instances.InstanceShutdown(ctx, node)
	switch {
	case errors.Is(err, cloudprovider.NotImplemented):
		return nil
	case errors.Is(err, cloudprovider.InstanceNotFound):
		// Gone between the two calls: the next check sees it gone.
		logger.V(4).Info("Instance not found when checking for shutdown")
		return nil
	case err != nil:
		return fmt.Errorf("checking whether the instance is shut down: %w", err)
	}
	if !shutdown || hasTaint(node, taintShutdown) {
		return nil
	}
	logger.V(2).Info("Instance is shut down, adding the shutdown taint")
	return c.updateTaints(ctx, node, withShutdownTaint)
}

// forgetGone drops the Node's gone-observation, if any.
func (c *Controller) forgetGone(ctx context.Context, node *v1.Node, why string) {
	c.mu.Lock()
	obs, ok := c.goneSince[node.Name]
	delete(c.goneSince, node.Name)
	c.mu.Unlock()
	if ok {
		klog.FromContext(ctx).V(2).Info("Forgetting that the instance was seen gone", "reason", why, "goneSince", obs.at)
	}
}

// instanceGone handles a check, started at started, that found the Node's
// instance gone. The first such check is remembered; the Node is deleted
// only by a check that started at least the grace period after the first
// one returned, so the two observations are at least that far apart.
func (c *Controller) instanceGone(ctx context.Context, node *v1.Node, started time.Time) error {
	logger := klog.FromContext(ctx)
	c.mu.Lock()
	first, seen := c.goneSince[node.Name]
	if !seen || !first.about(node) {
		c.goneSince[node.Name] = goneObservation{uid: node.UID, providerID: node.Spec.ProviderID, at: c.now()}
		c.mu.Unlock()
		logger.V(2).Info("Instance not found; the Node is deleted if it is still gone after the grace period", "gracePeriod", c.cfg.DeletionGracePeriod)
		return nil
	}
	c.mu.Unlock()
	if since := started.Sub(first.at); since < c.cfg.DeletionGracePeriod {
		logger.V(4).Info("Instance still not found, within the grace period", "goneSince", first.at, "remaining", c.cfg.DeletionGracePeriod-since)
		return nil
	}
	return c.deleteNode(ctx, node, first.at)
}

// deleteNode deletes the Node with its UID as a precondition: if the Node
// of this name is no longer the one the decision is about (deleted and
// re-registered), the apiserver refuses with a conflict and nothing is
// deleted. On a failure the gone-observation is kept and the next check
// that still finds the instance gone tries again.
func (c *Controller) deleteNode(ctx context.Context, node *v1.Node, goneSince time.Time) error {
	logger := klog.FromContext(ctx)
	c.recorder.Eventf(node, v1.EventTypeNormal, reasonDeletingNode, "Deleting Node %s: its instance has not been found since %s", node.Name, goneSince.UTC().Format(time.RFC3339))
	uid := node.UID
	err := c.client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		logger.V(2).Info("Deleted the Node: its instance is gone", "goneSince", goneSince)
	case apierrors.IsNotFound(err):
		logger.V(2).Info("Node was already deleted")
	case apierrors.IsConflict(err):
		// Not a failure to report: the safeguard worked.
		logger.V(2).Info("Node was replaced by a new one of the same name; not deleting it", "uid", uid, "err", err)
	default:
		c.recorder.Eventf(node, v1.EventTypeWarning, reasonDeletingNodeFailed, "Deleting Node %s: %v", node.Name, err)
		return fmt.Errorf("deleting the Node: %w", err)
	}
	c.mu.Lock()
	if obs, ok := c.goneSince[node.Name]; ok && obs.uid == uid {
		delete(c.goneSince, node.Name)
	}
	c.mu.Unlock()
	return nil
}

// updateTaints writes change(spec.taints) as a JSON merge patch that carries
// the Node's resourceVersion as a precondition.
//
// spec.taints has no merge key, so any patch (merge or strategic) replaces
// the whole list: without the precondition, a taint that another writer
// added after our read would be dropped. With it, such a write fails with
// 409 Conflict; the Node is then read again from the apiserver (the cache may
// not have the new version yet) and the change recomputed. A JSON patch with
// a `test` on resourceVersion would guard as well, but it fails with 422,
// which cannot be told apart from a real validation error and retried.
func (c *Controller) updateTaints(ctx context.Context, node *v1.Node, change func([]v1.Taint) ([]v1.Taint, bool)) error {
	logger := klog.FromContext(ctx)
	uid := node.UID
	reread := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if reread {
			fresh, err := c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if fresh.UID != uid {
				logger.V(2).Info("Node was replaced by a new one of the same name; leaving its taints to the next check")
				return nil
			}
			node = fresh
		}
		reread = true
		taints, changed := change(node.Spec.Taints)
		if !changed {
			return nil
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
			"spec":     map[string]any{"taints": taints},
		})
		if err != nil {
			return err
		}
		_, err = c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patching the taints: %w", err)
	}
	return nil
}
