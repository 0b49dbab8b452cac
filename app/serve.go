package app

import (
	"context"
	"fmt"
	"net/http"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"

	"k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/apiserver/pkg/server/routes"
	"k8s.io/client-go/informers"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/ccmkit/ccmkit/cloud"
	genericcontrollermanager "k8s.io/controller-manager/app"

	// Registers client-go's REST client and workqueue metrics.
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

// runState is what /readyz reports on: whether the shared informers have
// synced, which controllers have failed, and whether the guard is saturated.
type runState struct {
	mu        sync.Mutex
	informers informers.SharedInformerFactory
	failed    []string
	guard     *cloud.Guard
}

func (s *runState) setGuard(g *cloud.Guard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.guard = g
}

// cloudCalls fails while the guard refuses new calls because the cloud
// holds as many calls as it allows: every controller is then waiting.
func (s *runState) cloudCalls(*http.Request) error {
	s.mu.Lock()
	g := s.guard
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	return g.Saturated()
}

func (s *runState) setInformers(f informers.SharedInformerFactory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.informers = f
}

func (s *runState) controllerFailed(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failed = append(s.failed, name)
}

// informersSynced passes before this process leads (it has no informers)
// and once every started informer has synced.
func (s *runState) informersSynced(*http.Request) error {
	s.mu.Lock()
	f := s.informers
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	closed := make(chan struct{})
	close(closed)
	var pending []string
	for typ, synced := range f.WaitForCacheSync(closed) {
		if !synced {
			pending = append(pending, typ.String())
		}
	}
	if len(pending) > 0 {
		slices.Sort(pending)
		return fmt.Errorf("informers not synced: %s", strings.Join(pending, ", "))
	}
	return nil
}

// controllersRunning fails while a controller has stopped because of a failure.
func (s *runState) controllersRunning(*http.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failed) > 0 {
		return fmt.Errorf("controllers failed: %s", strings.Join(s.failed, ", "))
	}
	return nil
}

// serve starts the secure server and returns once it listens; it stops when
// ctx is done. Health checks: /healthz and /livez include the leader-election
// watchdog, /readyz the informer sync, controller state and guard saturation.
func serve(ctx context.Context, o *Options, info *server.SecureServingInfo, authn *server.AuthenticationInfo, authz *server.AuthorizationInfo, liveness []healthz.HealthChecker, state *runState) (<-chan struct{}, error) {
	m := mux.NewPathRecorderMux("cloud-controller-manager")
	healthz.InstallHandler(m, append([]healthz.HealthChecker{healthz.PingHealthz}, liveness...)...)
	healthz.InstallLivezHandler(m, append([]healthz.HealthChecker{healthz.PingHealthz}, liveness...)...)
	healthz.InstallReadyzHandler(m,
		healthz.PingHealthz,
		healthz.NamedCheck("informer-sync", state.informersSynced),
		healthz.NamedCheck("controllers", state.controllersRunning),
		healthz.NamedCheck("cloud-calls", state.cloudCalls),
	)
	m.Handle("/metrics", legacyregistry.Handler())
	if o.Profiling {
		routes.Profiling{}.Install(m)
		if o.ContentionProfiling {
			goruntime.SetBlockProfileRate(1)
		}
	}
	handler := genericcontrollermanager.BuildHandlerChain(m, authz, authn)
	stopped, _, err := info.Serve(handler, 0, ctx.Done())
	if err != nil {
		return nil, fmt.Errorf("serving on %s: %w", info.Listener.Addr(), err)
	}
	return stopped, nil
}
