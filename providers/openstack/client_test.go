package openstack

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
)

func TestAuthentication(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	project := c.DefaultProject()
	if _, err := c.AddUser(emulator.User{Name: "dflt", Password: testPassword, Projects: []string{project.ID}, DefaultProjectID: project.ID}); err != nil {
		t.Fatal(err)
	}
	c.addServer(t, emulator.Server{Name: "node-1"})
	pw := fmt.Sprintf("password = %q", testPassword)
	dir := t.TempDir()
	clouds := filepath.Join(dir, "clouds.yaml")
	if err := os.WriteFile(clouds, fmt.Appendf(nil, `clouds:
  mine:
    auth:
      auth_url: %s
      application_credential_id: %s
      application_credential_secret: %s
    region_name: %s
`, c.AuthURL(), c.cred.ID, testAppSecret, c.Region()), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		credentials string
		method      string // of the token
	}{
		{name: "password, user and project by name, each with its domain", method: "password",
			credentials: "username = ccm\n" + pw + "\nuser-domain-name = Default\ntenant-name = demo\ntenant-domain-name = Default"},
		{name: "password, user and project by id", method: "password",
			credentials: "user-id = " + c.user.ID + "\n" + pw + "\ntenant-id = " + project.ID},
		{name: "password, one domain for user and project", method: "password",
			credentials: "username = ccm\n" + pw + "\ndomain-name = Default\ntenant-name = demo"},
		{name: "password, own domains over the shared one", method: "password",
			credentials: "username = ccm\n" + pw + "\ndomain-id = nope\ndomain-name = Nope\nuser-domain-name = Default\ntenant-name = demo\ntenant-domain-id = default"},
		{name: "password, user id ignores domains", method: "password",
			credentials: "user-id = " + c.user.ID + "\n" + pw + "\ndomain-name = Default\ntenant-name = demo"},
		{name: "password, no project: the user's default one", method: "password",
			credentials: "username = dflt\n" + pw + "\nuser-domain-id = default"},
		{name: "application credential by id", method: "application_credential",
			credentials: "application-credential-id = " + c.cred.ID + "\napplication-credential-secret = " + testAppSecret},
		{name: "application credential by name, user name and domain", method: "application_credential",
			credentials: "application-credential-name = ccm-cred\napplication-credential-secret = " + testAppSecret + "\nusername = ccm\nuser-domain-name = Default"},
		{name: "application credential by name and user id", method: "application_credential",
			credentials: "application-credential-name = ccm-cred\napplication-credential-secret = " + testAppSecret + "\nuser-id = " + c.user.ID},
		{name: "application credential over a password", method: "application_credential",
			credentials: "application-credential-id = " + c.cred.ID + "\napplication-credential-secret = " + testAppSecret + "\nusername = ccm\n" + pw + "\nuser-domain-name = Default"},
		{name: "clouds.yaml", method: "application_credential",
			credentials: "use-clouds = true\nclouds-file = " + clouds + "\ncloud = mine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := c.confWith(tt.credentials)
			if strings.Contains(tt.credentials, "use-clouds") {
				conf = "[Global]\n" + tt.credentials + "\n"
			}
			p := newTestProvider(t, conf)
			instances, _ := p.InstancesV2()
			if _, err := instances.InstanceMetadata(t.Context(), node("node-1", "")); err != nil {
				t.Fatal(err)
			}
			result, ok := p.conn.conn.compute.GetAuthResult().(tokens.CreateResult)
			var token struct {
				Methods []string `json:"methods"`
			}
			if !ok || result.ExtractInto(&token) != nil || !slices.Equal(token.Methods, []string{tt.method}) {
				t.Errorf("token methods %v, want [%s]", token.Methods, tt.method)
			}
		})
	}
}

func TestUnversionedAuthURL(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	c.addServer(t, emulator.Server{Name: "node-1"})
	conf := strings.Replace(c.conf(), c.AuthURL(), c.URL()+"/identity", 1)
	p := newTestProvider(t, conf)
	instances, _ := p.InstancesV2()
	if _, err := instances.InstanceMetadata(t.Context(), node("node-1", "")); err != nil {
		t.Fatal(err)
	}
	if r := c.Requests(emulator.Identity); len(r) != 2 || r[0].Path != "" || r[1].Path != "v3/auth/tokens" {
		t.Errorf("Keystone requests %+v, want version discovery and a token", r)
	}
}

