package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrNotHeld is returned by Lease.Held when this process cannot prove that
// it still holds the Lease.
var ErrNotHeld = errors.New("this process cannot prove it still holds the Lease")

// Lease is this process's hold on the Lease, as far as it can prove it: it
// holds the Lease until LeaseDuration after the start of its last
// successful write of it (acquiring or renewing). Another candidate counts
// the duration from when it saw that write, which is later, so while Held
// passes no other candidate can have taken the Lease, whatever happened to
// this process meanwhile: paused, partitioned from the apiserver, starved
// of CPU. The bound is checked on both the monotonic and the wall clock, so
// a suspended machine, whose monotonic clock stands still, is caught too.
//
// client-go's elector gives up leading only when a renewal fails for
// RenewDeadline, which a process that was paused learns only after it runs
// again; Held is what every write checks in the meantime.
type Lease struct {
	duration time.Duration

	mu    sync.Mutex
	from  time.Time // start of the last successful write; monotonic
	until time.Time // from + duration
	lost  chan struct{}
	once  sync.Once
}

func newLease(duration time.Duration) *Lease {
	return &Lease{duration: duration, lost: make(chan struct{})}
}

// Held returns nil while this process can prove it holds the Lease, and
// an error wrapping ErrNotHeld otherwise. Once it has failed after the
// Lease was held, the leader stops: Run returns ErrLost.
func (l *Lease) Held() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	from, until := l.from, l.until
	l.mu.Unlock()
	now := time.Now()
	// Round(0) drops the monotonic reading: the second test is on the wall clock.
	if now.Before(until) && now.Round(0).Before(until.Round(0)) {
		return nil
	}
	if from.IsZero() {
		return fmt.Errorf("%w: it has not acquired it", ErrNotHeld)
	}
	l.once.Do(func() { close(l.lost) })
	return fmt.Errorf("%w: its last renewal started %s ago, and the Lease lasts %s", ErrNotHeld, now.Sub(from).Round(time.Millisecond), l.duration)
}

// expiry returns when the hold ends as far as known now.
func (l *Lease) expiry() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// wrote records a write of the Lease that started at start.
func (l *Lease) wrote(start time.Time, ours bool, err error) {
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ours {
		// Released: nothing is held from now on.
		l.until = time.Time{}
		return
	}
	l.from, l.until = start, start.Add(l.duration)
}

// watch calls stop as soon as the hold can no longer be proven, whether a
// writer's Held found it or the hold simply ran out; it returns when ctx
// is done.
func (l *Lease) watch(ctx context.Context, stop func()) {
	for {
		t := time.NewTimer(time.Until(l.expiry()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-l.lost:
			t.Stop()
			stop()
			return
		case <-t.C:
			if l.Held() != nil {
				stop()
				return
			}
		}
	}
}

// recordingLock is a resource lock that tells lease of its successful
// writes, and that never releases a Lease it last read as another's.
//
// client-go's release reads the Lease, which brings the lock's
// resourceVersion up to date, but then decides whether it leads by the
// record it observed before: a leader that was paused while another took
// over would overwrite the new holder's Lease with an empty one, and a
// third candidate could then take it while the new holder still leads.
type recordingLock struct {
	resourcelock.Interface
	lease *Lease

	mu   sync.Mutex
	read string // the holder of the Lease as last read
}

func (r *recordingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := r.Interface.Get(ctx)
	if err == nil && rec != nil {
		r.mu.Lock()
		r.read = rec.HolderIdentity
		r.mu.Unlock()
	}
	return rec, raw, err
}

func (r *recordingLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	start := time.Now()
	err := r.Interface.Create(ctx, ler)
	r.lease.wrote(start, ler.HolderIdentity == r.Identity(), err)
	return err
}

func (r *recordingLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity != r.Identity() {
		r.mu.Lock()
		read := r.read
		r.mu.Unlock()
		if read != r.Identity() {
			return fmt.Errorf("not releasing the Lease: it was last read held by %q", read)
		}
	}
	start := time.Now()
	err := r.Interface.Update(ctx, ler)
	r.lease.wrote(start, ler.HolderIdentity == r.Identity(), err)
	if err == nil {
		r.mu.Lock()
		r.read = ler.HolderIdentity
		r.mu.Unlock()
	}
	return err
}
