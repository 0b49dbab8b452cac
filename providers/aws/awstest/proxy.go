package awstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// closeTimeout bounds how long Close waits for forwarded requests.
const closeTimeout = 10 * time.Second

// AnyAction is the action of a fault that applies to every request that
// has no fault of its own action.
const AnyAction = ""

// Fault is what the proxy does to a request before it forwards it.
type Fault struct {
	// Latency delays the request.
	Latency time.Duration
	// Throttle answers the request, after its latency, as a throttled
	// service does instead of forwarding it: EC2 with HTTP 503
	// RequestLimitExceeded, the other services with HTTP 400 Throttling.
	Throttle bool
	// RetryAfter, with Throttle, is sent as the Retry-After header
	// (whole seconds).
	RetryAfter time.Duration
	// ThrottleEvery, with Throttle, throttles only every n-th request the
	// fault applies to (the n-th, the 2n-th, ... since the fault was set)
	// and forwards the others: a share of 1/n. 0 or 1 throttles every
	// request.
	ThrottleEvery int
	// Hang holds the request without an answer until the fault is changed
	// or cleared (then the request goes on as the new fault says), the
	// client goes away or the proxy closes.
	Hang bool
}

// Request is one request the proxy received.
type Request struct {
	// Service is the signing name of the request's credential scope
	// (ec2, elasticloadbalancing, sts, ...).
	Service string
	// Action is the API action (Action= of the form body or the query).
	Action string
	Header http.Header
	// Throttled is set once the proxy has answered the request as
	// throttled.
	Throttled bool
}

// Proxy is a reverse proxy with faults in front of an AWS API emulator.
// Its zero value is not usable; make one with NewProxy.
type Proxy struct {
	forward *httputil.ReverseProxy

	server   *http.Server
	listener net.Listener
	url      string
	// closing is closed by Close: held requests end without an answer.
	closing   chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex
	faults map[string]Fault
	// applied counts the requests each fault (by action) was applied to
	// since it was set, for ThrottleEvery.
	applied  map[string]int
	changed  chan struct{} // closed and replaced on every change of faults
	requests []Request
	hanging  map[string]int
}

// credentialScope finds the service in an AWS4 Authorization header.
var credentialScope = regexp.MustCompile(`Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request`)

// NewProxy returns a proxy to the emulator at target (http://host:port),
// not yet listening: Start it, or use it as an http.Handler.
func NewProxy(target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("proxy target %q is not a URL", target)
	}
	forward := httputil.NewSingleHostReverseProxy(u)
	// A client that went away is the tests' doing, not worth a log line.
	forward.ErrorLog = log.New(io.Discard, "", 0)
	return &Proxy{
		forward: forward,
		closing: make(chan struct{}),
		faults:  map[string]Fault{},
		applied: map[string]int{},
		changed: make(chan struct{}),
		hanging: map[string]int{},
	}, nil
}

// Start listens on a free loopback port and serves in the background.
func (p *Proxy) Start() error {
	if p.server != nil {
		return errors.New("proxy already started")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	p.listener = l
	p.url = "http://" + l.Addr().String()
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.server.Serve(l) }()
	return nil
}

// URL is the address to send requests to, once started.
func (p *Proxy) URL() string { return p.url }

// Close ends held and delayed requests without an answer, stops serving
// and waits a while for the requests in flight to end.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		close(p.closing)
		if p.server == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = p.server.Shutdown(ctx)
		_ = p.server.Close()
	})
}

// SetFault sets the fault of an action (AnyAction: of every action
// without a fault of its own). Requests held now see the new fault.
func (p *Proxy) SetFault(action string, f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[action] = f
	delete(p.applied, action)
	p.changedLocked()
}

// ClearFault removes the fault of an action.
func (p *Proxy) ClearFault(action string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.faults, action)
	delete(p.applied, action)
	p.changedLocked()
}

