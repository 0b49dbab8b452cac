package emulator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
)

// clock is a settable clock for Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// cloud is an emulator with a user "ccm" (password "pw") on the default
// project and an application credential "ccm-cred" (secret "cred-secret").
type cloud struct {
	*emulator.Emulator
	user emulator.User
	cred emulator.ApplicationCredential
}

func newCloud(t *testing.T, opts emulator.Options) *cloud {
	t.Helper()
	e := emulator.New(opts)
	t.Cleanup(e.Close)
	u, err := e.AddUser(emulator.User{Name: "ccm", Password: "pw", Projects: []string{e.DefaultProject().ID}})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := e.AddApplicationCredential(emulator.ApplicationCredential{Name: "ccm-cred", UserID: u.ID, Secret: "cred-secret"})
	if err != nil {
		t.Fatal(err)
	}
	return &cloud{Emulator: e, user: u, cred: cred}
}

func (c *cloud) passwordAuth() gophercloud.AuthOptions {
	return gophercloud.AuthOptions{
		IdentityEndpoint: c.AuthURL(), Username: "ccm", Password: "pw", DomainName: "Default",
		Scope: &gophercloud.AuthScope{ProjectID: c.DefaultProject().ID},
	}
}

func authenticate(ctx context.Context, ao gophercloud.AuthOptions) (*gophercloud.ProviderClient, error) {
	pc, err := openstack.NewClient(ao.IdentityEndpoint)
	if err != nil {
		return nil, err
	}
	return pc, openstack.Authenticate(ctx, pc, ao)
}

func computeClient(t *testing.T, pc *gophercloud.ProviderClient, microversion string) *gophercloud.ServiceClient {
	t.Helper()
	sc, err := openstack.NewComputeV2(pc, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	sc.Microversion = microversion
	return sc
}

func listServers(ctx context.Context, sc *gophercloud.ServiceClient, opts servers.ListOpts) ([]servers.Server, error) {
	pages, err := servers.List(sc, opts).AllPages(ctx)
	if err != nil {
		return nil, err
	}
	return servers.ExtractServers(pages)
}

func names(list []servers.Server) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}

