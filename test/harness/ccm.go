package harness

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	// ccmPackage is the main package that BuildCCM builds.
	ccmPackage = "./cmd/cloud-controller-manager"
	// ccmBinary is the name of the -race build under <repo>/.cache/bin.
	ccmBinary = "cloud-controller-manager-race"

	// stopGracePeriod is how long t.Cleanup waits after SIGTERM before SIGKILL.
	stopGracePeriod = 10 * time.Second
	// defaultWaitTimeout bounds Wait and RunCCM when the context has no deadline.
	defaultWaitTimeout = 30 * time.Second
	// defaultHealthyTimeout bounds WaitHealthy when the context has no deadline:
	// a -race build takes a while to start and sync its informers.
	defaultHealthyTimeout = 60 * time.Second
)

var ccmBuild struct {
	once sync.Once
	path string
	err  error
}

// BuildCCM builds ./cmd/cloud-controller-manager with -race into
// <repo>/.cache/bin, once per test process, and returns the binary's path. A
// build failure fails the test with the compiler's output.
func BuildCCM(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the cloud-controller-manager binary; make test runs it (skipped with -short)")
	}
	ccmBuild.once.Do(func() { ccmBuild.path, ccmBuild.err = buildCCM() })
	if ccmBuild.err != nil {
		t.Fatal(ccmBuild.err)
	}
	return ccmBuild.path
}

// buildCCM builds into a directory of its own and renames the result into
// place, so that test processes of several packages building at once never
// run or overwrite a half-written binary.
func buildCCM() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	binDir := filepath.Join(root, ".cache", "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", binDir, err)
	}
	tmpDir, err := os.MkdirTemp(binDir, "build-")
	if err != nil {
		return "", fmt.Errorf("creating a build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmpDir) }()

	built := filepath.Join(tmpDir, ccmBinary)
	cmd := exec.Command("go", "build", "-race", "-o", built, ccmPackage)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -race %s: %w\n%s", ccmPackage, err, out)
	}
	path := filepath.Join(binDir, ccmBinary)
	if err := os.Rename(built, path); err != nil {
		return "", fmt.Errorf("moving the cloud-controller-manager binary into place: %w", err)
	}
	return path, nil
}

// CCMOptions configures a cloud-controller-manager started by StartCCM.
type CCMOptions struct {
	// Binary is the program to start; empty: the cloud-controller-manager
	// that BuildCCM builds.
	Binary string
	// Kubeconfig is passed as --kubeconfig, --authentication-kubeconfig and
	// --authorization-kubeconfig, unless Args sets them.
	Kubeconfig string
	// Args are extra flags. A flag set here replaces the one the harness
	// would add (--secure-port, --bind-address, --cert-dir, the kubeconfigs).
	Args []string
	// Env holds extra KEY=value entries for the process environment, which
	// otherwise is the test's.
	Env []string
}

// CCM is a cloud-controller-manager subprocess started by StartCCM.
type CCM struct {
	t      testing.TB
	cmd    *exec.Cmd
	port   int
	out    *syncBuffer
	client *http.Client

	done    chan struct{} // closed once the process has exited
	waitErr error         // what cmd.Wait returned; read only after done is closed
}

// StartCCM builds (once) and starts the cloud-controller-manager with the
// harness flags and opts. The process is stopped in t.Cleanup (SIGTERM, then
// SIGKILL after 10s), and the test's output gets its log if the test failed.
func StartCCM(t testing.TB, opts CCMOptions) *CCM {
	t.Helper()
	binary := opts.Binary
	if binary == "" {
		binary = BuildCCM(t)
	}
	return startCCM(t, binary, opts, stopGracePeriod)
}

func startCCM(t testing.TB, binary string, opts CCMOptions, grace time.Duration) *CCM {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	args := harnessArgs(opts.Args, opts.Kubeconfig, port, t.TempDir())
	if p, ok := flagValue(args, "secure-port"); ok {
		port, _ = strconv.Atoi(p) // 0 (serving off) for a value that is no port
	}

	c := &CCM{
		t:    t,
		cmd:  exec.Command(binary, args...),
		port: port,
		out:  &syncBuffer{},
		client: &http.Client{Transport: &http.Transport{
			// The CCM serves with a self-signed certificate from --cert-dir.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		}},
		done: make(chan struct{}),
	}
	c.cmd.Env = append(os.Environ(), opts.Env...)
	c.cmd.Stdout = c.out
	c.cmd.Stderr = c.out
	// Never hang on a grandchild that keeps the output pipe open.
	c.cmd.WaitDelay = time.Second
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", binary, err)
	}
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.stop(grace)
		c.client.CloseIdleConnections()
		if t.Failed() {
			t.Logf("cloud-controller-manager %v (pid %d) %s; its log:\n%s", args, c.PID(), c.exitStatus(), c.Log())
		}
	})
	return c
}

// harnessArgs returns args plus each harness flag that args does not set.
func harnessArgs(args []string, kubeconfig string, port int, certDir string) []string {
	defaults := [][2]string{
		{"secure-port", strconv.Itoa(port)},
		{"bind-address", "127.0.0.1"},
		{"cert-dir", certDir},
	}
	if kubeconfig != "" {
		for _, name := range []string{"kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig"} {
			defaults = append(defaults, [2]string{name, kubeconfig})
		}
	}
	var out []string
	for _, d := range defaults {
		if _, ok := flagValue(args, d[0]); !ok {
			out = append(out, "--"+d[0]+"="+d[1])
		}
	}
	return append(out, args...)
}

