//go:build bench

package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	upstreamroute "k8s.io/cloud-provider/controllers/route"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/controller-manager/pkg/features"
	_ "k8s.io/controller-manager/pkg/features/register" // upstream's route controller reads its feature gate
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/ccmkit/ccmkit/app"
	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/controllers/route"
	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

var (
	routeNodes       = flag.Int("bench.route-nodes", 500, "Nodes of R1 and R2 (at most 1024)")
	routeBaseNodes   = flag.Int("bench.route-base-nodes", 50, "Nodes R3 starts with")
	routeAddedNodes  = flag.Int("bench.route-added-nodes", 10, "Nodes each R3 round adds")
	routeRounds      = flag.Int("bench.route-rounds", 5, "R3 rounds, spread over upstream's reconciliation period")
	routeSteadyTime  = flag.Duration("bench.route-steady-window", 120*time.Second, "how long R2 counts cloud calls")
	routeCallLatency = flag.Duration("bench.route-latency", 20*time.Millisecond, "latency of every ListRoutes, CreateRoute and DeleteRoute")
	routeWorkers     = flag.Int("bench.route-workers", 0, "ccmkit's --concurrent-route-syncs (0: the command's default)")
)

const (
	// routeClusterCIDR is --cluster-cidr; Node i gets the /24 number i in
	// it, so it holds routeMaxNodes Nodes.
	routeClusterCIDR = "10.244.0.0/14"
	routeMaxNodes    = 1 << (24 - 14)
	// upstreamRoutePeriod is upstream's --route-reconciliation-period default.
	upstreamRoutePeriod = 10 * time.Second
	// upstreamRouteConcurrency is upstream's fixed bound on route calls in
	// flight (maxConcurrentRouteOperations).
	upstreamRouteConcurrency = 200
	// routeConvergeLimit bounds each wait for routes or conditions.
	routeConvergeLimit = 5 * time.Minute
	// routePollInterval is how often a run checks the route table; the times
	// reported come from the cloud's call records, not from the polling.
	routePollInterval = 20 * time.Millisecond
	// routeNodeCreators register Nodes in parallel, as many kubelets do.
	routeNodeCreators = 20
	// routeQuietPeriod without a new cloud call tells that a stopped
	// controller's calls are over, or that a converged one is idle.
	routeQuietPeriod = time.Second
	// routeCleanupLimit bounds each wait of a run's teardown.
	routeCleanupLimit = time.Minute
)

// routeCountedMethods lists the fake cloud's methods, to count every call.
var routeCountedMethods = []string{
	"InstanceExists", "InstanceShutdown", "InstanceMetadata",
	"GetLoadBalancer", "EnsureLoadBalancer", "UpdateLoadBalancer", "EnsureLoadBalancerDeleted",
	"ListRoutes", "CreateRoute", "DeleteRoute",
}

// routeImpl is a route controller with its settings.
type routeImpl struct {
	name, settings string
	// comparison says which comparison the row belongs to.
	comparison      string
	informerOptions []informers.SharedInformerOption
	// newController wires the controller onto the run's Node informer; the
	// returned run blocks until its context ends.
	newController func(ctx context.Context, client kubernetes.Interface, nodes coreinformers.NodeInformer, provider *fake.Cloud) (run func(context.Context), err error)
}

// routeResult is what one run of a scenario measured.
type routeResult struct {
	scenario, impl, settings, comparison string
	// nodes in the cluster at the end of the run.
	nodes int
	// routes are the times until the routes existed (R1: one; R3: one per
	// round), conditions those until the Nodes had NetworkUnavailable=False;
	// 0 means not within the limit.
	routes, conditions []time.Duration
	// window is how long calls were counted in R2 (0 in R1 and R3).
	window time.Duration
	calls  routeCalls
}

// routeCalls counts the calls the cloud started.
type routeCalls struct{ list, create, delete, all int }

func countRouteCalls(p *fake.Cloud) routeCalls {
	c := routeCalls{list: p.CallCount("ListRoutes"), create: p.CallCount("CreateRoute"), delete: p.CallCount("DeleteRoute")}
	for _, m := range routeCountedMethods {
		c.all += p.CallCount(m)
	}
	return c
}

