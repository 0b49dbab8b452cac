//go:build bench

package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

const (
	taintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"
	// creators register Nodes in parallel, as many kubelets do.
	creators = 20
	// pollInterval is how often a run checks whether it has converged.
	pollInterval = 200 * time.Millisecond
	// cleanupTimeout bounds each wait of a run's teardown.
	cleanupTimeout = time.Minute
	// quietPeriod without a new cloud call tells that a stopped controller's
	// workers are gone.
	quietPeriod = time.Second
)

// cloudMethods are the fake cloud's methods, to count every call it got.
var cloudMethods = []string{
	"InstanceExists", "InstanceShutdown", "InstanceMetadata",
	"GetLoadBalancer", "EnsureLoadBalancer", "UpdateLoadBalancer", "EnsureLoadBalancerDeleted",
	"ListRoutes", "CreateRoute", "DeleteRoute",
}

// runOnce registers n tainted Nodes, then starts the implementation's
// controller on its own informers and client and a fresh fake cloud, and
// waits until every Node is initialised or the scenario's limit; it counts
// the cloud calls made until then. Before it returns, it stops the
// controller, waits until the cloud gets no more calls, deletes every Node
// and waits until the run's informer has seen them go.
func runOnce(ctx context.Context, cp *harness.ControlPlane, sc scenario, impl implementation, n int) (result, error) {
	r := result{scenario: sc.name, impl: impl.name, settings: impl.settings, comparison: impl.comparison, total: n, limit: sc.limit}
	provider, hung, err := newCloud(sc, n)
	if err != nil {
		return r, err
	}
	defer provider.Close()
	r.hung = len(hung)
	client, err := newClient(cp.Config)
	if err != nil {
		return r, err
	}
	if err := createNodes(ctx, cp.Client, n); err != nil {
		return r, err
	}

	informerCtx, stopInformers := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, impl.informerOptions...)
	defer func() {
		stopInformers()
		factory.Shutdown() // waits for the informers' goroutines
	}()
	nodes := factory.Core().V1().Nodes()
	runCtx, stopController := context.WithCancel(ctx)
	defer stopController()
	run, err := impl.newController(runCtx, client, nodes, provider, impl.workers)
	if err != nil {
		return r, err
	}
	prog := &progress{done: map[string]time.Duration{}}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    prog.observe,
		UpdateFunc: func(_, obj any) { prog.observe(obj) },
	}); err != nil {
		return r, fmt.Errorf("adding the progress handler: %w", err)
	}

	prog.start = time.Now()
	factory.Start(informerCtx.Done())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		run(runCtx)
	}()
	defer func() {
		stopController()
		<-stopped
	}()
	err = wait.PollUntilContextTimeout(ctx, pollInterval, sc.limit, false, func(context.Context) (bool, error) {
		return prog.count() == n, nil
	})
	if ctx.Err() != nil {
		return r, fmt.Errorf("waiting for the Nodes: %w", err)
	}
	r.initialised, r.hungInitialised, r.converged = prog.summary(hung, n)
	r.metadataCalls = provider.CallCount("InstanceMetadata")
	r.calls = startedCalls(provider)

	// Teardown: the controller's context ends every call it made, hung ones too.
	stopController()
	<-stopped
	if err := waitCloudQuiet(ctx, provider); err != nil {
		return r, err
	}
	if err := deleteNodes(ctx, cp.Client, nodes.Lister()); err != nil {
		return r, err
	}
	return r, nil
}

// newClient returns a clientset with the scenario's rate limit, speaking
// protobuf as both commands do by default.
func newClient(cfg *rest.Config) (kubernetes.Interface, error) {
	return newClientRate(cfg, 0, 0)
}

// newClientRate is newClient with the rate limit qps and burst; 0 takes the
// bench's flags.
func newClientRate(cfg *rest.Config, qps float32, burst int) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(*kubeQPS), *kubeBurst
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, burst
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the controller's client: %w", err)
	}
	return client, nil
}

