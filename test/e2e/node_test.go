package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ccmkit/ccmkit/test/harness"
)

const taintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

func tainted(n *v1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == taintUninitialized })
}

// initialised reports whether the cloud-node controller has initialised the Node.
func initialised(n *v1.Node) bool { return n.Spec.ProviderID != "" && !tainted(n) }

// registerNode creates the Node name as a kubelet with
// --cloud-provider=external registers it: tainted uninitialized, without a
// providerID; with the pod CIDR podCIDR unless it is empty.
func registerNode(t *testing.T, cp *harness.ControlPlane, name, podCIDR string) {
	t.Helper()
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: taintUninitialized, Value: "true", Effect: v1.TaintEffectNoSchedule}}},
	}
	if podCIDR != "" {
		node.Spec.PodCIDR, node.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	if _, err := cp.Client.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitNode waits until cond holds for the Node and returns it.
func waitNode(t *testing.T, cp *harness.ControlPlane, name, what string, cond func(*v1.Node) bool) *v1.Node {
	t.Helper()
	last := &v1.Node{}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = n
		return cond(n), nil
	})
	if err != nil {
		t.Fatalf("%s not %s (last seen spec %+v, labels %v): %v", name, what, last.Spec, last.Labels, err)
	}
	return last
}

// waitNodeGone waits until the Node is deleted.
func waitNodeGone(t *testing.T, cp *harness.ControlPlane, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the Node %s was not deleted: %v", name, err)
	}
}

// TestNodesInitialiseBesideHungCalls: of 50 tainted Nodes, 2 have
// InstanceMetadata hanging while ignoring its context. The other 48 are
// initialised; once the fault is cleared through the admin API, all 50 are.
func TestNodesInitialiseBesideHungCalls(t *testing.T) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	admin := freeLoopbackAddr(t)
	config := filepath.Join(t.TempDir(), "fake-cloud.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`
autoInstances: {enabled: true, type: fake.medium, region: region-1, zones: [zone-a, zone-b]}
faults: [{method: InstanceMetadata, object: "node-0[07]", hang: ignore-context}]
adminAddress: %s
`, admin)), 0o600); err != nil {
		t.Fatal(err)
	}
	ccm := harness.StartCCM(t, harness.CCMOptions{Kubeconfig: cp.Kubeconfig, Args: []string{
		"--cloud-provider=fake", "--cloud-config=" + config, "--controllers=cloud-node",
		"--cloud-call-detach-after=1s", "--cloud-call-timeout=5s",
	}})
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	const count = 50
	for i := range count {
		registerNode(t, cp, fmt.Sprintf("node-%02d", i), "")
	}
	hung := map[string]bool{"node-00": true, "node-07": true}

	var nodes []v1.Node
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		nodes = list.Items
		done := 0
		for _, n := range nodes {
			if !tainted(&n) {
				done++
			}
		}
		return done == count-len(hung), nil
	})
	if err != nil {
		t.Fatalf("48 Nodes not initialised beside 2 hung calls: %v", err)
	}
	for _, n := range nodes {
		if hung[n.Name] {
			if !tainted(&n) {
				t.Errorf("%s initialised while its InstanceMetadata hangs", n.Name)
			}
			continue
		}
		if !strings.HasPrefix(n.Spec.ProviderID, "fake://") || n.Labels[v1.LabelInstanceTypeStable] != "fake.medium" ||
			n.Labels[v1.LabelTopologyRegion] != "region-1" || n.Labels[v1.LabelTopologyZone] == "" || len(n.Status.Addresses) == 0 {
			t.Errorf("%s not initialised from the cloud: providerID %q labels %v addresses %v", n.Name, n.Spec.ProviderID, n.Labels, n.Status.Addresses)
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
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /faults = %d", resp.StatusCode)
	}

	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		for name := range hung {
			n, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || tainted(n) {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the 2 Nodes not initialised after the fault was cleared: %v", err)
	}
}
