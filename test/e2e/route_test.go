package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

// TestRoutesBesideHungCreates: 100 Nodes with pod CIDRs; CreateRoute hangs
// (ignoring its context) for 2 of them. The other 98 get their routes and
// NetworkUnavailable=False while the 2 hang; once the fault is cleared
// through the admin API, all 100 do.
func TestRoutesBesideHungCreates(t *testing.T) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	admin := freeLoopbackAddr(t)

	const count = 100
	name := func(i int) string { return fmt.Sprintf("node-%03d", i) }
	cidr := func(i int) string { return fmt.Sprintf("10.%d.%d.0/24", 244+i/256, i%256) }
	var instances strings.Builder
	for i := range count {
		fmt.Fprintf(&instances, "- {name: %s, zone: zone-a}\n", name(i))
	}
	config := filepath.Join(t.TempDir(), "fake-cloud.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`
instances:
%s
faults: [{method: CreateRoute, object: "node-00[07]", hang: ignore-context}]
adminAddress: %s
`, instances.String(), admin)), 0o600); err != nil {
		t.Fatal(err)
	}
	ccm := harness.StartCCM(t, harness.CCMOptions{Kubeconfig: cp.Kubeconfig, Args: []string{
		"--cloud-provider=fake", "--cloud-config=" + config, "--controllers=route", "--cluster-cidr=10.244.0.0/15",
		"--cloud-call-detach-after=1s", "--cloud-call-timeout=5s", "--cloud-fence-timeout=5s",
	}})
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	for i := range count {
		node := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name(i)},
			Spec:       v1.NodeSpec{PodCIDR: cidr(i), PodCIDRs: []string{cidr(i)}},
		}
		if _, err := cp.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	hung := map[string]bool{name(0): true, name(7): true}

	routesTo := func() (map[string]string, error) {
		var table []fake.Route
		if err := getJSON(ctx, "http://"+admin+"/routes", &table); err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, r := range table {
			out[r.TargetNode] = r.DestinationCIDR
		}
		return out, nil
	}
	available := func(ctx context.Context) (map[string]bool, error) {
		list, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for _, n := range list.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeNetworkUnavailable && c.Status == v1.ConditionFalse && c.Reason == "RouteCreated" {
					out[n.Name] = true
				}
			}
		}
		return out, nil
	}

	var routes map[string]string
	var ready map[string]bool
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if routes, err = routesTo(); err != nil {
			return false, err
		}
		if ready, err = available(ctx); err != nil {
			return false, err
		}
		return len(routes) == count-len(hung) && len(ready) == count-len(hung), nil
	})
	if err != nil {
		t.Fatalf("98 Nodes not routed beside 2 hung creates: %d routes, %d Nodes NetworkUnavailable=False: %v", len(routes), len(ready), err)
	}
	for i := range count {
		n := name(i)
		if hung[n] {
			if _, ok := routes[n]; ok || ready[n] {
				t.Errorf("%s routed while its CreateRoute hangs", n)
			}
			continue
		}
		if routes[n] != cidr(i) {
			t.Errorf("route of %s = %q, want %s", n, routes[n], cidr(i))
		}
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+admin+"/faults", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if routes, err = routesTo(); err != nil {
			return false, err
		}
		if ready, err = available(ctx); err != nil {
			return false, err
		}
		return len(routes) == count && len(ready) == count, nil
	})
	if err != nil {
		t.Fatalf("after the fault was cleared: %d routes, %d Nodes NetworkUnavailable=False: %v", len(routes), len(ready), err)
	}
	var calls struct {
		Overlaps int `json:"overlaps"`
	}
	if err := getJSON(ctx, "http://"+admin+"/calls", &calls); err != nil {
		t.Fatal(err)
	}
	if calls.Overlaps != 0 {
		t.Errorf("overlapping route calls: %d", calls.Overlaps)
	}
}

// getJSON decodes the JSON answer of a GET.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
