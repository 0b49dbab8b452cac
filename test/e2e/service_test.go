package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

const (
	// lbNamespace holds the Services of the load-balancer tests.
	lbNamespace = "lb"
	// lbFinalizer is the service controller's cleanup finalizer.
	lbFinalizer = "service.kubernetes.io/load-balancer-cleanup"
)

// vipCIDR is the fake cloud's pool of load-balancer IPs.
var vipCIDR = netip.MustParsePrefix("192.0.2.0/24")

// lbNodes are the Nodes the load balancers forward to.
var lbNodes = []string{"lb-node-0", "lb-node-1", "lb-node-2"}

// lbCluster is a control plane with lbNodes and the lbNamespace, and a CCM
// running only the service controller against the fake cloud.
type lbCluster struct {
	cp  *harness.ControlPlane
	ccm *harness.CCM
	// admin is the base URL of the fake cloud's admin API.
	admin string
}

// startLBCluster starts the cluster; faults is a YAML flow list of the
// fake cloud's faults ("" for none), flags are extra CCM flags.
func startLBCluster(t *testing.T, faults string, flags ...string) *lbCluster {
	t.Helper()
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	admin := freeLoopbackAddr(t)
	config := fmt.Sprintf("loadBalancers: {vipCIDR: %s}\nadminAddress: %s\n", vipCIDR, admin)
	if faults != "" {
		config += "faults: " + faults + "\n"
	}
	path := filepath.Join(t.TempDir(), "fake-cloud.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	// Nodes and namespace exist before the CCM starts: the host set is
	// complete in the informers' first list and never changes.
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lbNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range lbNodes {
		if _, err := cp.Client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	args := append([]string{"--cloud-provider=fake", "--cloud-config=" + path, "--controllers=service", "--v=2"}, flags...)
	ccm := harness.StartCCM(t, harness.CCMOptions{Kubeconfig: cp.Kubeconfig, Args: args})
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	return &lbCluster{cp: cp, ccm: ccm, admin: "http://" + admin}
}

// createServices creates a LoadBalancer Service with one TCP port for
// each name.
func (c *lbCluster) createServices(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		svc := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lbNamespace},
			Spec: v1.ServiceSpec{
				Type:     v1.ServiceTypeLoadBalancer,
				Selector: map[string]string{"app": name},
				Ports:    []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		if _, err := c.cp.Client.CoreV1().Services(lbNamespace).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// services returns the Services of lbNamespace by name.
func (c *lbCluster) services(ctx context.Context) (map[string]v1.Service, error) {
	list, err := c.cp.Client.CoreV1().Services(lbNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]v1.Service, len(list.Items))
	for _, svc := range list.Items {
		out[svc.Name] = svc
	}
	return out, nil
}

// waitIngress waits until each of names has an ingress IP and returns the
// Services of lbNamespace as last seen.
func (c *lbCluster) waitIngress(t *testing.T, timeout time.Duration, names []string) map[string]v1.Service {
	t.Helper()
	var svcs map[string]v1.Service
	var missing []string
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if svcs, err = c.services(ctx); err != nil {
			return false, err
		}
		missing = missing[:0]
		for _, name := range names {
			if ingressIP(svcs[name]) == "" {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("%d of %d Services without an ingress IP after %s (%v): %v", len(missing), len(names), timeout, firstOf(missing, 10), err)
	}
	return svcs
}

// checkLoadBalancers checks that names have distinct ingress IPs from the
// pool, the cleanup finalizer, and a load balancer in the cloud with that
// IP, their port and every Node; and that the cloud holds nothing else.
func (c *lbCluster) checkLoadBalancers(t *testing.T, svcs map[string]v1.Service, names []string) {
	t.Helper()
	owner := map[string]string{} // ingress IP -> Service name
	for _, name := range names {
		svc := svcs[name]
		ip := ingressIP(svc)
		addr, err := netip.ParseAddr(ip)
		if err != nil || !vipCIDR.Contains(addr) {
			t.Errorf("Service %s has ingress IP %q, want one from %s", name, ip, vipCIDR)
		}
		if other, ok := owner[ip]; ok {
			t.Errorf("Services %s and %s share ingress IP %s", other, name, ip)
		}
		owner[ip] = name
		if !slices.Contains(svc.Finalizers, lbFinalizer) {
			t.Errorf("Service %s has an ingress IP but finalizers %v, want %s", name, svc.Finalizers, lbFinalizer)
		}
	}

	var lbs []fake.LoadBalancer
	if err := getJSON(t.Context(), c.admin+"/loadbalancers", &lbs); err != nil {
		t.Fatal(err)
	}
	if len(lbs) != len(names) {
		t.Errorf("the cloud holds %d load balancers, want %d", len(lbs), len(names))
	}
	for _, lb := range lbs {
		ns, name, _ := strings.Cut(lb.Service, "/")
		if ns != lbNamespace || owner[lb.VIP] != name {
			t.Errorf("load balancer %s of %s has VIP %s, which is the ingress IP of %q", lb.Name, lb.Service, lb.VIP, owner[lb.VIP])
		}
		if len(lb.Ports) != 1 || lb.Ports[0].Port != 80 || lb.Ports[0].Protocol != v1.ProtocolTCP {
			t.Errorf("load balancer of %s has ports %+v, want 80/TCP", lb.Service, lb.Ports)
		}
		if !slices.Equal(lb.Nodes, lbNodes) {
			t.Errorf("load balancer of %s has nodes %v, want %v", lb.Service, lb.Nodes, lbNodes)
		}
	}
	var vips []string
	if err := getJSON(t.Context(), c.admin+"/vips", &vips); err != nil {
		t.Fatal(err)
	}
	if len(vips) != len(names) {
		t.Errorf("the cloud has %d VIPs allocated, want %d", len(vips), len(names))
	}
}

// cloudCalls is the answer of the admin API's GET /calls.
type cloudCalls struct {
	Calls    []fake.CallRecord `json:"calls"`
	Overlaps int               `json:"overlaps"`
}

func (c *lbCluster) calls(ctx context.Context) (cloudCalls, error) {
	var calls cloudCalls
	err := getJSON(ctx, c.admin+"/calls", &calls)
	return calls, err
}

// checkNoOverlaps fails the test when the cloud saw a mutating call on a
// Service start while another one on the same Service was in flight.
func (c *lbCluster) checkNoOverlaps(t *testing.T, when string) {
	t.Helper()
	calls, err := c.calls(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.Overlaps; n != 0 {
		t.Errorf("%s: %d load-balancer calls started while another on the same Service was in flight, want 0", when, n)
	}
}

// Series of the CCM's /metrics that show how the guard treats hung calls.
const (
	abandonedSeries = `cloudprovider_api_abandoned_calls{provider="fake"}`
	fencedSeries    = `cloudprovider_api_requests_total{method="EnsureLoadBalancer",provider="fake",result="fenced"}`
)

// metricValue returns the value of a series in a /metrics body, -1 if the
// body has none.
func metricValue(body, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

func ingressIP(svc v1.Service) string {
	if len(svc.Status.LoadBalancer.Ingress) == 0 {
		return ""
	}
	return svc.Status.LoadBalancer.Ingress[0].IP
}

func serviceNames(prefix string, count int) []string {
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return names
}

func firstOf(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// TestServicesConvergeAndLeakNothing: 100 LoadBalancer Services get distinct
// addresses from the cloud; once they are deleted, each Service object stays
// until its load balancer is gone, and the cloud is left with no load
// balancer and no allocated VIP.
func TestServicesConvergeAndLeakNothing(t *testing.T) {
	ctx := t.Context()
	c := startLBCluster(t, "")
	names := serviceNames("svc-", 100)

	start := time.Now()
	c.createServices(t, names...)
	svcs := c.waitIngress(t, 60*time.Second, names)
	t.Logf("%d Services converged in %s", len(names), time.Since(start).Round(time.Millisecond))
	c.checkLoadBalancers(t, svcs, names)
	c.checkNoOverlaps(t, "after convergence")

	start = time.Now()
	for _, name := range names {
		if err := c.cp.Client.CoreV1().Services(lbNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var left map[string]v1.Service
	var lbs []fake.LoadBalancer
	var vips []string
	var early []string // load balancers whose Service was gone before them
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if left, err = c.services(ctx); err != nil {
			return false, err
		}
		// Listed after the Services: a load balancer here existed when the
		// Services were listed, so its Service must still have been there.
		if err := getJSON(ctx, c.admin+"/loadbalancers", &lbs); err != nil {
			return false, err
		}
		if err := getJSON(ctx, c.admin+"/vips", &vips); err != nil {
			return false, err
		}
		for _, lb := range lbs {
			_, name, _ := strings.Cut(lb.Service, "/")
			if _, ok := left[name]; !ok && !slices.Contains(early, lb.Service) {
				early = append(early, lb.Service)
			}
		}
		return len(left) == 0 && len(lbs) == 0 && len(vips) == 0, nil
	})
	if err != nil {
		t.Fatalf("after deleting %d Services: %d Services left, the cloud holds %d load balancers and %d VIPs: %v",
			len(names), len(left), len(lbs), len(vips), err)
	}
	t.Logf("%d Services and their load balancers deleted in %s", len(names), time.Since(start).Round(time.Millisecond))
	if len(early) > 0 {
		t.Errorf("%d Services were gone while their load balancer still existed: %v", len(early), firstOf(early, 10))
	}

	calls, err := c.calls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if calls.Overlaps != 0 {
		t.Errorf("%d load-balancer calls started while another on the same Service was in flight, want 0", calls.Overlaps)
	}
	deleted := map[string]bool{}
	var failed []string
	for _, call := range calls.Calls {
		if call.Error != "" {
			failed = append(failed, fmt.Sprintf("%s %s: %s", call.Method, call.Object, call.Error))
		}
		if call.Method == "EnsureLoadBalancerDeleted" && call.Error == "" {
			deleted[call.Object] = true
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d cloud calls failed without a fault: %v", len(failed), firstOf(failed, 10))
	}
	for _, name := range names {
		if !deleted[lbNamespace+"/"+name] {
			t.Errorf("no successful EnsureLoadBalancerDeleted for %s/%s", lbNamespace, name)
		}
	}
}

// TestHungEnsureDoesNotStarveOthers: EnsureLoadBalancer hangs, ignoring its
// context, for 4 Services, as many as there are workers. The 20 others
// converge while the 4 stay without an address, and the controller never
// has a second call on a Service in the cloud while its first one still
// runs. Once the fault is cleared, the 4 converge too.
func TestHungEnsureDoesNotStarveOthers(t *testing.T) {
	ctx := t.Context()
	// The fence outlives the calls' 5s deadline by far: the hung calls are
	// released by clearing the fault long before it would let a second
	// call through.
	c := startLBCluster(t, fmt.Sprintf(`[{method: EnsureLoadBalancer, object: "%s/hung-*", hang: ignore-context}]`, lbNamespace),
		"--concurrent-service-syncs=4",
		"--cloud-call-detach-after=1s", "--cloud-lb-call-timeout=5s", "--cloud-fence-timeout=60s")
	token := c.cp.MetricsToken(ctx, t)
	hung := serviceNames("hung-", 4)
	others := serviceNames("svc-", 20)

	start := time.Now()
	// The hung ones first, so that they take every worker.
	c.createServices(t, hung...)
	c.createServices(t, others...)
	c.waitIngress(t, 60*time.Second, others)
	t.Logf("%d Services converged beside %d hung ones in %s", len(others), len(hung), time.Since(start).Round(time.Millisecond))
	c.checkNoOverlaps(t, "after the others converged")

	// Hold the fault until every hung call is past its deadline and the
	// controller has retried the hung Services since: the retries meet
	// abandoned calls that still run in the cloud.
	scrape := func(ctx context.Context) (string, error) {
		status, body, err := c.ccm.Get(ctx, "/metrics", token)
		if err != nil || status != http.StatusOK {
			return "", fmt.Errorf("GET /metrics: %d, %w", status, err)
		}
		return body, nil
	}
	var abandoned, fencedAtAbandon, fenced float64
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		body, err := scrape(ctx)
		if err != nil {
			return false, err
		}
		abandoned, fencedAtAbandon = metricValue(body, abandonedSeries), metricValue(body, fencedSeries)
		return abandoned == float64(len(hung)), nil
	})
	if err != nil {
		t.Fatalf("waiting for %d abandoned calls (last seen %v): %v", len(hung), abandoned, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		calls, err := c.calls(ctx)
		if err != nil {
			return false, err
		}
		if calls.Overlaps != 0 {
			return false, fmt.Errorf("%d load-balancer calls started while another on the same Service was in flight", calls.Overlaps)
		}
		body, err := scrape(ctx)
		if err != nil {
			return false, err
		}
		fenced = metricValue(body, fencedSeries)
		return fenced >= fencedAtAbandon+float64(len(hung)), nil
	})
	if err != nil {
		t.Fatalf("while the hung calls are abandoned (%v fenced Ensure calls, %v when they were abandoned): %v", fenced, fencedAtAbandon, err)
	}
	svcs, err := c.services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range hung {
		if ip := ingressIP(svcs[name]); ip != "" {
			t.Errorf("Service %s has ingress IP %s while its EnsureLoadBalancer hangs", name, ip)
		}
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.admin+"/faults", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /faults = %d", resp.StatusCode)
	}

	start = time.Now()
	all := append(slices.Clone(hung), others...)
	svcs = c.waitIngress(t, 60*time.Second, all)
	t.Logf("the %d hung Services converged %s after the fault was cleared", len(hung), time.Since(start).Round(time.Millisecond))
	c.checkLoadBalancers(t, svcs, all)
	c.checkNoOverlaps(t, "after every Service converged")
}