// newCloud returns a fake cloud that creates an instance for any Node name,
// with the scenario's faults, and the names of the Nodes whose calls hang.
func newCloud(sc scenario, n int) (*fake.Cloud, map[string]bool, error) {
	provider, err := fake.New(&fake.Config{AutoInstances: fake.AutoInstances{
		Enabled: true, Type: "fake.medium", Region: "region-1", Zones: []string{"zone-a", "zone-b", "zone-c"},
	}})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the fake cloud: %w", err)
	}
	faults := []fake.Fault{{Method: "InstanceMetadata", Latency: fake.Duration{Duration: sc.latency}}}
	hung := map[string]bool{}
	for i := range n {
		if sc.hangEvery > 0 && i%sc.hangEvery == sc.hangEvery-1 {
			hung[nodeName(i)] = true
			faults = append(faults, fake.Fault{Method: "InstanceMetadata", Object: nodeName(i), Hang: fake.HangRespectContext})
		}
	}
	for _, f := range faults {
		if _, err := provider.AddFault(f); err != nil {
			provider.Close()
			return nil, nil, fmt.Errorf("adding fault %+v: %w", f, err)
		}
	}
	return provider, hung, nil
}

func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// createNodes registers n Nodes the way kubelet --cloud-provider=external
// does (tainted, no providerID), creators at a time, before the controller
// starts. It fails when Nodes are left from an earlier run.
func createNodes(ctx context.Context, client kubernetes.Interface, n int) error {
	left, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("listing Nodes: %w", err)
	}
	if len(left.Items) > 0 {
		return fmt.Errorf("node %s is left from an earlier run", left.Items[0].Name)
	}
	names := make(chan string)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range creators {
		wg.Go(func() {
			for name := range names {
				_, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: name}},
					Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: taintUninitialized, Value: "true", Effect: v1.TaintEffectNoSchedule}}},
				}, metav1.CreateOptions{})
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("creating Node %s: %w", name, err))
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		names <- nodeName(i)
	}
	close(names)
	wg.Wait()
	return errors.Join(errs...)
}

// warmUp creates and deletes n Nodes once, so that the first run does not
// meet a colder apiserver and etcd than the others.
func warmUp(ctx context.Context, client kubernetes.Interface, n int) error {
	if err := createNodes(ctx, client, n); err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	if err := client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("warming up: deleting Nodes: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, cleanupTimeout, true, func(ctx context.Context) (bool, error) {
		left, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(left.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("warming up: waiting until no Node is left: %w", err)
	}
	return nil
}

// deleteNodes deletes every Node and the Events about them, and waits until
// the run's informer cache is empty.
func deleteNodes(ctx context.Context, client kubernetes.Interface, lister corelisters.NodeLister) error {
	if err := client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("deleting Nodes: %w", err)
	}
	// Events about a Node are in the default namespace.
	if err := client.CoreV1().Events(metav1.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("deleting Events: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, cleanupTimeout, true, func(context.Context) (bool, error) {
		left, err := lister.List(labels.Everything())
		return err == nil && len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting until the informer has no Nodes: %w", err)
	}
	return nil
}

// startedCalls counts the calls the cloud has started.
func startedCalls(provider *fake.Cloud) int {
	total := 0
	for _, m := range cloudMethods {
		total += provider.CallCount(m)
	}
	return total
}

// waitCloudQuiet waits until every call the cloud started has returned (a
// call is recorded when it returns) and no new one has started for
// quietPeriod. Neither controller's Run waits for its workers, and a
// worker goes on taking the keys left in its shut-down queue, each with a
// call that fails at once on the cancelled context. (The cloud keeps
// 10,000 call records, far more than a run of 1,000 Nodes makes.)
func waitCloudQuiet(ctx context.Context, provider *fake.Cloud) error {
	started, quietSince := -1, time.Now()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, cleanupTimeout, true, func(context.Context) (bool, error) {
		now := startedCalls(provider)
		if now != started {
			started, quietSince = now, time.Now()
		}
		return len(provider.Calls()) == now && time.Since(quietSince) >= quietPeriod, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the cloud calls to stop after the controller stopped: %w", err)
	}
	return nil
}

// progress records when the informer first saw each Node without the
// uninitialized taint, counted from start.
type progress struct {
	start time.Time
	mu    sync.Mutex
	done  map[string]time.Duration
}

func (p *progress) observe(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok || slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == taintUninitialized }) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, seen := p.done[node.Name]; !seen {
		p.done[node.Name] = time.Since(p.start)
	}
}

func (p *progress) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.done)
}

// summary returns how many Nodes are initialised, how many of those are
// hung ones, and when all the n-len(hung) others were (0: not yet).
func (p *progress) summary(hung map[string]bool, n int) (initialised, hungInitialised int, othersDone time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	others := 0
	var last time.Duration
	for name, at := range p.done {
		if hung[name] {
			hungInitialised++
			continue
		}
		others++
		last = max(last, at)
	}
	if others == n-len(hung) {
		othersDone = last
	}
	return len(p.done), hungInitialised, othersDone
}
