package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/cloud"
)

func newCloud(t *testing.T, yaml string) *Cloud {
	t.Helper()
	cfg, err := ParseConfig(strings.NewReader(yaml))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func node(name, providerID string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
}

func service(name string) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error; none = valid
	}{
		{name: "empty", yaml: ""},
		{name: "full", yaml: `
instances: [{name: n1, id: i-1, type: t, zone: z, region: r, state: stopped, addresses: [{type: InternalIP, address: 10.0.0.1}], labels: {a: b}}]
autoInstances: {enabled: true, zones: [a, b], addressCIDR: 10.1.0.0/16}
loadBalancers: {vipCIDR: 192.0.2.0/24}
routes: [{targetNode: n1, destinationCIDR: 10.244.0.0/24}]
faults: [{method: "*", object: "n*", latency: 1s, count: 2}]
adminAddress: 127.0.0.1:0
`},
		{name: "every problem at once", yaml: `
instances:
- {name: n1, state: exploded, addresses: [{type: Weird, address: x}]}
- {name: n1}
- {id: i-2}
loadBalancers: {vipCIDR: not-a-cidr}
faults: [{method: Nope, hang: sometimes, errorRate: 2}]
adminAddress: 0.0.0.0:8081
`, want: []string{
			"instances[0].state:", "instances[0].addresses[0].type:", "instances[1].name: \"n1\" is not unique",
			"instances[2].name: is required", "loadBalancers.vipCIDR:", "faults[0].method:", "faults[0].hang:",
			"faults[0].errorRate:", "adminAddress:", "not a loopback address",
		}},
		{name: "unknown field", yaml: "instancez: []", want: []string{"instancez"}},
		{name: "empty host is not loopback", yaml: "adminAddress: ':8081'", want: []string{"not a loopback address"}},
		{name: "bad duration", yaml: "faults: [{method: '*', latency: soon}]", want: []string{"soon"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(strings.NewReader(tt.yaml))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestInstances(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newCloud(t, `
instances:
- {name: run, id: i-run, type: m1, zone: z1, region: r1, addresses: [{type: InternalIP, address: 10.0.0.1}], labels: {rack: r1}}
- {name: stop, id: i-stop, state: stopped}
- {name: gone, id: i-gone, state: terminated}
`)
	md, err := c.InstanceMetadata(ctx, node("run", ""))
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "fake://i-run" || md.InstanceType != "m1" || md.Zone != "z1" || md.Region != "r1" || md.AdditionalLabels["rack"] != "r1" || md.NodeAddresses[0].Address != "10.0.0.1" {
		t.Errorf("metadata = %+v", md)
	}
	md.NodeAddresses[0].Address = "mutated"
	if again, _ := c.InstanceMetadata(ctx, node("run", "")); again.NodeAddresses[0].Address != "10.0.0.1" {
		t.Error("metadata shares the cloud's slices")
	}
	if md, err := c.InstanceMetadata(ctx, node("renamed", "fake://i-run")); err != nil || md.ProviderID != "fake://i-run" {
		t.Errorf("lookup by providerID = %+v, %v", md, err)
	}

	tests := []struct {
		node             *v1.Node
		exists, shutdown bool
		metadataNotFound bool
	}{
		{node: node("run", ""), exists: true},
		{node: node("stop", ""), exists: true, shutdown: true},
		{node: node("gone", ""), metadataNotFound: true},
		{node: node("nobody", ""), metadataNotFound: true},
		{node: node("run", "fake://i-unknown"), metadataNotFound: true},
	}
	for _, tt := range tests {
		t.Run(tt.node.Name+tt.node.Spec.ProviderID, func(t *testing.T) {
			if got, err := c.InstanceExists(ctx, tt.node); err != nil || got != tt.exists {
				t.Errorf("InstanceExists = %v, %v; want %v", got, err, tt.exists)
			}
			if got, err := c.InstanceShutdown(ctx, tt.node); err != nil || got != tt.shutdown {
				t.Errorf("InstanceShutdown = %v, %v; want %v", got, err, tt.shutdown)
			}
			_, err := c.InstanceMetadata(ctx, tt.node)
			if got := errors.Is(err, cloudprovider.InstanceNotFound); got != tt.metadataNotFound {
				t.Errorf("InstanceMetadata error = %v; want InstanceNotFound %v", err, tt.metadataNotFound)
			}
		})
	}
	if _, err := c.InstanceMetadata(ctx, node("x", "aws:///i-1")); err == nil || errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Errorf("foreign providerID: %v, want a plain error", err)
	}

	if err := c.SetInstanceState("run", StateStopped); err != nil {
		t.Fatal(err)
	}
	if down, _ := c.InstanceShutdown(ctx, node("run", "")); !down {
		t.Error("stopped instance is not shut down")
	}
	if !c.DeleteInstance("run") {
		t.Fatal("DeleteInstance")
	}
	if ok, _ := c.InstanceExists(ctx, node("run", "fake://i-run")); ok {
		t.Error("deleted instance exists")
	}
}

func TestAutoInstances(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newCloud(t, "autoInstances: {enabled: true, type: t1, region: r1, zones: [a, b], addressCIDR: 10.9.0.0/24}")
	first, err := c.InstanceMetadata(ctx, node("n1", ""))
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.InstanceMetadata(ctx, node("n2", ""))
	if err != nil {
		t.Fatal(err)
	}
	if first.Zone != "a" || second.Zone != "b" || first.Region != "r1" || first.InstanceType != "t1" {
		t.Errorf("auto instances: %+v, %+v", first, second)
	}
	if first.ProviderID == second.ProviderID || first.NodeAddresses[0].Address == second.NodeAddresses[0].Address {
		t.Errorf("auto instances share an id or address: %+v, %+v", first, second)
	}
	if !strings.HasPrefix(first.NodeAddresses[0].Address, "10.9.0.") {
		t.Errorf("address %s not from addressCIDR", first.NodeAddresses[0].Address)
	}
	again, _ := c.InstanceMetadata(ctx, node("n1", first.ProviderID))
	if again.ProviderID != first.ProviderID {
		t.Errorf("second lookup made a new instance: %s vs %s", again.ProviderID, first.ProviderID)
	}
}

func TestLoadBalancerVIPs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newCloud(t, "loadBalancers: {vipCIDR: 192.0.2.0/30}") // two usable VIPs
	nodes := []*v1.Node{node("n2", ""), node("n1", "")}

	a, err := c.EnsureLoadBalancer(ctx, "k", service("a"), nodes)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.EnsureLoadBalancer(ctx, "k", service("a"), nodes[:1])
	if err != nil || again.Ingress[0].IP != a.Ingress[0].IP {
		t.Fatalf("re-ensure = %v, %v; want the same VIP %s", again, err, a.Ingress[0].IP)
	}
	if _, err := c.EnsureLoadBalancer(ctx, "k", service("b"), nodes); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnsureLoadBalancer(ctx, "k", service("c"), nodes); err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("third LB in a /30: %v, want exhaustion", err)
	}
	status, exists, err := c.GetLoadBalancer(ctx, "k", service("a"))
	if err != nil || !exists || status.Ingress[0].IP != a.Ingress[0].IP {
		t.Errorf("GetLoadBalancer = %v, %v, %v", status, exists, err)
	}
	if err := c.UpdateLoadBalancer(ctx, "k", service("a"), nodes); err != nil {
		t.Fatal(err)
	}
	if lbs := c.ListLoadBalancers(); len(lbs) != 2 || strings.Join(lbs[0].Nodes, ",") != "n1,n2" {
		t.Errorf("load balancers = %+v", lbs)
	}

	if vips := c.AllocatedVIPs(); len(vips) != 2 {
		t.Errorf("allocated VIPs = %v, want 2", vips)
	}
	if err := c.EnsureLoadBalancerDeleted(ctx, "k", service("a")); err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureLoadBalancerDeleted(ctx, "k", service("a")); err != nil {
		t.Errorf("deleting an absent LB: %v", err)
	}
	if vips := c.AllocatedVIPs(); len(vips) != 1 || vips[0] == a.Ingress[0].IP {
		t.Errorf("allocated VIPs after deleting a = %v, want one VIP, not %s", vips, a.Ingress[0].IP)
	}
	if _, exists, _ := c.GetLoadBalancer(ctx, "k", service("a")); exists {
		t.Error("deleted LB exists")
	}
	if err := c.UpdateLoadBalancer(ctx, "k", service("a"), nodes); err == nil {
		t.Error("updating a missing LB: want an error")
	}
	if c2, err := c.EnsureLoadBalancer(ctx, "k", service("c"), nodes); err != nil || c2.Ingress[0].IP != a.Ingress[0].IP {
		t.Errorf("after a delete the VIP is free again: %v, %v", c2, err)
	}
}

