package leaderelection

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/test/harness"
)

// candidate is one Run in this process, with what its lead function saw.
type candidate struct {
	name     string
	cancel   context.CancelFunc
	started  chan struct{} // lead began
	returned chan struct{} // lead returned
	done     chan error    // Run's result
}

func startCandidate(ctx context.Context, t *testing.T, client kubernetes.Interface, name string, timing Config) *candidate {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	c := &candidate{name: name, cancel: cancel, started: make(chan struct{}), returned: make(chan struct{}), done: make(chan error, 1)}
	cfg := timing
	cfg.Client, cfg.Namespace, cfg.Name, cfg.Identity = client, "kube-system", "test-lease", name
	var once sync.Once
	go func() {
		c.done <- Run(ctx, cfg, func(ctx context.Context, _ *Lease) {
			once.Do(func() { close(c.started) })
			<-ctx.Done()
			close(c.returned)
		})
	}()
	t.Cleanup(cancel)
	return c
}

func holder(ctx context.Context, client kubernetes.Interface) string {
	lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "test-lease", metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %s", what, d)
	}
}

func TestHandOverAndLoss(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cp := harness.StartControlPlane(t)
	// The default timings: the hand-over must not depend on the retry period.
	timing := Config{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, StopTimeout: 5 * time.Second}

	a := startCandidate(ctx, t, cp.Client, "a", timing)
	within(t, a.started, 30*time.Second, "the first candidate leads")
	if h := holder(ctx, cp.Client); h != "a" {
		t.Fatalf("Lease holder %q, want a", h)
	}
	b := startCandidate(ctx, t, cp.Client, "b", timing)
	select {
	case <-b.started:
		t.Fatal("a second candidate leads while the first holds the Lease")
	case <-time.After(3 * time.Second):
	}

	// Shutdown of the leader: its work stops, then the Lease goes to b.
	start := time.Now()
	a.cancel()
	within(t, b.started, 10*time.Second, "the standby leads after the leader's shutdown")
	t.Logf("hand-over took %s (retry period %s)", time.Since(start).Round(time.Millisecond), timing.RetryPeriod)
	select {
	case <-a.returned:
	default:
		t.Error("the standby led before the old leader's work had stopped")
	}
	if err := <-a.done; err != nil {
		t.Errorf("Run after shutdown = %v, want nil", err)
	}
	if h := holder(ctx, cp.Client); h != "b" {
		t.Errorf("Lease holder %q, want b", h)
	}

	// Loss: another holder takes the Lease; b stops and Run says so.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		lease, err := cp.Client.CoordinationV1().Leases("kube-system").Get(ctx, "test-lease", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		lease.Spec.HolderIdentity = ptr.To("intruder")
		lease.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		_, err = cp.Client.CoordinationV1().Leases("kube-system").Update(ctx, lease, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-b.done:
		if !errors.Is(err, ErrLost) {
			t.Errorf("Run after losing the Lease = %v, want ErrLost", err)
		}
	case <-time.After(timing.RenewDeadline + 5*time.Second):
		t.Fatal("Run did not return after the Lease was lost")
	}
	within(t, b.returned, time.Second, "the lost leader's work stops")
}

func TestNewIdentity(t *testing.T) {
	id, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	rest, ok := strings.CutPrefix(id, host+"_")
	if !ok {
		t.Fatalf("identity %q does not start with %q", id, host+"_")
	}
	if _, err := uuid.Parse(rest); err != nil {
		t.Errorf("identity %q does not end in a uuid: %v", id, err)
	}
	if other, _ := NewIdentity(); other == id {
		t.Errorf("two identities are equal: %q", id)
	}
}
