//go:build bench

package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	upstreamservice "k8s.io/cloud-provider/controllers/service"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/ccmkit/ccmkit/app"
	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/controllers/service"
	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

var (
	serviceCount         = flag.Int("bench.service-count", 500, "LoadBalancer Services of S1 and S2")
	serviceHung          = flag.Int("bench.service-hung", 10, "Services of S2 whose EnsureLoadBalancer hangs, spread evenly")
	serviceHungWindow    = flag.Duration("bench.service-hung-window", 120*time.Second, "how long an S2 run lasts")
	serviceCallLatency   = flag.Duration("bench.service-latency", 50*time.Millisecond, "latency of every EnsureLoadBalancer and UpdateLoadBalancer")
	serviceBaseNodes     = flag.Int("bench.service-base-nodes", 20, "initialised Nodes every scenario starts with")
	serviceChurnServices = flag.Int("bench.service-churn-services", 200, "LoadBalancer Services of S3")
	serviceAddedNodes    = flag.Int("bench.service-added-nodes", 50, "Nodes S3 adds one by one")
	serviceNodeInterval  = flag.Duration("bench.service-node-interval", 200*time.Millisecond, "time between two Nodes S3 adds")
	serviceWorkers       = flag.Int("bench.service-workers", 0, "workers of both controllers (0: ccmkit's --concurrent-service-syncs default)")
)

const (
	// serviceNamespace holds the bench's Services.
	serviceNamespace = "service-bench"
	// serviceExtraCIDR is a ServiceCIDR added to the apiserver's
	// --service-cluster-ip-range (envtest's 10.0.0.0/24 holds about 250
	// Services); it holds serviceMaxServices more.
	serviceExtraCIDR   = "10.96.0.0/20"
	serviceMaxServices = 4000
	// serviceProbeIP is a ClusterIP in serviceExtraCIDR.
	serviceProbeIP = "10.96.0.10"
	// serviceVIPCIDR is the fake cloud's pool of load-balancer IPs.
	serviceVIPCIDR = "198.18.0.0/16"
	// upstreamServiceWorkers is upstream's --concurrent-service-syncs default.
	upstreamServiceWorkers = 1
	// upstreamDefaults names the run of upstream with its default workers;
	// "upstream" is the run with as many workers as ccmkit.
	upstreamDefaults = "upstream-defaults"
	// serviceConvergeLimit bounds each wait for ingress or host sets.
	serviceConvergeLimit = 5 * time.Minute
	// servicePollInterval is how often a run checks the Services or the
	// load balancers; the times reported come from the informer's events and
	// the cloud's calls, not from the polling.
	servicePollInterval = 20 * time.Millisecond
	// serviceCreators create Services and Nodes in parallel, as many
	// clients do.
	serviceCreators = 20
	// serviceQuietPeriod without a new cloud call, and none in flight,
	// tells that a stopped controller's calls are over, or that a
	// converged one is idle.
	serviceQuietPeriod = time.Second
	// serviceCleanupLimit bounds each wait of a run's set-up and teardown.
	serviceCleanupLimit = time.Minute
)

// serviceImpl is a service controller with its settings.
type serviceImpl struct {
	name string
	// informerOptions are those of the implementation's command.
	informerOptions []informers.SharedInformerOption
	// qps and burst are its client's rate limit; 0: the bench's
	// -bench.kube-api-qps and -bench.kube-api-burst.
	qps   float32
	burst int
	// newController wires the controller onto the run's informers; the
	// returned run blocks until its context ends.
	newController func(ctx context.Context, client kubernetes.Interface, services coreinformers.ServiceInformer, nodes coreinformers.NodeInformer, provider cloudprovider.Interface) (run func(context.Context), err error)
}

// serviceResult is what one run of a scenario measured.
type serviceResult struct {
	// services in the run, hung of them with a hanging EnsureLoadBalancer.
	services, hung int
	// ready Services had an ingress at the end of the run, hungReady of
	// them hung ones.
	ready, hungReady int
	// nodes every load balancer had to hold (S3).
	nodes int
	// created is how long the creates took, from the first (S1 and S2).
	created time.Duration
	// converged is S1: the time until every Service had an ingress; S2:
	// until every one but the hung ones had; S3: until every load balancer
	// held every Node. 0: not within limit.
	converged, limit time.Duration
	// Calls the cloud got: S1 and S2 in the whole run, S3 from the first
	// added Node on.
	ensure, update int
	// overlaps are mutating calls on one load balancer that ran at once.
	overlaps int
}

