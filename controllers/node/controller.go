package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
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
const Name = "cloud-node"

// Config configures the controller.
type Config struct {
	// Workers sync Nodes in parallel (--concurrent-node-syncs).
	Workers int
	// RefreshPeriod is how often an initialised Node's addresses and cloud
	// labels are refreshed (--node-status-update-frequency).
	RefreshPeriod time.Duration
}

// Controller initialises Nodes registered with the uninitialized taint and
// keeps initialised Nodes' addresses and cloud labels up to date.
type Controller struct {
	client    kubernetes.Interface
	nodes     corelisters.NodeLister
	synced    cache.InformerSynced
	instances cloudprovider.InstancesV2
	recorder  record.EventRecorder
	queue     *worker.Queue
	cfg       Config
}

// New wires the controller onto the shared Node informer. It fails when the
// provider offers no InstancesV2.
func New(ctx context.Context, client kubernetes.Interface, nodes coreinformers.NodeInformer, guard *cloud.Guard, recorder record.EventRecorder, cfg Config) (*Controller, error) {
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
		queue:     worker.New(Name, "node", workqueue.DefaultTypedControllerRateLimiter[string]()),
	}
	_, err := nodes.Informer().AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onAdd,
		UpdateFunc: c.onUpdate,
	}, cache.HandlerOptions{Logger: ptrTo(klog.FromContext(ctx))})
	if err != nil {
		return nil, fmt.Errorf("%s: adding Node event handler: %w", Name, err)
	}
	// A detached InstanceMetadata call that returns brings its Node back.
	guard.OnResult(cloud.KindNode, c.queue.Add)
	return c, nil
}

func ptrTo[T any](v T) *T { return &v }

// onAdd initialises a tainted Node at once and schedules the first refresh
// of an initialised one at its own random point in the period, so a
// restart spreads the refreshes of all Nodes over the period.
func (c *Controller) onAdd(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	if uninitialized(node) {
		c.queue.Add(node.Name)
		return
	}
	c.queue.AddAfter(node.Name, time.Duration(rand.Int64N(int64(c.cfg.RefreshPeriod)+1)))
}

// onUpdate enqueues a tainted Node when the taint appears or what its
// initialisation depends on changes. Heartbeats do not enqueue: a failed
// sync waits out its back-off.
func (c *Controller) onUpdate(oldObj, newObj any) {
	old, ok1 := oldObj.(*v1.Node)
	node, ok2 := newObj.(*v1.Node)
	if !ok1 || !ok2 || !uninitialized(node) {
		return
	}
	if !uninitialized(old) || old.Spec.ProviderID != node.Spec.ProviderID ||
		old.Annotations[annotationProvidedNodeIP] != node.Annotations[annotationProvidedNodeIP] {
		c.queue.Add(node.Name)
	}
}

// Run runs workers until ctx is done and they have stopped.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting", "workers", c.cfg.Workers)
	defer logger.Info("Stopped")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	c.queue.Run(ctx, c.cfg.Workers, c.sync)
}

// sync initialises or refreshes one Node. It returns when to refresh the
// Node next (0: not at all).
func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	cached, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	node := cached.DeepCopy()
	initializing := uninitialized(node)

	md, err := c.instances.InstanceMetadata(ctx, node)
	if err != nil {
		if _, retryLater := cloud.RetryAfter(err); retryLater {
			return 0, err
		}
		if !initializing && errors.Is(err, cloudprovider.InstanceNotFound) {
			// The lifecycle controller deals with vanished instances.
			return c.cfg.RefreshPeriod, nil
		}
		if initializing {
			c.recorder.Eventf(node, v1.EventTypeWarning, reasonInitFailed, "Getting instance metadata: %v", err)
		}
		return 0, fmt.Errorf("getting instance metadata: %w", err)
	}
	if md == nil {
		if initializing {
			c.recorder.Event(node, v1.EventTypeWarning, reasonInitFailed, "Cloud provider returned no instance metadata")
		}
		return 0, errors.New("cloud provider returned no instance metadata")
	}
	if initializing && node.Spec.ProviderID == "" && md.ProviderID == "" {
		c.recorder.Event(node, v1.EventTypeWarning, reasonInitFailed, "Cloud provider returned no providerID and the Node has none")
		return 0, errors.New("no providerID: the Node has none and the cloud provider returned none")
	}

	addresses, err := desiredAddresses(node, md.NodeAddresses)
	if err != nil {
		c.recorder.Eventf(node, v1.EventTypeWarning, reasonAddressMismatch, "%v", err)
		if initializing {
			return 0, err
		}
		// An initialised Node keeps its addresses; try again next period.
		return c.cfg.RefreshPeriod, nil
	}
	if addresses != nil {
		patched, err := c.patchAddresses(ctx, cached, addresses)
		if err != nil {
			return 0, err
		}
		// The next patch's precondition is the version this one made.
		cached = cached.DeepCopy()
		cached.ResourceVersion = patched.ResourceVersion
	}

	desired := node.DeepCopy()
	if desired.Spec.ProviderID == "" {
		desired.Spec.ProviderID = md.ProviderID
	}
	applyCloudLabels(desired, md)
	if initializing {
		desired.Spec.Taints = withoutTaint(desired.Spec.Taints, taintUninitialized)
	}
	changed, err := c.patchNode(ctx, cached, desired)
	if err != nil {
		return 0, err
	}
	if initializing {
		initDuration.Observe(time.Since(node.CreationTimestamp.Time).Seconds())
		c.recorder.Event(node, v1.EventTypeNormal, reasonSynced, "Node initialized from the cloud")
		klog.FromContext(ctx).V(2).Info("Node initialized", "providerID", desired.Spec.ProviderID)
	} else if changed || addresses != nil {
		klog.FromContext(ctx).V(2).Info("Node refreshed from the cloud", "labels", changed, "addresses", addresses != nil)
	}
	return c.cfg.RefreshPeriod, nil
}

// patchAddresses replaces status.addresses through the status subresource,
// with the resourceVersion as a precondition. A JSON merge patch replaces
// the list whole: a strategic merge patch merges addresses by type and
// cannot drop one address of a type while keeping another.
func (c *Controller) patchAddresses(ctx context.Context, node *v1.Node, addresses []v1.NodeAddress) (*v1.Node, error) {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"status":   map[string]any{"addresses": addresses},
	})
	if err != nil {
		return nil, err
	}
	patched, err := c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1PatchOptions, "status")
	if err != nil {
		return nil, fmt.Errorf("patching addresses: %w", err)
	}
	return patched, nil
}

// patchNode writes the difference between node and desired (providerID,
// labels, annotations, taints) in one strategic merge patch, with the
// resourceVersion as a precondition so that a concurrent writer's change
// is never dropped. It reports whether there was a difference.
func (c *Controller) patchNode(ctx context.Context, node, desired *v1.Node) (bool, error) {
	oldJSON, err := json.Marshal(node)
	if err != nil {
		return false, err
	}
	newJSON, err := json.Marshal(desired)
	if err != nil {
		return false, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Node{})
	if err != nil {
		return false, err
	}
	if string(patch) == "{}" {
		return false, nil
	}
	var withVersion map[string]any
	if err := json.Unmarshal(patch, &withVersion); err != nil {
		return false, err
	}
	meta, _ := withVersion["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		withVersion["metadata"] = meta
	}
	meta["resourceVersion"] = node.ResourceVersion
	if patch, err = json.Marshal(withVersion); err != nil {
		return false, err
	}
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1PatchOptions); err != nil {
		return false, fmt.Errorf("patching the Node: %w", err)
	}
	return true, nil
}
