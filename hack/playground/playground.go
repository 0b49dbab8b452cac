package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ccmkit/ccmkit/providers/fake"
)

const (
	// kwokAnnotation marks the Nodes that kwok keeps Ready.
	kwokAnnotation = "kwok.x-k8s.io/node"
	// kubeletAnnotation, set to kubeletStopped, stops the simulated kubelet
	// of a Node: kwok's stages (kwok.yaml) then stop its heartbeat and set
	// its Ready condition to Unknown.
	kubeletAnnotation = "playground.ccmkit.io/kubelet"
	kubeletStopped    = "stopped"
	// followPeriod is how often the Nodes' kubelets are matched to their
	// instances in the fake cloud.
	followPeriod = time.Second
	// taintUninitialized is how kubelet --cloud-provider=external registers a Node.
	taintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"
	// stopGrace is how long a process gets between SIGTERM and SIGKILL.
	stopGrace = 10 * time.Second
	// waitLimit bounds each wait of the start-up.
	waitLimit   = 3 * time.Minute
	clusterCIDR = "10.244.0.0/16"
	demoService = "demo"
)

// playground is one run.
type playground struct {
	opts       options
	out        io.Writer
	prog       *progress
	env        *envtest.Environment
	client     kubernetes.Interface
	kubeconfig string
	procs      []*process
	// stopFollowing stops the loop of followInstances and waits for it.
	stopFollowing func()
	// logHint tells where to look when the start-up fails.
	logHint string
}

// process is a child process with its log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

func newPlayground(opts options, out io.Writer) *playground {
	return &playground{opts: opts, out: out, prog: &progress{w: out, plain: opts.NonInteractive}}
}

func (p *playground) path(name string) string { return filepath.Join(p.opts.Dir, name) }

func (p *playground) say(format string, args ...any) {
	p.prog.done()
	_, _ = fmt.Fprintf(p.out, format+"\n", args...)
}

// up starts everything and waits until the Nodes are initialised and the
// demo Service has an address.
func (p *playground) up(ctx context.Context) error {
	// A fresh state: the previous run's etcd data and logs go.
	if err := os.RemoveAll(p.opts.Dir); err != nil {
		return err
	}
	if err := os.MkdirAll(p.opts.Dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p.path("playground.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	p.logHint = "Logs: " + p.opts.Dir

	p.say("Starting kube-apiserver and etcd (control-plane.log)")
	if err := p.startControlPlane(ctx); err != nil {
		return err
	}
	p.say("Creating %d Nodes as kubelet --cloud-provider=external registers them, kept Ready by kwok (kwok.log)", p.opts.Nodes)
	if err := p.createNodes(ctx); err != nil {
		return err
	}
	if err := p.start(ctx, "kwok", filepath.Join(p.opts.TestBin, "kwok"),
		"--kubeconfig="+p.kubeconfig, "--config="+p.opts.KwokConfig,
		"--manage-nodes-with-annotation-selector="+kwokAnnotation+"=fake",
		"--server-address=127.0.0.1:"+strconv.Itoa(freePort()),
	); err != nil {
		return err
	}
	p.say("Starting ccmkit with the fake cloud, leader election on (ccm.log)")
	if err := p.startCCM(ctx); err != nil {
		return err
	}
	p.say("Creating the LoadBalancer Service default/%s", demoService)
	if err := p.createDemoService(ctx); err != nil {
		return err
	}
	if err := p.waitConverged(ctx); err != nil {
		return err
	}
	p.followInstances(ctx)
	return nil
}

func (p *playground) startControlPlane(ctx context.Context) error {
	ctrllog.SetLogger(klog.Background())
	klog.SetOutput(io.Discard)
	log, err := os.Create(p.path("control-plane.log"))
	if err != nil {
		return err
	}
	p.env = &envtest.Environment{
		BinaryAssetsDirectory:    p.opts.TestBin,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  stopGrace,
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Path: filepath.Join(p.opts.TestBin, "kube-apiserver"), CertDir: p.path("apiserver"), Out: log, Err: log},
			Etcd:      &envtest.Etcd{Path: filepath.Join(p.opts.TestBin, "etcd"), DataDir: p.path("etcd"), Out: log, Err: log},
		},
	}
	p.env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", "127.0.0.1")
	for _, d := range []string{p.path("apiserver"), p.path("etcd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	started := make(chan error, 1)
	go func() {
		cfg, err := p.env.Start()
		if err == nil {
			p.client, err = kubernetes.NewForConfig(cfg)
		}
		started <- err
	}()
	select {
	case err = <-started:
	case <-ctx.Done():
		// envtest cannot be interrupted; down stops what it started.
		return errors.Join(ctx.Err(), <-started)
	}
	if err != nil {
		return fmt.Errorf("starting kube-apiserver and etcd: %w (see %s)", err, p.path("control-plane.log"))
	}
	p.kubeconfig = p.path("kubeconfig")
	return os.WriteFile(p.kubeconfig, p.env.KubeConfig, 0o600)
}

// createNodes registers the Nodes as the kubelet does with an external
// cloud provider: the uninitialized taint, no providerID. Each gets a pod
// CIDR, as node IPAM would give it, so that routes are made too.
func (p *playground) createNodes(ctx context.Context) error {
	for i := range p.opts.Nodes {
		cidr := fmt.Sprintf("10.244.%d.0/24", i)
		node := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        fmt.Sprintf("playground-node-%d", i+1),
				Annotations: map[string]string{kwokAnnotation: "fake"},
				Labels:      map[string]string{"type": "kwok", v1.LabelHostname: fmt.Sprintf("playground-node-%d", i+1)},
			},
			Spec: v1.NodeSpec{
				PodCIDR:  cidr,
				PodCIDRs: []string{cidr},
				Taints:   []v1.Taint{{Key: taintUninitialized, Value: "true", Effect: v1.TaintEffectNoSchedule}},
			},
		}
		if _, err := p.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Node %s: %w", node.Name, err)
		}
	}
	return nil
}

