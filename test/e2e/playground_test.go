package e2e

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ccmkit/ccmkit/test/harness"
)

// TestMakeRun runs `make run` as a newcomer would, non-interactive: the
// simulated Nodes get initialised from the fake cloud and the demo Service
// gets an address; an interrupt stops it, and nothing of it keeps running.
func TestMakeRun(t *testing.T) {
	run := startMakeRun(t, 2)
	ctx := t.Context()
	dir := run.dir
	for _, want := range []string{"export KUBECONFIG=" + filepath.Join(dir, "kubeconfig"), "kubectl get nodes -L topology.kubernetes.io/zone", "kubectl get svc", "curl -X POST http://127.0.0.1:", "/faults", "Logs: " + dir} {
		if !strings.Contains(run.out.String(), want) {
			t.Errorf("the guide does not say %q", want)
		}
	}

	nodes, err := run.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 2 {
		t.Errorf("%d Nodes, want 2", len(nodes.Items))
	}
	for _, n := range nodes.Items {
		if !strings.HasPrefix(n.Spec.ProviderID, "fake://") || n.Labels[v1.LabelTopologyZone] == "" ||
			slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == taintUninitialized }) {
			t.Errorf("Node %s not initialised: providerID %q labels %v taints %v", n.Name, n.Spec.ProviderID, n.Labels, n.Spec.Taints)
		}
	}
	svc, err := run.client.CoreV1().Services("default").Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ing := svc.Status.LoadBalancer.Ingress; len(ing) != 1 || net.ParseIP(ing[0].IP) == nil {
		t.Errorf("demo Service ingress = %v, want one IP", ing)
	}

	pid, err := os.ReadFile(filepath.Join(dir, "playground.pid"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-run.done:
		if run.err != nil {
			t.Errorf("make run after the interrupt: %v", run.err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("make run did not stop within 2 minutes of the interrupt")
	}
	if !strings.Contains(run.out.String(), "nothing left running") {
		t.Errorf("no final word that everything stopped")
	}
	if left := processesNaming(dir); len(left) > 0 {
		t.Errorf("processes left running after the stop: %v", left)
	}
}

// TestPlaygroundInstanceLifecycle: the guide's lines that stop, start and
// delete an instance through the fake cloud's admin API do what they say.
// A stopped instance's Node goes NotReady (Ready Unknown, as
// kube-controller-manager marks a Node whose kubelet stopped posting status)
// and ccmkit gives it the shutdown taint; started again, it is Ready and the
// taint goes; a deleted instance's Node is deleted. The CCM's periods are
// shortened with the playground's arguments after --.
func TestPlaygroundInstanceLifecycle(t *testing.T) {
	run := startMakeRun(t, 2, "--", "--node-monitor-period=1s", "--node-deletion-grace-period=2s")
	cp := &harness.ControlPlane{Client: run.client}
	stop := run.admin + "/instances/playground-node-1/stop"
	start := run.admin + "/instances/playground-node-1/start"
	remove := run.admin + "/instances/playground-node-2"
	for _, want := range []string{"curl -X POST " + stop + " ", "curl -X POST " + start + " ", "curl -X DELETE " + remove + " "} {
		if !strings.Contains(run.out.String(), want) {
			t.Errorf("the guide does not say %q", want)
		}
	}

	adminRequest(t, http.MethodPost, stop)
	n := waitNode(t, cp, "playground-node-1", "NotReady with the shutdown taint", func(n *v1.Node) bool {
		return readyCondition(n).Status == v1.ConditionUnknown && hasTaint(n, taintShutdown)
	})
	if c := readyCondition(n); c.Reason != "NodeStatusUnknown" || c.Message != "Kubelet stopped posting node status." {
		t.Errorf("Ready condition of the stopped Node: reason %q message %q, want kube-controller-manager's NodeStatusUnknown", c.Reason, c.Message)
	}

	adminRequest(t, http.MethodPost, start)
	waitNode(t, cp, "playground-node-1", "Ready without the shutdown taint", func(n *v1.Node) bool {
		return readyCondition(n).Status == v1.ConditionTrue && !hasTaint(n, taintShutdown)
	})

	adminRequest(t, http.MethodDelete, remove)
	waitNodeGone(t, cp, "playground-node-2")
	if _, err := run.client.CoreV1().Nodes().Get(t.Context(), "playground-node-1", metav1.GetOptions{}); err != nil {
		t.Errorf("the Node of the running instance: %v", err)
	}
}

const taintShutdown = "node.cloudprovider.kubernetes.io/shutdown"

func hasTaint(n *v1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == key })
}

