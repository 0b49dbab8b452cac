package openstack

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
)

// The credentials of testCloud's user. The password has characters that
// JSON and URLs escape, so that its escaped forms can be looked for too.
const (
	testPassword  = `p@ss"w0rd;&x`
	testAppSecret = "app-cred-s3cret-0123"
)

// testCloud is an emulator with a user "ccm" (testPassword) who has a role
// on the default project, and an application credential "ccm-cred"
// (testAppSecret) of that user.
type testCloud struct {
	*emulator.Emulator
	user emulator.User
	cred emulator.ApplicationCredential
}

func newTestCloud(t *testing.T, opts emulator.Options) *testCloud {
	t.Helper()
	e := emulator.New(opts)
	t.Cleanup(e.Close)
	u, err := e.AddUser(emulator.User{Name: "ccm", Password: testPassword, Projects: []string{e.DefaultProject().ID}})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := e.AddApplicationCredential(emulator.ApplicationCredential{Name: "ccm-cred", UserID: u.ID, Secret: testAppSecret})
	if err != nil {
		t.Fatal(err)
	}
	return &testCloud{Emulator: e, user: u, cred: cred}
}

// conf is a cloud.conf for the emulator: password authentication of "ccm"
// on the default project by name, and the lines of extra after [Global]'s.
func (c *testCloud) conf(extra ...string) string {
	return c.confWith(fmt.Sprintf("username = ccm\npassword = %q\nuser-domain-name = Default\ntenant-name = demo\ntenant-domain-id = default", testPassword), extra...)
}

// confWith is a cloud.conf for the emulator with the given credentials.
func (c *testCloud) confWith(credentials string, extra ...string) string {
	return fmt.Sprintf("[Global]\nauth-url = %s\nregion = %s\n%s\n%s\n", c.AuthURL(), c.Region(), credentials, strings.Join(extra, "\n"))
}

// newTestProvider builds the provider from a cloud.conf; failed connection
// attempts are retried at once.
func newTestProvider(t *testing.T, conf string) *Cloud {
	t.Helper()
	return newTestProviderWith(t, conf, defaultHTTPTimeouts)
}

func newTestProviderWith(t *testing.T, conf string, timeouts httpTimeouts) *Cloud {
	t.Helper()
	cfg, _, err := ParseConfig(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	p, err := newCloud(cfg, timeouts)
	if err != nil {
		t.Fatal(err)
	}
	p.conn.minBackoff, p.conn.maxBackoff = 0, 0
	p.conn.logger, _ = ktesting.NewTestContext(t)
	p.loadBalancers.pollInitial, p.loadBalancers.pollMax = 2*time.Millisecond, 20*time.Millisecond
	t.Cleanup(p.conn.close)
	return p
}

// addServer adds a running server with a fixed address.
func (c *testCloud) addServer(t *testing.T, s emulator.Server) emulator.Server {
	t.Helper()
	if s.Addresses == nil {
		s.Addresses = map[string][]emulator.Address{"private": {{Addr: "10.0.0.10"}}}
	}
	out, err := c.AddServer(s)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func node(name, providerID string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
}

// tokenRequests counts the token requests Keystone answered with status.
func tokenRequests(e *emulator.Emulator, status int) int {
	n := 0
	for _, r := range e.Requests(emulator.Identity) {
		if r.Method == "POST" && r.Path == "v3/auth/tokens" && r.Status == status {
			n++
		}
	}
	return n
}

// eventually polls cond until it holds, failing the test at the deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// lbNetworks are the networks of testCloud's load balancers.
type lbNetworks struct {
	private, public             emulator.Net
	privateSubnet, publicSubnet emulator.Subnet
}

// addLBNetworks adds a network "private" (10.0.0.0/24), on which servers
// added later get ports, and an external network "public"
// (172.24.4.0/24) of floating IPs.
func (c *testCloud) addLBNetworks(t *testing.T) lbNetworks {
	t.Helper()
	var n lbNetworks
	var err error
	if n.private, err = c.AddNetwork(emulator.Net{Name: "private"}); err != nil {
		t.Fatal(err)
	}
	if n.privateSubnet, err = c.AddSubnet(emulator.Subnet{Name: "private-subnet", NetworkID: n.private.ID, CIDR: "10.0.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	if n.public, err = c.AddNetwork(emulator.Net{Name: "public", External: true}); err != nil {
		t.Fatal(err)
	}
	if n.publicSubnet, err = c.AddSubnet(emulator.Subnet{Name: "public-subnet", NetworkID: n.public.ID, CIDR: "172.24.4.0/24"}); err != nil {
		t.Fatal(err)
	}
	return n
}