// TestServiceBench runs the load-balancer scenarios on ccmkit's service
// controller and on upstream's, one run after the other on the same control
// plane, and prints the table. Subtests name the scenarios: -run
// 'ServiceBench/S1'.
func TestServiceBench(t *testing.T) {
	// Verbosity 0, written nowhere: the controllers' logs would bury the table.
	klog.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(0), textlogger.Output(io.Discard))))
	switch {
	case *serviceCount < 1 || *serviceChurnServices < 1 || *serviceBaseNodes < 1 || *serviceAddedNodes < 1:
		t.Fatal("-bench.service-count, -bench.service-churn-services, -bench.service-base-nodes and -bench.service-added-nodes must be positive")
	case max(*serviceCount, *serviceChurnServices) > serviceMaxServices:
		t.Fatalf("at most %d Services fit in the bench's ServiceCIDR %s", serviceMaxServices, serviceExtraCIDR)
	case *serviceHung < 0 || *serviceHung >= *serviceCount:
		t.Fatalf("-bench.service-hung=%d: must be in [0, %d)", *serviceHung, *serviceCount)
	}
	cp := harness.StartControlPlane(t)
	if err := setUpServices(t.Context(), cp.Client); err != nil {
		t.Fatal(err)
	}

	opts := app.NewOptions()
	if *serviceWorkers > 0 {
		opts.ConcurrentServiceSyncs = int32(*serviceWorkers)
	}
	workers := int(opts.ConcurrentServiceSyncs)
	impls := []serviceImpl{
		ccmkitServiceImpl("ccmkit", opts),
		upstreamServiceImpl("upstream", workers),
		upstreamServiceImpl(upstreamDefaults, upstreamServiceWorkers),
	}

	// A discarded S1 run takes the apiserver and etcd through every path the
	// runs take (creates, patches, status writes, Events, deletes), so that
	// the first measured run does not meet them colder than the others do.
	if _, err := runServiceConverge(t.Context(), cp, impls[1]); err != nil {
		t.Fatalf("warming up: %v", err)
	}

	results := map[string]map[string]serviceResult{}
	scenarios := []struct {
		name string
		run  func(context.Context, *harness.ControlPlane, serviceImpl) (serviceResult, error)
	}{
		{"S1", runServiceConverge},
		{"S2", runServiceHung},
		{"S3", runServiceChurn},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, impl := range impls {
				r, err := sc.run(t.Context(), cp, impl)
				if err != nil {
					t.Fatalf("%s %s: %v", sc.name, impl.name, err)
				}
				t.Logf("%s %s: %s", sc.name, impl.name, r.summary())
				if results[sc.name] == nil {
					results[sc.name] = map[string]serviceResult{}
				}
				results[sc.name][impl.name] = r
			}
		})
	}
	if err := printServiceTable(os.Stdout, results, workers, opts); err != nil {
		t.Fatal(err)
	}
}

// ccmkitServiceImpl is ccmkit's service controller as the command wires it
// with opts.
func ccmkitServiceImpl(name string, opts *app.Options) serviceImpl {
	return serviceImpl{
		name: name,
		newController: func(ctx context.Context, client kubernetes.Interface, services coreinformers.ServiceInformer, nodes coreinformers.NodeInformer, provider cloudprovider.Interface) (func(context.Context), error) {
			return newServiceCCMKit(ctx, client, services, nodes, provider, opts)
		},
		informerOptions: []informers.SharedInformerOption{informers.WithTransform(app.StripUnused)},
	}
}

// upstreamServiceImpl is upstream's service controller with workers.
func upstreamServiceImpl(name string, workers int) serviceImpl {
	return serviceImpl{
		name: name,
		newController: func(ctx context.Context, client kubernetes.Interface, services coreinformers.ServiceInformer, nodes coreinformers.NodeInformer, provider cloudprovider.Interface) (func(context.Context), error) {
			return newServiceUpstream(ctx, client, services, nodes, provider, workers)
		},
	}
}

// runServiceConverge (S1) starts the controller, creates serviceCount
// Services and measures from the first create until every one has an
// ingress; it counts the calls until the cloud is quiet.
func runServiceConverge(ctx context.Context, cp *harness.ControlPlane, impl serviceImpl) (serviceResult, error) {
	return convergeServices(ctx, cp, impl, *serviceCount, serviceConvergeLimit)
}

// convergeServices is S1 with n Services, waiting at most limit.
func convergeServices(ctx context.Context, cp *harness.ControlPlane, impl serviceImpl, n int, limit time.Duration) (r serviceResult, err error) {
	r.services, r.limit = n, limit
	run, err := startServiceRun(ctx, cp, impl, nil)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, run.stop(ctx)) }()
	start := time.Now()
	if err := run.createServices(ctx, 0, n); err != nil {
		return r, err
	}
	r.created = time.Since(start)
	if r.converged, err = run.waitIngress(ctx, n, start, limit); err != nil {
		return r, err
	}
	if err := waitServiceCloudQuiet(ctx, run.cloud); err != nil {
		return r, err
	}
	r.ready, r.hungReady, _ = run.ingress.summary(n, nil, start)
	r.ensure, r.update, r.overlaps = run.cloud.CallCount("EnsureLoadBalancer"), run.cloud.CallCount("UpdateLoadBalancer"), run.cloud.Overlaps()
	return r, nil
}