func TestKeystoneAuthentication(t *testing.T) {
	c := newCloud(t, emulator.Options{})
	project := c.DefaultProject()
	other, err := c.AddProject(emulator.Project{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddUser(emulator.User{Name: "dflt", Password: "pw2", Projects: []string{project.ID}, DefaultProjectID: project.ID}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		ao   gophercloud.AuthOptions
		// wantCatalog: the token is scoped and its catalog leads to Nova.
		wantCatalog bool
		wantStatus  int // of a refused authentication
	}{
		{name: "password, user name and domain name, project by id", ao: c.passwordAuth(), wantCatalog: true},
		{name: "password, user name and domain id, project by name", ao: gophercloud.AuthOptions{
			Username: "ccm", Password: "pw", DomainID: "default",
			Scope: &gophercloud.AuthScope{ProjectName: "demo", DomainName: "Default"}}, wantCatalog: true},
		{name: "password, user id", ao: gophercloud.AuthOptions{UserID: c.user.ID, Password: "pw",
			Scope: &gophercloud.AuthScope{ProjectName: "demo", DomainID: "default"}}, wantCatalog: true},
		{name: "application credential by id", ao: gophercloud.AuthOptions{
			ApplicationCredentialID: c.cred.ID, ApplicationCredentialSecret: "cred-secret"}, wantCatalog: true},
		{name: "application credential by name and user id", ao: gophercloud.AuthOptions{UserID: c.user.ID,
			ApplicationCredentialName: "ccm-cred", ApplicationCredentialSecret: "cred-secret"}, wantCatalog: true},
		{name: "application credential by name, user name and domain", ao: gophercloud.AuthOptions{Username: "ccm", DomainName: "Default",
			ApplicationCredentialName: "ccm-cred", ApplicationCredentialSecret: "cred-secret"}, wantCatalog: true},
		{name: "no scope, default project", ao: gophercloud.AuthOptions{Username: "dflt", Password: "pw2", DomainID: "default"}, wantCatalog: true},
		{name: "no scope, no default project: unscoped", ao: gophercloud.AuthOptions{UserID: c.user.ID, Password: "pw"}},
		{name: "wrong password", ao: gophercloud.AuthOptions{UserID: c.user.ID, Password: "nope"}, wantStatus: 401},
		{name: "unknown user", ao: gophercloud.AuthOptions{Username: "nobody", Password: "pw", DomainName: "Default"}, wantStatus: 401},
		{name: "wrong application credential secret", ao: gophercloud.AuthOptions{
			ApplicationCredentialID: c.cred.ID, ApplicationCredentialSecret: "nope"}, wantStatus: 401},
		{name: "project without a role", ao: gophercloud.AuthOptions{UserID: c.user.ID, Password: "pw",
			Scope: &gophercloud.AuthScope{ProjectID: other.ID}}, wantStatus: 401},
		{name: "unknown project", ao: gophercloud.AuthOptions{UserID: c.user.ID, Password: "pw",
			Scope: &gophercloud.AuthScope{ProjectName: "nope", DomainName: "Default"}}, wantStatus: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			tt.ao.IdentityEndpoint = c.AuthURL()
			pc, err := authenticate(ctx, tt.ao)
			if tt.wantStatus != 0 {
				if !gophercloud.ResponseCodeIs(err, tt.wantStatus) {
					t.Fatalf("authenticate = %v, want HTTP %d", err, tt.wantStatus)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pc.Token() == "" {
				t.Fatal("no token")
			}
			_, err = openstack.NewComputeV2(pc, gophercloud.EndpointOpts{})
			if !tt.wantCatalog {
				var notFound *gophercloud.ErrEndpointNotFound
				if !errors.As(err, &notFound) {
					t.Fatalf("an unscoped token found Nova: %v", err)
				}
				return
			}
			if _, err := listServers(ctx, computeClient(t, pc, ""), servers.ListOpts{}); err != nil {
				t.Fatalf("listing servers with the token: %v", err)
			}
		})
	}
}

func TestKeystoneRefusesScopedApplicationCredential(t *testing.T) {
	c := newCloud(t, emulator.Options{})
	body := `{"auth": {"identity": {"methods": ["application_credential"],
		"application_credential": {"id": "` + c.cred.ID + `", "secret": "cred-secret"}},
		"scope": {"project": {"id": "` + c.DefaultProject().ID + `"}}}}`
	resp, err := http.Post(c.AuthURL()+"/auth/tokens", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var got struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 401 || got.Error.Code != 401 || !strings.Contains(got.Error.Message, "cannot request a scope") {
		t.Errorf("got %d %+v, want 401 cannot request a scope", resp.StatusCode, got)
	}
}

func TestKeystoneTokenMethod(t *testing.T) {
	clk := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newCloud(t, emulator.Options{Now: clk.Now, TokenTTL: time.Hour})
	ctx := t.Context()
	unscoped, err := authenticate(ctx, gophercloud.AuthOptions{IdentityEndpoint: c.AuthURL(), UserID: c.user.ID, Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(30 * time.Minute)
	scoped, err := authenticate(ctx, gophercloud.AuthOptions{IdentityEndpoint: c.AuthURL(), TokenID: unscoped.Token(),
		Scope: &gophercloud.AuthScope{ProjectID: c.DefaultProject().ID}})
	if err != nil {
		t.Fatalf("rescoping a token: %v", err)
	}
	if _, err := listServers(ctx, computeClient(t, scoped, ""), servers.ListOpts{}); err != nil {
		t.Fatalf("the rescoped token: %v", err)
	}
	identity, err := openstack.NewIdentityV3(scoped, gophercloud.EndpointOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if user, err := tokens.Get(ctx, identity, unscoped.Token()).ExtractUser(); err != nil || user.ID != c.user.ID {
		t.Errorf("validating a token: %+v, %v", user, err)
	}
	if err := tokens.Get(ctx, identity, "no-such-token").Err; !gophercloud.ResponseCodeIs(err, 404) {
		t.Errorf("validating an unknown token: %v, want 404", err)
	}
	// The rescoped token expires with the token it was made from.
	clk.Advance(31 * time.Minute)
	if _, err := listServers(ctx, computeClient(t, scoped, ""), servers.ListOpts{}); !gophercloud.ResponseCodeIs(err, 401) {
		t.Errorf("rescoped token an hour after the first: %v, want 401", err)
	}
	_, err = authenticate(ctx, gophercloud.AuthOptions{IdentityEndpoint: c.AuthURL(), TokenID: unscoped.Token(),
		Scope: &gophercloud.AuthScope{ProjectID: c.DefaultProject().ID}})
	if !gophercloud.ResponseCodeIs(err, 401) {
		t.Errorf("token method with an expired token: %v, want 401", err)
	}
}

func TestTokenExpiryAndReauthentication(t *testing.T) {
	clk := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newCloud(t, emulator.Options{Now: clk.Now, TokenTTL: 10 * time.Minute})
	ctx := t.Context()
	ao := c.passwordAuth()
	pc, err := authenticate(ctx, ao)
	if err != nil {
		t.Fatal(err)
	}
	noReauth := computeClient(t, pc, "")
	if _, err := listServers(ctx, noReauth, servers.ListOpts{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(11 * time.Minute)
	if _, err := listServers(ctx, noReauth, servers.ListOpts{}); !gophercloud.ResponseCodeIs(err, 401) {
		t.Fatalf("after the TTL: %v, want 401", err)
	}

	ao.AllowReauth = true
	pc, err = authenticate(ctx, ao)
	if err != nil {
		t.Fatal(err)
	}
	sc := computeClient(t, pc, "")
	for _, expire := range []func(){func() { clk.Advance(11 * time.Minute) }, c.ExpireTokens} {
		c.ResetRequests()
		expire()
		if _, err := listServers(ctx, sc, servers.ListOpts{}); err != nil {
			t.Fatalf("with re-authentication: %v", err)
		}
		var trail []string
		for _, r := range c.Requests() {
			trail = append(trail, r.Method+" "+r.Path+" "+http.StatusText(r.Status))
		}
		want := []string{"GET v2.1/servers/detail Unauthorized", "POST v3/auth/tokens Created", "GET v2.1/servers/detail OK"}
		if !slices.Equal(trail, want) {
			t.Errorf("requests = %q, want %q", trail, want)
		}
	}
}

func TestVersionDiscovery(t *testing.T) {
	c := newCloud(t, emulator.Options{})
	ctx := t.Context()
	ao := c.passwordAuth()
	ao.IdentityEndpoint = c.URL() + "/identity" // unversioned: discovered
	pc, err := authenticate(ctx, ao)
	if err != nil {
		t.Fatalf("authenticating at the unversioned URL: %v", err)
	}
	network, err := openstack.NewNetworkV2(pc, gophercloud.EndpointOpts{Availability: gophercloud.AvailabilityInternal})
	if err != nil {
		t.Fatal(err)
	}
	if want := c.URL() + "/internal/network/v2.0/"; network.ResourceBase != want {
		t.Errorf("network resource base = %s, want %s", network.ResourceBase, want)
	}
	lb, err := openstack.NewLoadBalancerV2(pc, gophercloud.EndpointOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if want := c.URL() + "/public/load-balancer/v2.0/"; lb.ResourceBase != want {
		t.Errorf("load-balancer resource base = %s, want %s", lb.ResourceBase, want)
	}
	pages, err := extensions.List(network).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exts, err := extensions.ExtractExtensions(pages)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(exts, func(e extensions.Extension) bool { return e.Alias == "router" }) {
		t.Errorf("extensions %v lack router", exts)
	}
	if _, err := extensions.Get(ctx, network, "nope").Extract(); !gophercloud.ResponseCodeIs(err, 404) {
		t.Errorf("unknown extension: %v, want 404", err)
	}
	var ifaces []string
	for _, r := range c.Requests(emulator.Network) {
		ifaces = append(ifaces, r.Interface)
	}
	if slices.ContainsFunc(ifaces, func(s string) bool { return s != "internal" }) {
		t.Errorf("network requests on interfaces %v, want only internal", ifaces)
	}
}

func TestNovaNameFilterIsARegularExpression(t *testing.T) {
	for _, caseSensitive := range []bool{false, true} {
		c := newCloud(t, emulator.Options{CaseSensitiveNames: caseSensitive})
		for _, name := range []string{"node-1", "node-10", "my-node-1", "Node-1", "nodeX1", "other"} {
			if _, err := c.AddServer(emulator.Server{Name: name}); err != nil {
				t.Fatal(err)
			}
		}
		pc, err := authenticate(t.Context(), c.passwordAuth())
		if err != nil {
			t.Fatal(err)
		}
		sc := computeClient(t, pc, "2.47")
		tests := []struct {
			filter string
			want   []string
		}{
			{"node-1", []string{"Node-1", "my-node-1", "node-1", "node-10"}},
			{"^node-1$", []string{"Node-1", "node-1"}},
			{"node.1", []string{"Node-1", "my-node-1", "node-1", "node-10", "nodeX1"}},
			{`^node\.1$`, nil},
		}
		for _, tt := range tests {
			want := tt.want
			if caseSensitive {
				want = slices.DeleteFunc(slices.Clone(want), func(s string) bool { return s == "Node-1" })
			}
			list, err := listServers(t.Context(), sc, servers.ListOpts{Name: tt.filter})
			if err != nil {
				t.Fatal(err)
			}
			if got := names(list); !slices.Equal(got, want) {
				t.Errorf("case-sensitive %v: name=%s lists %v, want %v", caseSensitive, tt.filter, got, want)
			}
		}
		if _, err := listServers(t.Context(), sc, servers.ListOpts{Name: "node-("}); !gophercloud.ResponseCodeIs(err, 400) {
			t.Errorf("an invalid regular expression: %v, want 400", err)
		}
	}
}

func TestNovaPagination(t *testing.T) {
	c := newCloud(t, emulator.Options{ComputePageLimit: 2})
	var added []string
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		s, err := c.AddServer(emulator.Server{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		added = append(added, s.Name)
	}
	pc, err := authenticate(t.Context(), c.passwordAuth())
	if err != nil {
		t.Fatal(err)
	}
	list, err := listServers(t.Context(), computeClient(t, pc, "2.47"), servers.ListOpts{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range list {
		got = append(got, s.Name)
	}
	slices.Reverse(added) // newest first
	if !slices.Equal(got, added) {
		t.Errorf("listed %v, want %v", got, added)
	}
	if n := len(c.Requests(emulator.Compute)); n != 3 {
		t.Errorf("%d list requests, want 3 pages", n)
	}
	_, err = listServers(t.Context(), computeClient(t, pc, ""), servers.ListOpts{Marker: "nope"})
	if !gophercloud.ResponseCodeIs(err, 400) {
		t.Errorf("unknown marker: %v, want 400", err)
	}
}

func TestNovaServer(t *testing.T) {
	c := newCloud(t, emulator.Options{})
	if _, err := c.AddFlavor(emulator.Flavor{Name: "m1.large", VCPUs: 4, RAM: 8192, Disk: 80}); err != nil {
		t.Fatal(err)
	}
	s, err := c.AddServer(emulator.Server{
		Name: "node-1", Flavor: "m1.large", AvailabilityZone: "az-1", Status: "SHUTOFF",
		Addresses: map[string][]emulator.Address{
			"private": {{Addr: "10.0.0.5", MAC: "fa:16:3e:00:00:01"}, {Addr: "203.0.113.7", Type: "floating"}, {Addr: "fd00::5"}},
		},
		AccessIPv4: "198.51.100.1", AccessIPv6: "2001:db8::1", Metadata: map[string]string{"role": "worker"},
	})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := authenticate(t.Context(), c.passwordAuth())
	if err != nil {
		t.Fatal(err)
	}

	got, err := servers.Get(t.Context(), computeClient(t, pc, "2.47"), s.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "node-1" || got.Status != "SHUTOFF" || got.AvailabilityZone != "az-1" || got.TenantID != c.DefaultProject().ID ||
		got.AccessIPv4 != "198.51.100.1" || got.AccessIPv6 != "2001:db8::1" || got.Metadata["role"] != "worker" {
		t.Errorf("server = %+v", got)
	}
	if got.Flavor["original_name"] != "m1.large" || got.Flavor["vcpus"] != float64(4) || got.Flavor["id"] != nil {
		t.Errorf("flavor at 2.47 = %v, want original_name m1.large and no id", got.Flavor)
	}
	addrs, _ := json.Marshal(got.Addresses["private"])
	for _, want := range []string{`"addr":"10.0.0.5"`, `"OS-EXT-IPS:type":"fixed"`, `"OS-EXT-IPS-MAC:mac_addr":"fa:16:3e:00:00:01"`,
		`"addr":"203.0.113.7"`, `"OS-EXT-IPS:type":"floating"`, `"version":6`} {
		if !bytes.Contains(addrs, []byte(want)) {
			t.Errorf("addresses %s lack %s", addrs, want)
		}
	}

	old, err := servers.Get(t.Context(), computeClient(t, pc, "2.1"), s.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	flavorID, _ := old.Flavor["id"].(string)
	if flavorID == "" || old.Flavor["original_name"] != nil {
		t.Fatalf("flavor at 2.1 = %v, want an id only", old.Flavor)
	}
	f, err := flavors.Get(t.Context(), computeClient(t, pc, "2.1"), flavorID).Extract()
	if err != nil || f.Name != "m1.large" || f.RAM != 8192 {
		t.Errorf("flavor %s = %+v, %v", flavorID, f, err)
	}

	res := servers.Get(t.Context(), computeClient(t, pc, "latest"), s.ID)
	if res.Err != nil || res.Header.Get("X-OpenStack-Nova-API-Version") != "2.96" {
		t.Errorf("latest: %v, served %q", res.Err, res.Header.Get("X-OpenStack-Nova-API-Version"))
	}
	if err := servers.Get(t.Context(), computeClient(t, pc, "2.200"), s.ID).Err; !gophercloud.ResponseCodeIs(err, 406) {
		t.Errorf("microversion 2.200: %v, want 406", err)
	}
}

func TestNovaNotFoundAndProjects(t *testing.T) {
	c := newCloud(t, emulator.Options{})
	other, err := c.AddProject(emulator.Project{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := c.AddServer(emulator.Server{Name: "node-1", ProjectID: other.ID})
	if err != nil {
		t.Fatal(err)
	}
	ours, err := c.AddServer(emulator.Server{Name: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := authenticate(t.Context(), c.passwordAuth())
	if err != nil {
		t.Fatal(err)
	}
	sc := computeClient(t, pc, "2.47")
	list, err := listServers(t.Context(), sc, servers.ListOpts{Name: "node-1"})
	if err != nil || len(list) != 1 || list[0].ID != ours.ID {
		t.Errorf("list = %+v, %v; want only the project's server", list, err)
	}
	for _, id := range []string{theirs.ID, "no-such-server"} {
		err := servers.Get(t.Context(), sc, id).Err
		var resp gophercloud.ErrUnexpectedResponseCode
		if !errors.As(err, &resp) || resp.Actual != 404 || !bytes.Contains(resp.Body, []byte(`"itemNotFound"`)) {
			t.Errorf("GET %s: %v, want a 404 itemNotFound", id, err)
		}
	}
	if err := c.DeleteServer(ours.ID); err != nil {
		t.Fatal(err)
	}
	if err := servers.Get(t.Context(), sc, ours.ID).Err; !gophercloud.ResponseCodeIs(err, 404) {
		t.Errorf("GET of a deleted server: %v, want 404", err)
	}
}

func TestFaults(t *testing.T) {
	c := newCloud(t, emulator.Options{})
	s, err := c.AddServer(emulator.Server{Name: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := authenticate(t.Context(), c.passwordAuth())
	if err != nil {
		t.Fatal(err)
	}
	sc := computeClient(t, pc, "2.47")
	get := func(ctx context.Context) error { return servers.Get(ctx, sc, s.ID).Err }

	t.Run("status", func(t *testing.T) {
		for status, key := range map[int]string{503: "serviceUnavailable", 500: "computeFault", 409: "conflictingRequest"} {
			id := c.AddFault(emulator.Fault{Service: emulator.Compute, Status: status})
			var resp gophercloud.ErrUnexpectedResponseCode
			if err := get(t.Context()); !errors.As(err, &resp) || resp.Actual != status || !bytes.Contains(resp.Body, []byte(key)) {
				t.Errorf("fault %d: %v", status, err)
			}
			c.RemoveFault(id)
		}
		if err := get(t.Context()); err != nil {
			t.Errorf("after removing the faults: %v", err)
		}
	})

	t.Run("count, method and path", func(t *testing.T) {
		c.AddFault(emulator.Fault{Service: emulator.Compute, Path: "v2.1/servers/", Method: "GET", Status: 500, Count: 1})
		c.AddFault(emulator.Fault{Service: emulator.Compute, Path: "v2.1/flavors", Status: 500})
		c.AddFault(emulator.Fault{Service: emulator.Network, Status: 500})
		defer c.ClearFaults()
		if err := get(t.Context()); !gophercloud.ResponseCodeIs(err, 500) {
			t.Errorf("first request: %v, want 500", err)
		}
		if err := get(t.Context()); err != nil {
			t.Errorf("second request, past the count: %v", err)
		}
	})

	t.Run("latency", func(t *testing.T) {
		c.AddFault(emulator.Fault{Service: emulator.Compute, Latency: 50 * time.Millisecond})
		defer c.ClearFaults()
		start := time.Now()
		if err := get(t.Context()); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Errorf("answered in %s, before the latency", d)
		}
	})

	t.Run("hang until removed", func(t *testing.T) {
		id := c.AddFault(emulator.Fault{Service: emulator.Compute, Hang: true})
		done := make(chan error, 1)
		go func() { done <- get(context.Background()) }()
		waitHung(t, c.Emulator, 1)
		select {
		case err := <-done:
			t.Fatalf("a hung request returned: %v", err)
		default:
		}
		c.RemoveFault(id)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("after the hang: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the request stayed hung after the fault was removed")
		}
	})

	t.Run("hang until the client gives up", func(t *testing.T) {
		c.AddFault(emulator.Fault{Service: emulator.Compute, Hang: true})
		defer c.ClearFaults()
		c.ResetRequests()
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if err := get(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("hung request: %v, want the deadline", err)
		}
		waitHung(t, c.Emulator, 0)
		if r := c.Requests(emulator.Compute); len(r) != 1 || r[0].Status != 0 {
			t.Errorf("requests = %+v, want one, unanswered", r)
		}
	})
}

func TestCloseReleasesHungRequests(t *testing.T) {
	c := newCloud(t, emulator.Options{})
	pc, err := authenticate(t.Context(), c.passwordAuth())
	if err != nil {
		t.Fatal(err)
	}
	sc := computeClient(t, pc, "")
	c.AddFault(emulator.Fault{Service: emulator.Compute, Hang: true})
	done := make(chan error, 1)
	go func() { _, err := listServers(context.Background(), sc, servers.ListOpts{}); done <- err }()
	waitHung(t, c.Emulator, 1)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	deadline := time.After(10 * time.Second)
	select {
	case <-closed:
	case <-deadline:
		t.Fatal("Close blocked on the hung request")
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("the hung request got an answer; want the connection dropped")
		}
	case <-deadline:
		t.Fatal("Close did not release the hung request")
	}
}

func TestUnknownPathsAnswerInTheServiceFormat(t *testing.T) {
	c := newCloud(t, emulator.Options{})
	for path, want := range map[string]string{
		"/public/compute/v2.1/os-hypervisors": `"itemNotFound"`,
		"/internal/network/v2.0/nothing":      `"NeutronError"`,
		"/admin/load-balancer/v2/nothing":     `"faultstring"`,
		"/identity/v3/nothing":                `"error"`,
	} {
		resp, err := http.Get(c.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 404 || !bytes.Contains(body, []byte(want)) {
			t.Errorf("GET %s = %d %s, want 404 with %s", path, resp.StatusCode, body, want)
		}
	}
	resp, err := http.Get(c.URL() + "/public/compute/v2.1/servers/detail")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), c.AuthURL()) {
		t.Errorf("without a token: %d %v, want 401 naming Keystone", resp.StatusCode, resp.Header)
	}
}

// waitHung waits until n requests hang in e.
func waitHung(t *testing.T, e *emulator.Emulator, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return e.Hung() == n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d hung requests: %v (now %d)", n, err, e.Hung())
	}
}