func (p *playground) startCCM(ctx context.Context) error {
	config := fmt.Sprintf(`# The fake cloud of the playground.
autoInstances: {enabled: true, type: fake.medium, region: region-1, zones: [zone-a, zone-b, zone-c]}
loadBalancers: {vipCIDR: 192.0.2.0/24}
adminAddress: 127.0.0.1:%d
`, p.opts.AdminPort)
	if err := os.WriteFile(p.path("fake-cloud.yaml"), []byte(config), 0o644); err != nil {
		return err
	}
	args := append([]string{
		"--cloud-provider=fake", "--cloud-config=" + p.path("fake-cloud.yaml"),
		"--kubeconfig=" + p.kubeconfig, "--authentication-kubeconfig=" + p.kubeconfig, "--authorization-kubeconfig=" + p.kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(p.opts.CCMPort),
		"--cluster-cidr=" + clusterCIDR, "--leader-elect=true", "--v=2",
	}, p.opts.CCMArgs...)
	if err := p.start(ctx, "ccm", p.opts.CCM, args...); err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// The CCM serves a self-signed certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probe
	}}
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", p.opts.CCMPort)
	return p.waitFor(ctx, func(ctx context.Context) (string, bool, error) {
		if err := p.exited("ccm"); err != nil {
			return "", false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "waiting for ccmkit's /healthz", false, nil
		}
		_ = resp.Body.Close()
		return "waiting for ccmkit's /healthz: " + resp.Status, resp.StatusCode == http.StatusOK, nil
	})
}

func (p *playground) createDemoService(ctx context.Context) error {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: demoService, Namespace: metav1.NamespaceDefault},
		Spec: v1.ServiceSpec{
			Type:     v1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": demoService},
			Ports:    []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	_, err := p.client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Service %s: %w", demoService, err)
	}
	return nil
}

// waitConverged waits until every Node is initialised (taint gone,
// providerID set) and the demo Service has an ingress address.
func (p *playground) waitConverged(ctx context.Context) error {
	return p.waitFor(ctx, func(ctx context.Context) (string, bool, error) {
		if err := p.exited("ccm", "kwok"); err != nil {
			return "", false, err
		}
		nodes, err := p.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", false, err
		}
		initialised, ready := 0, 0
		for _, n := range nodes.Items {
			if n.Spec.ProviderID != "" && !slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == taintUninitialized }) {
				initialised++
			}
			if slices.ContainsFunc(n.Status.Conditions, func(c v1.NodeCondition) bool { return c.Type == v1.NodeReady && c.Status == v1.ConditionTrue }) {
				ready++
			}
		}
		svc, err := p.client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, demoService, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		ip := "none yet"
		if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 {
			ip = ing[0].IP
		}
		msg := fmt.Sprintf("waiting: Nodes initialised %d/%d, Ready %d/%d; Service %s ingress: %s", initialised, p.opts.Nodes, ready, p.opts.Nodes, demoService, ip)
		return msg, initialised == p.opts.Nodes && ready == p.opts.Nodes && ip != "none yet", nil
	})
}

