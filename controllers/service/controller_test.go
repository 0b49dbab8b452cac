package service

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

// waitTimeout bounds every wait for the controller.
const waitTimeout = 30 * time.Second

// vipCIDR is the fake cloud's pool of load-balancer IPs.
const vipCIDR = "192.0.2.0/24"

// hookedCloud is the fake cloud whose EnsureLoadBalancer first runs a hook;
// an error from the hook is the call's answer.
type hookedCloud struct {
	*fake.Cloud
	beforeEnsure func(ctx context.Context, svc *v1.Service) error
}

var (
	_ cloudprovider.Interface    = (*hookedCloud)(nil)
	_ cloudprovider.LoadBalancer = (*hookedCloud)(nil)
)

func (h *hookedCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return h, true }

func (h *hookedCloud) EnsureLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	if err := h.beforeEnsure(ctx, svc); err != nil {
		return nil, err
	}
	return h.Cloud.EnsureLoadBalancer(ctx, clusterName, svc, nodes)
}

// requestCounter counts the API requests of a client by method and path.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (r *requestCounter) add(req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[req.Method+" "+req.URL.Path]++
}

func (r *requestCounter) count(method, path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[method+" "+path]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// countingClient returns a client for cfg whose requests the counter counts.
func countingClient(t *testing.T, cfg *rest.Config) (kubernetes.Interface, *requestCounter) {
	t.Helper()
	counter := &requestCounter{counts: map[string]int{}}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			counter.add(req)
			return rt.RoundTrip(req)
		})
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, counter
}

// env is one namespace of a control plane and a fake cloud. The controllers
// it starts see only the Services of that namespace, and every Node.
type env struct {
	ctx    context.Context
	client kubernetes.Interface
	ns     string
	cloud  *fake.Cloud
}