func TestReauthenticationAfterTokenExpiry(t *testing.T) {
	clk := newFakeClock()
	c := newTestCloud(t, emulator.Options{Now: clk.Now, TokenTTL: time.Hour})
	c.addServer(t, emulator.Server{Name: "node-1"})
	for name, conf := range map[string]string{
		"password": c.conf(),
		"application credential": c.confWith("application-credential-id = " + c.cred.ID +
			"\napplication-credential-secret = " + testAppSecret),
	} {
		t.Run(name, func(t *testing.T) {
			c.ResetRequests()
			p := newTestProvider(t, conf)
			instances, _ := p.InstancesV2()
			n := node("node-1", "")
			for i, expire := range []func(){func() {}, func() { clk.Advance(61 * time.Minute) }, c.ExpireTokens} {
				expire()
				if exists, err := instances.InstanceExists(t.Context(), n); err != nil || !exists {
					t.Fatalf("call %d: %v, %v", i, exists, err)
				}
				if got := tokenRequests(c.Emulator, http.StatusCreated); got != i+1 {
					t.Errorf("after call %d: %d tokens, want %d", i, got, i+1)
				}
			}
			var unauthorized int
			for _, r := range c.Requests(emulator.Compute) {
				if r.Status == http.StatusUnauthorized {
					unauthorized++
				}
			}
			if unauthorized != 2 {
				t.Errorf("%d requests with an expired token, want 2, each renewed", unauthorized)
			}
		})
	}
}

func TestEndpointType(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	c.addServer(t, emulator.Server{Name: "node-1"})
	for endpointType, want := range map[string]string{
		"":            "public",
		"public":      "public",
		"internal":    "internal",
		"internalURL": "internal",
		"admin":       "admin",
		"adminURL":    "admin",
	} {
		t.Run(endpointType, func(t *testing.T) {
			c.ResetRequests()
			p := newTestProvider(t, c.conf("os-endpoint-type = "+endpointType))
			instances, _ := p.InstancesV2()
			if _, err := instances.InstanceMetadata(t.Context(), node("node-1", "")); err != nil {
				t.Fatal(err)
			}
			network, err := p.conn.conn.networkClient(t.Context())
			if err != nil || network.ResourceBase != c.URL()+"/"+want+"/network/v2.0/" {
				t.Errorf("Neutron client %+v, %v; want the %s endpoint", network, err, want)
			}
			lb, err := p.conn.conn.loadBalancerClient(t.Context())
			if err != nil || lb.ResourceBase != c.URL()+"/"+want+"/load-balancer/v2.0/" {
				t.Errorf("Octavia client %+v, %v; want the %s endpoint", lb, err, want)
			}
			var got []string
			for _, r := range c.Requests(emulator.Compute, emulator.Network, emulator.LoadBalancer) {
				got = append(got, string(r.Service)+"/"+r.Interface)
			}
			for _, s := range []emulator.Service{emulator.Compute, emulator.Network, emulator.LoadBalancer} {
				if !slices.Contains(got, string(s)+"/"+want) {
					t.Errorf("no request to %s: %v", s, got)
				}
			}
			if slices.ContainsFunc(got, func(s string) bool { return !strings.HasSuffix(s, "/"+want) }) {
				t.Errorf("requests went to %v, want only the %s interface", got, want)
			}
		})
	}
}