// followInstances starts a loop that keeps every Node's simulated kubelet
// in step with its instance in the fake cloud, as a real kubelet stops with
// its machine; down stops it. It prints what it changes, and an error once.
func (p *playground) followInstances(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	p.stopFollowing = func() {
		cancel()
		<-done
	}
	client := &http.Client{Timeout: 2 * time.Second}
	go func() {
		defer close(done)
		var lastErr string
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			msg := ""
			if err := p.syncKubelets(ctx, client); err != nil && ctx.Err() == nil {
				msg = err.Error()
			}
			if msg != "" && msg != lastErr {
				_, _ = fmt.Fprintf(p.out, "  following the fake cloud's instances: %s\n", msg)
			}
			lastErr = msg
		}, followPeriod)
	}()
}

// syncKubelets stops the simulated kubelet of every initialised Node whose
// instance is stopped, terminated or gone from the fake cloud, and starts it
// again when the instance runs. kwok's stages (kwok.yaml) do the rest: a
// Node whose kubelet is stopped gets no heartbeat and its Ready condition
// goes Unknown, as kube-controller-manager marks a Node whose kubelet stopped
// posting status; started again, it is Ready.
func (p *playground) syncKubelets(ctx context.Context, client *http.Client) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/instances", p.opts.AdminPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var instances []fake.Instance
	if err := json.NewDecoder(resp.Body).Decode(&instances); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	states := make(map[string]string, len(instances))
	for _, in := range instances {
		states[in.ID] = in.State
	}

	nodes, err := p.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range nodes.Items {
		id, ok := strings.CutPrefix(n.Spec.ProviderID, fake.ProviderName+"://")
		if !ok {
			// Not initialised: ccmkit has not looked its instance up yet.
			continue
		}
		state, ok := states[id]
		if !ok {
			state = "gone"
		}
		stop := state != fake.StateRunning
		if stop == (n.Annotations[kubeletAnnotation] == kubeletStopped) {
			continue
		}
		var value any // null removes the annotation
		msg := fmt.Sprintf("%s: instance running; its kubelet posts status again (Ready)", n.Name)
		if stop {
			value = kubeletStopped
			msg = fmt.Sprintf("%s: instance %s; its kubelet stops posting status (Ready Unknown)", n.Name, state)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{kubeletAnnotation: value}}})
		if err != nil {
			return err
		}
		_, err = p.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			errs = append(errs, fmt.Errorf("annotating Node %s: %w", n.Name, err))
		default:
			_, _ = fmt.Fprintln(p.out, "  "+msg)
		}
	}
	return errors.Join(errs...)
}

// waitFor polls check, showing its message as progress, until it is done,
// fails, or waitLimit passes.
func (p *playground) waitFor(ctx context.Context, check func(context.Context) (string, bool, error)) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, waitLimit, true, func(ctx context.Context) (bool, error) {
		msg, done, err := check(ctx)
		if err != nil {
			return false, err
		}
		last = msg
		p.prog.update(msg)
		return done, nil
	})
	p.prog.done()
	if err != nil && ctx.Err() == nil && last != "" {
		return fmt.Errorf("%s: %w", last, err)
	}
	return err
}

