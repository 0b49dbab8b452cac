// Command playground runs ccmkit on one machine with nothing installed
// beforehand: a local kube-apiserver and etcd, Nodes registered as a
// kubelet with --cloud-provider=external registers them and kept Ready by
// kwok while their instance in the fake cloud runs, the
// cloud-controller-manager with the fake cloud, and a demo LoadBalancer
// Service. `make run` starts it; Ctrl-C stops everything it
// started; `make run-down` stops a run left in the background.
//
//	playground [-nodes 3] [-dir .cache/run] [-non-interactive] [-- cloud-controller-manager flags]
//	playground -down [-dir .cache/run]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run())
}

func run() int {
	opts := defaultOptions()
	flag.IntVar(&opts.Nodes, "nodes", opts.Nodes, "Nodes to simulate")
	flag.StringVar(&opts.Dir, "dir", opts.Dir, "directory for the kubeconfig, logs and state of the run")
	flag.StringVar(&opts.TestBin, "testbin", opts.TestBin, "directory of kube-apiserver, etcd and kwok")
	flag.StringVar(&opts.CCM, "ccm", opts.CCM, "the cloud-controller-manager binary")
	flag.IntVar(&opts.CCMPort, "ccm-port", opts.CCMPort, "secure port of the cloud-controller-manager (on 127.0.0.1)")
	flag.IntVar(&opts.AdminPort, "admin-port", opts.AdminPort, "port of the fake cloud's admin API (on 127.0.0.1)")
	flag.StringVar(&opts.KwokConfig, "kwok-config", opts.KwokConfig, "kwok's stages")
	flag.BoolVar(&opts.NonInteractive, "non-interactive", opts.NonInteractive, "print progress as plain lines")
	down := flag.Bool("down", false, "stop the run whose state is in -dir, and exit")
	flag.Usage = func() {
		_, _ = fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags] [-- cloud-controller-manager flags]\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	opts.CCMArgs = flag.Args()

	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "playground:", err)
		return 1
	}
	opts.Dir = dir
	if *down {
		if err := stopRun(opts.Dir, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "playground:", err)
			return 1
		}
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := opts.check(); err != nil {
		fmt.Fprintln(os.Stderr, "playground:", err)
		return 1
	}
	p := newPlayground(opts, os.Stdout)
	err = p.up(ctx)
	if err == nil {
		p.printGuide()
		<-ctx.Done()
		p.say("Stopping")
	}
	downCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if derr := p.down(downCtx); derr != nil {
		err = errors.Join(err, derr)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "playground:", err)
		if p.logHint != "" {
			fmt.Fprintln(os.Stderr, p.logHint)
		}
		return 1
	}
	p.say("Stopped; nothing left running")
	return 0
}

// options configure a run.
type options struct {
	Nodes          int
	Dir            string
	TestBin        string
	CCM            string
	CCMPort        int
	AdminPort      int
	NonInteractive bool
	KwokConfig     string
	// CCMArgs are added to the cloud-controller-manager's flags (after
	// the playground's own, so they win).
	CCMArgs []string
}

func defaultOptions() options {
	return options{
		Nodes:      3,
		Dir:        filepath.Join(".cache", "run"),
		TestBin:    filepath.Join(".cache", "testbin"),
		CCM:        filepath.Join("bin", "cloud-controller-manager"),
		CCMPort:    10258,
		AdminPort:  8081,
		KwokConfig: filepath.Join("hack", "playground", "kwok.yaml"),
	}
}

// check reports bad options and missing binaries before anything starts.
func (o options) check() error {
	var errs []error
	if o.Nodes < 1 || o.Nodes > 250 {
		errs = append(errs, fmt.Errorf("-nodes (NODES=): %d, want 1 to 250", o.Nodes))
	}
	for _, bin := range []string{filepath.Join(o.TestBin, "kube-apiserver"), filepath.Join(o.TestBin, "etcd"), filepath.Join(o.TestBin, "kwok"), o.CCM, o.KwokConfig} {
		if _, err := os.Stat(bin); err != nil {
			errs = append(errs, fmt.Errorf("%s is missing (make testbin build): %w", bin, errors.Unwrap(err)))
		}
	}
	for _, p := range []struct {
		flag string
		port int
	}{{"-ccm-port", o.CCMPort}, {"-admin-port", o.AdminPort}} {
		if err := portFree(p.port); err != nil {
			errs = append(errs, fmt.Errorf("%s: port %d on 127.0.0.1 is taken (%w); stop what uses it, or choose another port", p.flag, p.port, err))
		}
	}
	if pid, ok := runningPID(o.Dir); ok {
		errs = append(errs, fmt.Errorf("a run (pid %d) is already using %s; stop it with make run-down", pid, o.Dir))
	}
	return errors.Join(errs...)
}

// Defaults of the cloud-controller-manager that the guide names; a test
// keeps them equal to app.NewOptions().
const (
	ccmNodeMonitorPeriod       = 5 * time.Second
	ccmNodeDeletionGracePeriod = 30 * time.Second
)

// ccmFlag returns the value that CCMArgs give the cloud-controller-manager
// flag --name (the last one wins), or def, its default.
func (o options) ccmFlag(name string, def time.Duration) string {
	value := def.String()
	for i, arg := range o.CCMArgs {
		if v, ok := strings.CutPrefix(arg, "--"+name+"="); ok {
			value = v
		} else if arg == "--"+name && i+1 < len(o.CCMArgs) {
			value = o.CCMArgs[i+1]
		}
	}
	return value
}

// progress writes a line that the next one replaces on a terminal, or
// plain lines.
type progress struct {
	w     io.Writer
	plain bool
	last  string
}

func (p *progress) update(msg string) {
	if msg == p.last {
		return
	}
	p.last = msg
	if p.plain {
		_, _ = fmt.Fprintln(p.w, "  "+msg)
		return
	}
	_, _ = fmt.Fprintf(p.w, "\r\033[K  %s", msg)
}

func (p *progress) done() {
	if !p.plain && p.last != "" {
		_, _ = fmt.Fprintln(p.w)
	}
	p.last = ""
}
