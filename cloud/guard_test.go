package cloud

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
)

// stubCloud is a provider whose every method runs behave, so a test decides
// how each call behaves (block, fail, ignore its context).
type stubCloud struct {
	name string

	mu     sync.Mutex
	calls  map[string]int
	behave func(ctx context.Context, method, object string) error
}

var (
	_ cloudprovider.Interface    = (*stubCloud)(nil)
	_ cloudprovider.InstancesV2  = (*stubCloud)(nil)
	_ cloudprovider.LoadBalancer = (*stubCloud)(nil)
	_ cloudprovider.Routes       = (*stubCloud)(nil)
)

var stubs atomic.Int64

func newStub(t *testing.T, behave func(ctx context.Context, method, object string) error) *stubCloud {
	// A provider name per stub keeps each test's metric series its own,
	// also under -count.
	name := fmt.Sprintf("%s_%d", strings.ReplaceAll(t.Name(), "/", "_"), stubs.Add(1))
	return &stubCloud{name: name, calls: map[string]int{}, behave: behave}
}

func (s *stubCloud) call(ctx context.Context, method, object string) error {
	s.mu.Lock()
	s.calls[method]++
	behave := s.behave
	s.mu.Unlock()
	if behave == nil {
		return nil
	}
	return behave(ctx, method, object)
}

func (s *stubCloud) count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func (s *stubCloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (s *stubCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return s, true }
func (s *stubCloud) Instances() (cloudprovider.Instances, bool)                        { return nil, false }
func (s *stubCloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return s, true }
func (s *stubCloud) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (s *stubCloud) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (s *stubCloud) Routes() (cloudprovider.Routes, bool)                              { return s, true }
func (s *stubCloud) ProviderName() string                                              { return s.name }
func (s *stubCloud) HasClusterID() bool                                                { return true }

func (s *stubCloud) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	return true, s.call(ctx, "InstanceExists", node.Name)
}

func (s *stubCloud) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	return false, s.call(ctx, "InstanceShutdown", node.Name)
}

func (s *stubCloud) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	if err := s.call(ctx, "InstanceMetadata", node.Name); err != nil {
		return nil, err
	}
	return &cloudprovider.InstanceMetadata{ProviderID: "stub://" + node.Name}, nil
}

func (s *stubCloud) GetLoadBalancer(ctx context.Context, _ string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	return nil, false, s.call(ctx, "GetLoadBalancer", svc.Namespace+"/"+svc.Name)
}

func (s *stubCloud) GetLoadBalancerName(_ context.Context, _ string, svc *v1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

func (s *stubCloud) EnsureLoadBalancer(ctx context.Context, _ string, svc *v1.Service, _ []*v1.Node) (*v1.LoadBalancerStatus, error) {
	if err := s.call(ctx, "EnsureLoadBalancer", svc.Namespace+"/"+svc.Name); err != nil {
		return nil, err
	}
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}}, nil
}

func (s *stubCloud) UpdateLoadBalancer(ctx context.Context, _ string, svc *v1.Service, _ []*v1.Node) error {
	return s.call(ctx, "UpdateLoadBalancer", svc.Namespace+"/"+svc.Name)
}

func (s *stubCloud) EnsureLoadBalancerDeleted(ctx context.Context, _ string, svc *v1.Service) error {
	return s.call(ctx, "EnsureLoadBalancerDeleted", svc.Namespace+"/"+svc.Name)
}

func (s *stubCloud) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	return nil, s.call(ctx, "ListRoutes", clusterName)
}

func (s *stubCloud) CreateRoute(ctx context.Context, _ string, _ string, r *cloudprovider.Route) error {
	return s.call(ctx, "CreateRoute", r.DestinationCIDR)
}

func (s *stubCloud) DeleteRoute(ctx context.Context, _ string, r *cloudprovider.Route) error {
	return s.call(ctx, "DeleteRoute", r.DestinationCIDR)
}