// TestLoadBalancersShareMemberLists: load balancers with the same node set
// hold one list of names, so the fake's state does not grow as load
// balancers x Nodes; a changed set gets its own list.
func TestLoadBalancersShareMemberLists(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newCloud(t, "loadBalancers: {vipCIDR: 192.0.2.0/24}")
	members := func(name string) []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.lbs[cloudprovider.DefaultLoadBalancerName(service(name))].Nodes
	}
	nodes := []*v1.Node{node("n2", ""), node("n1", "")}
	for _, name := range []string{"a", "b"} {
		if _, err := c.EnsureLoadBalancer(ctx, "k", service(name), nodes); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := members("a"), members("b"); strings.Join(b, ",") != "n1,n2" || unsafe.SliceData(a) != unsafe.SliceData(b) {
		t.Errorf("members a %v and b %v: want one shared list n1,n2", a, b)
	}
	if err := c.UpdateLoadBalancer(ctx, "k", service("b"), nodes[:1]); err != nil {
		t.Fatal(err)
	}
	if a, b := members("a"), members("b"); strings.Join(a, ",") != "n1,n2" || strings.Join(b, ",") != "n2" {
		t.Errorf("after b's update: members a %v, b %v; want n1,n2 and n2", a, b)
	}
}

func TestLoadBalancerIP(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newCloud(t, "loadBalancers: {vipCIDR: 192.0.2.0/24}")
	svc := service("a")
	svc.Spec.LoadBalancerIP = "192.0.2.77"
	if st, err := c.EnsureLoadBalancer(ctx, "k", svc, nil); err != nil || st.Ingress[0].IP != "192.0.2.77" {
		t.Fatalf("= %v, %v; want 192.0.2.77", st, err)
	}
	other := service("b")
	other.Spec.LoadBalancerIP = "192.0.2.77"
	if _, err := c.EnsureLoadBalancer(ctx, "k", other, nil); err == nil {
		t.Error("taken loadBalancerIP: want an error")
	}
	other.Spec.LoadBalancerIP = "198.51.100.1"
	if _, err := c.EnsureLoadBalancer(ctx, "k", other, nil); err == nil {
		t.Error("loadBalancerIP outside the pool: want an error")
	}
	noPool := newCloud(t, "")
	if _, err := noPool.EnsureLoadBalancer(ctx, "k", service("a"), nil); err == nil || !strings.Contains(err.Error(), "vipCIDR") {
		t.Errorf("no pool: %v, want an error naming vipCIDR", err)
	}
}

