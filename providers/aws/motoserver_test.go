package aws

import (
	"bytes"
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

// The moto AWS emulator: `make test` (or `make moto`) installs moto_server
// into this virtualenv under the repository root.
const motoVenv = ".cache/venv-moto"

// motoServer is one moto_server process for the test package, started by
// the first test that needs it and stopped by TestMain.
type motoServer struct {
	url  string
	cmd  *exec.Cmd
	out  *lockedBuffer
	exit chan struct{}
}

var (
	motoOnce     sync.Once
	moto         *motoServer
	motoStartErr error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if moto != nil {
		moto.stop()
	}
	os.Exit(code)
}

// startMoto returns the package's moto server, reset to an empty cloud.
// Tests that use it do not run in parallel with each other.
func startMoto(t *testing.T) *motoServer {
	t.Helper()
	bin, err := motoBinary()
	if err != nil {
		if testing.Short() {
			t.Skipf("the moto AWS emulator is not installed (%v); `make test` installs it", err)
		}
		t.Fatalf("the moto AWS emulator is not installed: %v; `make test` (or `make moto`) installs it into %s", err, motoVenv)
	}
	motoOnce.Do(func() { moto, motoStartErr = launchMoto(bin) })
	if motoStartErr != nil {
		t.Fatalf("starting moto_server: %v", motoStartErr)
	}
	if err := moto.reset(t.Context()); err != nil {
		t.Fatalf("resetting moto: %v\nmoto_server output:\n%s", err, moto.out.String())
	}
	return moto
}

// motoBinary is moto_server in the virtualenv under the repository root,
// the directory of go.mod above this package.
func motoBinary() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
	bin := filepath.Join(dir, motoVenv, "bin", "moto_server")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no %s", bin)
	}
	return bin, nil
}

// launchMoto starts moto_server on a free loopback port and waits until it
// answers. A port taken between choosing and binding it is tried again.
func launchMoto(bin string) (*motoServer, error) {
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &motoServer{url: "http://127.0.0.1:" + strconv.Itoa(port), out: &lockedBuffer{}, exit: make(chan struct{})}
		s.cmd = exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
		s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
		if err := s.cmd.Start(); err != nil {
			return nil, err
		}
		go func() {
			_ = s.cmd.Wait()
			close(s.exit)
		}()
		if lastErr = s.waitReady(); lastErr == nil {
			return s, nil
		}
		s.stop()
		lastErr = fmt.Errorf("%w\nmoto_server output:\n%s", lastErr, s.out.String())
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

// waitReady polls moto's API until it answers, the process exits or a
// minute passes.
func (s *motoServer) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-s.exit:
			return false, errors.New("moto_server exited")
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/moto-api/", nil)
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

// reset empties every emulated service.
func (s *motoServer) reset(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/moto-api/reset", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close() //nolint:errcheck // read-only
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /moto-api/reset: %s", resp.Status)
	}
	return nil
}

// stop ends the process and waits for it. It stays in the test's process
// group, so that an interrupted test run ends it too.
func (s *motoServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exit:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exit
	}
}

// lockedBuffer is a process's output, written and read concurrently.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
