// Package leaderelection runs a function only while this process holds a
// coordination.k8s.io/v1 Lease, hands the Lease over promptly on shutdown and
// exits at once when it is lost.
//
// Beyond client-go's LeaderElector it watches the Lease, so a standby takes a
// released Lease within moments instead of at its next retry (up to
// 2.2 x --leader-elect-retry-period later); it stops the leader's work
// before it releases the Lease; and it gives the leader a Lease whose Held
// tells, before every write, whether the hold can still be proven, so a
// leader that was paused past the Lease's duration never acts again.
package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	// Registers leader_election_master_status with the legacy registry.
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection"
)

// ErrLost is returned by Run when the Lease was lost while leading.
var ErrLost = errors.New("leader election lost")

// Config is what Run needs.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Identity is this candidate's holder identity; NewIdentity makes one.
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// WatchDog, if set, fails its health check when the leader has not
	// renewed the Lease in time.
	WatchDog *leaderelection.HealthzAdaptor
	// StopTimeout bounds how long Run waits, on shutdown, for lead to return
	// before it releases the Lease.
	StopTimeout time.Duration
}

// NewIdentity returns "<hostname>_<uuid>".
func NewIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("getting hostname for the leader-election identity: %w", err)
	}
	return host + "_" + uuid.NewString(), nil
}

// NewWatchDog returns the health check of the leader's renewals; it fails
// when the leader is more than timeout past its last renewal.
func NewWatchDog(timeout time.Duration) *leaderelection.HealthzAdaptor {
	return leaderelection.NewLeaderHealthzAdaptor(timeout)
}

// Run campaigns for the Lease until ctx is done. While leading it runs lead
// with a context that ends when ctx ends or the Lease is lost, and the
// Lease, whose Held lead's writers check. On shutdown (ctx done) it waits
// for lead to return, releases the Lease and returns nil; when the Lease is
// lost, or its hold can no longer be proven, it returns ErrLost at once.
func Run(ctx context.Context, cfg Config, lead func(ctx context.Context, lease *Lease)) error {
	logger := klog.FromContext(ctx).WithName("leaderelection")
	released := watchReleases(ctx, cfg)
	lease := newLease(cfg.LeaseDuration)
	for {
		led, err := campaign(ctx, cfg, lease, lead, released)
		switch {
		case err != nil:
			return err
		case led && ctx.Err() == nil:
			logger.Info("Leader election lost", "lease", klog.KRef(cfg.Namespace, cfg.Name), "identity", cfg.Identity)
			return ErrLost
		case ctx.Err() != nil:
			return nil
		}
		logger.V(2).Info("Lease released by its holder, trying to acquire it now", "lease", klog.KRef(cfg.Namespace, cfg.Name))
	}
}

// campaign runs one LeaderElector until it stops leading, ctx ends, or
// (while not leading) the Lease is seen released. It reports whether it led.
func campaign(ctx context.Context, cfg Config, lease *Lease, lead func(context.Context, *Lease), released <-chan struct{}) (bool, error) {
	lock := &recordingLock{lease: lease, Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}}
	// The elector gets its own context so that on shutdown the Lease is
	// released only after lead has returned.
	electCtx, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()

	leading := make(chan struct{})
	leadDone := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        cfg.WatchDog,
		Name:            cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaseCtx context.Context) {
				defer close(leadDone)
				close(leading)
				klog.FromContext(ctx).Info("Started leading", "lease", klog.KRef(cfg.Namespace, cfg.Name), "identity", cfg.Identity)
				runCtx, cancel := context.WithCancel(leaseCtx)
				defer cancel()
				stop := context.AfterFunc(ctx, cancel)
				defer stop()
				go lease.watch(runCtx, func() {
					klog.FromContext(ctx).Info("Cannot prove this process still holds the Lease, stopping at once", "lease", klog.KRef(cfg.Namespace, cfg.Name), "reason", lease.Held())
					cancel()
					stopElecting()
				})
				lead(runCtx, lease)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return false, fmt.Errorf("leader election: %w", err)
	}
	if cfg.WatchDog != nil {
		cfg.WatchDog.SetLeaderElection(le)
	}

	go func() {
		for {
			select {
			case <-ctx.Done():
				select {
				case <-leading:
					timer := time.NewTimer(cfg.StopTimeout)
					select {
					case <-leadDone:
					case <-timer.C:
						klog.FromContext(ctx).Info("Controllers did not stop in time, releasing the Lease anyway", "timeout", cfg.StopTimeout)
					}
					timer.Stop()
				default:
				}
				stopElecting()
				return
			case <-released:
				if !le.IsLeader() {
					stopElecting()
					return
				}
			case <-electCtx.Done():
				return
			}
		}
	}()

	le.Run(electCtx)
	select {
	case <-leading:
		return true, nil
	default:
		return false, nil
	}
}

// watchReleases signals when the Lease is seen without a holder, which is
// how a leader releases it on shutdown.
func watchReleases(ctx context.Context, cfg Config) <-chan struct{} {
	released := make(chan struct{}, 1)
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.Name).String()
		}))
	notify := func(obj any) {
		lease, ok := obj.(*coordinationv1.Lease)
		if !ok || (lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "") {
			return
		}
		select {
		case released <- struct{}{}:
		default:
		}
	}
	_, _ = factory.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
	})
	factory.Start(ctx.Done())
	return released
}
