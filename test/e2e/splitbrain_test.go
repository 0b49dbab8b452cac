package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

// request is one request a recordingProxy passed on.
type request struct {
	at     time.Time
	method string
	path   string
	status int
}

// recordingProxy is an apiserver front that records every request of the
// one client that uses it: a process's writes can be told from another's.
type recordingProxy struct {
	mu       sync.Mutex
	requests []request
}

// startRecordingProxy serves plain HTTP on loopback, passes requests on to
// the control plane as its admin, and returns a kubeconfig for it.
func startRecordingProxy(t *testing.T, cp *harness.ControlPlane) (*recordingProxy, string) {
	t.Helper()
	transport, err := rest.TransportFor(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	host := cp.Config.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	target, err := url.Parse(host)
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{}
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     transport,
		FlushInterval: -1, // watches stream
		ModifyResponse: func(resp *http.Response) error {
			p.record(resp.Request, resp.StatusCode)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.record(r, http.StatusBadGateway)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(ln) }()
	t.Cleanup(func() { _ = server.Close() })

	kubeconfig := filepath.Join(t.TempDir(), "proxy.kubeconfig")
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: proxy, cluster: {server: "http://%s"}}]
users: [{name: anyone, user: {}}]
contexts: [{name: proxy, context: {cluster: proxy, user: anyone}}]
current-context: proxy
`, ln.Addr())
	if err := os.WriteFile(kubeconfig, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, kubeconfig
}

func (p *recordingProxy) record(r *http.Request, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, request{at: time.Now(), method: r.Method, path: r.URL.Path, status: status})
}

// writesSince returns the requests other than reads that reached the proxy
// at or after t.
func (p *recordingProxy) writesSince(t time.Time) []request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []request
	for _, r := range p.requests {
		if !r.at.Before(t) && r.method != http.MethodGet {
			out = append(out, r)
		}
	}
	return out
}

// TestPausedLeaderNeverActsAgain: a leader stopped (SIGSTOP) for longer
// than the Lease lasts loses the Lease to the standby. When it runs again
// it has Services and Nodes to act on, queued while it was stopped, yet it
// makes no mutating cloud call and no write to the apiserver, and exits.
func TestPausedLeaderNeverActsAgain(t *testing.T) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	leaseFlags := []string{"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=500ms", "--cluster-cidr=10.244.0.0/16", "--v=2"}

	// The old leader talks to the apiserver through a proxy that records
	// its requests, and logs its cloud calls to a file.
	proxy, proxyKubeconfig := startRecordingProxy(t, cp)
	callLog := filepath.Join(t.TempDir(), "calls.jsonl")
	config := filepath.Join(t.TempDir(), "fake-cloud.yaml")
	cloudConfig := "autoInstances:\n  enabled: true\n  zones: [zone-a]\n  region: region-1\nloadBalancers:\n  vipCIDR: 192.0.2.0/24\ncallLog: " + callLog + "\n"
	if err := os.WriteFile(config, []byte(cloudConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	old := harness.StartCCM(t, harness.CCMOptions{
		Kubeconfig: cp.Kubeconfig,
		Args:       append([]string{"--kubeconfig=" + proxyKubeconfig, "--cloud-provider=fake", "--cloud-config=" + config}, leaseFlags...),
	})
	if err := old.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	first := waitForHolder(ctx, t, cp.Client, 30*time.Second, func(h string) bool { return h != "" })
	if !logNames(ctx, old, first) {
		t.Fatalf("the first replica does not hold the Lease (%q)", first)
	}
	standby := startCCM(t, cp, leaseFlags...)
	if err := standby.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		status, _, err := old.Get(ctx, "/readyz", "")
		return err == nil && status == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("the leader's informers did not sync: %v", err)
	}

	old.Signal(syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			old.Signal(syscall.SIGCONT)
		}
	}()
	// Work for whoever leads: the stopped leader's watches queue it.
	registerNode(t, cp, "late-node", "10.244.7.0/24")
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "late-lb", Namespace: "default"},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolTCP}}},
	}
	if _, err := cp.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	second := waitForHolder(ctx, t, cp.Client, 30*time.Second, func(h string) bool { return h != "" && h != first })
	if !logNames(ctx, standby, second) {
		t.Fatalf("new holder %q is not the standby", second)
	}
	waitNode(t, cp, "late-node", "initialised by the new leader", initialised)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := cp.Client.CoreV1().Services("default").Get(ctx, "late-lb", metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) > 0, err
	})
	if err != nil {
		t.Fatalf("the new leader gave late-lb no address: %v", err)
	}

	resumed := time.Now()
	old.Signal(syscall.SIGCONT)
	stopped = false
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	code, err := old.Wait(waitCtx)
	if err != nil {
		t.Fatalf("the old leader did not exit after it ran again: %v", err)
	}
	t.Logf("the old leader exited %s after it ran again, with %d", time.Since(resumed).Round(time.Millisecond), code)
	if code == 0 {
		t.Error("the old leader exited 0, want non-zero: it lost the Lease")
	}
	if !strings.Contains(old.Log(), "Cannot prove this process still holds the Lease") {
		t.Error("the old leader's log does not say it stopped because it could not prove it holds the Lease")
	}

	// The elector's own release of the Lease may still be tried; it is
	// conditional on the resourceVersion the old leader last saw, so it
	// cannot succeed once another holder has written the Lease.
	leasePath := "/apis/coordination.k8s.io/v1/namespaces/" + leaseNamespace + "/leases/" + leaseName
	for _, w := range proxy.writesSince(resumed) {
		if w.path == leasePath && w.status == http.StatusConflict {
			continue
		}
		t.Errorf("the old leader wrote after it ran again: %s %s -> %d, %s after", w.method, w.path, w.status, w.at.Sub(resumed).Round(time.Millisecond))
	}
	for _, c := range mutatingCallsSince(t, callLog, resumed) {
		t.Errorf("the old leader made a mutating cloud call after it ran again: %s %s, %s after", c.Method, c.Object, c.Start.Sub(resumed).Round(time.Millisecond))
	}
}

// mutatingCallsSince reads a fake cloud's call log and returns the
// mutating calls that started at or after t.
func mutatingCallsSince(t *testing.T, path string, since time.Time) []fake.CallRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	mutating := map[string]bool{"EnsureLoadBalancer": true, "UpdateLoadBalancer": true, "EnsureLoadBalancerDeleted": true, "CreateRoute": true, "DeleteRoute": true}
	var out []fake.CallRecord
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var rec fake.CallRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("call log line %q: %v", sc.Text(), err)
		}
		if mutating[rec.Method] && !rec.Start.Before(since) {
			out = append(out, rec)
		}
	}
	return out
}
