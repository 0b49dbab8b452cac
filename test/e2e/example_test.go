package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ccmkit/ccmkit/test/harness"
)

// TestOutOfTreeProviderExample builds examples/out-of-tree-provider, a
// module of its own that builds a CCM on ccmkit's app package with a toy
// provider, and runs it: a tainted Node is initialised from the toy's file
// and a LoadBalancer Service gets the toy's address.
func TestOutOfTreeProviderExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example binary")
	}
	dir := filepath.Join(repoRoot(t), "examples", "out-of-tree-provider")
	binary := filepath.Join(t.TempDir(), "toy-cloud-controller-manager")
	build := exec.CommandContext(t.Context(), "go", "build", "-race", "-o", binary, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the example: %v\n%s", err, out)
	}

	config := filepath.Join(t.TempDir(), "toy.json")
	err := os.WriteFile(config, []byte(`{
  "instances": {"toy-node": {"id": "i-0001", "type": "small", "zone": "zone-t", "region": "region-t", "internalIP": "10.9.0.1"}},
  "loadBalancerIP": "203.0.113.10"
}`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cp := harness.StartControlPlane(t)
	ctx := t.Context()
	registerNode(t, cp, "toy-node", "")
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "toy-lb", Namespace: "default"},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeLoadBalancer,
			Ports: []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	if _, err := cp.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// No --cloud-provider: the example makes its provider the default.
	ccm := harness.StartCCM(t, harness.CCMOptions{
		Binary:     binary,
		Kubeconfig: cp.Kubeconfig,
		Args:       []string{"--cloud-config=" + config, "--v=2"},
	})
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatalf("%v\n%s", err, ccm.Log())
	}

	var got *v1.Node
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, "toy-node", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = n
		tainted := slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == taintUninitialized })
		return !tainted && n.Spec.ProviderID != "", nil
	})
	if err != nil {
		t.Fatalf("Node not initialised (last seen %+v): %v\n%s", got.Spec, err, ccm.Log())
	}
	if got.Spec.ProviderID != "toy://i-0001" || got.Labels[v1.LabelTopologyZone] != "zone-t" || got.Labels[v1.LabelInstanceTypeStable] != "small" {
		t.Errorf("Node initialised as providerID %q, labels %v; want the toy file's instance", got.Spec.ProviderID, got.Labels)
	}

	var ingress []v1.LoadBalancerIngress
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := cp.Client.CoreV1().Services("default").Get(ctx, "toy-lb", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ingress = s.Status.LoadBalancer.Ingress
		return len(ingress) > 0, nil
	})
	if err != nil {
		t.Fatalf("Service has no ingress: %v\n%s", err, ccm.Log())
	}
	if len(ingress) != 1 || ingress[0].IP != "203.0.113.10" {
		t.Errorf("ingress %+v, want the toy's 203.0.113.10", ingress)
	}
}

// TestPublicPackagesImportFromAnotherModule builds, in a module of its own
// beside the example, a program that imports the packages a binary built
// on ccmkit uses: app, cloud and leaderelection. A package moved under
// internal/ fails to build here.
func TestPublicPackagesImportFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in another module")
	}
	example := filepath.Join(repoRoot(t), "examples", "out-of-tree-provider")
	dir := t.TempDir()
	goMod, err := os.ReadFile(filepath.Join(example, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goMod = []byte(strings.Replace(string(goMod), "=> ../..", "=> "+repoRoot(t), 1))
	goMod = []byte(strings.Replace(string(goMod), "module github.com/ccmkit/ccmkit/examples/out-of-tree-provider", "module example.com/importer", 1))
	goSum, err := os.ReadFile(filepath.Join(example, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	program := `package main

import (
	"fmt"

	"github.com/ccmkit/ccmkit/app"
	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/leaderelection"
)

func main() {
	fmt.Println(app.NewOptions() != nil, cloud.DefaultOptions().DetachAfter, leaderelection.ErrLost)
}
`
	for name, data := range map[string][]byte{"go.mod": goMod, "go.sum": goSum, "main.go": []byte(program)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.CommandContext(t.Context(), "go", "build", "-o", filepath.Join(dir, "importer"), ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a program that imports app, cloud and leaderelection from another module: %v\n%s", err, out)
	}
}