func newEnv(t *testing.T, cp *harness.ControlPlane, ns string) *env {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fc, err := fake.New(&fake.Config{LoadBalancers: fake.LoadBalancerConfig{VIPCIDR: vipCIDR}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	return &env{ctx: ctx, client: cp.Client, ns: ns, cloud: fc}
}

// setup is how a controller is started. Zero workers, coalesce period,
// cluster name and guard timeouts take short test values; a zero resync
// period stays off.
type setup struct {
	provider cloudprovider.Interface // the env's fake cloud if nil
	client   kubernetes.Interface    // the admin client if nil
	config   Config
	guard    cloud.Options
}

// start runs a controller with its own informers and guard in front of the
// provider; the returned function stops it (also done at cleanup).
func (e *env) start(t *testing.T, s setup) (stop func()) {
	t.Helper()
	if s.provider == nil {
		s.provider = e.cloud
	}
	if s.client == nil {
		s.client = e.client
	}
	if s.config.Workers == 0 {
		s.config.Workers = 2
	}
	if s.config.NodeSyncCoalescePeriod == 0 {
		s.config.NodeSyncCoalescePeriod = 200 * time.Millisecond
	}
	if s.config.ClusterName == "" {
		s.config.ClusterName = "test"
	}
	if s.guard.CallTimeout == 0 {
		s.guard.CallTimeout = 5 * time.Second
	}
	if s.guard.LBCallTimeout == 0 {
		s.guard.LBCallTimeout = 5 * time.Second
	}
	if s.guard.DetachAfter == 0 {
		s.guard.DetachAfter = 300 * time.Millisecond
	}
	guard := cloud.New(s.provider, s.guard)

	ctx, cancel := context.WithCancel(e.ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithNamespace(e.ns))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "service-controller"})
	c, err := New(ctx, s.client, factory.Core().V1().Services(), factory.Core().V1().Nodes(), guard, recorder, s.config)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			factory.Shutdown()
			broadcaster.Shutdown()
			guard.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

func (e *env) key(name string) string { return e.ns + "/" + name }

// createService creates a LoadBalancer Service with one TCP port.
func (e *env) createService(t *testing.T, name string, mutate ...func(*v1.Service)) *v1.Service {
	t.Helper()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:     v1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
			Ports:    []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, m := range mutate {
		m(svc)
	}
	created, err := e.client.CoreV1().Services(e.ns).Create(e.ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// updateService applies mutate to the current Service and writes it.
func (e *env) updateService(t *testing.T, name string, mutate func(*v1.Service)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := e.client.CoreV1().Services(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(svc)
		_, err = e.client.CoreV1().Services(e.ns).Update(e.ctx, svc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("updating Service %s: %v", name, err)
	}
}

func (e *env) getService(t *testing.T, name string) *v1.Service {
	t.Helper()
	svc, err := e.client.CoreV1().Services(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func (e *env) waitService(t *testing.T, name, what string, cond func(*v1.Service) bool) *v1.Service {
	t.Helper()
	var last *v1.Service
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		svc, err := e.client.CoreV1().Services(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = svc
		return cond(svc), nil
	})
	if err != nil {
		var seen string
		if last != nil {
			seen = fmt.Sprintf("type %s, finalizers %v, deleted %v, status %+v", last.Spec.Type, last.Finalizers, last.DeletionTimestamp != nil, last.Status.LoadBalancer)
		}
		t.Fatalf("Service %s: waiting for %s: %v\nlast seen: %s\ncloud calls: %v", e.key(name), what, err, seen, e.cloud.Calls())
	}
	return last
}

// waitConverged waits until the Service has the finalizer and an ingress.
func (e *env) waitConverged(t *testing.T, name string) *v1.Service {
	t.Helper()
	return e.waitService(t, name, "a load balancer", converged)
}

func (e *env) waitServiceGone(t *testing.T, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := e.client.CoreV1().Services(e.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("Service %s is still there: %v", e.key(name), err)
	}
}

func (e *env) events(t *testing.T, name string) []v1.Event {
	t.Helper()
	list, err := e.client.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func (e *env) waitEvent(t *testing.T, name, reason string) v1.Event {
	t.Helper()
	var found v1.Event
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := e.client.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
		if err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.Reason == reason {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("Service %s: no %s event: %v\nevents: %v", e.key(name), reason, err, reasons(e.events(t, name)))
	}
	return found
}

// waitLB waits until cond holds for the Service's load balancer in the
// fake cloud (ok is false when there is none).
func (e *env) waitLB(t *testing.T, name, what string, cond func(lb fake.LoadBalancer, ok bool) bool) fake.LoadBalancer {
	t.Helper()
	var lb fake.LoadBalancer
	var ok bool
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		lb, ok = loadBalancerOf(e.cloud, e.key(name))
		return cond(lb, ok), nil
	})
	if err != nil {
		t.Fatalf("load balancer of %s: waiting for %s: %v\nlast seen: %+v (exists %v)", e.key(name), what, err, lb, ok)
	}
	return lb
}

func loadBalancerOf(fc *fake.Cloud, key string) (fake.LoadBalancer, bool) {
	for _, lb := range fc.ListLoadBalancers() {
		if lb.Service == key {
			return lb, true
		}
	}
	return fake.LoadBalancer{}, false
}

// callsOf returns the calls of method about object.
func callsOf(fc *fake.Cloud, method, object string) []fake.CallRecord {
	var out []fake.CallRecord
	for _, c := range fc.Calls() {
		if c.Method == method && c.Object == object {
			out = append(out, c)
		}
	}
	return out
}

func converged(svc *v1.Service) bool {
	return hasFinalizer(svc) && len(svc.Status.LoadBalancer.Ingress) > 0
}

func reasons(events []v1.Event) []string {
	var out []string
	for _, ev := range events {
		out = append(out, ev.Type+"/"+ev.Reason)
	}
	return out
}

// createNode creates a Node; mutate may set labels, taints and status.
func createNode(ctx context.Context, t *testing.T, client kubernetes.Interface, name string, mutate ...func(*v1.Node)) {
	t.Helper()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, m := range mutate {
		m(node)
	}
	status := node.Status
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(status.Conditions) > 0 || len(status.Addresses) > 0 {
		created.Status = status
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestServiceController(t *testing.T) {
	cp := harness.StartControlPlane(t)
	// The Nodes of this control plane never change: the tests here run in
	// parallel, each in a namespace of its own with its own controller and
	// cloud, and only the Services of its namespace.
	sharedNodes := []string{"node-0", "node-1"}
	for _, name := range sharedNodes {
		createNode(t.Context(), t, cp.Client, name)
	}

	t.Run("ensure", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, cp, "ensure")
		var mu sync.Mutex
		var finalizerSeen []bool
		hooked := &hookedCloud{Cloud: e.cloud, beforeEnsure: func(ctx context.Context, svc *v1.Service) error {
			cur, err := e.client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			mu.Lock()
			finalizerSeen = append(finalizerSeen, slices.Contains(cur.Finalizers, "service.kubernetes.io/load-balancer-cleanup"))
			mu.Unlock()
			return nil
		}}
		client, requests := countingClient(t, cp.Config)
		e.start(t, setup{provider: hooked, client: client})

		e.createService(t, "web")
		svc := e.waitConverged(t, "web")
		e.waitEvent(t, "web", reasonEnsuring)
		e.waitEvent(t, "web", reasonEnsured)

		mu.Lock()
		seen := slices.Clone(finalizerSeen)
		mu.Unlock()
		if len(seen) == 0 || !seen[0] {
			t.Errorf("finalizer present at each EnsureLoadBalancer call: %v, want it there before the first", seen)
		}
		lb, ok := loadBalancerOf(e.cloud, e.key("web"))
		if !ok {
			t.Fatal("no load balancer in the cloud")
		}
		if got := svc.Status.LoadBalancer.Ingress; len(got) != 1 || got[0].IP != lb.VIP {
			t.Errorf("status.loadBalancer.ingress = %+v, want the VIP %s", got, lb.VIP)
		}
		if !slices.Equal(lb.Nodes, sharedNodes) {
			t.Errorf("load balancer nodes = %v, want %v", lb.Nodes, sharedNodes)
		}
		if len(lb.Ports) != 1 || lb.Ports[0].Port != 80 || lb.Ports[0].NodePort == 0 {
			t.Errorf("load balancer ports = %+v, want port 80 with its node port", lb.Ports)
		}
		statusPath := fmt.Sprintf("/api/v1/namespaces/%s/services/web/status", e.ns)
		if n := requests.count(http.MethodPatch, statusPath) + requests.count(http.MethodPut, statusPath); n != 1 {
			t.Errorf("status written %d times, want once", n)
		}
		if n := len(callsOf(e.cloud, "EnsureLoadBalancer", e.key("web"))); n != 1 {
			t.Errorf("EnsureLoadBalancer called %d times, want once", n)
		}
	})

	t.Run("type flip", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, cp, "flip")
		e.start(t, setup{})
		e.createService(t, "web")
		e.waitConverged(t, "web")

		e.updateService(t, "web", func(svc *v1.Service) { svc.Spec.Type = v1.ServiceTypeClusterIP })
		e.waitService(t, "web", "the finalizer to go", func(svc *v1.Service) bool { return !hasFinalizer(svc) })
		e.waitEvent(t, "web", reasonDeleting)
		e.waitEvent(t, "web", reasonDeleted)
		svc := e.getService(t, "web")
		if len(svc.Status.LoadBalancer.Ingress) != 0 {
			t.Errorf("a ClusterIP Service keeps status.loadBalancer %+v", svc.Status.LoadBalancer)
		}
		if lbs := e.cloud.ListLoadBalancers(); len(lbs) != 0 {
			t.Errorf("load balancers after the type change: %+v", lbs)
		}
		if vips := e.cloud.AllocatedVIPs(); len(vips) != 0 {
			t.Errorf("VIPs still allocated: %v", vips)
		}

		e.updateService(t, "web", func(svc *v1.Service) { svc.Spec.Type = v1.ServiceTypeLoadBalancer })
		svc = e.waitConverged(t, "web")
		lb, ok := loadBalancerOf(e.cloud, e.key("web"))
		if !ok {
			t.Fatal("no load balancer after the Service became a LoadBalancer again")
		}
		if got := svc.Status.LoadBalancer.Ingress; len(got) != 1 || got[0].IP != lb.VIP {
			t.Errorf("status.loadBalancer.ingress = %+v, want the new VIP %s", got, lb.VIP)
		}
		if vips := e.cloud.AllocatedVIPs(); !slices.Equal(vips, []string{lb.VIP}) {
			t.Errorf("allocated VIPs = %v, want only %s", vips, lb.VIP)
		}
		if n := len(callsOf(e.cloud, "EnsureLoadBalancerDeleted", e.key("web"))); n != 1 {
			t.Errorf("EnsureLoadBalancerDeleted called %d times, want once", n)
		}
	})

	t.Run("class", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, cp, "class")
		e.start(t, setup{config: Config{LoadBalancerClass: "example.com/mine", Workers: 1}})
		// Created first: had it been queued, the one worker would have
		// synced it before the Services after it.
		e.createService(t, "other", func(svc *v1.Service) { svc.Spec.LoadBalancerClass = ptr("example.com/other") })
		e.createService(t, "mine", func(svc *v1.Service) { svc.Spec.LoadBalancerClass = ptr("example.com/mine") })
		e.createService(t, "plain")
		e.waitConverged(t, "mine")
		e.waitConverged(t, "plain")

		other := e.getService(t, "other")
		if len(other.Finalizers) != 0 || len(other.Status.LoadBalancer.Ingress) != 0 {
			t.Errorf("Service of another class was touched: finalizers %v, status %+v", other.Finalizers, other.Status.LoadBalancer)
		}
		for _, c := range e.cloud.Calls() {
			if c.Object == e.key("other") {
				t.Errorf("cloud call for a Service of another class: %+v", c)
			}
		}
		if evs := e.events(t, "other"); len(evs) != 0 {
			t.Errorf("events for a Service of another class: %v", reasons(evs))
		}
		if _, ok := loadBalancerOf(e.cloud, e.key("mine")); !ok {
			t.Error("no load balancer for the Service of our class")
		}
	})

	t.Run("deletion while stopped", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, cp, "stopped")
		stop := e.start(t, setup{})
		e.createService(t, "web")
		e.waitConverged(t, "web")
		stop()

		if err := e.client.CoreV1().Services(e.ns).Delete(e.ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		svc := e.getService(t, "web")
		if svc.DeletionTimestamp == nil || !hasFinalizer(svc) {
			t.Fatalf("deleted Service: deletionTimestamp %v, finalizers %v; want it held by the finalizer", svc.DeletionTimestamp, svc.Finalizers)
		}
		if _, ok := loadBalancerOf(e.cloud, e.key("web")); !ok {
			t.Fatal("load balancer gone while no controller ran")
		}

		e.start(t, setup{})
		e.waitServiceGone(t, "web")
		if lbs := e.cloud.ListLoadBalancers(); len(lbs) != 0 {
			t.Errorf("load balancers after the deletion: %+v", lbs)
		}
		if vips := e.cloud.AllocatedVIPs(); len(vips) != 0 {
			t.Errorf("VIPs still allocated: %v", vips)
		}
		e.waitEvent(t, "web", reasonDeleted)
	})

	t.Run("retry-after delay", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, cp, "retry-after")
		const delay = 2 * time.Second
		var mu sync.Mutex
		var calls []time.Time
		hooked := &hookedCloud{Cloud: e.cloud, beforeEnsure: func(context.Context, *v1.Service) error {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, time.Now())
			if len(calls) == 1 {
				return api.NewRetryError("load balancer is being provisioned", delay)
			}
			return nil
		}}
		e.start(t, setup{provider: hooked})
		e.createService(t, "web")
		e.waitConverged(t, "web")

		mu.Lock()
		defer mu.Unlock()
		if len(calls) != 2 {
			t.Fatalf("EnsureLoadBalancer called %d times, want twice (the retry-after answer, then success)", len(calls))
		}
		gap := calls[1].Sub(calls[0])
		if gap < delay-100*time.Millisecond {
			t.Errorf("retried %s after a retry-after of %s", gap, delay)
		}
		if gap >= 4500*time.Millisecond {
			t.Errorf("retried %s after a retry-after of %s: the back-off was used instead", gap, delay)
		}
	})

	t.Run("failure retry", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, cp, "failure")
		if _, err := e.cloud.AddFault(fake.Fault{Method: "EnsureLoadBalancer", Object: e.key("web"), Error: "quota exceeded", Count: 1}); err != nil {
			t.Fatal(err)
		}
		e.start(t, setup{})
		e.createService(t, "web")
		ev := e.waitEvent(t, "web", reasonSyncFailed)
		if ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Message, "quota exceeded") {
			t.Errorf("failure event %s %q, want a Warning naming the cloud's error", ev.Type, ev.Message)
		}
		e.waitConverged(t, "web")
		calls := callsOf(e.cloud, "EnsureLoadBalancer", e.key("web"))
		if len(calls) != 2 || calls[0].Error == "" || calls[1].Error != "" {
			t.Fatalf("EnsureLoadBalancer calls %+v, want a failure then a success", calls)
		}
		if gap := calls[1].Start.Sub(calls[0].End); gap < minRetryDelay-500*time.Millisecond {
			t.Errorf("retried %s after the failure, want the back-off of %s", gap, minRetryDelay)
		}
	})

	t.Run("timed-out ensure backs off", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, cp, "timeout")
		// The first call respects its context and ends at its deadline,
		// long after the caller was released.
		if _, err := e.cloud.AddFault(fake.Fault{Method: "EnsureLoadBalancer", Object: e.key("web"), Hang: fake.HangRespectContext, Count: 1}); err != nil {
			t.Fatal(err)
		}
		const lbTimeout = 2 * time.Second
		e.start(t, setup{guard: cloud.Options{LBCallTimeout: lbTimeout, DetachAfter: 200 * time.Millisecond, FenceTimeout: 100 * time.Millisecond}})
		e.createService(t, "web")
		e.waitConverged(t, "web")
		calls := callsOf(e.cloud, "EnsureLoadBalancer", e.key("web"))
		if len(calls) != 2 {
			t.Fatalf("EnsureLoadBalancer calls %+v, want the timed-out one and one retry", calls)
		}
		// The retry waits out the back-off from the deadline; no timer
		// of the waiting time brings it forward.
		if gap := calls[1].Start.Sub(calls[0].Start); gap < lbTimeout+minRetryDelay-500*time.Millisecond {
			t.Errorf("retried %s after the timed-out call began, want its deadline %s plus the back-off %s", gap, lbTimeout, minRetryDelay)
		}
		if n := countReason(e.events(t, "web"), reasonEnsuring); n != 2 {
			t.Errorf("%d %s Events, want one per call (2)", n, reasonEnsuring)
		}
	})

	t.Run("hung ensure", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, cp, "hung")
		id, err := e.cloud.AddFault(fake.Fault{Method: "EnsureLoadBalancer", Object: e.key("hung-*"), Hang: fake.HangIgnoreContext})
		if err != nil {
			t.Fatal(err)
		}
		// The hung calls stay within their deadline: their results are
		// kept for the next sync of their Service. A fenced Service is
		// retried after the detach window; a returned call brings it
		// back sooner.
		const detachAfter = 3 * time.Second
		e.start(t, setup{config: Config{Workers: 2}, guard: cloud.Options{LBCallTimeout: time.Minute, DetachAfter: detachAfter}})
		// More hung Services than workers, created first.
		hung := []string{"hung-0", "hung-1", "hung-2"}
		for _, name := range hung {
			e.createService(t, name)
		}
		for i := range 5 {
			e.createService(t, fmt.Sprintf("ok-%d", i))
		}
		for i := range 5 {
			e.waitConverged(t, fmt.Sprintf("ok-%d", i))
		}
		err = wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
			return e.cloud.Faults()[0].Hits == len(hung), nil
		})
		if err != nil {
			t.Fatalf("hung calls in the cloud: %d, want one per hung Service (%d): %v", e.cloud.Faults()[0].Hits, len(hung), err)
		}
		for _, name := range hung {
			if svc := e.getService(t, name); len(svc.Status.LoadBalancer.Ingress) != 0 {
				t.Errorf("%s has an ingress while its call hangs: %+v", name, svc.Status.LoadBalancer)
			}
		}
		if n := e.cloud.Overlaps(); n != 0 {
			t.Errorf("%d overlapping mutating calls while calls hang", n)
		}

		if !e.cloud.RemoveFault(id) {
			t.Fatal("fault gone")
		}
		released := time.Now()
		for _, name := range hung {
			e.waitConverged(t, name)
			if took := time.Since(released); took > detachAfter/2 {
				t.Errorf("%s converged %s after its call returned, want it synced on the call's return, not on a retry after %s", name, took, detachAfter)
			}
			if n := len(callsOf(e.cloud, "EnsureLoadBalancer", e.key(name))); n != 1 {
				t.Errorf("%s: EnsureLoadBalancer reached the cloud %d times, want once (the hung call's result taken)", name, n)
			}
			for _, ev := range e.events(t, name) {
				if ev.Type == v1.EventTypeWarning {
					t.Errorf("%s: warning event %s %q for a call that was only slow", name, ev.Reason, ev.Message)
				}
			}
		}
		if n := e.cloud.Overlaps(); n != 0 {
			t.Errorf("%d overlapping mutating calls", n)
		}
	})

	t.Run("drift repair", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, cp, "drift")
		client, requests := countingClient(t, cp.Config)
		e.start(t, setup{client: client, config: Config{ResyncPeriod: 2 * time.Second}})
		e.createService(t, "web")
		svc := e.waitConverged(t, "web")
		err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
			return len(callsOf(e.cloud, "EnsureLoadBalancer", e.key("web"))) >= 3, nil
		})
		if err != nil {
			t.Fatalf("EnsureLoadBalancer calls %d, want the load balancer re-ensured at a 2s resync period: %v", len(callsOf(e.cloud, "EnsureLoadBalancer", e.key("web"))), err)
		}
		if now := e.getService(t, "web"); now.ResourceVersion != svc.ResourceVersion {
			t.Errorf("re-ensuring an unchanged load balancer changed the Service (resourceVersion %s -> %s)", svc.ResourceVersion, now.ResourceVersion)
		}
		statusPath := fmt.Sprintf("/api/v1/namespaces/%s/services/web/status", e.ns)
		if n := requests.count(http.MethodPatch, statusPath) + requests.count(http.MethodPut, statusPath); n != 1 {
			t.Errorf("status written %d times, want once: re-ensuring an unchanged load balancer writes nothing", n)
		}
		if n := e.cloud.CallCount("UpdateLoadBalancer"); n != 0 {
			t.Errorf("UpdateLoadBalancer called %d times without Node changes", n)
		}
	})

	t.Run("no drift repair", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, cp, "no-drift")
		// The second Service's load balancer takes 3s: when it is there,
		// a resync would have re-ensured the first.
		if _, err := e.cloud.AddFault(fake.Fault{Method: "EnsureLoadBalancer", Object: e.key("slow"), Latency: fake.Duration{Duration: 3 * time.Second}}); err != nil {
			t.Fatal(err)
		}
		e.start(t, setup{config: Config{ResyncPeriod: 0}})
		e.createService(t, "web")
		e.waitConverged(t, "web")
		began := time.Now()
		e.createService(t, "slow")
		e.waitConverged(t, "slow")
		if waited := time.Since(began); waited < 3*time.Second {
			t.Fatalf("the slow Service converged after %s, want at least 3s", waited)
		}
		if n := len(callsOf(e.cloud, "EnsureLoadBalancer", e.key("web"))); n != 1 {
			t.Errorf("EnsureLoadBalancer called %d times with the resync off, want once", n)
		}
	})

	t.Run("deletion", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, cp, "deletion")
		e.start(t, setup{})
		e.createService(t, "web")
		e.waitConverged(t, "web")
		if vips := e.cloud.AllocatedVIPs(); len(vips) != 1 {
			t.Fatalf("allocated VIPs = %v, want one", vips)
		}
		if err := e.client.CoreV1().Services(e.ns).Delete(e.ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitServiceGone(t, "web")
		if lbs := e.cloud.ListLoadBalancers(); len(lbs) != 0 {
			t.Errorf("load balancers after the deletion: %+v", lbs)
		}
		if vips := e.cloud.AllocatedVIPs(); len(vips) != 0 {
			t.Errorf("VIPs still allocated: %v", vips)
		}
		e.waitEvent(t, "web", reasonDeleting)
		e.waitEvent(t, "web", reasonDeleted)
	})
}