// Neutron and Octavia are found on first use, not when the provider
// connects: Nova's calls do not wait on them, a hung discovery holds a
// caller no longer than its deadline, and a found client is kept.
func TestNeutronAndOctaviaOnFirstUse(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	c.addServer(t, emulator.Server{Name: "node-1"})
	hang := c.AddFault(emulator.Fault{Service: emulator.LoadBalancer, Hang: true})
	down := c.AddFault(emulator.Fault{Service: emulator.Network, Status: http.StatusServiceUnavailable})
	p := newTestProvider(t, c.conf())
	instances, _ := p.InstancesV2()
	if _, err := instances.InstanceMetadata(t.Context(), node("node-1", "")); err != nil {
		t.Fatalf("with Neutron down and Octavia hung: %v", err)
	}
	if r := c.Requests(emulator.Network, emulator.LoadBalancer); len(r) != 0 {
		t.Errorf("Nova's call went to Neutron or Octavia: %+v", r)
	}
	conn := p.conn.conn

	if _, err := conn.networkClient(t.Context()); err == nil || !strings.Contains(err.Error(), "finding Neutron (network)") {
		t.Errorf("Neutron down: %v", err)
	}
	c.RemoveFault(down)
	if _, err := conn.networkClient(t.Context()); err != nil {
		t.Errorf("Neutron back: %v", err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := conn.loadBalancerClient(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Octavia hung: %v, want the deadline", err)
	}
	c.RemoveFault(hang)
	for range 2 {
		if _, err := conn.loadBalancerClient(t.Context()); err != nil {
			t.Fatalf("Octavia back: %v", err)
		}
	}
	if n := len(c.Requests(emulator.Network, emulator.LoadBalancer)); n != 4 {
		t.Errorf("%d discovery requests, want 4: two to Neutron, two to Octavia (hung, then found and kept)", n)
	}
}

// TestHungOctaviaHoldsUpNoNeutronCall: while Octavia's discovery hangs,
// Neutron is found (or was found before) and routes are created, so that
// a hung Octavia holds up no route.
func TestHungOctaviaHoldsUpNoNeutronCall(t *testing.T) {
	for _, tt := range []struct {
		name         string
		neutronFirst bool
	}{
		{name: "Neutron found before", neutronFirst: true},
		{name: "Neutron found during the hang"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			c := newRouteCloud(t, nil)
			r := c.routes(t)
			conn, err := r.conn.clients(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tt.neutronFirst {
				if _, err := conn.networkClient(ctx); err != nil {
					t.Fatal(err)
				}
			}
			c.AddFault(emulator.Fault{Service: emulator.LoadBalancer, Hang: true})
			hungCtx, cancel := context.WithCancel(ctx)
			found := make(chan struct{})
			go func() {
				defer close(found)
				if _, err := conn.loadBalancerClient(hungCtx); !errors.Is(err, context.Canceled) {
					t.Errorf("Octavia's hung discovery = %v, want it cancelled", err)
				}
			}()
			defer func() {
				cancel()
				<-found
			}()
			err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return c.Hung() > 0, nil
			})
			if err != nil {
				t.Fatalf("Octavia's discovery never reached the emulator: %v", err)
			}

			callCtx, stop := context.WithTimeout(ctx, 2*time.Second)
			defer stop()
			if err := r.CreateRoute(callCtx, "kubernetes", "uid", routeTo("node-1", "10.0.0.11", "10.244.1.0/24")); err != nil {
				t.Fatalf("CreateRoute while Octavia's discovery hangs: %v", err)
			}
			if got, want := c.table(t), []string{"10.244.1.0/24>10.0.0.11"}; !slices.Equal(got, want) {
				t.Errorf("routes %v, want %v", got, want)
			}
		})
	}
}

func TestRegionNotInTheCatalog(t *testing.T) {
	c := newTestCloud(t, emulator.Options{Region: "RegionOne"})
	p := newTestProvider(t, strings.Replace(c.conf(), "region = RegionOne", "region = RegionTwo", 1))
	instances, _ := p.InstancesV2()
	_, err := instances.InstanceExists(t.Context(), node("node-1", ""))
	if err == nil || !strings.Contains(err.Error(), "finding Nova (compute) on the public interface of region RegionTwo") {
		t.Errorf("with a region the catalog lacks: %v", err)
	}
}

func TestTLS(t *testing.T) {
	c := newTestCloud(t, emulator.Options{TLS: true})
	c.addServer(t, emulator.Server{Name: "node-1"})
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		extra string
		fails bool
	}{
		{name: "ca-file", extra: "ca-file = " + ca},
		{name: "tls-insecure", extra: "tls-insecure = true"},
		{name: "unknown CA", fails: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProvider(t, c.conf(tt.extra))
			instances, _ := p.InstancesV2()
			_, err := instances.InstanceExists(t.Context(), node("node-1", ""))
			if tt.fails != (err != nil) {
				t.Fatalf("InstanceExists: %v", err)
			}
			if tt.fails && !strings.Contains(err.Error(), "certificate") {
				t.Errorf("error %q does not name the certificate", err)
			}
		})
	}
}