func (c routeCalls) minus(o routeCalls) routeCalls {
	return routeCalls{list: c.list - o.list, create: c.create - o.create, delete: c.delete - o.delete, all: c.all - o.all}
}

// TestRouteBench runs the route scenarios on ccmkit's route controller and
// on upstream's, one run after the other on the same control plane, and
// prints the table. Subtests name the scenarios: -run 'RouteBench/R1'.
func TestRouteBench(t *testing.T) {
	// Verbosity 0, written nowhere: the controllers' logs would bury the table.
	klog.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(0), textlogger.Output(io.Discard))))
	if utilfeature.DefaultFeatureGate.Enabled(features.CloudControllerManagerWatchBasedRoutesReconciliation) {
		t.Fatalf("feature gate %s is on; upstream's default (polling) is what is measured", features.CloudControllerManagerWatchBasedRoutesReconciliation)
	}
	if n := max(*routeNodes, *routeBaseNodes+*routeRounds**routeAddedNodes); n > routeMaxNodes {
		t.Fatalf("%d Nodes do not fit in %s with a /24 each (at most %d)", n, routeClusterCIDR, routeMaxNodes)
	}
	cp := harness.StartControlPlane(t)
	if err := warmUpRoutes(t.Context(), cp.Client, *routeNodes); err != nil {
		t.Fatal(err)
	}

	opts := app.NewOptions()
	if *routeWorkers > 0 {
		opts.ConcurrentRouteSyncs = int32(*routeWorkers)
	}
	ccmkit := routeImpl{
		name: "ccmkit", comparison: "baseline",
		settings: fmt.Sprintf("workers=%d, resync=%s, guard defaults", opts.ConcurrentRouteSyncs, opts.RouteReconciliationPeriod),
		newController: func(ctx context.Context, client kubernetes.Interface, nodes coreinformers.NodeInformer, provider *fake.Cloud) (func(context.Context), error) {
			return newRouteCCMKit(ctx, client, nodes, provider, opts)
		},
		informerOptions: []informers.SharedInformerOption{informers.WithTransform(app.StripUnused)},
	}
	upstream := routeImpl{
		name: "upstream", comparison: "defaults",
		settings:      fmt.Sprintf("period=%s, %d calls in flight", upstreamRoutePeriod, upstreamRouteConcurrency),
		newController: newRouteUpstream,
	}
	impls := []routeImpl{ccmkit, upstream}

	var results []routeResult
	scenarios := []struct {
		name string
		run  func(context.Context, *harness.ControlPlane, routeImpl) (routeResult, error)
	}{
		{"R1", runRouteConverge},
		{"R2", runRouteSteady},
		{"R3", runRouteAdd},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, impl := range impls {
				r, err := sc.run(t.Context(), cp, impl)
				if err != nil {
					t.Fatalf("%s %s: %v", sc.name, impl.name, err)
				}
				r.scenario, r.impl, r.settings, r.comparison = sc.name, impl.name, impl.settings, impl.comparison
				t.Logf("%s %s: %s", sc.name, impl.name, r.summary())
				results = append(results, r)
			}
		})
	}
	if err := printRouteTable(os.Stdout, results); err != nil {
		t.Fatal(err)
	}
}

// runRouteConverge (R1) starts the controller on routeNodes Nodes that
// have pod CIDRs and no routes, and measures until every route exists.
func runRouteConverge(ctx context.Context, cp *harness.ControlPlane, impl routeImpl) (r routeResult, err error) {
	run, err := startRouteRun(ctx, cp, impl, *routeNodes)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, run.stop(ctx)) }()
	r.nodes = *routeNodes
	d, err := run.waitRoutes(ctx, 0, *routeNodes, run.start)
	if err != nil {
		return r, err
	}
	r.routes = []time.Duration{d}
	r.calls = countRouteCalls(run.provider)
	if d == 0 {
		return r, nil
	}
	c, err := run.waitConditions(ctx, 0, *routeNodes, run.start)
	r.conditions = []time.Duration{c}
	return r, err
}