// runServiceHung (S2) is S1 with the EnsureLoadBalancer of serviceHung
// Services hanging until its context ends; the run lasts serviceHungWindow
// from the first create.
func runServiceHung(ctx context.Context, cp *harness.ControlPlane, impl serviceImpl) (r serviceResult, err error) {
	n := *serviceCount
	hung := serviceHungNames(n, *serviceHung)
	r.services, r.hung, r.limit = n, len(hung), *serviceHungWindow
	run, err := startServiceRun(ctx, cp, impl, hung)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, run.stop(ctx)) }()
	start := time.Now()
	if err := run.createServices(ctx, 0, n); err != nil {
		return r, err
	}
	r.created = time.Since(start)
	if err := routePause(ctx, time.Until(start.Add(*serviceHungWindow))); err != nil {
		return r, err
	}
	r.ready, r.hungReady, r.converged = run.ingress.summary(n, hung, start)
	r.ensure, r.update, r.overlaps = run.cloud.CallCount("EnsureLoadBalancer"), run.cloud.CallCount("UpdateLoadBalancer"), run.cloud.Overlaps()
	return r, nil
}

// runServiceChurn (S3) lets the controller converge on serviceBaseNodes
// Nodes and serviceChurnServices Services, then adds serviceAddedNodes
// Nodes, one every serviceNodeInterval, and measures from the first added
// Node until every load balancer holds every Node, and the calls from then
// until the cloud is quiet.
func runServiceChurn(ctx context.Context, cp *harness.ControlPlane, impl serviceImpl) (r serviceResult, err error) {
	n, base, added := *serviceChurnServices, *serviceBaseNodes, *serviceAddedNodes
	r.services, r.nodes, r.limit = n, base+added, serviceConvergeLimit
	run, err := startServiceRun(ctx, cp, impl, nil)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, run.stop(ctx)) }()
	if err := run.createServices(ctx, 0, n); err != nil {
		return r, err
	}
	d, err := run.waitIngress(ctx, n, time.Now(), serviceConvergeLimit)
	if err != nil {
		return r, err
	}
	if d == 0 {
		return r, fmt.Errorf("the %d Services did not all get an ingress within %s", n, serviceConvergeLimit)
	}
	if err := waitServiceCloudQuiet(ctx, run.cloud); err != nil {
		return r, err
	}
	ensureBefore, updateBefore, overlapsBefore := run.cloud.CallCount("EnsureLoadBalancer"), run.cloud.CallCount("UpdateLoadBalancer"), run.cloud.Overlaps()

	start := time.Now()
	for k := range added {
		if err := routePause(ctx, time.Until(start.Add(time.Duration(k)**serviceNodeInterval))); err != nil {
			return r, err
		}
		if err := createServiceNode(ctx, cp.Client, base+k); err != nil {
			return r, err
		}
	}
	if r.converged, err = run.waitHosts(ctx, n, base+added, start); err != nil {
		return r, err
	}
	if err := waitServiceCloudQuiet(ctx, run.cloud); err != nil {
		return r, err
	}
	r.ready, r.hungReady, _ = run.ingress.summary(n, nil, start)
	r.ensure = run.cloud.CallCount("EnsureLoadBalancer") - ensureBefore
	r.update = run.cloud.CallCount("UpdateLoadBalancer") - updateBefore
	r.overlaps = run.cloud.Overlaps() - overlapsBefore
	return r, nil
}

// newServiceCCMKit wires ccmkit's service controller as the command does:
// behind a guard with the options' defaults, the flags' defaults, Events
// recorded to the apiserver.
func newServiceCCMKit(ctx context.Context, client kubernetes.Interface, services coreinformers.ServiceInformer, nodes coreinformers.NodeInformer, provider cloudprovider.Interface, opts *app.Options) (func(context.Context), error) {
	guard := cloud.New(provider, opts.Cloud)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "service-controller"})
	c, err := service.New(ctx, client, services, nodes, guard, recorder, service.Config{
		ClusterName:            opts.ClusterName,
		LoadBalancerClass:      opts.LoadBalancerClass,
		Workers:                int(opts.ConcurrentServiceSyncs),
		NodeSyncCoalescePeriod: opts.NodeSyncCoalescePeriod,
		ResyncPeriod:           opts.LoadBalancerResyncPeriod,
	})
	if err != nil {
		guard.Close()
		broadcaster.Shutdown()
		return nil, fmt.Errorf("creating ccmkit's service controller: %w", err)
	}
	return func(ctx context.Context) {
		// Close cancels the calls still in the cloud, hung ones too.
		defer guard.Close()
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		c.Run(ctx)
	}, nil
}

