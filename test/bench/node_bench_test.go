//go:build bench

// Package bench runs scenarios side by side on ccmkit's controllers and on
// the upstream k8s.io/cloud-provider controllers, on one real kube-apiserver
// and a fresh fake cloud per run, and prints a table. It is built only with
// the bench tag (make bench): its figures depend on the machine.
package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	upstreamnode "k8s.io/cloud-provider/controllers/node"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/controllers/node"
	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

const taintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"

var (
	nodeCount = flag.Int("bench.nodes", 1000, "Nodes per scenario")
	hungLimit = flag.Duration("bench.hung-limit", 120*time.Second, "how long N2 runs")
)

// scenario is one node-initialisation workload.
type scenario struct {
	name    string
	latency time.Duration
	// hung is a glob of Nodes whose InstanceMetadata hangs (respecting its context).
	hung      string
	hungCount int
	// limit ends the run if it has not converged.
	limit time.Duration
}

// result is what one run measured.
type result struct {
	scenario, impl, settings string
	// converged is how many Nodes lost the taint within the limit.
	converged, total int
	// othersDone is when every Node but the hung ones was initialised (0: never).
	othersDone time.Duration
	// all is when every Node was initialised (0: not within the limit).
	all           time.Duration
	metadataCalls int
}

// implementation starts a cloud-node controller; it returns when ctx ends.
type implementation struct {
	name    string
	workers int
	run     func(ctx context.Context, client kubernetes.Interface, nodes informers.SharedInformerFactory, provider *fake.Cloud, workers int)
}

func runCCMKit(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory, provider *fake.Cloud, workers int) {
	guard := cloud.New(provider, cloud.DefaultOptions())
	defer guard.Close()
	c, err := node.New(ctx, client, factory.Core().V1().Nodes(), guard, record.NewFakeRecorder(100000), node.Config{Workers: workers, RefreshPeriod: 5 * time.Minute})
	if err != nil {
		panic(err)
	}
	factory.Start(ctx.Done())
	c.Run(ctx)
}

func runUpstream(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory, provider *fake.Cloud, workers int) {
	c, err := upstreamnode.NewCloudNodeController(factory.Core().V1().Nodes(), client, provider, 5*time.Minute, int32(workers), int32(workers))
	if err != nil {
		panic(err)
	}
	factory.Start(ctx.Done())
	c.RunWithContext(ctx, controllersmetrics.NewControllerManagerMetrics("bench"))
}

func TestNodeInitialisationBench(t *testing.T) {
	// The controllers' logs would bury the table.
	klog.SetLogger(logr.Discard())
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	n := *nodeCount

	scenarios := []scenario{
		{name: "N1", latency: 50 * time.Millisecond, limit: 10 * time.Minute},
		{name: "N2", latency: 50 * time.Millisecond, hung: "node-000?", hungCount: 10, limit: *hungLimit}, // node-0000..node-0009: 1% of 1,000
	}
	impls := []implementation{
		{name: "ccmkit", workers: 10, run: runCCMKit},
		{name: "upstream", workers: 1, run: runUpstream},
		{name: "upstream", workers: 10, run: runUpstream},
	}
	var results []result
	for _, sc := range scenarios {
		for _, impl := range impls {
			r := runScenario(ctx, t, cp.Client, sc, impl, n)
			results = append(results, r)
			fmt.Fprintf(os.Stderr, "done: %s %s %s\n", r.scenario, r.impl, r.settings)
		}
	}
	if err := printTable(os.Stdout, results); err != nil {
		t.Fatal(err)
	}
}

func runScenario(ctx context.Context, t *testing.T, client kubernetes.Interface, sc scenario, impl implementation, n int) result {
	t.Helper()
	provider, err := fake.New(&fake.Config{AutoInstances: fake.AutoInstances{Enabled: true, Type: "fake.medium", Region: "region-1", Zones: []string{"zone-a", "zone-b", "zone-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer provider.Close()
	if _, err := provider.AddFault(fake.Fault{Method: "InstanceMetadata", Latency: fake.Duration{Duration: sc.latency}}); err != nil {
		t.Fatal(err)
	}
	if sc.hung != "" {
		if _, err := provider.AddFault(fake.Fault{Method: "InstanceMetadata", Object: sc.hung, Hang: fake.HangRespectContext}); err != nil {
			t.Fatal(err)
		}
	}
	createNodes(ctx, t, client, n)

	r := result{scenario: sc.name, impl: impl.name, settings: fmt.Sprintf("workers=%d", impl.workers), total: n}
	runCtx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		impl.run(runCtx, client, factory, provider, impl.workers)
	}()
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, sc.limit, false, func(ctx context.Context) (bool, error) {
		initialised, err := countInitialised(ctx, client)
		if err != nil {
			return false, nil
		}
		r.converged = initialised
		if r.othersDone == 0 && initialised >= n-sc.hungCount {
			r.othersDone = time.Since(start)
		}
		if initialised == n {
			r.all = time.Since(start)
			return true, nil
		}
		return false, nil
	})
	cancel()
	<-done
	factory.Shutdown()
	r.metadataCalls = provider.CallCount("InstanceMetadata")
	deleteNodes(ctx, t, client)
	return r
}

// createNodes registers n Nodes the way kubelet --cloud-provider=external
// does, 20 at a time, before the controller starts.
func createNodes(ctx context.Context, t *testing.T, client kubernetes.Interface, n int) {
	t.Helper()
	names := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 20 {
		wg.Go(func() {
			for name := range names {
				_, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: taintUninitialized, Value: "true", Effect: v1.TaintEffectNoSchedule}}},
				}, metav1.CreateOptions{})
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		names <- fmt.Sprintf("node-%04d", i)
	}
	close(names)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

func deleteNodes(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	if err := client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("Nodes not deleted between runs: %v", err)
	}
}

func countInitialised(ctx context.Context, client kubernetes.Interface) (int, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	count := 0
	for _, n := range list.Items {
		if !slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == taintUninitialized }) {
			count++
		}
	}
	return count, nil
}

func printTable(w io.Writer, results []result) error {
	ccmkit := map[string]result{}
	for _, r := range results {
		if r.impl == "ccmkit" {
			ccmkit[r.scenario] = r
		}
	}
	seconds := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	ratio := func(a, b time.Duration) string {
		if a == 0 || b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1fx", a.Seconds()/b.Seconds())
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var err error
	printf := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(tw, format, args...)
		}
	}
	printf("%s\n", "scenario\timpl\tsettings\tall initialised\tall but hung\tconverged\tInstanceMetadata calls\ttime vs ccmkit")
	for _, r := range results {
		base := ccmkit[r.scenario]
		vs := ratio(r.othersDone, base.othersDone)
		if r.impl == "ccmkit" {
			vs = "1.0x"
		} else if r.othersDone == 0 {
			vs = fmt.Sprintf("did not converge (ccmkit %s)", seconds(base.othersDone))
		}
		printf("%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\n", r.scenario, r.impl, r.settings, seconds(r.all), seconds(r.othersDone), r.converged, r.total, r.metadataCalls, vs)
	}
	printf("%s\n", strings.TrimSpace(`
all initialised: time until every taint was gone; all but hung: until every Node but the hung ones was
initialised; time vs ccmkit compares "all but hung". N1: InstanceMetadata takes 50ms; N2: the same,
and 1% of the Nodes' InstanceMetadata hangs (respecting its context), run for 120s.`))
	if err != nil {
		return err
	}
	return tw.Flush()
}
