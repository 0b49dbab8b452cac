// Package e2e runs the cloud-controller-manager binary against a real
// kube-apiserver and etcd with the fake cloud.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/test/harness"
)

const (
	leaseNamespace = "kube-system"
	leaseName      = "cloud-controller-manager"
)

// fakeCloudConfig writes a fake-cloud config and returns its path.
func fakeCloudConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake-cloud.yaml")
	config := "autoInstances:\n  enabled: true\n  zones: [zone-a, zone-b]\n  region: region-1\nloadBalancers:\n  vipCIDR: 192.0.2.0/24\n"
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func startCCM(t *testing.T, cp *harness.ControlPlane, extra ...string) *harness.CCM {
	t.Helper()
	args := append([]string{"--cloud-provider=fake", "--cloud-config=" + fakeCloudConfig(t), "--cluster-cidr=10.244.0.0/16", "--v=2"}, extra...)
	return harness.StartCCM(t, harness.CCMOptions{Kubeconfig: cp.Kubeconfig, Args: args})
}

// leaseHolder returns the Lease's holder identity, "" when none.
func leaseHolder(ctx context.Context, client kubernetes.Interface) (string, error) {
	lease, err := client.CoordinationV1().Leases(leaseNamespace).Get(ctx, leaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return ptr.Deref(lease.Spec.HolderIdentity, ""), nil
}

func waitForHolder(ctx context.Context, t *testing.T, client kubernetes.Interface, timeout time.Duration, ok func(string) bool) string {
	t.Helper()
	var holder string
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, client)
		if err != nil {
			return false, err
		}
		holder = h
		return ok(h), nil
	})
	if err != nil {
		t.Fatalf("waiting for the Lease holder (last seen %q): %v", holder, err)
	}
	return holder
}

// isLeader reads leader_election_master_status from the CCM's /metrics.
func isLeader(ctx context.Context, t *testing.T, ccm *harness.CCM, token string) bool {
	t.Helper()
	status, body, err := ccm.Get(ctx, "/metrics", token)
	if err != nil || status != 200 {
		t.Fatalf("GET /metrics: %d, %v", status, err)
	}
	return regexp.MustCompile(`(?m)^leader_election_master_status\{name="cloud-controller-manager"\} 1$`).MatchString(body)
}

// logNames reports whether the CCM's log comes to hold s within a few
// seconds: a replica writes the Lease before it logs that it leads.
func logNames(ctx context.Context, ccm *harness.CCM, s string) bool {
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(ccm.Log(), s), nil
	})
	return err == nil
}

