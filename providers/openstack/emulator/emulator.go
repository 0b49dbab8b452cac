package emulator

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Service is an OpenStack service of the emulator, named by its catalog type.
type Service string

// The services of the emulator.
const (
	Identity     Service = "identity"
	Compute      Service = "compute"
	Network      Service = "network"
	LoadBalancer Service = "load-balancer"
)

// Interfaces are the catalog interfaces every service but Keystone is
// published on, each under its own path.
var Interfaces = []string{"public", "internal", "admin"}

// Options configure an Emulator. The zero value is a usable cloud.
type Options struct {
	// Region of every catalog endpoint; default "RegionOne".
	Region string
	// TLS serves HTTPS with a certificate of httptest; Certificate returns it.
	TLS bool
	// TokenTTL is how long a Keystone token lives; default one hour.
	TokenTTL time.Duration
	// Now is the emulator's clock; default time.Now. Token expiry and
	// timestamps follow it, so a test can move time forward.
	Now func() time.Time
	// ComputeMaxMicroversion is Nova's highest microversion; default "2.96".
	ComputeMaxMicroversion string
	// ComputePageLimit is Nova's max_limit: the most servers in one page of
	// a list; default 1000.
	ComputePageLimit int
	// CaseSensitiveNames makes Nova's name filter match case-sensitively,
	// as Nova does on PostgreSQL. By default it ignores case, as Nova does on
	// MySQL and MariaDB with their default collation.
	CaseSensitiveNames bool
	// NetworkExtensions are the aliases of the Neutron extensions listed;
	// default a typical ML2/OVS set. NetworkExtensionsWithout leaves some
	// of those out: without extraroute-atomic, for one, routers have no
	// add_extraroutes and remove_extraroutes.
	NetworkExtensions []string
	// OctaviaDelay is how long a load balancer stays PENDING_CREATE,
	// PENDING_UPDATE or PENDING_DELETE after a change before it is ACTIVE
	// (or gone); zero makes it so by the next request, while the answer to
	// the change itself still shows the PENDING_* status. The clock is Now.
	OctaviaDelay time.Duration
}

// Request is one request the emulator received.
type Request struct {
	Service Service
	// Interface is the catalog interface the request came in on; empty for
	// Keystone, which has one address.
	Interface string
	Method    string
	// Path is the URL path below the service's root, like
	// "v2.1/servers/detail" or "v3/auth/tokens".
	Path  string
	Query url.Values
	// Microversion is the compute microversion the client asked for.
	Microversion string
	// Status is the response's status; 0 while the request is in flight,
	// or when it was never answered (the client gave up or the emulator
	// closed while it hung).
	Status int
}

// Emulator is an OpenStack cloud served over HTTP. It is safe for
// concurrent use.
type Emulator struct {
	opts      Options
	srv       *httptest.Server
	closed    chan struct{}
	closeOnce sync.Once

	// mu guards the state of every service, the faults and the log.
	mu       sync.Mutex
	keystone keystoneState
	nova     novaState
	neutron  neutronState
	octavia  octaviaState
	// Faults and the request log.
	faults   []*fault
	faultSeq int
	requests []Request
	hung     int
}