// newServiceUpstream wires upstream's service controller as
// k8s.io/cloud-provider/app does: the raw provider, the default
// --cluster-name and feature gates; workers is --concurrent-service-syncs.
func newServiceUpstream(_ context.Context, client kubernetes.Interface, services coreinformers.ServiceInformer, nodes coreinformers.NodeInformer, provider cloudprovider.Interface, workers int) (func(context.Context), error) {
	c, err := upstreamservice.New(provider, client, services, nodes, app.NewOptions().ClusterName, utilfeature.DefaultFeatureGate)
	if err != nil {
		return nil, fmt.Errorf("creating upstream's service controller: %w", err)
	}
	// Its calls get the worker's context (UpdateLoadBalancer of the node
	// sync: none), which ends when Run's does.
	return func(ctx context.Context) { c.Run(ctx, workers, upstreamMetrics) }, nil
}

// serviceCloud is the fake cloud with its load-balancer calls in flight
// counted, and with the time each load balancer got the host count it has.
type serviceCloud struct {
	*fake.Cloud
	inflight atomic.Int64

	mu    sync.Mutex
	hosts map[string]serviceHosts // by "namespace/name"
}

// serviceHosts is how many hosts a load balancer has, since when.
type serviceHosts struct {
	count int
	since time.Time
}

var (
	_ cloudprovider.Interface    = (*serviceCloud)(nil)
	_ cloudprovider.LoadBalancer = (*serviceCloud)(nil)
)

// LoadBalancer returns the counting cloud itself.
func (c *serviceCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c, true }

// GetLoadBalancer counts the call in flight.
func (c *serviceCloud) GetLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	c.inflight.Add(1)
	defer c.inflight.Add(-1)
	return c.Cloud.GetLoadBalancer(ctx, clusterName, svc)
}

// EnsureLoadBalancer counts the call in flight and notes the host count.
func (c *serviceCloud) EnsureLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	c.inflight.Add(1)
	defer c.inflight.Add(-1)
	status, err := c.Cloud.EnsureLoadBalancer(ctx, clusterName, svc, nodes)
	if err == nil {
		c.noteHosts(svc, len(nodes))
	}
	return status, err
}

// UpdateLoadBalancer counts the call in flight and notes the host count.
func (c *serviceCloud) UpdateLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) error {
	c.inflight.Add(1)
	defer c.inflight.Add(-1)
	err := c.Cloud.UpdateLoadBalancer(ctx, clusterName, svc, nodes)
	if err == nil {
		c.noteHosts(svc, len(nodes))
	}
	return err
}

// EnsureLoadBalancerDeleted counts the call in flight.
func (c *serviceCloud) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, svc *v1.Service) error {
	c.inflight.Add(1)
	defer c.inflight.Add(-1)
	return c.Cloud.EnsureLoadBalancerDeleted(ctx, clusterName, svc)
}

func (c *serviceCloud) noteHosts(svc *v1.Service, count int) {
	key := svc.Namespace + "/" + svc.Name
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.hosts[key]; !ok || h.count != count {
		c.hosts[key] = serviceHosts{count: count, since: time.Now()}
	}
}

// hostsSince returns when the last of the load balancers got count hosts,
// and whether n of them have that many.
func (c *serviceCloud) hostsSince(n, count int) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last time.Time
	found := 0
	for _, h := range c.hosts {
		if h.count != count {
			continue
		}
		found++
		if h.since.After(last) {
			last = h.since
		}
	}
	return last, found == n
}

// serviceRun is one controller running on its own client, informers and
// fresh fake cloud.
type serviceRun struct {
	cp       *harness.ControlPlane
	cloud    *serviceCloud
	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	ingress  *serviceIngressProgress

	stopInformers, stopController context.CancelFunc
	factory                       informers.SharedInformerFactory
	stopped                       chan struct{}
}