// hangIgnoringContext blocks for ten minutes whatever its context says, or
// until release is closed (so the test leaves no goroutine behind).
func hangIgnoringContext(release <-chan struct{}) func(context.Context, string, string) error {
	return func(context.Context, string, string) error {
		select {
		case <-release:
		case <-time.After(10 * time.Minute):
		}
		return nil
	}
}

func node(name string) *v1.Node { return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

func service(name string) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
}

func counter(t *testing.T, provider, method, result string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(requestsTotal.WithLabelValues(provider, method, result))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func gaugeValue(t *testing.T, which string, provider string) float64 {
	t.Helper()
	var (
		v   float64
		err error
	)
	switch which {
	case "inflight":
		v, err = testutil.GetGaugeMetricValue(inflightCalls.WithLabelValues(provider))
	case "detached":
		v, err = testutil.GetGaugeMetricValue(detachedCalls.WithLabelValues(provider))
	case "abandoned":
		v, err = testutil.GetGaugeMetricValue(abandonedCalls.WithLabelValues(provider))
	default:
		t.Fatalf("no gauge %q", which)
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func histogramCount(t *testing.T, provider, method, result string) uint64 {
	t.Helper()
	n, err := testutil.GetHistogramMetricCount(requestDuration.WithLabelValues(provider, method, result))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// eventually polls cond with a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// slack is how late past its bound a released caller may be.
const slack = 100 * time.Millisecond

func TestHungCallReleasesCaller(t *testing.T) {
	tests := []struct {
		name    string
		detach  time.Duration
		timeout time.Duration
		wantErr error
		result  string
	}{
		{name: "detach window first", detach: 200 * time.Millisecond, timeout: time.Minute, wantErr: ErrInProgress, result: ResultDetached},
		{name: "deadline first", detach: time.Minute, timeout: 200 * time.Millisecond, wantErr: ErrTimeout, result: ResultTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			release := make(chan struct{})
			defer close(release)
			stub := newStub(t, hangIgnoringContext(release))
			g := New(stub, Options{CallTimeout: tt.timeout, DetachAfter: tt.detach})
			defer g.Close()
			inst, _ := g.InstancesV2()

			start := time.Now()
			_, err := inst.InstanceMetadata(ctx, node("n1"))
			elapsed := time.Since(start)

			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error = %v, want %v", err, tt.wantErr)
			}
			if bound := min(tt.detach, tt.timeout) + slack; elapsed > bound {
				t.Errorf("caller released after %s, want at most %s", elapsed, bound)
			}
			if got := counter(t, stub.name, "InstanceMetadata", tt.result); got != 1 {
				t.Errorf("requests_total{result=%q} = %v, want 1", tt.result, got)
			}
		})
	}
}

func TestDetachedCallKeepsResultForNextCall(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	proceed := make(chan struct{})
	stub := newStub(t, func(context.Context, string, string) error {
		<-proceed
		return nil
	})
	g := New(stub, Options{DetachAfter: 50 * time.Millisecond, CallTimeout: time.Minute})
	defer g.Close()
	requeued := make(chan string, 1)
	g.OnResult(KindNode, func(key string) { requeued <- key })
	inst, _ := g.InstancesV2()

	_, err := inst.InstanceMetadata(ctx, node("n1"))
	if !errors.Is(err, ErrInProgress) {
		t.Fatalf("first call: error = %v, want ErrInProgress", err)
	}
	if after, ok := RetryAfter(err); !ok || after <= 0 {
		t.Errorf("in-progress error carries no retry-after: %v", err)
	}
	if got := gaugeValue(t, "detached", stub.name); got != 1 {
		t.Errorf("detached gauge = %v while the call runs, want 1", got)
	}
	// While it runs, the same question is not asked twice.
	if _, err := inst.InstanceMetadata(ctx, node("n1")); !errors.Is(err, ErrInProgress) {
		t.Fatalf("call while detached: error = %v, want ErrInProgress", err)
	}

	close(proceed)
	select {
	case key := <-requeued:
		if key != "n1" {
			t.Fatalf("callback got key %q, want n1", key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the detached call's callback did not fire")
	}
	if got := gaugeValue(t, "detached", stub.name); got != 0 {
		t.Errorf("detached gauge = %v after the call returned, want 0", got)
	}

	md, err := inst.InstanceMetadata(ctx, node("n1"))
	if err != nil || md == nil || md.ProviderID != "stub://n1" {
		t.Fatalf("next call = %+v, %v; want the kept metadata", md, err)
	}
	if got := stub.count("InstanceMetadata"); got != 1 {
		t.Errorf("provider called %d times, want 1 (the kept result must be taken)", got)
	}
	if got := counter(t, stub.name, "InstanceMetadata", ResultDetached); got != 2 {
		t.Errorf("requests_total{result=detached} = %v, want 2", got)
	}
	if got := counter(t, stub.name, "InstanceMetadata", ResultSuccess); got != 1 {
		t.Errorf("requests_total{result=success} = %v, want 1", got)
	}
	if got := histogramCount(t, stub.name, "InstanceMetadata", ResultSuccess); got != 1 {
		t.Errorf("request_duration{result=success} count = %v, want 1", got)
	}

	// The kept result is handed out once: the call after it asks the cloud.
	if _, err := inst.InstanceMetadata(ctx, node("n1")); err != nil {
		t.Fatal(err)
	}
	if got := stub.count("InstanceMetadata"); got != 2 {
		t.Errorf("provider called %d times, want 2", got)
	}
}

func TestKeptResultIsNotUsedForOtherArguments(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	proceed := make(chan struct{})
	var once sync.Once
	stub := newStub(t, func(context.Context, string, string) error {
		<-proceed
		return nil
	})
	g := New(stub, Options{DetachAfter: 50 * time.Millisecond})
	defer g.Close()
	requeued := make(chan string, 1)
	g.OnResult(KindService, func(key string) { requeued <- key })
	lb, _ := g.LoadBalancer()

	svc := service("web")
	svc.Spec.Ports = []v1.ServicePort{{Port: 80}}
	if _, err := lb.EnsureLoadBalancer(ctx, "c", svc, nil); !errors.Is(err, ErrInProgress) {
		t.Fatalf("error = %v, want ErrInProgress", err)
	}
	once.Do(func() { close(proceed) })
	<-requeued

	// The Service changed while the call ran: its kept result is stale.
	changed := svc.DeepCopy()
	changed.Spec.Ports = []v1.ServicePort{{Port: 443}}
	if _, err := lb.EnsureLoadBalancer(ctx, "c", changed, nil); err != nil {
		t.Fatal(err)
	}
	if got := stub.count("EnsureLoadBalancer"); got != 2 {
		t.Errorf("provider called %d times, want 2 (a stale kept result must not be used)", got)
	}
}

func TestAbandonedBoundSaturatesAndRecovers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	release := make(chan struct{})
	stub := newStub(t, hangIgnoringContext(release))
	g := New(stub, Options{CallTimeout: 50 * time.Millisecond, DetachAfter: time.Minute, MaxAbandoned: 2})
	defer g.Close()
	inst, _ := g.InstancesV2()

	for _, n := range []string{"a", "b"} {
		if _, err := inst.InstanceExists(ctx, node(n)); !errors.Is(err, ErrTimeout) {
			t.Fatalf("call for %s: error = %v, want ErrTimeout", n, err)
		}
	}
	if got := gaugeValue(t, "abandoned", stub.name); got != 2 {
		t.Fatalf("abandoned gauge = %v, want 2", got)
	}

	start := time.Now()
	_, err := inst.InstanceExists(ctx, node("c"))
	if !errors.Is(err, ErrSaturated) {
		t.Fatalf("call at the bound: error = %v, want ErrSaturated", err)
	}
	if elapsed := time.Since(start); elapsed > slack {
		t.Errorf("saturated call took %s, want a fast refusal", elapsed)
	}
	if _, ok := RetryAfter(err); !ok {
		t.Errorf("saturated error carries no retry-after: %v", err)
	}
	if got := stub.count("InstanceExists"); got != 2 {
		t.Errorf("provider called %d times, want 2 (a saturated call must not reach it)", got)
	}
	if got := counter(t, stub.name, "InstanceExists", ResultSaturated); got != 1 {
		t.Errorf("requests_total{result=saturated} = %v, want 1", got)
	}
	if got := histogramCount(t, stub.name, "InstanceExists", ResultTimeout); got != 2 {
		t.Errorf("request_duration{result=timeout} count = %v, want 2", got)
	}

	// The hung calls return: the guard takes calls again.
	close(release)
	eventually(t, "abandoned calls to return", func() bool { return gaugeValue(t, "abandoned", stub.name) == 0 })
	if got := gaugeValue(t, "inflight", stub.name); got != 0 {
		t.Errorf("inflight gauge = %v, want 0", got)
	}
	if _, err := inst.InstanceExists(ctx, node("c")); err != nil {
		t.Fatalf("call after recovery: %v", err)
	}
}

func TestInflightAndPerMethodBounds(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	release := make(chan struct{})
	defer close(release)
	stub := newStub(t, func(ctx context.Context, method, _ string) error {
		if method == "EnsureLoadBalancer" {
			<-release
		}
		return nil
	})
	g := New(stub, Options{DetachAfter: 10 * time.Millisecond, MaxInflight: 4, MaxPerMethod: 2})
	defer g.Close()
	lb, _ := g.LoadBalancer()
	inst, _ := g.InstancesV2()

	for _, name := range []string{"a", "b"} {
		if _, err := lb.EnsureLoadBalancer(ctx, "c", service(name), nil); !errors.Is(err, ErrInProgress) {
			t.Fatalf("EnsureLoadBalancer %s: %v, want ErrInProgress", name, err)
		}
	}
	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("c"), nil); !errors.Is(err, ErrSaturated) {
		t.Fatalf("third slow LB call: %v, want ErrSaturated (per-method bound)", err)
	}
	// Slow load balancers do not take the budget of node initialisation.
	if _, err := inst.InstanceMetadata(ctx, node("n1")); err != nil {
		t.Fatalf("InstanceMetadata beside slow LB calls: %v", err)
	}
	if got := gaugeValue(t, "inflight", stub.name); got != 2 {
		t.Errorf("inflight gauge = %v, want 2", got)
	}
}

func TestFenceRefusesOverlappingMutations(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	release := make(chan struct{})
	stub := newStub(t, hangIgnoringContext(release))
	g := New(stub, Options{DetachAfter: 20 * time.Millisecond, LBCallTimeout: 200 * time.Millisecond, FenceTimeout: time.Minute})
	defer g.Close()
	lb, _ := g.LoadBalancer()
	svc := service("web")

	if _, err := lb.EnsureLoadBalancer(ctx, "c", svc, nil); !errors.Is(err, ErrInProgress) {
		t.Fatalf("first call: %v, want ErrInProgress", err)
	}
	// In flight (detached): any other mutation of the same Service is refused.
	if err := lb.EnsureLoadBalancerDeleted(ctx, "c", svc); !errors.Is(err, ErrFenced) {
		t.Fatalf("delete while ensure in flight: %v, want ErrFenced", err)
	}
	// Another Service is not fenced.
	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("other"), nil); !errors.Is(err, ErrInProgress) {
		t.Fatalf("other service: %v, want ErrInProgress (not fenced)", err)
	}
	// Past its deadline the call is abandoned and still holds the fence.
	eventually(t, "the calls to be abandoned", func() bool { return gaugeValue(t, "abandoned", stub.name) == 2 })
	if _, err := lb.EnsureLoadBalancer(ctx, "c", svc, nil); err == nil {
		t.Fatal("call after the abandoned one's deadline: want an error")
	}
	if _, err := lb.EnsureLoadBalancer(ctx, "c", svc, nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("ensure while abandoned: %v, want ErrFenced", err)
	}
	if got := counter(t, stub.name, "EnsureLoadBalancer", ResultFenced); got != 1 {
		t.Errorf("requests_total{EnsureLoadBalancer,fenced} = %v, want 1", got)
	}
	if got := stub.count("EnsureLoadBalancer"); got != 2 {
		t.Errorf("provider EnsureLoadBalancer calls = %d, want 2 (a fenced call must not reach it)", got)
	}

	// When the abandoned call returns, the fence lifts.
	close(release)
	eventually(t, "abandoned calls to return", func() bool { return gaugeValue(t, "abandoned", stub.name) == 0 })
	if _, err := lb.EnsureLoadBalancer(ctx, "c", svc, nil); err != nil {
		t.Fatalf("ensure after the fence lifted: %v", err)
	}
}

func TestFenceTimeoutReleasesAbandonedFence(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	release := make(chan struct{})
	defer close(release)
	stub := newStub(t, func(ctx context.Context, method, object string) error {
		if method == "CreateRoute" {
			<-release
		}
		return nil
	})
	g := New(stub, Options{DetachAfter: time.Minute, CallTimeout: 20 * time.Millisecond, FenceTimeout: 50 * time.Millisecond})
	defer g.Close()
	routes, _ := g.Routes()
	route := &cloudprovider.Route{TargetNode: "n1", DestinationCIDR: "10.244.1.0/24"}

	if err := routes.CreateRoute(ctx, "c", "uid", route); !errors.Is(err, ErrTimeout) {
		t.Fatalf("CreateRoute: %v, want ErrTimeout", err)
	}
	if err := routes.DeleteRoute(ctx, "c", route); !errors.Is(err, ErrFenced) {
		t.Fatalf("DeleteRoute right after: %v, want ErrFenced", err)
	}
	eventually(t, "the fence to time out", func() bool {
		return routes.DeleteRoute(ctx, "c", route) == nil
	})
}

func TestProviderErrorsAreClassified(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		result string
	}{
		{name: "success", err: nil, result: ResultSuccess},
		{name: "error", err: errors.New("boom"), result: ResultError},
		{name: "not found", err: fmt.Errorf("lookup: %w", cloudprovider.InstanceNotFound), result: ResultNotFound},
		{name: "throttled", err: &ThrottledError{Err: errors.New("429")}, result: ResultThrottled},
		{name: "context deadline respected", err: context.DeadlineExceeded, result: ResultTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			stub := newStub(t, func(context.Context, string, string) error { return tt.err })
			g := New(stub, Options{})
			defer g.Close()
			inst, _ := g.InstancesV2()
			_, err := inst.InstanceShutdown(ctx, node("n1"))
			if !errors.Is(err, tt.err) {
				t.Errorf("error = %v, want %v", err, tt.err)
			}
			if got := counter(t, stub.name, "InstanceShutdown", tt.result); got != 1 {
				t.Errorf("requests_total{result=%q} = %v, want 1", tt.result, got)
			}
			if got := histogramCount(t, stub.name, "InstanceShutdown", tt.result); got != 1 {
				t.Errorf("request_duration{result=%q} count = %v, want 1", tt.result, got)
			}
		})
	}
}