// flagValue returns the value of the last --name=value, --name value, -name=value
// or -name value in args.
func flagValue(args []string, name string) (value string, found bool) {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			break
		}
		trimmed := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
		if trimmed == arg {
			continue // not a flag
		}
		key, val, hasValue := strings.Cut(trimmed, "=")
		if key != name {
			continue
		}
		found = true
		switch {
		case hasValue:
			value = val
		case i+1 < len(args):
			i++
			value = args[i]
		default:
			value = ""
		}
	}
	return value, found
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("releasing port %d: %w", port, err)
	}
	return port, nil
}

// Port returns the secure port that the CCM serves on.
func (c *CCM) Port() int { return c.port }

// PID returns the process id of the CCM.
func (c *CCM) PID() int { return c.cmd.Process.Pid }

// Log returns what the CCM has written to stdout and stderr so far.
func (c *CCM) Log() string { return c.out.String() }

// Signal sends sig to the CCM. Signalling a CCM that has already exited does
// nothing: Wait tells how it exited.
func (c *CCM) Signal(sig os.Signal) {
	if err := c.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.t.Errorf("sending %v to cloud-controller-manager (pid %d): %v", sig, c.PID(), err)
	}
}

// Wait waits until the CCM exits and returns its exit code, which is -1 when
// a signal killed it. It returns an error when ctx ends first; without a
// deadline in ctx it waits 30s at most.
func (c *CCM) Wait(ctx context.Context) (exitCode int, err error) {
	ctx, cancel := withDefaultTimeout(ctx, defaultWaitTimeout)
	defer cancel()
	select {
	case <-c.done:
		return c.exitCode()
	case <-ctx.Done():
		return -1, fmt.Errorf("waiting for cloud-controller-manager (pid %d) to exit: %w", c.PID(), ctx.Err())
	}
}

// exited reports whether the process has exited.
func (c *CCM) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// exitCode must only be called once done is closed.
func (c *CCM) exitCode() (int, error) {
	var exitErr *exec.ExitError
	if c.waitErr != nil && !errors.As(c.waitErr, &exitErr) {
		return -1, fmt.Errorf("waiting for cloud-controller-manager (pid %d): %w", c.PID(), c.waitErr)
	}
	return c.cmd.ProcessState.ExitCode(), nil
}

// exitStatus describes the process state for the log dump.
func (c *CCM) exitStatus() string {
	if !c.exited() {
		return "still running"
	}
	return "exited: " + c.cmd.ProcessState.String()
}

// stop ends the process if it still runs: SIGTERM, and SIGKILL after grace.
func (c *CCM) stop(grace time.Duration) {
	if c.exited() {
		return
	}
	c.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return
	case <-time.After(grace):
	}
	c.t.Logf("cloud-controller-manager (pid %d) still runs %v after SIGTERM; killing it", c.PID(), grace)
	if err := c.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.t.Errorf("killing cloud-controller-manager (pid %d): %v", c.PID(), err)
	}
	<-c.done
}

// WaitHealthy polls https://127.0.0.1:<port>/healthz until it answers 200. It
// returns an error when ctx ends first (without a deadline in ctx, after 60s)
// or when the CCM exits.
func (c *CCM) WaitHealthy(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx, defaultHealthyTimeout)
	defer cancel()
	var lastStatus int
	var lastBody string
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if c.exited() {
			return false, fmt.Errorf("cloud-controller-manager %s before it became healthy", c.exitStatus())
		}
		lastStatus, lastBody, lastErr = c.Get(ctx, "/healthz", "")
		return lastStatus == http.StatusOK, nil
	})
	switch {
	case err == nil:
		return nil
	case lastErr != nil:
		return fmt.Errorf("waiting for /healthz on port %d: %w (last error: %w)", c.port, err, lastErr)
	default:
		return fmt.Errorf("waiting for /healthz on port %d: %w (last answer: %d %q)", c.port, err, lastStatus, lastBody)
	}
}

// Get sends GET https://127.0.0.1:<port><path> to the CCM, with the bearer
// token unless it is empty, and returns the status code and the body.
func (c *CCM) Get(ctx context.Context, path, bearerToken string) (status int, body string, err error) {
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", fmt.Errorf("building a request for %s: %w", url, err)
	}
	if bearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+bearerToken)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("GET %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, string(b), fmt.Errorf("reading the body of GET %s: %w", url, err)
	}
	return resp.StatusCode, string(b), nil
}

// RunCCM runs the cloud-controller-manager with exactly args (no harness
// flags) for a test that expects it to exit at once, as on a bad flag, and
// returns its exit code and its combined stdout and stderr. It fails the test
// if the process is still running when ctx ends (without a deadline in ctx,
// after 30s).
func RunCCM(t testing.TB, ctx context.Context, args ...string) (exitCode int, output string) {
	t.Helper()
	return runCCM(t, ctx, BuildCCM(t), args...)
}

func runCCM(t testing.TB, ctx context.Context, binary string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := withDefaultTimeout(ctx, defaultWaitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("cloud-controller-manager %v did not exit in time: %v\noutput:\n%s", args, ctx.Err(), out)
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("running cloud-controller-manager %v: %v\noutput:\n%s", args, err, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}
