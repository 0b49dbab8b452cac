package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/test/harness"
)

// fieldManager is the server-side apply field manager of these tests.
const fieldManager = "ccmkit-deploy-test"

// warnings collects the apiserver's Warning headers (deprecated APIs and
// fields, and the like).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// applier applies rendered objects with server-side apply.
type applier struct {
	dynamic  dynamic.Interface
	mapper   meta.RESTMapper
	warnings *warnings
}

func newApplier(t testing.TB, cfg *rest.Config) *applier {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	w := &warnings{}
	cfg.WarningHandler = w
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	return &applier{dynamic: dyn, mapper: mapper, warnings: w}
}

// apply applies obj as `kubectl apply --server-side --force-conflicts` does,
// with strict field validation, so that a field the apiserver does not know
// is an error. With dryRun nothing is stored.
func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s: %w", key(obj), err)
	}
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return fmt.Errorf("%s: %w", key(obj), err)
	}
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true), FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var resource dynamic.ResourceInterface = a.dynamic.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		resource = a.dynamic.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	}
	if _, err := resource.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts); err != nil {
		return fmt.Errorf("applying %s: %w", key(obj), err)
	}
	return nil
}

// waitForObjects waits until the apiserver has what it creates itself and the
// manifests refer to: the kube-system namespace, the PriorityClass
// system-cluster-critical, and the RBAC roles for delegated authentication
// and authorization.
func waitForObjects(ctx context.Context, t testing.TB, client kubernetes.Interface) {
	t.Helper()
	checks := []struct {
		what string
		get  func(ctx context.Context) error
	}{
		{"Namespace kube-system", func(ctx context.Context) error {
			_, err := client.CoreV1().Namespaces().Get(ctx, systemNamespace, metav1.GetOptions{})
			return err
		}},
		{"PriorityClass system-cluster-critical", func(ctx context.Context) error {
			_, err := client.SchedulingV1().PriorityClasses().Get(ctx, "system-cluster-critical", metav1.GetOptions{})
			return err
		}},
		{"Role kube-system/extension-apiserver-authentication-reader", func(ctx context.Context) error {
			_, err := client.RbacV1().Roles(systemNamespace).Get(ctx, "extension-apiserver-authentication-reader", metav1.GetOptions{})
			return err
		}},
		{"ClusterRole system:auth-delegator", func(ctx context.Context) error {
			_, err := client.RbacV1().ClusterRoles().Get(ctx, "system:auth-delegator", metav1.GetOptions{})
			return err
		}},
	}
	for _, c := range checks {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			last = c.get(ctx)
			return last == nil, nil
		})
		if err != nil {
			t.Fatalf("kube-apiserver did not create %s: %v (last error: %v)", c.what, err, last)
		}
	}
}

func TestOverlaysApplyServerSideDryRun(t *testing.T) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	waitForObjects(ctx, t, cp.Client)
	a := newApplier(t, cp.Config)

	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			m := render(t, tg)
			for _, obj := range m {
				if err := a.apply(ctx, obj, true); err != nil {
					t.Error(err)
				}
			}
			if w := a.warnings.take(); len(w) > 0 {
				t.Errorf("kube-apiserver warned:\n%s", strings.Join(w, "\n"))
			}
			// A dry run stores nothing.
			_, err := cp.Client.CoreV1().Secrets(systemNamespace).Get(ctx, cloudConfigSecret, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("get Secret %s after a dry run: %v, want NotFound", cloudConfigSecret, err)
			}
		})
	}

	// The check is strict: a field the apiserver does not know fails.
	t.Run("unknown field", func(t *testing.T) {
		tried := false
		for _, obj := range render(t, targets[0]) {
			if key(obj) != "DaemonSet "+systemNamespace+"/"+ccmName {
				continue
			}
			tried = true
			bad := obj.DeepCopy()
			spec := bad.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			spec["hostNetwrok"] = true
			if err := a.apply(ctx, bad, true); err == nil || !strings.Contains(err.Error(), "hostNetwrok") {
				t.Errorf("applying a DaemonSet with spec.template.spec.hostNetwrok: %v, want an unknown-field error", err)
			}
		}
		if !tried {
			t.Error("no DaemonSet rendered")
		}
	})
}