// start runs a child process with its output in <name>.log. Children are
// in their own process group, so that Ctrl-C reaches only the playground,
// which stops them in order; they die with it if it is killed.
func (p *playground) start(ctx context.Context, name, bin string, args ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	log, err := os.Create(p.path(name + ".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	proc := &process{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(proc.done)
	}()
	p.procs = append(p.procs, proc)
	return nil
}

// exited returns an error when one of the named processes has exited.
func (p *playground) exited(names ...string) error {
	for _, proc := range p.procs {
		if !slices.Contains(names, proc.name) {
			continue
		}
		select {
		case <-proc.done:
			return fmt.Errorf("%s exited: %v (see %s)", proc.name, proc.cmd.ProcessState, p.path(proc.name+".log"))
		default:
		}
	}
	return nil
}

// down stops the children, last started first (ccmkit releases its Lease
// while the apiserver still runs), then the control plane.
func (p *playground) down(ctx context.Context) error {
	if p.stopFollowing != nil {
		p.stopFollowing()
	}
	var errs []error
	for _, proc := range slices.Backward(p.procs) {
		if err := stopProcess(ctx, proc); err != nil {
			errs = append(errs, err)
		}
		_ = proc.log.Close()
	}
	if p.env != nil {
		if err := p.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping kube-apiserver and etcd: %w", err))
		}
	}
	// Anything still holding the run directory is a leftover.
	for _, pid := range processesUsing(p.opts.Dir) {
		errs = append(errs, fmt.Errorf("process %d still runs after the stop", pid))
	}
	if len(errs) == 0 {
		_ = os.Remove(p.path("playground.pid"))
	}
	return errors.Join(errs...)
}

func stopProcess(ctx context.Context, proc *process) error {
	select {
	case <-proc.done:
		return nil
	default:
	}
	_ = proc.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-proc.done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	_ = proc.cmd.Process.Kill()
	<-proc.done
	return nil
}

// stopRun stops a run in the background: it signals the playground, waits
// for it to stop what it started, and kills whatever is left of the run.
func stopRun(dir string, out io.Writer) error {
	if pid, ok := runningPID(dir); ok {
		_, _ = fmt.Fprintf(out, "Stopping the playground (pid %d)\n", pid)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
			return syscall.Kill(pid, 0) != nil, nil
		})
	}
	left := processesUsing(dir)
	for _, pid := range left {
		_, _ = fmt.Fprintf(out, "Killing leftover process %d\n", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = os.Remove(filepath.Join(dir, "playground.pid"))
	_, _ = fmt.Fprintln(out, "Nothing of the playground is running")
	return nil
}

// runningPID returns the pid of a live playground using dir.
func runningPID(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "playground.pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid == os.Getpid() {
		return 0, false
	}
	return pid, syscall.Kill(pid, 0) == nil
}

// processesUsing lists the processes (other than this one) whose command
// line names dir: the children of a run all do.
func processesUsing(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(cmdline), dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// portFree reports an error when the TCP port is taken on 127.0.0.1.
func portFree(port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return ln.Close()
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

func (p *playground) printGuide() {
	admin := fmt.Sprintf("http://127.0.0.1:%d", p.opts.AdminPort)
	last := fmt.Sprintf("playground-node-%d", p.opts.Nodes)
	_, _ = fmt.Fprintf(p.out, `
ccmkit is running: %d Nodes initialised from the fake cloud, Service default/%s has an address.

  export KUBECONFIG=%s
  kubectl get nodes -L topology.kubernetes.io/zone -L node.kubernetes.io/instance-type
  kubectl get svc %s
  kubectl get events -A --field-selector source=service-controller

The fake cloud's admin API is at %s. A Node's kubelet stops and starts with its
instance; ccmkit checks the NotReady Nodes every %s (--node-monitor-period):
  curl -X POST %s/instances/playground-node-1/stop     # NotReady, then the shutdown taint
  curl -X POST %s/instances/playground-node-1/start    # Ready again, the taint goes
  curl -X DELETE %s/instances/%-24s # NotReady, then the Node is deleted once its instance has been gone %s
  kubectl get nodes -o custom-columns='NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,TAINTS:.spec.taints[*].key'
  curl -X POST %s/faults -d '{"method":"EnsureLoadBalancer","latency":"5s"}'   # slow load balancers
  curl %s/loadbalancers

ccmkit's health and metrics: https://127.0.0.1:%d/healthz
Logs: %s/{ccm,kwok,control-plane}.log
Ctrl-C stops everything (or make run-down from another shell).
`, p.opts.Nodes, demoService, p.kubeconfig, demoService,
		admin, p.opts.ccmFlag("node-monitor-period", ccmNodeMonitorPeriod),
		admin, admin, admin, last, p.opts.ccmFlag("node-deletion-grace-period", ccmNodeDeletionGracePeriod),
		admin, admin, p.opts.CCMPort, p.opts.Dir)
}