// startServiceRun creates a fresh fake cloud whose EnsureLoadBalancer and
// UpdateLoadBalancer take serviceCallLatency and whose EnsureLoadBalancer
// hangs for the Services named in hung, registers serviceBaseNodes
// initialised Nodes, and starts the controller once its informers have
// synced.
func startServiceRun(ctx context.Context, cp *harness.ControlPlane, impl serviceImpl, hung []string, extra ...fake.Fault) (*serviceRun, error) {
	provider, err := newServiceCloud(hung, extra...)
	if err != nil {
		return nil, err
	}
	run := &serviceRun{cp: cp, cloud: provider, ingress: &serviceIngressProgress{at: map[string]time.Time{}}, stopped: make(chan struct{})}
	if err := checkServiceLeftovers(ctx, cp.Client); err != nil {
		provider.Close()
		return nil, err
	}
	if err := serviceParallel(*serviceBaseNodes, func(i int) error { return createServiceNode(ctx, cp.Client, i) }); err != nil {
		provider.Close()
		return nil, err
	}

	client, err := newClientRate(cp.Config, impl.qps, impl.burst)
	if err != nil {
		provider.Close()
		return nil, err
	}
	informerCtx, stopInformers := context.WithCancel(ctx)
	run.stopInformers = stopInformers
	run.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, impl.informerOptions...)
	services, nodes := run.factory.Core().V1().Services(), run.factory.Core().V1().Nodes()
	run.services, run.nodes = services.Lister(), nodes.Lister()
	runCtx, stopController := context.WithCancel(ctx)
	run.stopController = stopController
	controller, err := impl.newController(runCtx, client, services, nodes, provider)
	if err == nil {
		_, err = services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    run.ingress.observe,
			UpdateFunc: func(_, obj any) { run.ingress.observe(obj) },
		})
	}
	fail := func(err error) (*serviceRun, error) {
		stopController()
		stopInformers()
		run.factory.Shutdown()
		provider.Close()
		return nil, err
	}
	if err != nil {
		return fail(err)
	}
	run.factory.Start(informerCtx.Done())
	for typ, ok := range run.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fail(fmt.Errorf("the %v informer did not sync", typ))
		}
	}
	go func() {
		defer close(run.stopped)
		controller(runCtx)
	}()
	return run, nil
}

// newServiceCloud returns a fake cloud with a VIP pool and the scenario's
// faults (hangs for the Services named in hung, and extra), wrapped to
// count its calls in flight.
func newServiceCloud(hung []string, extra ...fake.Fault) (*serviceCloud, error) {
	provider, err := fake.New(&fake.Config{LoadBalancers: fake.LoadBalancerConfig{VIPCIDR: serviceVIPCIDR}})
	if err != nil {
		return nil, fmt.Errorf("creating the fake cloud: %w", err)
	}
	faults := []fake.Fault{
		{Method: "EnsureLoadBalancer", Latency: fake.Duration{Duration: *serviceCallLatency}},
		{Method: "UpdateLoadBalancer", Latency: fake.Duration{Duration: *serviceCallLatency}},
	}
	for _, name := range hung {
		faults = append(faults, fake.Fault{Method: "EnsureLoadBalancer", Object: serviceNamespace + "/" + name, Hang: fake.HangRespectContext})
	}
	faults = append(faults, extra...)
	for _, f := range faults {
		if _, err := provider.AddFault(f); err != nil {
			provider.Close()
			return nil, fmt.Errorf("adding fault %+v: %w", f, err)
		}
	}
	return &serviceCloud{Cloud: provider, hosts: map[string]serviceHosts{}}, nil
}

// checkServiceLeftovers fails when Services or Nodes are left from an
// earlier run.
func checkServiceLeftovers(ctx context.Context, client kubernetes.Interface) error {
	svcs, err := client.CoreV1().Services(serviceNamespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("listing Services: %w", err)
	}
	if len(svcs.Items) > 0 {
		return fmt.Errorf("service %s/%s is left from an earlier run", serviceNamespace, svcs.Items[0].Name)
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("listing Nodes: %w", err)
	}
	if len(nodes.Items) > 0 {
		return fmt.Errorf("node %s is left from an earlier run", nodes.Items[0].Name)
	}
	return nil
}

// createServices creates Services [from, to), serviceCreators at a time.
func (r *serviceRun) createServices(ctx context.Context, from, to int) error {
	return createBenchServices(ctx, r.cp.Client, from, to)
}

// createBenchServices creates LoadBalancer Services [from, to) with one TCP
// port each, serviceCreators at a time.
func createBenchServices(ctx context.Context, client kubernetes.Interface, from, to int) error {
	return serviceParallel(to-from, func(i int) error {
		name := serviceName(from + i)
		_, err := client.CoreV1().Services(serviceNamespace).Create(ctx, &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: serviceNamespace},
			Spec: v1.ServiceSpec{
				Type:     v1.ServiceTypeLoadBalancer,
				Selector: map[string]string{"app": name},
				Ports:    []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating Service %s/%s: %w", serviceNamespace, name, err)
		}
		return nil
	})
}

// createServiceNode registers Node i as the cloud-node controller leaves
// it: with its providerID, without the uninitialized taint, so that both
// service controllers count it as a load-balancer host.
func createServiceNode(ctx context.Context, client kubernetes.Interface, i int) error {
	name := nodeName(i)
	_, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: name}},
		Spec:       v1.NodeSpec{ProviderID: fake.ProviderName + "://" + name},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Node %s: %w", name, err)
	}
	return nil
}