func TestRoutes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newCloud(t, `
instances: [{name: n1}, {name: n2, state: stopped}]
routes: [{name: old, targetNode: gone, destinationCIDR: 10.244.9.0/24}]
`)
	for i, n := range []string{"n1", "n2"} {
		r := &cloudprovider.Route{TargetNode: types.NodeName(n), DestinationCIDR: fmt.Sprintf("10.244.%d.0/24", i)}
		if err := c.CreateRoute(ctx, "k", "uid-"+n, r); err != nil {
			t.Fatal(err)
		}
		if err := c.CreateRoute(ctx, "k", "uid-"+n, r); err != nil {
			t.Errorf("creating the same route again: %v", err)
		}
	}
	if err := c.CreateRoute(ctx, "k", "x", &cloudprovider.Route{TargetNode: "n2", DestinationCIDR: "10.244.0.0/24"}); err == nil {
		t.Error("same destination for another node: want an error")
	}
	routes, err := c.ListRoutes(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range routes {
		got[r.DestinationCIDR] = r.Blackhole
	}
	want := map[string]bool{"10.244.0.0/24": false, "10.244.1.0/24": true, "10.244.9.0/24": true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("routes (cidr: blackhole) = %v, want %v", got, want)
	}
	if err := c.DeleteRoute(ctx, "k", &cloudprovider.Route{DestinationCIDR: "10.244.9.0/24"}); err != nil {
		t.Fatal(err)
	}
	if n := len(c.ListRouteTable()); n != 2 {
		t.Errorf("%d routes after a delete, want 2", n)
	}
}

