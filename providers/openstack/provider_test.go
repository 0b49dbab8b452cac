package openstack

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
)

func TestRegisteredFactory(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	if !slices.Contains(cloud.Providers(), ProviderName) {
		t.Fatalf("providers %v lack %s", cloud.Providers(), ProviderName)
	}
	p, err := cloudprovider.GetCloudProvider(ProviderName, strings.NewReader(c.conf("unknown-key = 1")))
	if err != nil {
		t.Fatal(err)
	}
	oc, ok := p.(*Cloud)
	if !ok {
		t.Fatalf("the factory made a %T", p)
	}
	t.Cleanup(oc.conn.close)
	if n := len(c.Requests()); n != 0 {
		t.Errorf("building the provider sent %d requests; it connects on first use", n)
	}
	if _, ok := p.InstancesV2(); !ok {
		t.Error("no InstancesV2")
	}
	if _, ok := p.Instances(); ok {
		t.Error("Instances offered")
	}
	if _, ok := p.Zones(); ok {
		t.Error("Zones offered")
	}
	if _, ok := p.Clusters(); ok {
		t.Error("Clusters offered")
	}
	if _, ok := p.LoadBalancer(); !ok {
		t.Error("no LoadBalancer")
	}
	if _, ok := p.Routes(); ok {
		t.Error("Routes offered")
	}
	if p.ProviderName() != "openstack" || !p.HasClusterID() {
		t.Errorf("ProviderName %q, HasClusterID %v", p.ProviderName(), p.HasClusterID())
	}
}

func TestFactoryErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		conf *string // nil: no config
		want []string
	}{
		{name: "no config", want: []string{"--cloud-config"}},
		{name: "bad config", conf: stringPtr("[Global]\nusername = ccm\n"),
			want: []string{"region is required", "auth-url is required", "no credentials"}},
		{name: "user name without a domain", conf: stringPtr("[Global]\nauth-url = https://k:5000/v3\nregion = r\nusername = u\npassword = p\n"),
			want: []string{"[Global] credentials", "DomainID or DomainName"}},
		{name: "project name without a domain", conf: stringPtr("[Global]\nauth-url = https://k:5000/v3\nregion = r\nuser-id = u\npassword = p\ntenant-name = demo\n"),
			want: []string{"[Global] credentials"}},
		{name: "auth-url without a scheme", conf: stringPtr("[Global]\nauth-url = keystone:5000\nregion = r\nuser-id = u\npassword = p\n"),
			want: []string{`auth-url "keystone:5000" is not an http or https URL`}},
		{name: "ca-file without a certificate", conf: stringPtr("[Global]\nauth-url = https://k:5000/v3\nregion = r\nuser-id = u\npassword = p\nca-file = " + garbage + "\n"),
			want: []string{"ca-file", "no PEM certificate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p cloudprovider.Interface
			var err error
			if tt.conf == nil {
				p, err = newFromConfig(nil)
			} else {
				p, err = newFromConfig(strings.NewReader(*tt.conf))
			}
			if err == nil {
				t.Fatalf("built %T, want an error", p)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "password = p") {
				t.Errorf("error %q shows the config", err)
			}
		})
	}
	if _, err := newFromConfig(nil); !errors.Is(err, errNoConfig) {
		t.Errorf("no config: %v, want errNoConfig", err)
	}
}

func stringPtr(s string) *string { return &s }

