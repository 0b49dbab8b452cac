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

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	upstreamnode "k8s.io/cloud-provider/controllers/node"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/ccmkit/ccmkit/app"
	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/controllers/node"
	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

var (
	nodeCount  = flag.Int("bench.nodes", 1000, "Nodes per run (1% of them hang in N2)")
	hungWindow = flag.Duration("bench.hung-window", 120*time.Second, "how long an N2 run lasts")
	kubeQPS    = flag.Float64("bench.kube-api-qps", 1000, "client QPS of both controllers (the CCMs' --kube-api-qps default is 20)")
	kubeBurst  = flag.Int("bench.kube-api-burst", 2000, "client burst of both controllers (the CCMs' default is 30)")
)

const (
	// upstreamDefaultWorkers is upstream's --concurrent-node-syncs default.
	upstreamDefaultWorkers = 1
	// convergeLimit ends a run without hung Nodes that has not converged.
	convergeLimit = 5 * time.Minute
)

// scenario is one node-initialisation workload.
type scenario struct {
	name string
	// latency is how long every InstanceMetadata call takes.
	latency time.Duration
	// hangEvery makes the InstanceMetadata of every hangEvery-th Node hang,
	// respecting its context (0: none).
	hangEvery int
	// limit is how long a run lasts at most.
	limit time.Duration
}

// implementation is a cloud-node controller with its settings.
type implementation struct {
	name, settings string
	// comparison says which comparison the row belongs to.
	comparison string
	workers    int
	// informerOptions are those of the implementation's command.
	informerOptions []informers.SharedInformerOption
	// newController wires the controller onto the run's Node informer; the
	// returned run blocks until its context ends.
	newController func(ctx context.Context, client kubernetes.Interface, nodes coreinformers.NodeInformer, provider *fake.Cloud, workers int) (run func(context.Context), err error)
}

// TestNodeInitBench runs every scenario on each implementation, one run
// after the other on the same control plane, and prints the table.
// Subtests name the scenarios: -run 'NodeInitBench/N1' runs N1 only.
func TestNodeInitBench(t *testing.T) {
	// Verbosity 0, written nowhere: the controllers' logs would bury the table.
	klog.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(0), textlogger.Output(io.Discard))))
	cp := harness.StartControlPlane(t)
	if err := warmUp(t.Context(), cp.Client, *nodeCount); err != nil {
		t.Fatal(err)
	}

	scenarios := []scenario{
		{name: "N1", latency: 50 * time.Millisecond, limit: convergeLimit},
		{name: "N2", latency: 50 * time.Millisecond, hangEvery: 100, limit: *hungWindow},
	}
	ccmkitWorkers := int(app.NewOptions().ConcurrentNodeSyncs)
	impls := []implementation{
		{
			name: "ccmkit", settings: fmt.Sprintf("workers=%d, guard defaults", ccmkitWorkers), comparison: "baseline",
			workers: ccmkitWorkers, newController: newCCMKit,
			informerOptions: []informers.SharedInformerOption{informers.WithTransform(app.StripUnused)},
		},
		{
			name: "upstream", settings: fmt.Sprintf("workers=%d", upstreamDefaultWorkers), comparison: "a: defaults",
			workers: upstreamDefaultWorkers, newController: newUpstream,
		},
		{
			name: "upstream", settings: fmt.Sprintf("workers=%d", ccmkitWorkers), comparison: "b: equal workers",
			workers: ccmkitWorkers, newController: newUpstream,
		},
	}

	var results []result
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, impl := range impls {
				r, err := runOnce(t.Context(), cp, sc, impl, *nodeCount)
				if err != nil {
					t.Fatalf("%s %s %s: %v", sc.name, impl.name, impl.settings, err)
				}
				t.Logf("%s %s %s: %s", sc.name, impl.name, impl.settings, r.summary())
				results = append(results, r)
			}
		})
	}
	if err := printTable(os.Stdout, results, *nodeCount, *kubeQPS, *hungWindow); err != nil {
		t.Fatal(err)
	}
}

// newCCMKit wires ccmkit's controller as the command does: behind a guard
// with the default options, Events recorded to the apiserver.
func newCCMKit(ctx context.Context, client kubernetes.Interface, nodes coreinformers.NodeInformer, provider *fake.Cloud, workers int) (func(context.Context), error) {
	guard := cloud.New(provider, cloud.DefaultOptions())
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "cloud-node-controller"})
	c, err := node.New(ctx, client, nodes, guard, recorder, node.Config{
		Workers:       workers,
		RefreshPeriod: app.NewOptions().NodeStatusUpdateFrequency,
	})
	if err != nil {
		guard.Close()
		broadcaster.Shutdown()
		return nil, fmt.Errorf("creating ccmkit's cloud-node controller: %w", err)
	}
	return func(ctx context.Context) {
		defer guard.Close()
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		c.Run(ctx)
	}, nil
}

// upstreamMetrics is what the upstream command passes to its controllers.
var upstreamMetrics = controllersmetrics.NewControllerManagerMetrics("cloud-controller-manager")

// newUpstream wires upstream's controller as k8s.io/cloud-provider/app does:
// the raw provider, --concurrent-node-status-updates defaulting to
// --concurrent-node-syncs, and the default --node-status-update-frequency.
func newUpstream(_ context.Context, client kubernetes.Interface, nodes coreinformers.NodeInformer, provider *fake.Cloud, workers int) (func(context.Context), error) {
	c, err := upstreamnode.NewCloudNodeController(nodes, client, provider, 5*time.Minute, int32(workers), int32(workers))
	if err != nil {
		return nil, fmt.Errorf("creating upstream's cloud node controller: %w", err)
	}
	// Run returns when stopCh closes; the context it gives its calls (and so
	// every hung InstanceMetadata) ends then too.
	return func(ctx context.Context) { c.Run(ctx.Done(), upstreamMetrics) }, nil
}