// runRouteSteady (R2) lets the controller converge on routeNodes Nodes,
// then counts its cloud calls for routeSteadyTime without any change.
func runRouteSteady(ctx context.Context, cp *harness.ControlPlane, impl routeImpl) (r routeResult, err error) {
	run, err := startRouteRun(ctx, cp, impl, *routeNodes)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, run.stop(ctx)) }()
	r.nodes = *routeNodes
	if err := run.converge(ctx, 0, *routeNodes); err != nil {
		return r, err
	}
	// A reconciliation that Node events asked for at the start may still be due.
	if err := waitRouteCloudQuiet(ctx, run.provider); err != nil {
		return r, err
	}
	before := countRouteCalls(run.provider)
	tableBefore := run.provider.ListRouteTable()
	if err := routePause(ctx, *routeSteadyTime); err != nil {
		return r, err
	}
	r.window = *routeSteadyTime
	r.calls = countRouteCalls(run.provider).minus(before)
	if after := run.provider.ListRouteTable(); !slices.Equal(after, tableBefore) {
		return r, fmt.Errorf("the route table changed in the steady state: %d routes before, %d after", len(tableBefore), len(after))
	}
	return r, nil
}

// runRouteAdd (R3) lets the controller converge on routeBaseNodes Nodes,
// then adds routeAddedNodes Nodes per round and measures until their
// routes exist. Upstream converges right after one of its ticks, so round
// k starts (k+1/2)/rounds of upstream's period after the previous round
// converged: the rounds meet its ticker at evenly spread phases, as Nodes
// joining at random times would.
func runRouteAdd(ctx context.Context, cp *harness.ControlPlane, impl routeImpl) (r routeResult, err error) {
	run, err := startRouteRun(ctx, cp, impl, *routeBaseNodes)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, run.stop(ctx)) }()
	if err := run.converge(ctx, 0, *routeBaseNodes); err != nil {
		return r, err
	}
	before := countRouteCalls(run.provider)
	from := *routeBaseNodes
	for k := range *routeRounds {
		if err := routePause(ctx, (time.Duration(k)*upstreamRoutePeriod+upstreamRoutePeriod/2)/time.Duration(*routeRounds)); err != nil {
			return r, err
		}
		to := from + *routeAddedNodes
		start := time.Now()
		if err := run.addNodes(ctx, from, to); err != nil {
			return r, err
		}
		d, err := run.waitRoutes(ctx, from, to, start)
		if err != nil {
			return r, err
		}
		r.routes = append(r.routes, d)
		if d == 0 {
			break
		}
		c, err := run.waitConditions(ctx, from, to, start)
		if err != nil {
			return r, err
		}
		r.conditions = append(r.conditions, c)
		from = to
	}
	r.nodes = from
	r.calls = countRouteCalls(run.provider).minus(before)
	return r, nil
}

// routePause waits d, or until ctx ends. The scenarios pause on purpose: to
// watch a steady state, or to shift a round against upstream's ticker.
func routePause(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newRouteCCMKit wires ccmkit's route controller as the command does:
// behind a guard with the default options, the flags' defaults, Events
// recorded to the apiserver.
func newRouteCCMKit(ctx context.Context, client kubernetes.Interface, nodes coreinformers.NodeInformer, provider *fake.Cloud, opts *app.Options) (func(context.Context), error) {
	guard := cloud.New(provider, cloud.DefaultOptions())
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "route_controller"})
	c, err := route.New(ctx, client, nodes, guard, recorder, route.Config{
		ClusterName:  opts.ClusterName,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix(routeClusterCIDR)},
		Workers:      int(opts.ConcurrentRouteSyncs),
		ResyncPeriod: opts.RouteReconciliationPeriod,
	})
	if err != nil {
		guard.Close()
		broadcaster.Shutdown()
		return nil, fmt.Errorf("creating ccmkit's route controller: %w", err)
	}
	return func(ctx context.Context) {
		defer guard.Close()
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		c.Run(ctx)
	}, nil
}