// TestNodeEligibility runs on a control plane of its own: it changes Nodes.
func TestNodeEligibility(t *testing.T) {
	cp := harness.StartControlPlane(t)
	e := newEnv(t, cp, "nodes")
	createNode(e.ctx, t, e.client, "plain")
	createNode(e.ctx, t, e.client, "excluded", func(n *v1.Node) {
		n.Labels = map[string]string{v1.LabelNodeExcludeBalancers: "true"}
	})
	createNode(e.ctx, t, e.client, "included", func(n *v1.Node) {
		n.Labels = map[string]string{v1.LabelNodeExcludeBalancers: "false"}
	})
	createNode(e.ctx, t, e.client, "autoscaled-away", func(n *v1.Node) {
		n.Spec.Taints = []v1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: v1.TaintEffectNoSchedule}}
	})
	createNode(e.ctx, t, e.client, "not-ready", func(n *v1.Node) {
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "KubeletNotReady"}}
	})
	e.start(t, setup{})
	e.createService(t, "web")
	e.waitConverged(t, "web")

	want := []string{"included", "not-ready", "plain"}
	if lb, _ := loadBalancerOf(e.cloud, e.key("web")); !slices.Equal(lb.Nodes, want) {
		t.Errorf("load balancer nodes = %v, want %v", lb.Nodes, want)
	}
	ensures := e.cloud.CallCount("EnsureLoadBalancer")

	node, err := e.client.CoreV1().Nodes().Get(e.ctx, "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Labels = map[string]string{v1.LabelNodeExcludeBalancers: "true"}
	if _, err := e.client.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = []string{"included", "not-ready"}
	e.waitLB(t, "web", "the excluded Node to go", func(lb fake.LoadBalancer, _ bool) bool { return slices.Equal(lb.Nodes, want) })
	if n := e.cloud.CallCount("UpdateLoadBalancer"); n != 1 {
		t.Errorf("UpdateLoadBalancer called %d times, want once", n)
	}
	if n := e.cloud.CallCount("EnsureLoadBalancer"); n != ensures {
		t.Errorf("EnsureLoadBalancer called %d more times for a host change, want UpdateLoadBalancer only", n-ensures)
	}
	e.waitEvent(t, "web", reasonUpdated)
}

