//go:build bench

package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/ccmkit/ccmkit/app"
	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

var (
	s4Services = flag.Int("bench.s4-services", 200, "LoadBalancer Services of each S4 run")
	s4Window   = flag.Duration("bench.s4-window", 60*time.Second, "longest an S4 run waits for the healthy Services")
	s4Slow     = flag.Duration("bench.s4-slow", 25*time.Second, "how long a slow EnsureLoadBalancer of S4 takes")
)

// s4Variant is one share of hung or slow EnsureLoadBalancer calls.
type s4Variant struct {
	name       string
	hung, slow int // Services whose EnsureLoadBalancer hangs, or is slow
}

// s4Result is one run: when the healthy Services all had an ingress.
type s4Result struct {
	healthy int
	done    time.Duration // from the first create; 0: not within the window
}

// TestServiceHungShareBench (S4) measures how long the Services whose
// EnsureLoadBalancer is healthy take to converge beside Services whose
// call hangs (until its context ends) or is slow, at several shares,
// against the same run with every call healthy. ccmkit and upstream run
// with the same number of workers.
func TestServiceHungShareBench(t *testing.T) {
	klog.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(0), textlogger.Output(io.Discard))))
	n := *s4Services
	if n < 20 || n > serviceMaxServices {
		t.Fatalf("-bench.s4-services=%d: must be in [20, %d]", n, serviceMaxServices)
	}
	cp := harness.StartControlPlane(t)
	if err := setUpServices(t.Context(), cp.Client); err != nil {
		t.Fatal(err)
	}
	opts := app.NewOptions()
	workers := int(opts.ConcurrentServiceSyncs)
	impls := []serviceImpl{upstreamServiceImpl("upstream", workers), ccmkitServiceImpl("ccmkit", opts)}
	variants := []s4Variant{
		{name: "none"},
		{name: "5% hung", hung: n / 20},
		{name: "10% hung", hung: n / 10},
		{name: "50% hung", hung: n / 2},
		{name: "10% slow", slow: n / 10},
	}
	// A discarded run warms the apiserver and etcd up.
	if _, err := runServiceHungShare(t.Context(), cp, impls[0], variants[0]); err != nil {
		t.Fatalf("warming up: %v", err)
	}
	results := map[string]map[string]s4Result{}
	for _, v := range variants {
		results[v.name] = map[string]s4Result{}
		for _, impl := range impls {
			r, err := runServiceHungShare(t.Context(), cp, impl, v)
			if err != nil {
				t.Fatalf("S4 %s %s: %v", v.name, impl.name, err)
			}
			t.Logf("S4 %s %s: %d healthy Services with an ingress in %s", v.name, impl.name, r.healthy, serviceSeconds(r.done))
			results[v.name][impl.name] = r
		}
	}
	if err := printS4Table(os.Stdout, variants, results, workers, opts); err != nil {
		t.Fatal(err)
	}
}

// runServiceHungShare starts the controller on a cloud where v's Services
// hang or are slow, creates the Services and waits until every other one
// has an ingress, or the window passes.
func runServiceHungShare(ctx context.Context, cp *harness.ControlPlane, impl serviceImpl, v s4Variant) (r s4Result, err error) {
	n := *s4Services
	// Hung Services are spread evenly; slow ones too, offset by one.
	hung := serviceHungNames(n, v.hung)
	var slow []string
	var extra []fake.Fault
	if v.slow > 0 {
		step := n / v.slow
		for k := range v.slow {
			name := serviceName(k * step)
			slow = append(slow, name)
			extra = append(extra, fake.Fault{Method: "EnsureLoadBalancer", Object: serviceNamespace + "/" + name, Latency: fake.Duration{Duration: *s4Slow}})
		}
	}
	excluded := append(append([]string(nil), hung...), slow...)
	r.healthy = n - len(excluded)
	run, err := startServiceRun(ctx, cp, impl, hung, extra...)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, run.stop(ctx)) }()
	start := time.Now()
	if err := run.createServices(ctx, 0, n); err != nil {
		return r, err
	}
	err = wait.PollUntilContextTimeout(ctx, servicePollInterval, *s4Window, true, func(context.Context) (bool, error) {
		_, _, done := run.ingress.summary(n, excluded, start)
		return done > 0, nil
	})
	if ctx.Err() != nil {
		return r, err
	}
	_, _, r.done = run.ingress.summary(n, excluded, start)
	return r, nil
}

// printS4Table prints, per share, each implementation's time for the
// healthy Services and its ratio to its own run with every call healthy.
func printS4Table(w io.Writer, variants []s4Variant, results map[string]map[string]s4Result, workers int, opts *app.Options) error {
	rows := [][]string{{"S4: hung or slow share", "healthy Services", fmt.Sprintf("upstream (workers=%d)", workers), "vs none",
		fmt.Sprintf("ccmkit (workers=%d)", workers), "vs none", "upstream / ccmkit"}}
	base := results["none"]
	vsBase := func(r, b s4Result) string {
		switch {
		case r.done == 0:
			return fmt.Sprintf(">%.1fx", s4Window.Seconds()/b.done.Seconds())
		case b.done == 0:
			return "-"
		default:
			return fmt.Sprintf("%.2fx", r.done.Seconds()/b.done.Seconds())
		}
	}
	cell := func(r s4Result) string {
		if r.done == 0 {
			return "not within " + s4Window.String()
		}
		return serviceSeconds(r.done)
	}
	for _, v := range variants {
		up, ccm := results[v.name]["upstream"], results[v.name]["ccmkit"]
		ratio := "-"
		switch {
		case ccm.done == 0:
		case up.done == 0:
			ratio = fmt.Sprintf(">%.1fx", s4Window.Seconds()/ccm.done.Seconds())
		default:
			ratio = fmt.Sprintf("%.2fx", up.done.Seconds()/ccm.done.Seconds())
		}
		rows = append(rows, []string{v.name, fmt.Sprint(up.healthy), cell(up), vsBase(up, base["upstream"]), cell(ccm), vsBase(ccm, base["ccmkit"]), ratio})
		fmt.Printf("MEASURED s4_%s_ccmkit_vs_none=%s\n", strings.ReplaceAll(strings.ReplaceAll(v.name, "% ", "pct_"), " ", "_"), vsBase(ccm, base["ccmkit"]))
	}
	if err := writeRows(w, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, `
S4: %d Services created by %d clients at once; a healthy EnsureLoadBalancer takes %s; a hung one hangs until its
context ends, a slow one takes %s. Time from the first create until every healthy Service has an ingress, at most
%s. Both run %d workers; ccmkit with its guard defaults (detach after %s). "vs none": the time over the same
implementation's run with every call healthy (">": not within the window).
`, *s4Services, serviceCreators, *serviceCallLatency, *s4Slow, *s4Window, workers, opts.Cloud.DetachAfter)
	if err != nil {
		return fmt.Errorf("printing the table: %w", err)
	}
	return nil
}