// upstreamRouteMetrics is what the upstream command passes to its controllers.
var upstreamRouteMetrics = controllersmetrics.NewControllerManagerMetrics("cloud-controller-manager")

// newRouteUpstream wires upstream's route controller as
// k8s.io/cloud-provider/app does: the raw provider, the default
// --cluster-name and --route-reconciliation-period.
func newRouteUpstream(_ context.Context, client kubernetes.Interface, nodes coreinformers.NodeInformer, provider *fake.Cloud) (func(context.Context), error) {
	_, cidr, err := net.ParseCIDR(routeClusterCIDR)
	if err != nil {
		return nil, fmt.Errorf("parsing the cluster CIDR: %w", err)
	}
	c, err := upstreamroute.New(provider, client, nodes, app.NewOptions().ClusterName, []*net.IPNet{cidr})
	if err != nil {
		return nil, fmt.Errorf("creating upstream's route controller: %w", err)
	}
	return func(ctx context.Context) { c.Run(ctx, upstreamRoutePeriod, upstreamRouteMetrics) }, nil
}

// routeRun is one controller running on its own client, informers and
// fresh fake cloud.
type routeRun struct {
	cp       *harness.ControlPlane
	provider *fake.Cloud
	lister   corelisters.NodeLister
	conds    *routeConditionProgress
	start    time.Time

	stopInformers, stopController context.CancelFunc
	factory                       informers.SharedInformerFactory
	stopped                       chan struct{}
}

// startRouteRun creates a fresh fake cloud whose route calls take
// routeCallLatency, registers n Nodes with pod CIDRs and running
// instances, and starts the controller.
func startRouteRun(ctx context.Context, cp *harness.ControlPlane, impl routeImpl, n int) (*routeRun, error) {
	provider, err := fake.New(&fake.Config{})
	if err != nil {
		return nil, fmt.Errorf("creating the fake cloud: %w", err)
	}
	for _, m := range []string{"ListRoutes", "CreateRoute", "DeleteRoute"} {
		if _, err := provider.AddFault(fake.Fault{Method: m, Latency: fake.Duration{Duration: *routeCallLatency}}); err != nil {
			provider.Close()
			return nil, fmt.Errorf("adding the latency of %s: %w", m, err)
		}
	}
	run := &routeRun{cp: cp, provider: provider, conds: &routeConditionProgress{at: map[string]time.Time{}}, stopped: make(chan struct{})}
	left, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		provider.Close()
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	if len(left.Items) > 0 {
		provider.Close()
		return nil, fmt.Errorf("node %s is left from an earlier run", left.Items[0].Name)
	}
	if err := run.addNodes(ctx, 0, n); err != nil {
		provider.Close()
		return nil, err
	}

	client, err := newRouteClient(cp.Config)
	if err != nil {
		provider.Close()
		return nil, err
	}
	informerCtx, stopInformers := context.WithCancel(ctx)
	run.stopInformers = stopInformers
	run.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, impl.informerOptions...)
	nodes := run.factory.Core().V1().Nodes()
	run.lister = nodes.Lister()
	runCtx, stopController := context.WithCancel(ctx)
	run.stopController = stopController
	controller, err := impl.newController(runCtx, client, nodes, provider)
	if err == nil {
		_, err = nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    run.conds.observe,
			UpdateFunc: func(_, obj any) { run.conds.observe(obj) },
		})
	}
	if err != nil {
		stopController()
		stopInformers()
		run.factory.Shutdown()
		provider.Close()
		return nil, err
	}

	run.start = time.Now()
	run.factory.Start(informerCtx.Done())
	go func() {
		defer close(run.stopped)
		controller(runCtx)
	}()
	return run, nil
}

// converge waits until Nodes [from, to) have their routes and their
// NetworkUnavailable=False condition.
func (r *routeRun) converge(ctx context.Context, from, to int) error {
	d, err := r.waitRoutes(ctx, from, to, r.start)
	if err != nil {
		return err
	}
	if d == 0 {
		return fmt.Errorf("the routes of Nodes %d-%d did not exist within %s", from, to-1, routeConvergeLimit)
	}
	c, err := r.waitConditions(ctx, from, to, r.start)
	if err != nil {
		return err
	}
	if c == 0 {
		return fmt.Errorf("nodes %d-%d did not get NetworkUnavailable=False within %s", from, to-1, routeConvergeLimit)
	}
	return nil
}