// No error text carries a configured secret, however the cloud spells it
// back: as it is, escaped in JSON or escaped in a URL.
func TestErrorsCarryNoSecret(t *testing.T) {
	forms := func(secret string) []string {
		j, _ := json.Marshal(secret)
		return []string{secret, string(j[1 : len(j)-1]), url.QueryEscape(secret)}
	}
	// echo is what a server that echoes the request shows of a secret.
	echo := func(secret string) string { return "bad request: " + secret + " " + url.QueryEscape(secret) }
	passwordConf := func(c *testCloud) string { return c.conf() }
	appCredConf := func(c *testCloud) string {
		return c.confWith("application-credential-id = " + c.cred.ID + "\napplication-credential-secret = " + testAppSecret)
	}
	tests := []struct {
		name   string
		conf   func(*testCloud) string
		secret string // the configured one
		setup  func(*testing.T, *testCloud)
		// echoes: the cloud's answer has the secrets, replaced in the error.
		echoes bool
		// deadline, when set, is the caller's deadline.
		deadline time.Duration
	}{
		{name: "wrong password", secret: strings.Replace(testPassword, "w0rd", "w1rd", 1),
			conf: func(c *testCloud) string { return strings.Replace(c.conf(), "w0rd", "w1rd", 1) }},
		{name: "a proxy before Keystone echoes the request", conf: passwordConf, secret: testPassword, echoes: true, setup: func(_ *testing.T, c *testCloud) {
			c.AddFault(emulator.Fault{Service: emulator.Identity, Status: http.StatusBadGateway, Message: echo(testPassword)})
		}},
		{name: "Nova echoes the password", conf: passwordConf, secret: testPassword, echoes: true, setup: func(_ *testing.T, c *testCloud) {
			c.AddFault(emulator.Fault{Service: emulator.Compute, Path: "v2.1/servers", Status: http.StatusInternalServerError, Message: echo(testPassword)})
		}},
		{name: "Nova echoes the application credential secret", conf: appCredConf, secret: testAppSecret, echoes: true, setup: func(_ *testing.T, c *testCloud) {
			c.AddFault(emulator.Fault{Service: emulator.Compute, Path: "v2.1/servers", Status: http.StatusInternalServerError, Message: echo(testAppSecret)})
		}},
		{name: "Keystone hangs", conf: passwordConf, secret: testPassword, deadline: 100 * time.Millisecond, setup: func(_ *testing.T, c *testCloud) {
			c.AddFault(emulator.Fault{Service: emulator.Identity, Hang: true})
		}},
		{name: "re-authentication refused", conf: passwordConf, secret: testPassword, setup: func(t *testing.T, c *testCloud) {
			if err := c.SetPassword(c.user.ID, "changed"); err != nil {
				t.Fatal(err)
			}
			c.ExpireTokens()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestCloud(t, emulator.Options{})
			c.addServer(t, emulator.Server{Name: "node-1"})
			p := newTestProvider(t, tt.conf(c))
			instances, _ := p.InstancesV2()
			if tt.setup != nil {
				tt.setup(t, c)
			}
			ctx := t.Context()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			_, err := instances.InstanceMetadata(ctx, node("node-1", ""))
			if err == nil {
				t.Fatal("no error")
			}
			for _, secret := range forms(tt.secret) {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q contains the secret as %q", err, secret)
				}
			}
			if tt.echoes && !strings.Contains(err.Error(), "bad request: <redacted> <redacted>") {
				t.Errorf("error %q: want the echoed secrets replaced by <redacted>", err)
			}
			if tt.deadline > 0 && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %q does not unwrap to the deadline", err)
			}
		})
	}
}

// A Nova call that hangs (the request is accepted and never answered, as
// on a half-open connection) returns at the caller's deadline, and at the
// response-header timeout when the caller has none.
func TestHungNovaCallReturns(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	srv := c.addServer(t, emulator.Server{Name: "node-1"})
	timeouts := defaultHTTPTimeouts
	timeouts.responseHeader = 300 * time.Millisecond
	p := newTestProviderWith(t, c.conf(), timeouts)
	instances, _ := p.InstancesV2()
	byID := node("node-1", providerID(srv.ID))
	if _, err := instances.InstanceExists(t.Context(), byID); err != nil {
		t.Fatal(err)
	}
	hang := c.AddFault(emulator.Fault{Service: emulator.Compute, Hang: true})

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := instances.InstanceExists(ctx, byID)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("with a deadline: %v, want the deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned after %s", d)
	}

	_, err = instances.InstanceShutdown(context.Background(), byID)
	if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Errorf("without a deadline: %v, want the response-header timeout", err)
	}
	eventually(t, "the hung requests to be dropped", func() bool { return c.Hung() == 0 })

	c.RemoveFault(hang)
	if exists, err := instances.InstanceExists(t.Context(), byID); err != nil || !exists {
		t.Errorf("after the hang: %v, %v", exists, err)
	}
}