// A CCM starts while Keystone is down: the provider is built without a
// request, calls fail with Keystone's error, a failed attempt is not
// repeated before its back-off, and the first call after Keystone is back
// connects.
func TestStartsWhileKeystoneIsDown(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	srv := c.addServer(t, emulator.Server{Name: "node-1"})
	down := c.AddFault(emulator.Fault{Service: emulator.Identity, Status: http.StatusServiceUnavailable})
	p := newTestProvider(t, c.conf())
	clk := newFakeClock()
	p.conn.now = clk.Now
	p.conn.minBackoff, p.conn.maxBackoff = 10*time.Second, time.Minute
	instances, _ := p.InstancesV2()
	n := node("node-1", "")

	_, err := instances.InstanceExists(t.Context(), n)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("with Keystone down: %v, want its 503", err)
	}
	if d, ok := cloud.RetryAfter(err); ok {
		t.Errorf("the first failure asks to retry after %s; it has just tried", d)
	}
	_, err = instances.InstanceExists(t.Context(), n)
	d, ok := cloud.RetryAfter(err)
	if !ok || d != 10*time.Second || !strings.Contains(err.Error(), "503") {
		t.Errorf("within the back-off: %v (retry after %s, %v), want the last error and 10s", err, d, ok)
	}
	if got := len(c.Requests(emulator.Identity)); got != 1 {
		t.Errorf("%d Keystone requests, want 1: a failed attempt waits for its back-off", got)
	}

	clk.Advance(10 * time.Second)
	if _, err := instances.InstanceExists(t.Context(), n); err == nil {
		t.Fatal("Keystone is still down")
	}
	_, err = instances.InstanceExists(t.Context(), n)
	if d, _ := cloud.RetryAfter(err); d != 20*time.Second {
		t.Errorf("after two failures the back-off is %s, want 20s", d)
	}

	c.RemoveFault(down)
	clk.Advance(20 * time.Second)
	md, err := instances.InstanceMetadata(t.Context(), n)
	if err != nil {
		t.Fatalf("with Keystone back: %v", err)
	}
	if md.ProviderID != providerID(srv.ID) {
		t.Errorf("providerID %s, want %s", md.ProviderID, providerID(srv.ID))
	}
}

// While one attempt to connect hangs, callers wait for it no longer than
// their deadline, and no second attempt starts.
func TestHungKeystoneHoldsNoCaller(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	c.addServer(t, emulator.Server{Name: "node-1"})
	hang := c.AddFault(emulator.Fault{Service: emulator.Identity, Hang: true})
	p := newTestProvider(t, c.conf())
	instances, _ := p.InstancesV2()

	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		start := time.Now()
		_, err := instances.InstanceExists(ctx, node("node-1", ""))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("with Keystone hung: %v, want the caller's deadline", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("returned after %s", d)
		}
	}
	if got := len(c.Requests(emulator.Identity)); got != 1 {
		t.Errorf("%d Keystone requests, want the one attempt", got)
	}
	c.RemoveFault(hang)
	if exists, err := instances.InstanceExists(t.Context(), node("node-1", "")); err != nil || !exists {
		t.Errorf("after Keystone answered: %v, %v", exists, err)
	}
	if got := tokenRequests(c.Emulator, http.StatusCreated); got != 1 {
		t.Errorf("%d tokens issued, want 1", got)
	}
}

func TestInitializeConnectsInTheBackground(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	c.addServer(t, emulator.Server{Name: "node-1"})
	p := newTestProvider(t, c.conf())
	stop := make(chan struct{})
	defer close(stop)
	p.Initialize(nil, stop)
	p.Initialize(nil, stop) // once only
	eventually(t, "a token", func() bool { return tokenRequests(c.Emulator, http.StatusCreated) == 1 })
	eventually(t, "the connection", func() bool {
		p.conn.mu.Lock()
		defer p.conn.mu.Unlock()
		return p.conn.conn != nil
	})
	instances, _ := p.InstancesV2()
	if _, err := instances.InstanceMetadata(t.Context(), node("node-1", "")); err != nil {
		t.Fatal(err)
	}
	if got := len(c.Requests(emulator.Identity)); got != 1 {
		t.Errorf("%d Keystone requests, want the one of Initialize", got)
	}
}

func TestStopEndsAHungAttempt(t *testing.T) {
	c := newTestCloud(t, emulator.Options{})
	c.AddFault(emulator.Fault{Service: emulator.Identity, Hang: true})
	p := newTestProvider(t, c.conf())
	stop := make(chan struct{})
	p.Initialize(nil, stop)
	eventually(t, "the attempt to hang", func() bool { return c.Hung() == 1 })
	close(stop)
	eventually(t, "the hung attempt to end", func() bool { return c.Hung() == 0 })
}