// TestSpecAndNodeChangeOneSync runs on a control plane of its own: it
// changes Nodes.
func TestSpecAndNodeChangeOneSync(t *testing.T) {
	cp := harness.StartControlPlane(t)
	e := newEnv(t, cp, "together")
	createNode(e.ctx, t, e.client, "n0")

	// The test's own Node informer: the Service changes only once the new
	// Node has gone out on the watch, so the controller's sync sees it.
	factory := informers.NewSharedInformerFactory(e.client, 0)
	nodes := factory.Core().V1().Nodes()
	nodes.Informer()
	watchCtx, stopWatch := context.WithCancel(e.ctx)
	factory.Start(watchCtx.Done())
	t.Cleanup(func() {
		stopWatch()
		factory.Shutdown()
	})
	factory.WaitForCacheSync(watchCtx.Done())

	const coalesce = time.Second
	e.start(t, setup{config: Config{NodeSyncCoalescePeriod: coalesce}})
	e.createService(t, "web")
	e.waitConverged(t, "web")

	// A first Node change: its recomputation starts a coalesce period.
	// (The recomputation counter is process-wide: the tests that change
	// Nodes do not run in parallel.)
	createNode(e.ctx, t, e.client, "n1")
	e.waitLB(t, "web", "the first new Node", func(lb fake.LoadBalancer, _ bool) bool { return slices.Equal(lb.Nodes, []string{"n0", "n1"}) })
	ensures, updates := e.cloud.CallCount("EnsureLoadBalancer"), e.cloud.CallCount("UpdateLoadBalancer")
	recomputes, err := testutil.GetCounterMetricValue(hostSetRecomputes)
	if err != nil {
		t.Fatal(err)
	}

	// Within that period, a Node and a port at once: the Service's sync
	// makes the load balancer with both, and the recomputation at the end
	// of the period finds nothing left to do.
	createNode(e.ctx, t, e.client, "n2")
	err = wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		_, err := nodes.Lister().Get("n2")
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.updateService(t, "web", func(svc *v1.Service) {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: "https", Protocol: v1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(8443)})
	})
	e.waitLB(t, "web", "the new port and Node", func(lb fake.LoadBalancer, _ bool) bool {
		return len(lb.Ports) == 2 && slices.Equal(lb.Nodes, []string{"n0", "n1", "n2"})
	})
	// The recomputation of the period has run.
	err = wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		n, err := testutil.GetCounterMetricValue(hostSetRecomputes)
		return n > recomputes, err
	})
	if err != nil {
		t.Fatalf("no recomputation of the node set after a Node was added: %v", err)
	}
	if n := e.cloud.CallCount("EnsureLoadBalancer") - ensures; n != 1 {
		t.Errorf("%d EnsureLoadBalancer calls for a spec and a Node change, want 1", n)
	}
	if n := e.cloud.CallCount("UpdateLoadBalancer") - updates; n != 0 {
		t.Errorf("%d UpdateLoadBalancer calls beside the Ensure that had the new Node, want 0", n)
	}
}

