package openstack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
)

// novaMicroversion gives servers their flavor's name (2.47).
const novaMicroversion = "2.47"

// httpTimeouts bound the phases of every request below the guard's
// per-call deadline: a connection that never completes, a TLS handshake
// that stalls or a server that accepts a request and never answers fails
// the request on its own, even when a caller's context has no deadline.
type httpTimeouts struct {
	dial           time.Duration
	tlsHandshake   time.Duration
	responseHeader time.Duration
	idleConn       time.Duration
}

var defaultHTTPTimeouts = httpTimeouts{
	dial:           10 * time.Second,
	tlsHandshake:   10 * time.Second,
	responseHeader: 60 * time.Second,
	idleConn:       90 * time.Second,
}

// clients are the service clients of one authenticated session. Nova is
// found when the session starts; Neutron and Octavia when they are first
// used, so that Node initialisation does not wait on them, and each on its
// own, so that a service whose discovery hangs (an Octavia that accepts
// requests and never answers) holds up no caller of the other.
type clients struct {
	provider *gophercloud.ProviderClient
	// catalog is Keystone's; nil when Keystone is not v3, and gophercloud's
	// own endpoint locator is used.
	catalog *tokens.ServiceCatalog
	eo      gophercloud.EndpointOpts
	compute *gophercloud.ServiceClient

	network      lazyClient
	loadBalancer lazyClient

	// constructing guards provider.EndpointLocator, which locate sets and
	// gophercloud's constructors read.
	constructing sync.Mutex
}

// serviceConstructor is a gophercloud constructor of a service client.
type serviceConstructor func(*gophercloud.ProviderClient, gophercloud.EndpointOpts) (*gophercloud.ServiceClient, error)

// catalogService is an OpenStack service the provider finds in Keystone's
// catalog.
type catalogService struct {
	// name names it in errors.
	name string
	// typ is its type in Keystone's catalog, and version the major version
	// of its API that newClient makes a client of.
	typ       string
	version   int
	newClient serviceConstructor
}

var (
	computeService      = catalogService{name: "Nova (compute)", typ: "compute", version: 2, newClient: gopenstack.NewComputeV2}
	networkService      = catalogService{name: "Neutron (network)", typ: "network", version: 2, newClient: gopenstack.NewNetworkV2}
	loadBalancerService = catalogService{name: "Octavia (load-balancer)", typ: "load-balancer", version: 2, newClient: gopenstack.NewLoadBalancerV2}
)

// lazyClient is the client of a service found on first use.
type lazyClient struct {
	service catalogService
	// finding is held while the service is found; a channel, so that a
	// caller can stop waiting for it.
	finding chan struct{}
	client  atomic.Pointer[gophercloud.ServiceClient]
}

func newLazyClient(s catalogService) lazyClient {
	return lazyClient{service: s, finding: make(chan struct{}, 1)}
}

