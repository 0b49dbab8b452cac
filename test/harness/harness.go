// Package harness starts what the integration and e2e tests run against: a
// real kube-apiserver and etcd (controller-runtime's envtest, with the binaries
// that `make testbin` builds into .cache/testbin) and the cloud-controller-manager
// binary as a subprocess.
//
// Everything is stopped in t.Cleanup, in the reverse order of starting: start
// the control plane first, so that the CCM stops before it. A missing binary
// fails the test (it never skips), and a failed test gets the CCM's log in its
// output.
package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// repoRoot returns the directory of the ccmkit go.mod, found by walking up
// from this package's source directory (or, in a -trimpath build, from the
// working directory, which `go test` sets to the package under test).
func repoRoot() (string, error) {
	start, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		start = filepath.Dir(file)
	}
	for dir := start; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if parent := filepath.Dir(dir); parent == dir {
			return "", fmt.Errorf("no go.mod above %s", start)
		}
	}
}

// withDefaultTimeout bounds ctx by d unless it already has a deadline, so that
// no wait in the harness can hang a test until the go test timeout.
func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// syncBuffer is a bytes.Buffer that a subprocess's output pipes and a test
// can use at the same time.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