func TestFaults(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newCloud(t, "instances: [{name: n1}, {name: n2}]")

	id, err := c.AddFault(Fault{Method: "InstanceExists", Object: "n1", Error: "boom", Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		_, err := c.InstanceExists(ctx, node("n1", ""))
		if wantErr := i < 2; (err != nil) != wantErr || (err != nil && !strings.Contains(err.Error(), "boom")) {
			t.Errorf("call %d: %v, want error %v", i, err, wantErr)
		}
	}
	if _, err := c.InstanceExists(ctx, node("n2", "")); err != nil {
		t.Errorf("other object: %v", err)
	}
	if !c.RemoveFault(id) || c.RemoveFault(id) {
		t.Error("RemoveFault reports wrongly")
	}

	if _, err := c.AddFault(Fault{Method: "*", Throttle: true}); err != nil {
		t.Fatal(err)
	}
	var throttled *cloud.ThrottledError
	if _, err := c.InstanceShutdown(ctx, node("n1", "")); !errors.As(err, &throttled) {
		t.Errorf("throttle fault: %v, want a cloud.ThrottledError", err)
	}
	c.ClearFaults()

	c.SetRandSeed(7)
	if _, err := c.AddFault(Fault{Method: "InstanceMetadata", Error: "flaky", ErrorRate: 0.5}); err != nil {
		t.Fatal(err)
	}
	failures := 0
	for range 200 {
		if _, err := c.InstanceMetadata(ctx, node("n1", "")); err != nil {
			failures++
		}
	}
	if failures < 60 || failures > 140 {
		t.Errorf("%d of 200 calls failed at rate 0.5", failures)
	}
	c.ClearFaults()

	if _, err := c.AddFault(Fault{Method: "InstanceExists", Latency: Duration{100 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.InstanceExists(ctx, node("n1", "")); err != nil || time.Since(start) < 100*time.Millisecond {
		t.Errorf("latency fault: %v after %s", err, time.Since(start))
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := c.InstanceExists(short, node("n1", "")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("latency respects the context: %v", err)
	}
}

func TestHangs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newCloud(t, "instances: [{name: n1}]")

	if _, err := c.AddFault(Fault{Method: "InstanceExists", Hang: HangRespectContext}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := c.InstanceExists(short, node("n1", "")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("respect-context hang: %v", err)
	}
	c.ClearFaults()

	hangIgnoring := func(c *Cloud, release func()) {
		t.Helper()
		if _, err := c.AddFault(Fault{Method: "InstanceShutdown", Hang: HangIgnoreContext}); err != nil {
			t.Fatal(err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		done := make(chan error, 1)
		go func() {
			_, err := c.InstanceShutdown(cancelled, node("n1", ""))
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("ignore-context hang returned on a cancelled context: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		release()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("released call: %v, want it to go on and succeed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("hung call not released")
		}
	}
	hangIgnoring(c, c.ClearFaults)
	closing := newCloud(t, "instances: [{name: n1}]")
	hangIgnoring(closing, closing.Close)
}

func TestOverlaps(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newCloud(t, "loadBalancers: {vipCIDR: 192.0.2.0/24}")
	if _, err := c.AddFault(Fault{Method: "EnsureLoadBalancer", Latency: Duration{200 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	concurrently := func(names ...string) {
		var wg sync.WaitGroup
		for _, n := range names {
			wg.Go(func() {
				if _, err := c.EnsureLoadBalancer(ctx, "k", service(n), nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	concurrently("a", "b")
	if got := c.Overlaps(); got != 0 {
		t.Errorf("different services: %d overlaps, want 0", got)
	}
	concurrently("a", "a")
	if got := c.Overlaps(); got != 1 {
		t.Errorf("same service twice at once: %d overlaps, want 1", got)
	}
	if got := c.CallCount("EnsureLoadBalancer"); got != 4 {
		t.Errorf("CallCount = %d, want 4", got)
	}
	calls := c.Calls()
	if len(calls) != 4 || calls[0].Method != "EnsureLoadBalancer" || calls[0].End.Before(calls[0].Start) {
		t.Errorf("call records = %+v", calls)
	}
}

func TestAdminAPI(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newCloud(t, "instances: [{name: n1}]\nadminAddress: 127.0.0.1:0")
	base := "http://" + c.AdminAddr()
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	steps := []struct {
		method, path, body string
		status             int
		contains           string
	}{
		{"GET", "/instances", "", 200, `"name":"n1"`},
		{"POST", "/instances", `{"name":"n2","zone":"z"}`, 201, `"n2"`},
		{"POST", "/instances", `{"name":`, 400, "bad JSON"},
		{"POST", "/instances/n2/stop", "", 204, ""},
		{"GET", "/instances", "", 200, `"state":"stopped"`},
		{"POST", "/instances/n2/start", "", 204, ""},
		{"POST", "/instances/nobody/stop", "", 404, "not found"},
		{"DELETE", "/instances/n2", "", 204, ""},
		{"DELETE", "/instances/n2", "", 404, "no instance"},
		{"POST", "/faults", `{"method":"InstanceExists","error":"boom"}`, 201, `"id":"1"`},
		{"POST", "/faults", `{"method":"Nope"}`, 400, "method"},
		{"GET", "/faults", "", 200, `"boom"`},
		{"GET", "/loadbalancers", "", 200, "[]"},
		{"GET", "/vips", "", 200, "[]"},
		{"GET", "/routes", "", 200, "[]"},
		{"DELETE", "/faults/1", "", 204, ""},
		{"DELETE", "/faults/1", "", 404, ""},
		{"DELETE", "/faults", "", 204, ""},
	}
	for _, s := range steps {
		status, body := do(s.method, s.path, s.body)
		if status != s.status || !strings.Contains(body, s.contains) {
			t.Errorf("%s %s = %d %q; want %d containing %q", s.method, s.path, status, body, s.status, s.contains)
		}
	}
	if _, err := c.InstanceExists(ctx, node("n1", "")); err != nil {
		t.Fatal(err)
	}
	if status, body := do("GET", "/calls", ""); status != 200 || !strings.Contains(body, `"method":"InstanceExists"`) || !strings.Contains(body, `"overlaps":0`) {
		t.Errorf("GET /calls = %d %q", status, body)
	}
	if _, err := New(&Config{AdminAddress: "0.0.0.0:0"}); err == nil {
		t.Error("admin API on 0.0.0.0: want an error")
	}
}

func TestAdminHandlerServes(t *testing.T) {
	c := newCloud(t, "")
	srv := httptest.NewServer(c.AdminHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/instances")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("= %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestRegistered(t *testing.T) {
	p, err := cloudprovider.GetCloudProvider(ProviderName, strings.NewReader("autoInstances: {enabled: true}"))
	if err != nil || p == nil || p.ProviderName() != "fake" {
		t.Fatalf("GetCloudProvider = %v, %v", p, err)
	}
	p.(*Cloud).Close()
	if _, err := cloudprovider.GetCloudProvider(ProviderName, strings.NewReader("bogus: 1")); err == nil {
		t.Error("bad config through the factory: want an error")
	}
}

func TestCallLog(t *testing.T) {
	path := t.TempDir() + "/calls.jsonl"
	c, err := New(&Config{Instances: []Instance{{Name: "n1"}}, CallLog: path})
	if err != nil {
		t.Fatal(err)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if _, err := c.InstanceExists(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InstanceExists(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("call log has %d lines, want 2:\n%s", len(lines), data)
	}
	var rec CallRecord
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Method != "InstanceExists" || rec.Object != "n1" || rec.Start.IsZero() {
		t.Errorf("first record %+v, want InstanceExists of n1 with its start", rec)
	}
}