// addNodes gives Nodes [from, to) a running instance in the run's cloud,
// then registers them.
func (r *routeRun) addNodes(ctx context.Context, from, to int) error {
	return createRouteNodes(ctx, r.cp.Client, r.provider, from, to)
}

// createRouteNodes gives Nodes [from, to) a running instance in provider,
// then registers them with their pod CIDRs, routeNodeCreators at a time.
func createRouteNodes(ctx context.Context, client kubernetes.Interface, provider *fake.Cloud, from, to int) error {
	for i := from; i < to; i++ {
		if err := provider.AddInstance(fake.Instance{Name: routeNodeName(i)}); err != nil {
			return fmt.Errorf("adding the instance of Node %s: %w", routeNodeName(i), err)
		}
	}
	indexes := make(chan int)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range routeNodeCreators {
		wg.Go(func() {
			for i := range indexes {
				name, cidr := routeNodeName(i), routePodCIDR(i)
				_, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: name}},
					Spec:       v1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
				}, metav1.CreateOptions{})
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("creating Node %s: %w", name, err))
					mu.Unlock()
				}
			}
		})
	}
	for i := from; i < to; i++ {
		indexes <- i
	}
	close(indexes)
	wg.Wait()
	return errors.Join(errs...)
}

// waitRoutes waits until the cloud has the route of every Node in
// [from, to) and returns how long after since the last of them was
// created, from the cloud's call records (0: not within routeConvergeLimit).
func (r *routeRun) waitRoutes(ctx context.Context, from, to int, since time.Time) (time.Duration, error) {
	want := map[string]string{} // destination to Node
	for i := from; i < to; i++ {
		want[routePodCIDR(i)] = routeNodeName(i)
	}
	var polled time.Duration
	err := wait.PollUntilContextTimeout(ctx, routePollInterval, routeConvergeLimit, true, func(context.Context) (bool, error) {
		found := 0
		for _, rt := range r.provider.ListRouteTable() {
			if node, ok := want[rt.DestinationCIDR]; ok && node == rt.TargetNode && !rt.Blackhole {
				found++
			}
		}
		polled = time.Since(since)
		return found == len(want), nil
	})
	if ctx.Err() != nil {
		return 0, fmt.Errorf("waiting for routes: %w", err)
	}
	if err != nil {
		return 0, nil
	}
	// The route exists from the CreateRoute that returned without error.
	created := map[string]time.Time{}
	for _, rec := range r.provider.Calls() {
		if rec.Method != "CreateRoute" || rec.Error != "" || rec.End.Before(since) {
			continue
		}
		if at, ok := created[rec.Object]; !ok || rec.End.Before(at) {
			created[rec.Object] = rec.End
		}
	}
	var last time.Time
	for _, node := range want {
		at, ok := created[node]
		if !ok {
			return polled, nil // created before since, or its record was dropped
		}
		if at.After(last) {
			last = at
		}
	}
	return last.Sub(since), nil
}

// waitConditions waits until the run's informer has seen every Node in
// [from, to) with NetworkUnavailable=False, and returns how long after
// since the last one was (0: not within routeConvergeLimit).
func (r *routeRun) waitConditions(ctx context.Context, from, to int, since time.Time) (time.Duration, error) {
	var last time.Time
	err := wait.PollUntilContextTimeout(ctx, routePollInterval, routeConvergeLimit, true, func(context.Context) (bool, error) {
		var ok bool
		last, ok = r.conds.last(from, to)
		return ok, nil
	})
	if ctx.Err() != nil {
		return 0, fmt.Errorf("waiting for NetworkUnavailable=False: %w", err)
	}
	if err != nil {
		return 0, nil
	}
	return last.Sub(since), nil
}

