package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

const (
	// assetsEnv names the directory of kube-apiserver and etcd, as in envtest.
	assetsEnv = "KUBEBUILDER_ASSETS"
	// startTimeoutEnv is envtest's override of the start timeout.
	startTimeoutEnv = "KUBEBUILDER_CONTROLPLANE_START_TIMEOUT"

	// controlPlaneStartTimeout is longer than envtest's 20s default: on a
	// 2-core CI machine several test packages start an apiserver at once,
	// next to -race builds.
	controlPlaneStartTimeout = 90 * time.Second

	// metricsTokenNamespace holds the ServiceAccounts that MetricsToken creates.
	metricsTokenNamespace = metav1.NamespaceDefault
)

// setLoggerOnce routes envtest's log (its retries of a failed start) to klog.
// Without a logger, controller-runtime prints a warning with a stack trace
// when it first logs more than 30s after the process started.
var setLoggerOnce sync.Once

// ControlPlane is a running kube-apiserver and etcd, stopped in t.Cleanup.
type ControlPlane struct {
	// Config is a REST config for an admin user (group system:masters), who may
	// also create TokenReviews and SubjectAccessReviews, as the CCM's delegated
	// authentication and authorization do.
	Config *rest.Config
	// Client is a clientset for Config.
	Client kubernetes.Interface
	// Kubeconfig is the path of a kubeconfig file for the same admin user.
	Kubeconfig string

	env *envtest.Environment
	out *syncBuffer
}

// StartControlPlane starts kube-apiserver and etcd from $KUBEBUILDER_ASSETS,
// or else from <repo>/.cache/testbin, and stops them when the test ends. It
// fails the test when the binaries are missing.
//
// envtest's defaults already give what the CCM needs: RBAC authorization,
// client certificate authentication for the admin user, and service account
// issuer and keys so that TokenRequest and TokenReview work.
func StartControlPlane(t testing.TB) *ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("needs kube-apiserver and etcd; make test runs it (skipped with -short)")
	}
	dir, err := assetsDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("control plane binary %s is missing (run make testbin): %v", name, err)
		}
	}

	setLoggerOnce.Do(func() { ctrllog.SetLogger(klog.Background()) })

	out := &syncBuffer{}
	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Path: filepath.Join(dir, "kube-apiserver"), Out: out, Err: out},
			Etcd:      &envtest.Etcd{Path: filepath.Join(dir, "etcd"), Out: out, Err: out},
		},
	}
	if os.Getenv(startTimeoutEnv) == "" {
		env.ControlPlaneStartTimeout = controlPlaneStartTimeout
	}
	// Without a default route (as in a sandbox) the apiserver cannot guess
	// the address to advertise; the deprecated envtest defaults had this too.
	env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", "127.0.0.1")

	// Registered before Start, so that a half-started control plane is
	// stopped too.
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping kube-apiserver and etcd: %v", err)
		}
	})
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting kube-apiserver and etcd from %s: %v\noutput:\n%s", dir, err, out)
	}

	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating a clientset: %v", err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatalf("writing the admin kubeconfig: %v", err)
	}
	return &ControlPlane{Config: cfg, Client: client, Kubeconfig: kubeconfig, env: env, out: out}
}

// Log returns what kube-apiserver and etcd have printed so far.
func (cp *ControlPlane) Log() string {
	return cp.out.String()
}

// MetricsToken creates a ServiceAccount that RBAC allows `get` on the
// non-resource URL /metrics (and nothing else), and returns a bearer token for
// it. It returns once the apiserver authorizes that ServiceAccount, so a CCM
// that asks it with a SubjectAccessReview gets a yes at once.
func (cp *ControlPlane) MetricsToken(ctx context.Context, t testing.TB) string {
	t.Helper()
	sa, err := cp.Client.CoreV1().ServiceAccounts(metricsTokenNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "metrics-reader-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the metrics reader ServiceAccount: %v", err)
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: sa.Name},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	if _, err := cp.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRole %s: %v", role.Name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}},
	}
	if _, err := cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRoleBinding %s: %v", binding.Name, err)
	}

	tr, err := cp.Client.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", sa.Namespace, sa.Name, err)
	}

	// RBAC reads bindings from an informer: wait until the apiserver sees this one.
	user := fmt.Sprintf("system:serviceaccount:%s:%s", sa.Namespace, sa.Name)
	if err := cp.waitAllowed(ctx, user, "/metrics"); err != nil {
		t.Fatalf("ServiceAccount %s/%s is not allowed to get /metrics: %v", sa.Namespace, sa.Name, err)
	}
	return tr.Status.Token
}

// waitAllowed polls until the apiserver allows user to get the non-resource path.
func (cp *ControlPlane) waitAllowed(ctx context.Context, user, path string) error {
	ctx, cancel := withDefaultTimeout(ctx, 30*time.Second)
	defer cancel()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:                  user,
		Groups:                []string{"system:serviceaccounts", "system:authenticated"},
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}
	var last *authorizationv1.SubjectAccessReview
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err := cp.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("creating a SubjectAccessReview: %w", err)
		}
		last = got
		return got.Status.Allowed, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last review: %+v)", err, last.Status)
	}
	return err
}

// assetsDir returns $KUBEBUILDER_ASSETS, or else <repo>/.cache/testbin.
func assetsDir() (string, error) {
	if dir := os.Getenv(assetsEnv); dir != "" {
		return dir, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "testbin"), nil
}