func TestProviderRespectingDeadlineGetsIt(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	deadlines := make(chan time.Time, 1)
	stub := newStub(t, func(ctx context.Context, _, _ string) error {
		d, _ := ctx.Deadline()
		deadlines <- d
		<-ctx.Done()
		return ctx.Err()
	})
	g := New(stub, Options{CallTimeout: 100 * time.Millisecond, LBCallTimeout: time.Hour})
	defer g.Close()
	inst, _ := g.InstancesV2()
	start := time.Now()
	_, err := inst.InstanceExists(ctx, node("n1"))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("error = %v, want ErrTimeout", err)
	}
	if deadline := <-deadlines; deadline.Sub(start) > 100*time.Millisecond+slack {
		t.Errorf("provider context deadline %v after start, want the call timeout", deadline.Sub(start))
	}
	eventually(t, "the call to return", func() bool { return gaugeValue(t, "inflight", stub.name) == 0 })
	if got := gaugeValue(t, "abandoned", stub.name); got != 0 {
		t.Errorf("abandoned gauge = %v, want 0", got)
	}
}

func TestThrottlingBacksOffAllCalls(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var mu sync.Mutex
	var starts []time.Time
	throttled := true
	stub := newStub(t, func(context.Context, string, string) error {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, time.Now())
		if throttled {
			throttled = false
			return &ThrottledError{RetryAfter: 300 * time.Millisecond, Err: errors.New("RequestLimitExceeded")}
		}
		return nil
	})
	g := New(stub, Options{})
	defer g.Close()
	inst, _ := g.InstancesV2()

	if _, err := inst.InstanceExists(ctx, node("a")); !isThrottled(err) {
		t.Fatalf("first call: %v, want a throttled error", err)
	}
	if _, err := inst.InstanceExists(ctx, node("b")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := starts[1].Sub(starts[0]); gap < 300*time.Millisecond {
		t.Errorf("call after a throttle reached the provider after %s, want at least the 300ms retry-after", gap)
	}
}