// stop stops the controller, waits until the cloud gets no more calls,
// deletes every Node and the Events about them, waits until the run's
// informer has seen them go, and stops the informers.
func (r *routeRun) stop(ctx context.Context) error {
	defer r.provider.Close()
	defer func() {
		r.stopInformers()
		r.factory.Shutdown() // waits for the informers' goroutines
	}()
	r.stopController()
	<-r.stopped
	if err := waitRouteCloudQuiet(ctx, r.provider); err != nil {
		return err
	}
	client := r.cp.Client
	if err := client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("deleting Nodes: %w", err)
	}
	// Events about a Node are in the default namespace.
	if err := client.CoreV1().Events(metav1.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("deleting Events: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, routePollInterval, routeCleanupLimit, true, func(context.Context) (bool, error) {
		left, err := r.lister.List(labels.Everything())
		return err == nil && len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting until the informer has no Nodes: %w", err)
	}
	return nil
}

// waitRouteCloudQuiet waits until every call the cloud started has
// returned (a call is recorded when it returns) and no new one has started
// for routeQuietPeriod: upstream's Run does not wait for a reconciliation
// in progress.
func waitRouteCloudQuiet(ctx context.Context, provider *fake.Cloud) error {
	started, quietSince := -1, time.Now()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, routeCleanupLimit, true, func(context.Context) (bool, error) {
		now := countRouteCalls(provider).all
		if now != started {
			started, quietSince = now, time.Now()
		}
		return len(provider.Calls()) == now && time.Since(quietSince) >= routeQuietPeriod, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the cloud calls to stop after the controller stopped: %w", err)
	}
	return nil
}

// newRouteClient returns a clientset with the bench's client rate limit,
// speaking protobuf as both commands do by default.
func newRouteClient(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = float32(*kubeQPS)
	cfg.Burst = *kubeBurst
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the controller's client: %w", err)
	}
	return client, nil
}

// warmUpRoutes creates and deletes n Nodes once, so that the first run
// does not meet a colder apiserver and etcd than the others.
func warmUpRoutes(ctx context.Context, client kubernetes.Interface, n int) error {
	provider, err := fake.New(&fake.Config{})
	if err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	defer provider.Close()
	if err := createRouteNodes(ctx, client, provider, 0, n); err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	if err := client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("warming up: deleting Nodes: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, routePollInterval, routeCleanupLimit, true, func(ctx context.Context) (bool, error) {
		left, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(left.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("warming up: waiting until no Node is left: %w", err)
	}
	return nil
}

func routeNodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// routePodCIDR is Node i's pod CIDR: the /24 number i in routeClusterCIDR.
func routePodCIDR(i int) string { return fmt.Sprintf("10.%d.%d.0/24", 244+i/256, i%256) }

// routeConditionProgress records when the informer first saw each Node with
// NetworkUnavailable=False.
type routeConditionProgress struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (p *routeConditionProgress) observe(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok || !slices.ContainsFunc(node.Status.Conditions, func(c v1.NodeCondition) bool {
		return c.Type == v1.NodeNetworkUnavailable && c.Status == v1.ConditionFalse
	}) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, seen := p.at[node.Name]; !seen {
		p.at[node.Name] = time.Now()
	}
}

// last returns when the last of Nodes [from, to) was first seen, and
// whether all were.
func (p *routeConditionProgress) last(from, to int) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var last time.Time
	for i := from; i < to; i++ {
		at, ok := p.at[routeNodeName(i)]
		if !ok {
			return time.Time{}, false
		}
		if at.After(last) {
			last = at
		}
	}
	return last, true
}

// summary is the run's one-line progress report.
func (r routeResult) summary() string {
	s := fmt.Sprintf("%d Nodes", r.nodes)
	if len(r.routes) > 0 {
		s += fmt.Sprintf(", routes %s, NetworkUnavailable=False %s", routeDurations(r.routes), routeDurations(r.conditions))
	}
	if r.window > 0 {
		s += fmt.Sprintf(", window %s", r.window)
	}
	return s + fmt.Sprintf(", cloud calls: ListRoutes %d, CreateRoute %d, DeleteRoute %d, all %d", r.calls.list, r.calls.create, r.calls.delete, r.calls.all)
}