func TestServesAndLeads(t *testing.T) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	ccm := startCCM(t, cp)
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	identity := regexp.MustCompile("^" + regexp.QuoteMeta(host) + `_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	holder := waitForHolder(ctx, t, cp.Client, 30*time.Second, func(h string) bool { return h != "" })
	if !identity.MatchString(holder) {
		t.Errorf("Lease holder %q is not <hostname>_<uuid>", holder)
	}
	if !logNames(ctx, ccm, holder) {
		t.Errorf("the CCM log does not name its identity %q", holder)
	}

	// /readyz turns ready once the leader's informers have synced, which
	// may be a moment after the Lease is taken.
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		var status int
		var body string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			status, body, err = ccm.Get(ctx, path, "")
			return err == nil && status == 200, nil
		})
		if err != nil {
			t.Errorf("GET %s = %d %q; want 200 within 30s", path, status, body)
		}
	}
	status, body, err := ccm.Get(ctx, "/healthz?verbose", "")
	if err != nil || status != 200 || !strings.Contains(body, "leaderElection ok") {
		t.Errorf("GET /healthz?verbose = %d %q, %v; want the leader-election watchdog", status, body, err)
	}

	if status, _, err := ccm.Get(ctx, "/metrics", ""); err != nil || (status != 401 && status != 403) {
		t.Errorf("GET /metrics without a token = %d, %v; want 401 or 403", status, err)
	}
	token := cp.MetricsToken(ctx, t)
	status, body, err = ccm.Get(ctx, "/metrics", token)
	if err != nil || status != 200 {
		t.Fatalf("GET /metrics with an authorized token = %d, %v", status, err)
	}
	for _, family := range []string{
		`cloudprovider_api_requests_total{method="EnsureLoadBalancer",provider="fake",result="success"} 0`,
		`cloudprovider_api_request_duration_seconds_bucket{method="InstanceMetadata",provider="fake",result="success",le="0.005"}`,
		`cloudprovider_api_inflight_calls{provider="fake"} 0`,
		`cloudprovider_api_detached_calls{provider="fake"} 0`,
		`cloudprovider_api_abandoned_calls{provider="fake"} 0`,
		`leader_election_master_status{name="cloud-controller-manager"} 1`,
		`rest_client_requests_total`,
	} {
		if !strings.Contains(body, family) {
			t.Errorf("/metrics lacks %s", family)
		}
	}
}

func TestFailoverOnSIGTERM(t *testing.T) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	a := startCCM(t, cp)
	b := startCCM(t, cp)
	for _, c := range []*harness.CCM{a, b} {
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	first := waitForHolder(ctx, t, cp.Client, 30*time.Second, func(h string) bool { return h != "" })

	token := cp.MetricsToken(ctx, t)
	var leader, standby *harness.CCM
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		aLeads, bLeads := isLeader(ctx, t, a, token), isLeader(ctx, t, b, token)
		switch {
		case aLeads && !bLeads:
			leader, standby = a, b
		case bLeads && !aLeads:
			leader, standby = b, a
		default:
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("want exactly one of two replicas leading: %v", err)
	}
	if !logNames(ctx, leader, first) {
		t.Fatalf("Lease holder %q is not the replica that reports leading", first)
	}
	status, _, err := standby.Get(ctx, "/readyz", "")
	if err != nil || status != 200 {
		t.Errorf("standby /readyz = %d, %v; want 200", status, err)
	}

	start := time.Now()
	leader.Signal(syscall.SIGTERM)
	second := waitForHolder(ctx, t, cp.Client, 10*time.Second, func(h string) bool { return h != "" && h != first })
	failover := time.Since(start)
	t.Logf("failover after SIGTERM to the leader: %s", failover.Round(time.Millisecond))
	fmt.Printf("MEASURED failover_seconds=%.3f\n", failover.Seconds())
	if !logNames(ctx, standby, second) {
		t.Errorf("new holder %q is not the standby", second)
	}
	if failover > 3*time.Second {
		t.Errorf("the standby led %s after SIGTERM, want within 3s", failover)
	}

	waitCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	code, err := leader.Wait(waitCtx)
	if err != nil || code != 0 {
		t.Errorf("old leader exited with %d, %v; want 0", code, err)
	}
	if !strings.Contains(leader.Log(), "Lease released") {
		t.Errorf("old leader's log does not say it released the Lease")
	}
}

func TestLosingTheLeaseExits(t *testing.T) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	ccm := startCCM(t, cp, "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=250ms")
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	waitForHolder(ctx, t, cp.Client, 30*time.Second, func(h string) bool { return h != "" })

	// Another candidate takes the Lease: the CCM can no longer renew it.
	lease, err := cp.Client.CoordinationV1().Leases(leaseNamespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease.Spec.HolderIdentity = ptr.To("intruder")
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := cp.Client.CoordinationV1().Leases(leaseNamespace).Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stolen := time.Now()

	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	code, err := ccm.Wait(waitCtx)
	if err != nil {
		t.Fatalf("the CCM did not exit after losing the Lease: %v", err)
	}
	t.Logf("exited %s after the Lease was taken (renew deadline 2s)", time.Since(stolen).Round(time.Millisecond))
	if code == 0 {
		t.Errorf("exit code 0 after losing the Lease, want non-zero")
	}
	if !strings.Contains(ccm.Log(), "leader election lost") {
		t.Errorf("log does not say the Lease was lost")
	}
}

func TestBadInputExitsClearly(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// Nothing listens there: bad input must be reported before any contact.
	kc := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: x}}]\n"
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	badYAML := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badYAML, []byte("instances: [{name: n1, state: exploded}]\nnoSuchField: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notYAML := filepath.Join(dir, "garbage.yaml")
	if err := os.WriteFile(notYAML, []byte("{{{ not yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--kubeconfig=" + kubeconfig, "--secure-port=0"}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "no provider", args: base, want: []string{"--cloud-provider: is required", "fake"}},
		{name: "unknown provider", args: append(base, "--cloud-provider=nope"), want: []string{`unknown provider "nope"; compiled-in providers: aws, fake, openstack`}},
		{name: "unknown flag", args: append(base, "--cloud-provider=fake", "--no-such-flag"), want: []string{"unknown flag: --no-such-flag"}},
		{name: "bad values, all reported", args: append(base, "--cloud-provider=fake", "--concurrent-node-syncs=0", "--cloud-call-timeout=-1s", "--controllers=cloud-node,bogus", "--cluster-cidr=300.0.0.0/8"),
			want: []string{"--concurrent-node-syncs", "--cloud-call-timeout", `--controllers: unknown controller "bogus"`, "--cluster-cidr"}},
		{name: "unparsable value", args: append(base, "--cloud-provider=fake", "--cloud-call-timeout=soon"), want: []string{"cloud-call-timeout", "soon"}},
		{name: "missing cloud-config", args: append(base, "--cloud-provider=fake", "--cloud-config=/nonexistent/cloud.yaml"), want: []string{"--cloud-config: cannot read /nonexistent/cloud.yaml"}},
		{name: "invalid cloud-config", args: append(base, "--cloud-provider=fake", "--cloud-config="+badYAML), want: []string{"--cloud-config", "noSuchField"}},
		{name: "malformed cloud-config", args: append(base, "--cloud-provider=fake", "--cloud-config="+notYAML), want: []string{"--cloud-config"}},
		{name: "missing kubeconfig", args: []string{"--cloud-provider=fake", "--kubeconfig=/nonexistent/kubeconfig"}, want: []string{"--kubeconfig: cannot read /nonexistent/kubeconfig"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := harness.RunCCM(t, t.Context(), tt.args...)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero; output:\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not mention %q:\n%s", w, out)
				}
			}
			for _, bad := range []string{"panic(", "goroutine ", "[recovered]"} {
				if strings.Contains(out, bad) {
					t.Errorf("output contains %q (a stack trace?):\n%s", bad, out)
				}
			}
		})
	}
}

// TestUpstreamFlagsStart: the binary starts with flags from an upstream
// manifest that have no effect here, and names each in its log.
func TestUpstreamFlagsStart(t *testing.T) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	ccm := startCCM(t, cp, "--webhook-secure-port=0", "--min-resync-period=12h", "--concurrent-node-status-updates=4", "--controller-start-interval=10ms")
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatalf("%v\n%s", err, ccm.Log())
	}
	for _, flag := range []string{"--webhook-secure-port", "--min-resync-period", "--concurrent-node-status-updates"} {
		if !logNames(ctx, ccm, `"Flag has no effect in this cloud-controller-manager" flag="`+flag+`"`) {
			t.Errorf("the log does not name %s as without effect", flag)
		}
	}
	if strings.Contains(ccm.Log(), `flag="--controller-start-interval"`) {
		t.Error("--controller-start-interval, which acts, is named as without effect")
	}
}