func TestRateLimit(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	stub := newStub(t, nil)
	g := New(stub, Options{QPS: 20, Burst: 1})
	defer g.Close()
	inst, _ := g.InstancesV2()
	start := time.Now()
	for i := range 5 {
		if _, err := inst.InstanceExists(ctx, node(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// 5 calls at 20/s with a burst of 1 need at least 4 intervals of 50ms.
	if elapsed := time.Since(start); elapsed < 200*time.Millisecond {
		t.Errorf("5 calls at 20 QPS took %s, want at least 200ms", elapsed)
	}
}

func TestProviderPanicIsAnError(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	stub := newStub(t, func(context.Context, string, string) error { panic("provider bug") })
	g := New(stub, Options{})
	defer g.Close()
	routes, _ := g.Routes()
	if _, err := routes.ListRoutes(ctx, "c"); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("error = %v, want the panic as an error", err)
	}
	if got := gaugeValue(t, "inflight", stub.name); got != 0 {
		t.Errorf("inflight gauge = %v after a panic, want 0", got)
	}
}

func TestCallerCancellationDetaches(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	proceed := make(chan struct{})
	stub := newStub(t, func(context.Context, string, string) error { <-proceed; return nil })
	g := New(stub, Options{DetachAfter: time.Minute})
	defer g.Close()
	requeued := make(chan string, 1)
	g.OnResult(KindService, func(key string) { requeued <- key })
	lb, _ := g.LoadBalancer()

	cctx, cancel := context.WithCancel(ctx)
	go func() {
		eventually(t, "the call to start", func() bool { return stub.count("EnsureLoadBalancerDeleted") == 1 })
		cancel()
	}()
	if err := lb.EnsureLoadBalancerDeleted(cctx, "c", service("web")); !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	close(proceed)
	select {
	case key := <-requeued:
		if key != "default/web" {
			t.Errorf("callback key %q, want default/web", key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no callback after the cancelled caller's call returned")
	}
	if err := lb.EnsureLoadBalancerDeleted(ctx, "c", service("web")); err != nil {
		t.Fatalf("kept result: %v", err)
	}
	if got := stub.count("EnsureLoadBalancerDeleted"); got != 1 {
		t.Errorf("provider called %d times, want 1", got)
	}
}