// serviceParallel runs fn for [0, n), serviceCreators at a time, and joins
// the errors.
func serviceParallel(n int, fn func(i int) error) error {
	indexes := make(chan int)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range serviceCreators {
		wg.Go(func() {
			for i := range indexes {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		indexes <- i
	}
	close(indexes)
	wg.Wait()
	return errors.Join(errs...)
}

// waitIngress waits until Services [0, n) have an ingress and returns how
// long after since the informer saw the last of them get it (0: not within
// limit).
func (r *serviceRun) waitIngress(ctx context.Context, n int, since time.Time, limit time.Duration) (time.Duration, error) {
	err := wait.PollUntilContextTimeout(ctx, servicePollInterval, limit, true, func(context.Context) (bool, error) {
		return r.ingress.count() >= n, nil
	})
	if ctx.Err() != nil {
		return 0, fmt.Errorf("waiting for the Services' ingress: %w", err)
	}
	if err != nil {
		return 0, nil
	}
	_, _, d := r.ingress.summary(n, nil, since)
	return d, nil
}

// waitHosts waits until the cloud's n load balancers each hold Nodes
// [0, nodes) and returns how long after since the last of them got them,
// from the calls that returned (0: not within serviceConvergeLimit).
func (r *serviceRun) waitHosts(ctx context.Context, n, nodes int, since time.Time) (time.Duration, error) {
	want := make([]string, nodes)
	for i := range want {
		want[i] = nodeName(i)
	}
	err := wait.PollUntilContextTimeout(ctx, servicePollInterval, serviceConvergeLimit, true, func(context.Context) (bool, error) {
		lbs := r.cloud.ListLoadBalancers()
		return len(lbs) == n && !slices.ContainsFunc(lbs, func(lb fake.LoadBalancer) bool { return !slices.Equal(lb.Nodes, want) }), nil
	})
	if ctx.Err() != nil {
		return 0, fmt.Errorf("waiting for the load balancers' hosts: %w", err)
	}
	if err != nil {
		return 0, nil
	}
	last, ok := r.cloud.hostsSince(n, nodes)
	if !ok {
		return 0, fmt.Errorf("the cloud holds %d load balancers with %d hosts, but their calls do not tell so", n, nodes)
	}
	return last.Sub(since), nil
}

// stop stops the controller, waits until the cloud is quiet, strips the
// cleanup finalizer off every Service and deletes them, the Nodes and the
// Events, waits until the run's informers have seen them go, and stops
// the informers.
func (r *serviceRun) stop(ctx context.Context) error {
	defer r.cloud.Close()
	defer func() {
		r.stopInformers()
		r.factory.Shutdown() // waits for the informers' goroutines
	}()
	r.stopController()
	<-r.stopped
	if err := waitServiceCloudQuiet(ctx, r.cloud); err != nil {
		return err
	}
	if err := deleteBenchServices(ctx, r.cp.Client); err != nil {
		return err
	}
	client := r.cp.Client
	if err := client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("deleting Nodes: %w", err)
	}
	for _, ns := range []string{serviceNamespace, metav1.NamespaceDefault} {
		if err := client.CoreV1().Events(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("deleting the Events of namespace %s: %w", ns, err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, servicePollInterval, serviceCleanupLimit, true, func(context.Context) (bool, error) {
		svcs, err := r.services.Services(serviceNamespace).List(labels.Everything())
		if err != nil {
			return false, nil
		}
		nodes, err := r.nodes.List(labels.Everything())
		return err == nil && len(svcs) == 0 && len(nodes) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting until the informers have no Services and no Nodes: %w", err)
	}
	return nil
}

// deleteBenchServices deletes every Service of serviceNamespace, first
// removing the cleanup finalizer that a stopped controller can no longer
// act on, and waits until none is left.
func deleteBenchServices(ctx context.Context, client kubernetes.Interface) error {
	list, err := client.CoreV1().Services(serviceNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Services: %w", err)
	}
	svcs := list.Items
	err = serviceParallel(len(svcs), func(i int) error {
		svcs := client.CoreV1().Services(serviceNamespace)
		name := list.Items[i].Name
		if len(list.Items[i].Finalizers) > 0 {
			_, err := svcs.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("removing the finalizers of Service %s/%s: %w", serviceNamespace, name, err)
			}
		}
		if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Service %s/%s: %w", serviceNamespace, name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, servicePollInterval, serviceCleanupLimit, true, func(ctx context.Context) (bool, error) {
		left, err := client.CoreV1().Services(serviceNamespace).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(left.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting until no Service of %d is left: %w", len(svcs), err)
	}
	return nil
}

// waitServiceCloudQuiet waits until no load-balancer call is in flight and
// no new call has started for serviceQuietPeriod. Neither controller's Run
// waits for its workers, and a worker goes on taking the keys left in its
// shut-down queue.
func waitServiceCloudQuiet(ctx context.Context, c *serviceCloud) error {
	started, quietSince := -1, time.Now()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, serviceCleanupLimit, true, func(context.Context) (bool, error) {
		now := startedCalls(c.Cloud)
		if now != started {
			started, quietSince = now, time.Now()
		}
		return c.inflight.Load() == 0 && time.Since(quietSince) >= serviceQuietPeriod, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the cloud calls to stop (%d in flight): %w", c.inflight.Load(), err)
	}
	return nil
}

// setUpServices creates serviceNamespace and a ServiceCIDR for
// serviceMaxServices Services beyond envtest's range.
func setUpServices(ctx context.Context, client kubernetes.Interface) error {
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: serviceNamespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", serviceNamespace, err)
	}
	_, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: serviceNamespace},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{serviceExtraCIDR}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating ServiceCIDR %s: %w", serviceExtraCIDR, err)
	}
	// The apiserver's allocator takes the new range once its informer has
	// it: until then a ClusterIP in it is refused.
	probe := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "cidr-probe", Namespace: serviceNamespace},
		Spec: v1.ServiceSpec{
			ClusterIP: serviceProbeIP,
			Ports:     []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
	var probeErr error
	err = wait.PollUntilContextTimeout(ctx, servicePollInterval, serviceCleanupLimit, true, func(ctx context.Context) (bool, error) {
		_, probeErr = client.CoreV1().Services(serviceNamespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return probeErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for ServiceCIDR %s to take Services (last: %w): %w", serviceExtraCIDR, probeErr, err)
	}
	return nil
}

func serviceName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// serviceHungNames spreads hung Services evenly over [0, n): the last of
// every n/hung.
func serviceHungNames(n, hung int) []string {
	if hung == 0 {
		return nil
	}
	step := n / hung
	names := make([]string, 0, hung)
	for k := range hung {
		names = append(names, serviceName((k+1)*step-1))
	}
	return names
}

// serviceIngressProgress records when the informer first saw each Service
// with an ingress.
type serviceIngressProgress struct {
	mu sync.Mutex
	at map[string]time.Time // by name
}

func (p *serviceIngressProgress) observe(obj any) {
	svc, ok := obj.(*v1.Service)
	if !ok || svc.Namespace != serviceNamespace || len(svc.Status.LoadBalancer.Ingress) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, seen := p.at[svc.Name]; !seen {
		p.at[svc.Name] = time.Now()
	}
}

func (p *serviceIngressProgress) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.at)
}

// summary returns how many of Services [0, n) have an ingress, how many of
// those are hung ones, and how long after since the last of the others got
// it, if all did (0: not all).
func (p *serviceIngressProgress) summary(n int, hung []string, since time.Time) (ready, hungReady int, othersDone time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var last time.Time
	others := 0
	for i := range n {
		name := serviceName(i)
		at, ok := p.at[name]
		if !ok {
			continue
		}
		ready++
		if slices.Contains(hung, name) {
			hungReady++
			continue
		}
		others++
		if at.After(last) {
			last = at
		}
	}
	if others == n-len(hung) {
		othersDone = last.Sub(since)
	}
	return ready, hungReady, othersDone
}

// summary is the run's one-line progress report.
func (r serviceResult) summary() string {
	s := fmt.Sprintf("%s Services with ingress", r.readyCount())
	if r.created > 0 {
		s += fmt.Sprintf(" (created in %s)", serviceSeconds(r.created))
	}
	if r.nodes > 0 {
		s += fmt.Sprintf(", every load balancer with its %d Nodes in %s", r.nodes, serviceSeconds(r.converged))
	} else {
		s += fmt.Sprintf(", converged in %s", serviceSeconds(r.converged))
	}
	return s + fmt.Sprintf(", EnsureLoadBalancer %d, UpdateLoadBalancer %d, overlapping calls %d", r.ensure, r.update, r.overlaps)
}

func (r serviceResult) readyCount() string {
	s := fmt.Sprintf("%d/%d", r.ready, r.services)
	if r.hung > 0 {
		s += fmt.Sprintf(" (hung %d/%d)", r.hungReady, r.hung)
	}
	return s
}

func serviceSeconds(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// serviceTimeRatio is upstream's time over ccmkit's; when upstream did not
// converge, a lower bound from its run's limit.
func serviceTimeRatio(up, ccm serviceResult) string {
	switch {
	case ccm.converged == 0:
		return "-"
	case up.converged == 0:
		return fmt.Sprintf(">%.1fx", up.limit.Seconds()/ccm.converged.Seconds())
	default:
		return fmt.Sprintf("%.2fx", up.converged.Seconds()/ccm.converged.Seconds())
	}
}

func serviceCountRatio(up, ccm int) string {
	if ccm == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(up)/float64(ccm))
}

// printServiceTable prints one row per measure of each scenario that ran:
// upstream's value, ccmkit's, and upstream / ccmkit.
func printServiceTable(w io.Writer, results map[string]map[string]serviceResult, workers int, opts *app.Options) error {
	rows := [][]string{{"scenario", fmt.Sprintf("upstream (workers=%d)", upstreamServiceWorkers), fmt.Sprintf("upstream (workers=%d)", workers),
		fmt.Sprintf("ccmkit (workers=%d)", workers), "ratio a: defaults", "ratio b: equal workers"}}
	type row struct {
		scenario, what string
		cell           func(serviceResult) string
		ratio          func(up, ccm serviceResult) string
	}
	seconds := func(r serviceResult) string { return serviceSeconds(r.converged) }
	ensure := func(r serviceResult) string { return fmt.Sprint(r.ensure) }
	ensureRatio := func(up, ccm serviceResult) string { return serviceCountRatio(up.ensure, ccm.ensure) }
	s2 := results["S2"]["ccmkit"]
	s3 := results["S3"]["ccmkit"]
	table := []row{
		{"S1", fmt.Sprintf("%d Services: all have an ingress in", *serviceCount), seconds, serviceTimeRatio},
		{"S1", fmt.Sprintf("(creating the %d took)", *serviceCount), func(r serviceResult) string { return serviceSeconds(r.created) },
			func(serviceResult, serviceResult) string { return "-" }},
		{"S1", "EnsureLoadBalancer calls", ensure, ensureRatio},
		{"S2", fmt.Sprintf("Services with an ingress at %s", *serviceHungWindow), serviceResult.readyCount,
			func(up, ccm serviceResult) string { return serviceCountRatio(up.ready, ccm.ready) }},
		{"S2", fmt.Sprintf("the %d not hung: all have an ingress in", s2.services-s2.hung), func(r serviceResult) string {
			if r.converged == 0 {
				return "not within " + r.limit.String()
			}
			return serviceSeconds(r.converged)
		}, serviceTimeRatio},
		{"S2", "EnsureLoadBalancer calls", ensure, ensureRatio},
		{"S3", fmt.Sprintf("every load balancer holds all %d Nodes in", s3.nodes), seconds, serviceTimeRatio},
		{"S3", "UpdateLoadBalancer+EnsureLoadBalancer calls", func(r serviceResult) string {
			return fmt.Sprintf("%d (%d+%d)", r.update+r.ensure, r.update, r.ensure)
		}, func(up, ccm serviceResult) string {
			return serviceCountRatio(up.update+up.ensure, ccm.update+ccm.ensure)
		}},
	}
	for _, rw := range table {
		def, okDef := results[rw.scenario][upstreamDefaults]
		up, okUp := results[rw.scenario]["upstream"]
		ccm, okCCM := results[rw.scenario]["ccmkit"]
		if !okDef || !okUp || !okCCM {
			continue
		}
		rows = append(rows, []string{rw.scenario + " " + rw.what, rw.cell(def), rw.cell(up), rw.cell(ccm), rw.ratio(def, ccm), rw.ratio(up, ccm)})
	}
	defOverlaps, upOverlaps, ccmOverlaps, ran := 0, 0, 0, false
	for _, byImpl := range results {
		defOverlaps += byImpl[upstreamDefaults].overlaps
		upOverlaps += byImpl["upstream"].overlaps
		ccmOverlaps += byImpl["ccmkit"].overlaps
		ran = true
	}
	if ran {
		rows = append(rows, []string{"overlapping calls on one load balancer, all runs", fmt.Sprint(defOverlaps), fmt.Sprint(upOverlaps), fmt.Sprint(ccmOverlaps), "-", "-"})
	}

	if err := writeRows(w, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, `
ccmkit runs %d workers (its --concurrent-service-syncs default), upstream its default %d and as many as ccmkit, on %d initialised
Nodes (providerID set, no taint); EnsureLoadBalancer and UpdateLoadBalancer take %s; client QPS %g for both.
ccmkit: guard with its defaults (detach after %s, load-balancer call deadline %s), node-set coalescing %s,
drift repair every %s. upstream: the raw fake cloud, as k8s.io/cloud-provider/app wires it.
S1: %d Services created by %d clients at once; times from the first create. S2: the same, and the
EnsureLoadBalancer of %d of them hangs until its context ends; each run lasts %s. S3: %d Services, converged;
then %d Nodes added one every %s; time from the first added Node until every load balancer in the cloud
holds all %d, calls from the first added Node until the cloud is quiet. Ratios: upstream / ccmkit, a: upstream
with its defaults, b: with equal workers (">": upstream did not converge, lower bound from the run's length).
`, workers, upstreamServiceWorkers, *serviceBaseNodes, *serviceCallLatency, *kubeQPS,
		opts.Cloud.DetachAfter, opts.Cloud.LBCallTimeout, opts.NodeSyncCoalescePeriod, opts.LoadBalancerResyncPeriod,
		*serviceCount, serviceCreators, *serviceHung, *serviceHungWindow, *serviceChurnServices,
		*serviceAddedNodes, *serviceNodeInterval, *serviceBaseNodes+*serviceAddedNodes)
	if err != nil {
		return fmt.Errorf("printing the table: %w", err)
	}
	return nil
}
