package openstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/cloud"
)

// Defaults of a session.
const (
	// connectTimeout bounds one attempt to authenticate and find Nova,
	// whoever waits for it.
	connectTimeout = 60 * time.Second
	// After a failed attempt the next one waits at least
	// minConnectBackoff, doubling with each failure up to
	// maxConnectBackoff, so that a wrong password is not tried again on
	// every call (Keystone may lock the user out).
	minConnectBackoff = time.Second
	maxConnectBackoff = 2 * time.Minute
)

// errStopped is the error of a call that needs a connection after the
// provider stopped.
var errStopped = errors.New("the openstack provider has stopped")

// session is the provider's connection to OpenStack. It authenticates on
// first use, not when the provider is built: a CCM starts, serves its
// health endpoints and elects a leader while Keystone is briefly down, and
// its calls fail, each at its own deadline, until Keystone answers. Only
// one attempt runs at a time, bounded by connectTimeout; callers wait for
// it no longer than their context allows. A failed attempt is not
// repeated before its back-off has passed: meanwhile callers get its error
// wrapped in a cloud.RetryAfterError. Once connected, gophercloud renews
// the token when it expires.
type session struct {
	cfg        *Config
	httpClient *http.Client
	secrets    []string

	// ctx bounds every attempt; it ends when the provider stops.
	ctx    context.Context
	cancel context.CancelFunc

	connectTimeout         time.Duration
	minBackoff, maxBackoff time.Duration
	now                    func() time.Time
	logger                 klog.Logger

	// attempts counts the attempts under way, for close to wait on.
	attempts sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	conn      *clients
	attempt   *attempt
	failures  int
	lastErr   error
	notBefore time.Time
}

// attempt is one connection attempt; done is closed when it ends.
type attempt struct {
	done chan struct{}
	conn *clients
	err  error
}

func newSession(cfg *Config, httpClient *http.Client) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{
		cfg:            cfg,
		httpClient:     httpClient,
		secrets:        secretForms(cfg.Global),
		ctx:            ctx,
		cancel:         cancel,
		connectTimeout: connectTimeout,
		minBackoff:     minConnectBackoff,
		maxBackoff:     maxConnectBackoff,
		now:            time.Now,
		logger:         klog.Background().WithName(ProviderName),
	}
}

// clients returns the service clients, connecting when there are none.
func (s *session) clients(ctx context.Context) (*clients, error) {
	s.mu.Lock()
	if s.conn != nil {
		c := s.conn
		s.mu.Unlock()
		return c, nil
	}
	a := s.attempt
	if a == nil {
		if s.closed {
			s.mu.Unlock()
			return nil, errStopped
		}
		if wait := s.notBefore.Sub(s.now()); s.lastErr != nil && wait > 0 {
			err := s.lastErr
			s.mu.Unlock()
			return nil, &cloud.RetryAfterError{RetryAfter: wait, Err: err}
		}
		a = &attempt{done: make(chan struct{})}
		s.attempt = a
		s.attempts.Add(1)
		go s.connect(a)
	}
	s.mu.Unlock()
	select {
	case <-a.done:
		return a.conn, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("connecting to OpenStack: %w", ctx.Err())
	}
}

func (s *session) connect(a *attempt) {
	defer s.attempts.Done()
	ctx, cancel := context.WithTimeout(s.ctx, s.connectTimeout)
	defer cancel()
	conn, err := connect(ctx, s.cfg, s.httpClient)
	err = s.redact(err)

	s.mu.Lock()
	s.attempt = nil
	if err == nil {
		s.conn, s.failures, s.lastErr = conn, 0, nil
	} else {
		s.failures++
		s.lastErr = err
		s.notBefore = s.now().Add(s.backoff(s.failures))
	}
	failures := s.failures
	s.mu.Unlock()

	if err != nil {
		s.logger.Error(err, "Connecting to OpenStack failed", "authURL", s.cfg.Global.AuthURL, "failures", failures)
	} else {
		s.logger.Info("Connected to OpenStack", "authURL", s.cfg.Global.AuthURL, "region", s.cfg.Global.Region,
			"compute", conn.compute.Endpoint)
	}
	a.conn, a.err = conn, err
	close(a.done)
}

func (s *session) backoff(failures int) time.Duration {
	d := s.minBackoff
	for i := 1; i < failures && d < s.maxBackoff; i++ {
		d *= 2
	}
	return min(d, s.maxBackoff)
}

// redact keeps the configured secrets out of an error's text.
func (s *session) redact(err error) error { return redact(err, s.secrets) }

// close cancels the attempt under way, if any, waits for it to end and
// starts no other.
func (s *session) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.attempts.Wait()
}
