package leaderelection

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// stubLock is a resource lock whose writes succeed or fail as told, and
// whose Get shows holder.
type stubLock struct {
	resourcelock.Interface
	fail    error
	holder  string
	updates int
}

func (s *stubLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: s.holder}, []byte(s.holder), nil
}

func (s *stubLock) Identity() string { return "me" }
func (s *stubLock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	return s.fail
}
func (s *stubLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	s.updates++
	return s.fail
}

func TestLeaseHeldOnlyWithinItsDurationOfTheLastWrite(t *testing.T) {
	const duration = 200 * time.Millisecond
	lease := newLease(duration)
	lock := &recordingLock{Interface: &stubLock{}, lease: lease}
	if err := lease.Held(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("before acquiring: %v, want ErrNotHeld", err)
	}

	before := time.Now()
	if err := lock.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if err := lease.Held(); err != nil && time.Since(before) < duration {
		t.Fatalf("right after acquiring: %v", err)
	}
	until := lease.expiry()
	if until.Before(before.Add(duration)) || until.After(after.Add(duration)) {
		t.Errorf("held until %s after the test's write began, want the duration from the start of the write (%s)", until.Sub(before), duration)
	}

	// A failed renewal does not extend the hold.
	lock.Interface.(*stubLock).fail = errors.New("conflict")
	_ = lock.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
	if got := lease.expiry(); !got.Equal(until) {
		t.Errorf("a failed write moved the hold's end by %s", got.Sub(until))
	}

	select {
	case <-lease.lost:
		t.Fatal("lost before anything found the hold gone")
	default:
	}
	stopped := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go lease.watch(ctx, func() { close(stopped) })
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not stop the leader when the hold ran out")
	}
	if err := lease.Held(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("past the duration: %v, want ErrNotHeld", err)
	}
}

func TestLeaseRenewalsExtendAndReleaseEnds(t *testing.T) {
	lease := newLease(time.Hour)
	lock := &recordingLock{Interface: &stubLock{}, lease: lease}
	ctx := context.Background()
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
		t.Fatal(err)
	}
	if err := lease.Held(); err != nil {
		t.Fatalf("after a renewal: %v", err)
	}
	// Writing another holder (the release on shutdown) ends the hold.
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: ""}); err != nil {
		t.Fatal(err)
	}
	if err := lease.Held(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("after the release: %v, want ErrNotHeld", err)
	}
}

func TestNilLeaseIsAlwaysHeld(t *testing.T) {
	var lease *Lease
	if err := lease.Held(); err != nil {
		t.Fatalf("without leader election: %v", err)
	}
}

// TestNoReleaseOfAnotherHoldersLease: a release after a read that shows
// another holder is refused without a write, whatever the elector
// observed before.
func TestNoReleaseOfAnotherHoldersLease(t *testing.T) {
	ctx := context.Background()
	stub := &stubLock{}
	lock := &recordingLock{Interface: stub, lease: newLease(time.Hour)}
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
		t.Fatal(err)
	}
	stub.holder = "other"
	if _, _, err := lock.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{}); err == nil {
		t.Fatal("released a Lease last read as another's")
	}
	if stub.updates != 1 {
		t.Errorf("%d writes reached the apiserver, want 1 (the renewal)", stub.updates)
	}
	stub.holder = "me"
	if _, _, err := lock.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil {
		t.Fatalf("releasing its own Lease: %v", err)
	}
}
