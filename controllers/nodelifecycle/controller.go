// Package nodelifecycle is the cloud-node-lifecycle controller. Every
// monitor period it asks the cloud about the Nodes that are not Ready: a
// Node whose instance is gone is deleted once a second check, a grace period
// after the first, still finds it gone; a Node whose instance is shut down
// gets the shutdown taint, which is removed when the Node is Ready again.
package nodelifecycle

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
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/cloud"
)

// Name is the controller's name in --controllers.
const Name = "cloud-node-lifecycle"

// Keys and reasons.
const (
	taintShutdown = cloudproviderapi.TaintNodeShutdown

	reasonDeleting       = "DeletingNode"
	reasonDeletingFailed = "DeletingNodeFailed"
)

// Config configures the controller.
type Config struct {
	// MonitorPeriod is how often the Nodes are checked (--node-monitor-period).
	MonitorPeriod time.Duration
	// DeletionGracePeriod is how long after an instance was first seen gone
	// a second check must still find it gone before the Node is deleted
	// (--node-deletion-grace-period).
	DeletionGracePeriod time.Duration
	// Workers check Nodes in parallel.
	Workers int
}

// Controller deletes Nodes whose instance is gone and taints Nodes whose
// instance is shut down.
type Controller struct {
	client    kubernetes.Interface
	nodes     corelisters.NodeLister
	synced    cache.InformerSynced
	instances cloudprovider.InstancesV2
	recorder  record.EventRecorder
	queue     workqueue.TypedRateLimitingInterface[string]
	cfg       Config

	mu sync.Mutex
	// goneSince is when a Node's instance was first seen gone, for that
	// Node's UID, until a check finds it or the Node is deleted.
	goneSince map[string]gone
}

type gone struct {
	uid   types.UID
	since time.Time
}

// New wires the controller onto the shared Node informer.
func New(ctx context.Context, client kubernetes.Interface, nodes coreinformers.NodeInformer, instances cloudprovider.InstancesV2, recorder record.EventRecorder, cfg Config) (*Controller, error) {
	c := &Controller{
		client:    client,
		nodes:     nodes.Lister(),
		synced:    nodes.Informer().HasSynced,
		instances: instances,
		recorder:  recorder,
		cfg:       cfg,
		goneSince: map[string]gone{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name},
		),
	}
	logger := klog.FromContext(ctx)
	_, err := nodes.Informer().AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if node, ok := obj.(*v1.Node); ok {
				c.forget(node.Name)
			}
		},
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return nil, fmt.Errorf("%s: adding Node event handler: %w", Name, err)
	}
	return c, nil
}

// Run scans the Nodes every monitor period and checks them with bounded
// workers until ctx is done. A Node whose check is queued or running is not
// queued twice, so a hung call never piles up work.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting", "workers", c.cfg.Workers, "period", c.cfg.MonitorPeriod, "deletionGracePeriod", c.cfg.DeletionGracePeriod)
	defer logger.Info("Stopped")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	for range c.cfg.Workers {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	wait.UntilWithContext(ctx, c.scan, c.cfg.MonitorPeriod)
}

// scan queues every Node that needs a look: not Ready ones, and Ready ones
// that still carry the shutdown taint.
func (c *Controller) scan(ctx context.Context) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Listing Nodes")
		return
	}
	for _, n := range nodes {
		if !ready(n) || hasTaint(n, taintShutdown) {
			c.queue.Add(n.Name)
		}
	}
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("node", name))
	err := c.sync(ctx, name)
	if err == nil {
		c.queue.Forget(name)
		return true
	}
	// The next scan looks again; a retry-after only says "not before".
	if after, ok := cloud.RetryAfter(err); ok {
		klog.FromContext(ctx).V(4).Info("Cloud asked to retry later", "after", after, "err", err)
		c.queue.Forget(name)
		return true
	}
	klog.FromContext(ctx).V(2).Info("Check failed", "err", err)
	c.queue.AddRateLimited(name)
	return true
}

func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(name)
		return nil
	}
	if err != nil {
		return err
	}
	if ready(node) {
		c.forget(name)
		if hasTaint(node, taintShutdown) {
			return c.setTaints(ctx, node, slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t v1.Taint) bool { return t.Key == taintShutdown }))
		}
		return nil
	}

	exists, err := c.instances.InstanceExists(ctx, node)
	if errors.Is(err, cloudprovider.InstanceNotFound) {
		exists, err = false, nil
	}
	if err != nil {
		// An error says nothing about the instance: no deletion, and the
		// first gone-observation, if any, stays as it was.
		return fmt.Errorf("checking the instance: %w", err)
	}
	if !exists {
		return c.instanceGone(ctx, node)
	}
	c.forget(name)

	shutdown, err := c.instances.InstanceShutdown(ctx, node)
	if err != nil {
		return fmt.Errorf("checking for shutdown: %w", err)
	}
	if shutdown && !hasTaint(node, taintShutdown) {
		klog.FromContext(ctx).V(2).Info("Instance is shut down, tainting the Node")
		return c.setTaints(ctx, node, append(slices.Clone(node.Spec.Taints), v1.Taint{Key: taintShutdown, Effect: v1.TaintEffectNoSchedule}))
	}
	return nil
}

// instanceGone deletes the Node when its instance was already seen gone a
// grace period ago, and otherwise remembers this first observation.
func (c *Controller) instanceGone(ctx context.Context, node *v1.Node) error {
	logger := klog.FromContext(ctx)
	now := time.Now()
	c.mu.Lock()
	first, seen := c.goneSince[node.Name]
	if !seen || first.uid != node.UID {
		c.goneSince[node.Name] = gone{uid: node.UID, since: now}
		c.mu.Unlock()
		logger.V(2).Info("Instance not found; checking again after the grace period before deleting the Node", "gracePeriod", c.cfg.DeletionGracePeriod)
		c.queue.AddAfter(node.Name, c.cfg.DeletionGracePeriod)
		return nil
	}
	c.mu.Unlock()
	if wait := first.since.Add(c.cfg.DeletionGracePeriod).Sub(now); wait > 0 {
		c.queue.AddAfter(node.Name, wait)
		return nil
	}

	c.recorder.Eventf(node, v1.EventTypeNormal, reasonDeleting, "Deleting Node %s: its instance has been gone since %s", node.Name, first.since.UTC().Format(time.RFC3339))
	uid := node.UID
	err := c.client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		c.recorder.Eventf(node, v1.EventTypeWarning, reasonDeletingFailed, "Deleting Node %s: %v", node.Name, err)
		return fmt.Errorf("deleting the Node: %w", err)
	}
	logger.V(2).Info("Deleted the Node: its instance is gone")
	c.forget(node.Name)
	return nil
}

// setTaints replaces the Node's taints with a merge patch that carries the
// resourceVersion as a precondition: if another writer changed the Node
// meanwhile, the patch fails with a conflict and the next check starts
// from the new state, so no taint of theirs is dropped.
func (c *Controller) setTaints(ctx context.Context, node *v1.Node, taints []v1.Taint) error {
	if taints == nil {
		taints = []v1.Taint{}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"spec":     map[string]any{"taints": taints},
	})
	if err != nil {
		return err
	}
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patching taints: %w", err)
	}
	return nil
}

func (c *Controller) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.goneSince, name)
}

func ready(node *v1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == v1.NodeReady {
			return cond.Status == v1.ConditionTrue
		}
	}
	return false
}

func hasTaint(node *v1.Node, key string) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == key })
}