// newHTTPClient returns the client every OpenStack request goes through.
func newHTTPClient(g GlobalConfig, t httpTimeouts) (*http.Client, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: g.TLSInsecure} //nolint:gosec // tls-insecure is the operator's choice
	if g.CAFile != "" {
		pem, err := os.ReadFile(g.CAFile)
		if err != nil {
			return nil, fmt.Errorf("[Global] ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("[Global] ca-file %s: no PEM certificate in it", g.CAFile)
		}
		tlsConfig.RootCAs = pool
	}
	if g.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(g.CertFile, g.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("[Global] cert-file/key-file: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	}
	dialer := &net.Dialer{Timeout: t.dial, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   t.tlsHandshake,
		ResponseHeaderTimeout: t.responseHeader,
		IdleConnTimeout:       t.idleConn,
		MaxIdleConnsPerHost:   16,
		ForceAttemptHTTP2:     true,
	}}, nil
}

// authOptions maps [Global] to gophercloud's options. Re-authentication is
// on: an expired token is renewed on the next request.
//
// Keystone names a user and a project each by ID, or by name within a
// domain given by ID or by name, exactly one of the two. The
// user-domain-* and tenant-domain-* keys name the domain of one of them;
// domain-id and domain-name stand for both when those are not set. An ID
// is taken over a name.
func authOptions(g GlobalConfig) gophercloud.AuthOptions {
	ao := gophercloud.AuthOptions{IdentityEndpoint: g.AuthURL, AllowReauth: true}
	userDomainID, userDomainName := oneDomain(g.UserDomainID, g.UserDomainName, g.DomainID, g.DomainName)
	if g.ApplicationCredentialSecret.set() {
		// An application credential carries its own project scope.
		ao.ApplicationCredentialID = g.ApplicationCredentialID
		ao.ApplicationCredentialSecret = string(g.ApplicationCredentialSecret)
		if g.ApplicationCredentialID == "" {
			// By name, the credential is looked up among its user's.
			ao.ApplicationCredentialName = g.ApplicationCredentialName
			ao.UserID = g.UserID
			if g.UserID == "" {
				ao.Username, ao.DomainID, ao.DomainName = g.Username, userDomainID, userDomainName
			}
		}
		return ao
	}
	ao.Password = string(g.Password)
	if g.UserID != "" {
		ao.UserID = g.UserID
	} else {
		ao.Username, ao.DomainID, ao.DomainName = g.Username, userDomainID, userDomainName
	}
	switch {
	case g.TrustID != "":
		ao.Scope = &gophercloud.AuthScope{TrustID: g.TrustID}
	case g.TenantID != "":
		ao.Scope = &gophercloud.AuthScope{ProjectID: g.TenantID}
	case g.TenantName != "":
		id, name := oneDomain(g.TenantDomainID, g.TenantDomainName, g.DomainID, g.DomainName)
		ao.Scope = &gophercloud.AuthScope{ProjectName: g.TenantName, DomainID: id, DomainName: name}
	}
	// Without a scope Keystone scopes the token to the user's default project.
	return ao
}

// oneDomain picks the domain of a user or a project: its own ID, its own
// name, the shared ID, the shared name, the first that is set. It returns
// an ID or a name, never both.
func oneDomain(ownID, ownName, sharedID, sharedName string) (id, name string) {
	switch {
	case ownID != "":
		return ownID, ""
	case ownName != "":
		return "", ownName
	case sharedID != "":
		return sharedID, ""
	default:
		return "", sharedName
	}
}

// checkAuth finds, without a request, what Keystone could not be asked
// with: an auth-url that is not an HTTP URL, or credentials gophercloud
// cannot make a token request of (a user name without a domain, a
// project name without one, ...).
func checkAuth(g GlobalConfig) error {
	u, err := url.Parse(g.AuthURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("[Global] auth-url %q is not an http or https URL", g.AuthURL)
	}
	ao := authOptions(g)
	scope, err := ao.ToTokenV3ScopeMap()
	if err == nil {
		_, err = ao.ToTokenV3CreateMap(scope)
	}
	if err != nil {
		return fmt.Errorf("[Global] credentials: %w", err)
	}
	return nil
}

// connect authenticates with Keystone and finds Nova, all bounded by ctx.
func connect(ctx context.Context, cfg *Config, httpClient *http.Client) (*clients, error) {
	g := cfg.Global
	provider, err := gopenstack.NewClient(g.AuthURL)
	if err != nil {
		return nil, fmt.Errorf("[Global] auth-url: %w", err)
	}
	provider.HTTPClient = *httpClient
	if err := gopenstack.Authenticate(ctx, provider, authOptions(g)); err != nil {
		return nil, fmt.Errorf("authenticating with Keystone at %s: %w", g.AuthURL, err)
	}
	c := &clients{
		provider:     provider,
		eo:           gophercloud.EndpointOpts{Region: g.Region, Availability: availability(g.EndpointType)},
		network:      newLazyClient(networkService),
		loadBalancer: newLazyClient(loadBalancerService),
	}
	if result, ok := provider.GetAuthResult().(tokens.CreateResult); ok {
		if c.catalog, err = result.ExtractServiceCatalog(); err != nil {
			return nil, fmt.Errorf("reading Keystone's catalog: %w", err)
		}
	}
	if c.compute, err = c.locate(ctx, computeService); err != nil {
		return nil, err
	}
	c.compute.Microversion = novaMicroversion
	return c, nil
}

// locate makes the client of a service found in the catalog. gophercloud
// discovers the versions of an unversioned endpoint (Neutron's and
// Octavia's usually are) with a request to the service; its own endpoint
// locator does so with a context that has no deadline. Here the discovery
// is made first, with ctx, and holds nothing: only the making of the
// client, which sends no request, holds c.constructing.
func (c *clients) locate(ctx context.Context, s catalogService) (*gophercloud.ServiceClient, error) {
	notFound := func(err error) error {
		return fmt.Errorf("finding %s on the %s interface of region %s in the catalog: %w", s.name, c.eo.Availability, c.eo.Region, err)
	}
	if c.catalog == nil {
		// gophercloud's own locator, which nothing changes.
		sc, err := s.newClient(c.provider, c.eo)
		if err != nil {
			return nil, notFound(err)
		}
		return sc, nil
	}
	eo := c.eo // as gophercloud's constructor completes it
	eo.ApplyDefaults(s.typ)
	eo.Version = s.version
	endpoint, err := gopenstack.V3Endpoint(ctx, c.provider, c.catalog, eo)
	if err != nil {
		return nil, notFound(err)
	}
	c.constructing.Lock()
	defer c.constructing.Unlock()
	c.provider.EndpointLocator = func(gophercloud.EndpointOpts) (string, error) { return endpoint, nil }
	sc, err := s.newClient(c.provider, c.eo)
	if err != nil {
		return nil, notFound(err)
	}
	return sc, nil
}

// cached returns the client of l, finding its service first if it has not
// been found. A failure is not kept: the next call tries again.
func (c *clients) cached(ctx context.Context, l *lazyClient) (*gophercloud.ServiceClient, error) {
	if sc := l.client.Load(); sc != nil {
		return sc, nil
	}
	select {
	case l.finding <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("finding %s: %w", l.service.name, ctx.Err())
	}
	defer func() { <-l.finding }()
	if sc := l.client.Load(); sc != nil {
		return sc, nil // found while this caller waited
	}
	sc, err := c.locate(ctx, l.service)
	if err != nil {
		return nil, err
	}
	l.client.Store(sc)
	return sc, nil
}

// networkClient returns Neutron's client.
func (c *clients) networkClient(ctx context.Context) (*gophercloud.ServiceClient, error) {
	return c.cached(ctx, &c.network)
}

// loadBalancerClient returns Octavia's client. When the catalog has no
// Octavia the error wraps *gophercloud.ErrEndpointNotFound.
func (c *clients) loadBalancerClient(ctx context.Context) (*gophercloud.ServiceClient, error) {
	return c.cached(ctx, &c.loadBalancer)
}

func availability(endpointType string) gophercloud.Availability {
	switch strings.TrimSuffix(endpointType, "URL") {
	case "internal":
		return gophercloud.AvailabilityInternal
	case "admin":
		return gophercloud.AvailabilityAdmin
	default:
		return gophercloud.AvailabilityPublic
	}
}

// secretForms are the ways the secrets of g may be spelt in an error: as
// they are, escaped in JSON (with and without HTML escaping) and escaped
// in a URL.
func secretForms(g GlobalConfig) []string {
	var forms []string
	for _, s := range []string{string(g.Password), string(g.ApplicationCredentialSecret)} {
		if s == "" {
			continue
		}
		for _, f := range []string{s, jsonString(s, true), jsonString(s, false), url.QueryEscape(s), url.PathEscape(s)} {
			if f != "" && !slices.Contains(forms, f) {
				forms = append(forms, f)
			}
		}
	}
	return forms
}

// jsonString is s as it is inside a JSON string.
func jsonString(s string, escapeHTML bool) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	_ = enc.Encode(s)
	return strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(b.String()), `"`), `"`)
}

// redactedError is an error whose text has its secrets replaced. It
// unwraps to the original, so errors.Is and errors.As see through it.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redact keeps the secrets out of an error's text.
func redact(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := msg
	for _, s := range secrets {
		out = strings.ReplaceAll(out, s, "<redacted>")
	}
	if out == msg {
		return err
	}
	return &redactedError{msg: out, err: err}
}