// readyCondition returns the Node's Ready condition, a zero one if it has none.
func readyCondition(n *v1.Node) v1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c
		}
	}
	return v1.NodeCondition{}
}

// adminRequest sends a body-less request to the fake cloud's admin API and
// fails the test unless it succeeds.
func adminRequest(t *testing.T, method, url string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s", method, url, resp.Status)
	}
}

// makeRun is a `make run` started by a test.
type makeRun struct {
	dir string
	// admin is the URL of the fake cloud's admin API.
	admin  string
	out    *lockedBuffer
	client kubernetes.Interface
	// done is closed when make run has exited, with err.
	done chan struct{}
	err  error
}

// startMakeRun runs `make run` with nodes Nodes, non-interactive, on free
// ports, with args added to its RUN_FLAGS, and waits until it prints its
// guide. Cleanup stops it and, when the test failed, logs its output.
func startMakeRun(t *testing.T, nodes int, args ...string) *makeRun {
	t.Helper()
	harness.BuildCCM(t) // skips with -short; make run builds its own binary
	root := repoRoot(t)
	adminPort := freePort(t)
	run := &makeRun{
		dir:   t.TempDir(),
		admin: "http://127.0.0.1:" + strconv.Itoa(adminPort),
		out:   &lockedBuffer{},
		done:  make(chan struct{}),
	}
	flags := append([]string{"-non-interactive", "-dir", run.dir, "-ccm-port", strconv.Itoa(freePort(t)), "-admin-port", strconv.Itoa(adminPort)}, args...)
	cmd := exec.Command("make", "-s", "-C", root, "run", "NODES="+strconv.Itoa(nodes), "RUN_FLAGS="+strings.Join(flags, " "))
	cmd.Stdout, cmd.Stderr = run.out, run.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		run.err = cmd.Wait()
		close(run.done)
	}()
	t.Cleanup(func() {
		select {
		case <-run.done:
		default:
			_ = exec.Command(filepath.Join(root, "bin", "playground"), "-down", "-dir", run.dir).Run()
			<-run.done
			t.Logf("make run stopped: %v", run.err)
		}
		if t.Failed() {
			t.Logf("make run output:\n%s", run.out)
			for _, log := range []string{"ccm.log", "kwok.log"} {
				if b, err := os.ReadFile(filepath.Join(run.dir, log)); err == nil {
					t.Logf("%s:\n%s", log, tail(string(b), 40))
				}
			}
		}
	})

	// make builds the binaries first (testbin is already there).
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-run.done:
			return false, errors.Join(errors.New("make run exited early"), run.err)
		default:
		}
		return strings.Contains(run.out.String(), "ccmkit is running"), nil
	})
	if err != nil {
		t.Fatalf("make run did not come up: %v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(run.dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	run.client, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// TestMakeRunPortTaken: a taken port is a clear error before anything starts.
func TestMakeRunPortTaken(t *testing.T) {
	harness.BuildCCM(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	port := ln.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "make", "-s", "-C", repoRoot(t), "run",
		"RUN_FLAGS=-non-interactive -dir "+dir+" -ccm-port "+strconv.Itoa(port)+" -admin-port "+strconv.Itoa(freePort(t)))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make run with a taken port succeeded:\n%s", out)
	}
	if want := "-ccm-port: port " + strconv.Itoa(port) + " on 127.0.0.1 is taken"; !strings.Contains(string(out), want) {
		t.Errorf("output does not say %q:\n%s", want, out)
	}
	if left := processesNaming(dir); len(left) > 0 {
		t.Errorf("processes left running: %v", left)
	}
}

// processesNaming lists the processes whose command line names dir.
func processesNaming(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), dir+"/") {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod in %s: %v", dir, err)
	}
	return dir
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

func tail(s string, lines int) string {
	all := strings.Split(s, "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// lockedBuffer is a strings.Builder that a subprocess's output and the
// test use at the same time.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