// TestNodeChurnCoalesced runs on a control plane of its own: it adds Nodes.
func TestNodeChurnCoalesced(t *testing.T) {
	cp := harness.StartControlPlane(t)
	e := newEnv(t, cp, "churn")
	createNode(e.ctx, t, e.client, "node-00")
	e.start(t, setup{config: Config{Workers: 4, NodeSyncCoalescePeriod: time.Second}})
	const services, added = 5, 10
	for i := range services {
		e.createService(t, fmt.Sprintf("web-%d", i))
	}
	for i := range services {
		e.waitConverged(t, fmt.Sprintf("web-%d", i))
	}
	ensures := e.cloud.CallCount("EnsureLoadBalancer")

	want := []string{"node-00"}
	for i := range added {
		name := fmt.Sprintf("node-%02d", i+1)
		want = append(want, name)
		createNode(e.ctx, t, e.client, name)
	}
	for i := range services {
		e.waitLB(t, fmt.Sprintf("web-%d", i), "every Node", func(lb fake.LoadBalancer, _ bool) bool { return slices.Equal(lb.Nodes, want) })
	}
	if n := e.cloud.CallCount("UpdateLoadBalancer"); n >= services*3 {
		t.Errorf("%d UpdateLoadBalancer calls for %d Nodes added to %d load balancers, want fewer than %d", n, added, services, services*3)
	}
	if n := e.cloud.CallCount("EnsureLoadBalancer"); n != ensures {
		t.Errorf("%d EnsureLoadBalancer calls for Node changes, want none", n-ensures)
	}
	if n := e.cloud.Overlaps(); n != 0 {
		t.Errorf("%d overlapping mutating calls", n)
	}
}

func countReason(events []v1.Event, reason string) int {
	n := 0
	for _, ev := range events {
		if ev.Reason == reason {
			n += max(int(ev.Count), 1)
		}
	}
	return n
}
