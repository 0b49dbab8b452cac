package awstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// MotoVenv is where `make moto` installs moto_server, relative to the
// repository root.
const MotoVenv = ".cache/venv-moto"

const (
	// motoStartTimeout bounds the wait for a new moto_server to answer.
	motoStartTimeout = time.Minute
	// motoStopTimeout is how long StopMoto waits after SIGTERM before
	// SIGKILL.
	motoStopTimeout = 10 * time.Second
)

// Moto is a moto_server process: every AWS API the provider calls, on
// one loopback port.
type Moto struct {
	// URL is the base URL of every emulated service, http://127.0.0.1:<port>.
	URL string

	cmd  *exec.Cmd
	out  *lockedBuffer
	exit chan struct{} // closed once the process has exited
}

// shared is the test binary's one moto server.
var shared struct {
	once sync.Once
	moto *Moto
	err  error
}

// StartMoto returns the test binary's moto server, reset to an empty
// cloud. The first call starts it; TestMain stops it with StopMoto once
// the tests have run. Tests that use it must not run in parallel with
// each other.
//
// A missing moto install fails the test, naming `make moto`; under
// -short it skips the test instead.
func StartMoto(t testing.TB) *Moto {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return startMoto(t, root)
}

// startMoto is StartMoto with moto_server under the repository root.
func startMoto(t testing.TB, root string) *Moto {
	t.Helper()
	bin, err := motoBinary(root)
	if err != nil {
		if testing.Short() {
			t.Skipf("the moto AWS emulator is not installed (%v); `make moto` installs it (skipped with -short)", err)
		}
		t.Fatalf("the moto AWS emulator is not installed: %v; `make moto` (or `make test`) installs it", err)
	}
	shared.once.Do(func() { shared.moto, shared.err = launchMoto(bin) })
	if shared.err != nil {
		t.Fatalf("starting moto_server: %v", shared.err)
	}
	if err := shared.moto.Reset(t.Context()); err != nil {
		t.Fatalf("resetting moto: %v\nmoto_server output:\n%s", err, shared.moto.Log())
	}
	return shared.moto
}

// StopMoto stops the server that StartMoto started, if any. Call it from
// TestMain after m.Run.
func StopMoto() {
	if shared.moto != nil {
		shared.moto.stop()
	}
}

// Reset empties every emulated service.
func (m *Moto) Reset(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL+"/moto-api/reset", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("POST /moto-api/reset: %w", err)
	}
	defer resp.Body.Close() //nolint:errcheck // read-only
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /moto-api/reset: %s", resp.Status)
	}
	return nil
}

// Log is what moto_server has printed so far.
func (m *Moto) Log() string { return m.out.String() }

// repoRoot is the directory of the go.mod above the working directory,
// which go test sets to the directory of the package under test.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the repository root: no go.mod above the test's directory")
		}
		dir = parent
	}
}

// motoBinary is moto_server in the virtualenv under root.
func motoBinary(root string) (string, error) {
	bin := filepath.Join(root, MotoVenv, "bin", "moto_server")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no %s", bin)
	}
	return bin, nil
}

// launchMoto starts moto_server on a free loopback port and waits until
// it answers. A port taken between choosing and binding it is tried
// again.
func launchMoto(bin string) (*Moto, error) {
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		m := &Moto{URL: "http://127.0.0.1:" + strconv.Itoa(port), out: &lockedBuffer{}, exit: make(chan struct{})}
		// The process stays in the test's process group, so that an
		// interrupted test run ends it too.
		m.cmd = exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
		m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
		if err := m.cmd.Start(); err != nil {
			return nil, err
		}
		go func() {
			_ = m.cmd.Wait()
			close(m.exit)
		}()
		if lastErr = m.waitReady(); lastErr == nil {
			return m, nil
		}
		m.stop()
		lastErr = fmt.Errorf("%w\nmoto_server output:\n%s", lastErr, m.Log())
	}
	return nil, lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close() //nolint:errcheck // only its port is wanted
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls moto's API until it answers, the process exits or
// motoStartTimeout passes.
func (m *Moto) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), motoStartTimeout)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-m.exit:
			return false, errors.New("moto_server exited")
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL+"/moto-api/", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// stop ends the process, SIGKILL after motoStopTimeout, and waits for it.
func (m *Moto) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exit:
	case <-time.After(motoStopTimeout):
		_ = m.cmd.Process.Kill()
		<-m.exit
	}
}

// lockedBuffer is a process's output, written and read concurrently.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
