//go:build bench

package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/ccmkit/ccmkit/app"
	"github.com/ccmkit/ccmkit/test/harness"
)

var (
	s5Services = flag.Int("bench.s5-services", 2000, "LoadBalancer Services of S5")
	s5Nodes    = flag.Int("bench.s5-nodes", 500, "initialised Nodes of S5")
)

// upstreamKubeAPIQPS and upstreamKubeAPIBurst are upstream's
// --kube-api-qps and --kube-api-burst defaults.
const (
	upstreamKubeAPIQPS   = 20
	upstreamKubeAPIBurst = 30
)

// TestServiceScaleBench (S5) creates s5Services Services on s5Nodes Nodes
// and measures how long until every one has an ingress, with each
// implementation's client at its command's default rate limit: the
// apiserver client, not the cloud, bounds this scenario.
func TestServiceScaleBench(t *testing.T) {
	klog.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(0), textlogger.Output(io.Discard))))
	n := *s5Services
	if n < 1 || n > serviceMaxServices {
		t.Fatalf("-bench.s5-services=%d: must be in [1, %d]", n, serviceMaxServices)
	}
	cp := harness.StartControlPlane(t)
	if err := setUpServices(t.Context(), cp.Client); err != nil {
		t.Fatal(err)
	}
	opts := app.NewOptions()
	workers := int(opts.ConcurrentServiceSyncs)
	withRate := func(impl serviceImpl, qps float32, burst int) serviceImpl {
		impl.qps, impl.burst = qps, burst
		return impl
	}
	impls := []serviceImpl{
		withRate(upstreamServiceImpl("upstream", workers), upstreamKubeAPIQPS, upstreamKubeAPIBurst),
		withRate(ccmkitServiceImpl("ccmkit at upstream's rate", opts), upstreamKubeAPIQPS, upstreamKubeAPIBurst),
		withRate(ccmkitServiceImpl("ccmkit", opts), opts.KubeAPIQPS, int(opts.KubeAPIBurst)),
	}
	results := map[string]serviceResult{}
	for _, impl := range impls {
		r, err := runServiceScale(t.Context(), cp, impl)
		if err != nil {
			t.Fatalf("S5 %s: %v", impl.name, err)
		}
		t.Logf("S5 %s: %s", impl.name, r.summary())
		results[impl.name] = r
	}

	rows := [][]string{{"S5", "client QPS/burst", fmt.Sprintf("%d Services on %d Nodes: all have an ingress in", n, *s5Nodes), "upstream / this"}}
	up := results["upstream"]
	for _, impl := range impls {
		r := results[impl.name]
		rows = append(rows, []string{impl.name, fmt.Sprintf("%g/%d", impl.qps, impl.burst), serviceSeconds(r.converged), serviceTimeRatio(up, r)})
	}
	if err := writeRows(os.Stdout, rows); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("\nS5: both run %d workers; EnsureLoadBalancer takes %s; Services created by %d clients at once, times from the first create.\n",
		workers, *serviceCallLatency, serviceCreators)
	fmt.Printf("MEASURED s5_ccmkit_seconds=%.1f s5_upstream_seconds=%.1f\n", results["ccmkit"].converged.Seconds(), up.converged.Seconds())
}

// runServiceScale is S1 at S5's size, on s5Nodes Nodes.
func runServiceScale(ctx context.Context, cp *harness.ControlPlane, impl serviceImpl) (serviceResult, error) {
	base := *serviceBaseNodes
	*serviceBaseNodes = *s5Nodes
	defer func() { *serviceBaseNodes = base }()
	return convergeServices(ctx, cp, impl, *s5Services, 10*time.Minute)
}