// ClearFaults removes every fault: held requests go on.
func (p *Proxy) ClearFaults() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = map[string]Fault{}
	p.applied = map[string]int{}
	p.changedLocked()
}

func (p *Proxy) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// faultLocked is the fault of an action, the action it was set for
// (AnyAction when the action has none of its own), and a channel closed
// when the faults change.
func (p *Proxy) faultLocked(action string) (Fault, string, <-chan struct{}) {
	if f, ok := p.faults[action]; ok {
		return f, action, p.changed
	}
	return p.faults[AnyAction], AnyAction, p.changed
}

// Requests is every request received so far.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.requests...)
}

// Count is how many requests of an action the proxy received (AnyAction:
// of all actions).
func (p *Proxy) Count(action string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.requests {
		if action == AnyAction || r.Action == action {
			n++
		}
	}
	return n
}

// Hanging is how many requests of an action are held now (AnyAction: of
// all actions).
func (p *Proxy) Hanging(action string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if action != AnyAction {
		return p.hanging[action]
	}
	n := 0
	for _, c := range p.hanging {
		n += c
	}
	return n
}

// ServeHTTP applies the request's fault and forwards it to the target.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	req := Request{Action: action(r, body), Header: r.Header.Clone()}
	if m := credentialScope.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
		req.Service = m[1]
	}
	p.mu.Lock()
	index := len(p.requests)
	p.requests = append(p.requests, req)
	p.mu.Unlock()

	f, ok := p.hold(r.Context(), req.Action)
	if !ok {
		// Not even a status line: the connection is closed.
		panic(http.ErrAbortHandler)
	}
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			panic(http.ErrAbortHandler)
		case <-p.closing:
			t.Stop()
			panic(http.ErrAbortHandler)
		}
	}
	if f.Throttle {
		p.mu.Lock()
		p.requests[index].Throttled = true
		p.mu.Unlock()
		writeThrottle(w, req.Service, f.RetryAfter)
		return
	}
	p.forward.ServeHTTP(w, r)
}

// hold waits while the action's fault is a hang, and returns the fault
// that lets the request go on, its Throttle cleared when ThrottleEvery
// forwards this request; false when the request is to end without an
// answer.
func (p *Proxy) hold(ctx context.Context, action string) (Fault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	counted := false
	defer func() {
		if counted {
			p.hanging[action]--
		}
	}()
	for {
		f, key, changed := p.faultLocked(action)
		if !f.Hang {
			if f.Throttle && f.ThrottleEvery > 1 {
				p.applied[key]++
				f.Throttle = p.applied[key]%f.ThrottleEvery == 0
			}
			return f, true
		}
		if !counted {
			p.hanging[action]++
			counted = true
		}
		p.mu.Unlock()
		select {
		case <-changed:
			p.mu.Lock()
		case <-ctx.Done():
			p.mu.Lock()
			return Fault{}, false
		case <-p.closing:
			p.mu.Lock()
			return Fault{}, false
		}
	}
}

// action is a request's API action: Action= of its form body (the query
// protocol of EC2, ELB, ELBv2 and STS) or of its URL's query.
func action(r *http.Request, body []byte) string {
	if form, err := url.ParseQuery(string(body)); err == nil && form.Get("Action") != "" {
		return form.Get("Action")
	}
	return r.URL.Query().Get("Action")
}

// writeThrottle answers as a throttled service does: EC2 with HTTP 503
// RequestLimitExceeded, the others with HTTP 400 Throttling.
func writeThrottle(w http.ResponseWriter, service string, retryAfter time.Duration) {
	w.Header().Set("Content-Type", "text/xml")
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
	}
	if service == "ec2" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
			`<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors>`+
			`<RequestID>00000000-0000-0000-0000-000000000000</RequestID></Response>`)
		return
	}
	w.WriteHeader(http.StatusBadRequest)
	_, _ = io.WriteString(w, `<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error>`+
		`<RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>`)
}