// New starts an emulator. Close it when done.
func New(opts Options) *Emulator {
	if opts.Region == "" {
		opts.Region = "RegionOne"
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ComputeMaxMicroversion == "" {
		opts.ComputeMaxMicroversion = "2.96"
	}
	if opts.ComputePageLimit == 0 {
		opts.ComputePageLimit = 1000
	}
	if opts.NetworkExtensions == nil {
		opts.NetworkExtensions = defaultNetworkExtensions
	}
	e := &Emulator{
		opts:     opts,
		closed:   make(chan struct{}),
		keystone: newKeystoneState(),
		nova:     newNovaState(),
		neutron:  newNeutronState(),
		octavia:  newOctaviaState(opts.OctaviaDelay),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", http.NotFound)
	e.routeKeystone(mux)
	e.routeNova(mux)
	e.routeNeutron(mux)
	e.routeOctavia(mux)
	e.srv = httptest.NewUnstartedServer(mux)
	if opts.TLS {
		e.srv.StartTLS()
	} else {
		e.srv.Start()
	}
	return e
}

// Close releases every request held by a fault and stops the server.
func (e *Emulator) Close() {
	e.closeOnce.Do(func() {
		close(e.closed)
		e.srv.CloseClientConnections()
		e.srv.Close()
	})
}

// URL is the base URL of the server.
func (e *Emulator) URL() string { return e.srv.URL }

// AuthURL is Keystone's v3 URL, the auth-url of a cloud.conf.
func (e *Emulator) AuthURL() string { return e.srv.URL + "/identity/v3" }

// Region is the region of the catalog's endpoints.
func (e *Emulator) Region() string { return e.opts.Region }

// Certificate is the server's certificate when it serves TLS, else nil.
func (e *Emulator) Certificate() *x509.Certificate {
	if !e.opts.TLS {
		return nil
	}
	return e.srv.Certificate()
}

// Requests returns the requests received so far, of the given services
// (all when none is given), in the order they arrived.
func (e *Emulator) Requests(services ...Service) []Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Request
	for _, r := range e.requests {
		if len(services) == 0 || slices.Contains(services, r.Service) {
			r.Query = cloneValues(r.Query)
			out = append(out, r)
		}
	}
	return out
}

// ResetRequests forgets the requests received so far.
func (e *Emulator) ResetRequests() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.requests = nil
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

// endpoint is the URL of a service on an interface, as the catalog has it.
// Nova's carries its version, as Nova's usually does; Neutron's and
// Octavia's do not, so clients discover their versions.
func (e *Emulator) endpoint(s Service, iface string) string {
	switch s {
	case Identity:
		return e.AuthURL()
	case Compute:
		return e.srv.URL + "/" + iface + "/compute/v2.1"
	default:
		return e.srv.URL + "/" + iface + "/" + string(s)
	}
}

// root is the path prefix of a service on an interface.
func root(s Service, iface string) string {
	if s == Identity {
		return "/identity/"
	}
	return "/" + iface + "/" + string(s) + "/"
}

// call is one request on its way through the emulator.
type call struct {
	e       *Emulator
	w       *statusWriter
	r       *http.Request
	service Service
	iface   string
	path    string // below the service's root
	token   *token // the caller's token on authenticated routes
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

// route registers a handler. Every request is logged, then meets the
// faults of its service, then, when authenticated is set, the token
// check, and then the handler.
func (e *Emulator) route(mux *http.ServeMux, method, path string, s Service, iface string, authenticated bool, h func(*call)) {
	prefix := root(s, iface)
	pattern := prefix + path
	if method != "" {
		pattern = method + " " + pattern
	}
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		// The body is read first, as a real service reads a request before
		// it works on it; only then does the server see the client go away.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		c := &call{e: e, w: &statusWriter{ResponseWriter: w}, r: r, service: s, iface: iface,
			path: strings.TrimPrefix(r.URL.Path, prefix)}
		i := e.record(c)
		defer func() { e.finish(i, c.w.status) }()
		if !e.applyFaults(c) {
			return
		}
		if authenticated {
			t, ok := e.checkToken(c.r.Header.Get("X-Auth-Token"))
			if !ok {
				c.w.Header().Set("WWW-Authenticate", `Keystone uri="`+e.AuthURL()+`"`)
				c.fail(http.StatusUnauthorized, "The request you have made requires authentication.")
				return
			}
			c.token = t
		}
		h(c)
	})
}

func (e *Emulator) record(c *call) int {
	iface := c.iface
	if c.service == Identity {
		iface = ""
	}
	mv := c.r.Header.Get("X-OpenStack-Nova-API-Version")
	if v, ok := strings.CutPrefix(c.r.Header.Get("OpenStack-API-Version"), "compute "); ok {
		mv = v
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.requests = append(e.requests, Request{Service: c.service, Interface: iface, Method: c.r.Method,
		Path: c.path, Query: c.r.URL.Query(), Microversion: mv})
	return len(e.requests) - 1
}

func (e *Emulator) finish(i, status int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i < len(e.requests) {
		e.requests[i].Status = status
	}
}

func (c *call) json(status int, body any) {
	c.w.Header().Set("Content-Type", "application/json")
	c.w.WriteHeader(status)
	_ = json.NewEncoder(c.w).Encode(body)
}

// fail answers with an error in the format of the call's service. A 401
// has keystonemiddleware's format on every service.
func (c *call) fail(status int, message string) {
	var body any
	switch {
	case c.service == Identity || status == http.StatusUnauthorized:
		body = map[string]any{"error": map[string]any{"code": status, "message": message, "title": http.StatusText(status)}}
	case c.service == Compute:
		body = map[string]any{novaFaultName(status): map[string]any{"code": status, "message": message}}
	case c.service == Network:
		body = map[string]any{"NeutronError": map[string]any{"type": neutronErrorType(status), "message": message, "detail": ""}}
	default:
		code := "Server"
		if status < 500 {
			code = "Client"
		}
		body = map[string]any{"faultcode": code, "faultstring": message, "debuginfo": nil}
	}
	c.json(status, body)
}

// wait returns true after d, or, when d is zero, when release is closed;
// false when the client went away or the emulator closed first.
func (c *call) wait(d time.Duration, release <-chan struct{}) bool {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-timer:
		return true
	case <-release:
		return true
	case <-c.r.Context().Done():
		return false
	case <-c.e.closed:
		return false
	}
}

func newID() string { return strings.ReplaceAll(uuid.NewString(), "-", "") }

// routeNotFound answers what a service does not serve with a 404 in the
// service's format, after logging it and applying the faults.
func (e *Emulator) routeNotFound(mux *http.ServeMux, s Service, iface string) {
	e.route(mux, "", "", s, iface, false, func(c *call) {
		c.fail(http.StatusNotFound, "The resource could not be found.")
	})
}
