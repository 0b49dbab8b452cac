package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
	"github.com/ccmkit/ccmkit/test/harness"
)

// openstackCloud starts the OpenStack API emulator with a user for the
// CCM and returns it with the path of a cloud.conf for it.
func openstackCloud(t *testing.T) (*emulator.Emulator, string) {
	t.Helper()
	e := emulator.New(emulator.Options{})
	t.Cleanup(e.Close)
	if _, err := e.AddUser(emulator.User{Name: "ccm", Password: "ccm-secret", Projects: []string{e.DefaultProject().ID}}); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`[Global]
auth-url = %s
region = %s
username = ccm
password = ccm-secret
user-domain-name = Default
tenant-name = %s
tenant-domain-id = default
`, e.AuthURL(), e.Region(), e.DefaultProject().Name)
	path := filepath.Join(t.TempDir(), "cloud.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return e, path
}

// TestOpenStackNodes runs the binary with --cloud-provider=openstack
// against the emulator: Nodes are initialised from their Nova servers, a
// Node whose server is shut off is tainted, and one whose server is
// deleted is deleted.
func TestOpenStackNodes(t *testing.T) {
	ctx := t.Context()
	cloud, conf := openstackCloud(t)
	cp := harness.StartControlPlane(t)

	servers := map[string]emulator.Server{}
	for i := range 3 {
		name := fmt.Sprintf("os-node-%d", i)
		srv, err := cloud.AddServer(emulator.Server{
			Name:             name,
			Flavor:           "m1.large",
			AvailabilityZone: "az-1",
			Addresses:        map[string][]emulator.Address{"private": {{Addr: fmt.Sprintf("10.0.0.%d", 10+i)}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		servers[name] = srv
		node := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: taintUninitialized, Value: "true", Effect: v1.TaintEffectNoSchedule}}},
		}
		if _, err := cp.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	ccm := harness.StartCCM(t, harness.CCMOptions{Kubeconfig: cp.Kubeconfig, Args: []string{
		"--cloud-provider=openstack", "--cloud-config=" + conf, "--configure-cloud-routes=false",
		"--node-monitor-period=1s", "--node-deletion-grace-period=2s", "--v=2",
	}})
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	for name, srv := range servers {
		n := waitNode(t, cp, name, "initialised from Nova", func(n *v1.Node) bool {
			return n.Spec.ProviderID != "" && !slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == taintUninitialized })
		})
		if want := "openstack:///" + srv.ID; n.Spec.ProviderID != want {
			t.Errorf("%s: providerID %q, want %q", name, n.Spec.ProviderID, want)
		}
		if n.Labels[v1.LabelTopologyZone] != "az-1" || n.Labels[v1.LabelTopologyRegion] != cloud.Region() || n.Labels[v1.LabelInstanceTypeStable] != "m1.large" {
			t.Errorf("%s: labels %v, want zone az-1, region %s, instance type m1.large", name, n.Labels, cloud.Region())
		}
		if !slices.Contains(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: srv.Addresses["private"][0].Addr}) {
			t.Errorf("%s: addresses %v lack the server's fixed address", name, n.Status.Addresses)
		}
	}

	if err := cloud.SetStatus(servers["os-node-1"].ID, "SHUTOFF"); err != nil {
		t.Fatal(err)
	}
	waitNode(t, cp, "os-node-1", "tainted as shut down", func(n *v1.Node) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == cloudproviderapi.TaintNodeShutdown })
	})

	if err := cloud.DeleteServer(servers["os-node-2"].ID); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().Nodes().Get(ctx, "os-node-2", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the Node of a deleted server was not deleted: %v", err)
	}
	if _, err := cp.Client.CoreV1().Nodes().Get(ctx, "os-node-0", metav1.GetOptions{}); err != nil {
		t.Errorf("the Node of a running server: %v", err)
	}
}

// waitNode waits until cond holds for the Node and returns it.
func waitNode(t *testing.T, cp *harness.ControlPlane, name, what string, cond func(*v1.Node) bool) *v1.Node {
	t.Helper()
	var last *v1.Node
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