func routeDurations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = routeSeconds(d)
	}
	return strings.Join(s, " ")
}

func routeSeconds(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// routeMedianMax returns the median of ds and the largest; 0 when one of
// them did not converge.
func routeMedianMax(ds []time.Duration) (median, largest time.Duration) {
	if len(ds) == 0 || slices.Contains(ds, 0) {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2, s[n-1]
	}
	return s[n/2], s[n-1]
}

// routeTimeCell is a result's time: R1's one, R3's median and max of the rounds.
func routeTimeCell(ds []time.Duration) string {
	switch {
	case len(ds) == 0:
		return "-"
	case len(ds) == 1:
		return routeSeconds(ds[0])
	}
	med, most := routeMedianMax(ds)
	if med == 0 {
		return "none"
	}
	return fmt.Sprintf("%s (max %s)", routeSeconds(med), routeSeconds(most))
}

// printRouteTable prints one row per run; each upstream row has its times
// and calls relative to ccmkit's run of the same scenario.
func printRouteTable(w io.Writer, results []routeResult) error {
	resync := app.NewOptions().RouteReconciliationPeriod
	baseline := map[string]routeResult{}
	for _, r := range results {
		if r.comparison == "baseline" {
			baseline[r.scenario] = r
		}
	}
	rows := [][]string{{"scenario", "implementation", "settings", "compared", "routes in", "NetworkUnavailable=False in",
		"ListRoutes", "CreateRoute", "DeleteRoute", "all calls", "all calls per hour", "time ratio", "calls ratio"}}
	for _, r := range results {
		perHour, timeRatio, callsRatio := "-", "-", "-"
		if r.window > 0 {
			perHour = fmt.Sprintf("%.0f", float64(r.calls.all)*float64(time.Hour)/float64(r.window))
		}
		if base, ok := baseline[r.scenario]; ok && r.comparison != "baseline" {
			if b, x := routeMedian(base.routes), routeMedian(r.routes); b > 0 && x > 0 {
				timeRatio = fmt.Sprintf("%.2fx", x.Seconds()/b.Seconds())
			}
			if base.calls.all > 0 {
				callsRatio = fmt.Sprintf("%.2fx", float64(r.calls.all)/float64(base.calls.all))
			}
		}
		rows = append(rows, []string{r.scenario, r.impl, r.settings, r.comparison, routeTimeCell(r.routes), routeTimeCell(r.conditions),
			fmt.Sprint(r.calls.list), fmt.Sprint(r.calls.create), fmt.Sprint(r.calls.delete), fmt.Sprint(r.calls.all), perHour, timeRatio, callsRatio})
	}
	if err := writeRows(w, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, `
Cluster CIDR %s, a /24 per Node; ListRoutes, CreateRoute and DeleteRoute take %s; client QPS %g for both.
R1: %d Nodes with pod CIDRs and no routes when the controller starts; times from its start, calls until every route exists.
R2: the same cluster, converged and %s without a call; calls in %s without any change, and that rate per hour
(ccmkit's full resync comes %s after its last reconciliation, so a shorter window does not see it).
R3: %d Nodes, converged; %d rounds each add %d Nodes, round k (k+1/2)*%s after the previous one converged, so
that they meet upstream's ticker at evenly spread phases: median (max) time from the round's first Node create
until its routes exist; calls from the first round on. Ratios: upstream / ccmkit (R3: of the medians).
`, routeClusterCIDR, *routeCallLatency, *kubeQPS, *routeNodes, routeQuietPeriod, *routeSteadyTime, resync,
		*routeBaseNodes, *routeRounds, *routeAddedNodes, upstreamRoutePeriod/time.Duration(max(*routeRounds, 1)))
	if err != nil {
		return fmt.Errorf("printing the table: %w", err)
	}
	return nil
}

func routeMedian(ds []time.Duration) time.Duration {
	m, _ := routeMedianMax(ds)
	return m
}
