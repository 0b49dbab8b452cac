package harness

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func TestControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd; not in -short mode")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cp := StartControlPlane(t)

	// The kubeconfig file is for the same admin user as Config and Client.
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatalf("loading %s: %v", cp.Kubeconfig, err)
	}
	fromFile, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating a clientset from the kubeconfig: %v", err)
	}
	version, err := fromFile.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("getting the server version through the kubeconfig: %v", err)
	}
	t.Logf("kube-apiserver %s", version.GitVersion)

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   "harness-node",
		Labels: map[string]string{"ccmkit.test/harness": "yes"},
	}}
	if _, err := cp.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Node: %v", err)
	}
	got, err := fromFile.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the Node back: %v", err)
	}
	if got.Labels["ccmkit.test/harness"] != "yes" {
		t.Errorf("Node labels = %v, want ccmkit.test/harness=yes", got.Labels)
	}

	token := cp.MetricsToken(ctx, t)
	review, err := cp.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a TokenReview: %v", err)
	}
	if !review.Status.Authenticated {
		t.Fatalf("metrics token does not authenticate: %+v", review.Status)
	}
	user := review.Status.User.Username
	if !strings.HasPrefix(user, "system:serviceaccount:default:metrics-reader-") {
		t.Errorf("metrics token authenticates as %q, want a metrics-reader ServiceAccount", user)
	}

	// RBAC is on: the ServiceAccount may get /metrics and nothing else.
	for path, want := range map[string]bool{"/metrics": true, "/debug/pprof/": false} {
		sar, err := cp.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:                  user,
				Groups:                review.Status.User.Groups,
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating a SubjectAccessReview for %s: %v", path, err)
		}
		if sar.Status.Allowed != want {
			t.Errorf("%s may get %s: %v, want %v (%s)", user, path, sar.Status.Allowed, want, sar.Status.Reason)
		}
	}
}

func TestAssetsDirHonoursKubebuilderAssets(t *testing.T) {
	t.Setenv(assetsEnv, "/somewhere/else")
	dir, err := assetsDir()
	if err != nil {
		t.Fatal(err)
	}
	if dir != "/somewhere/else" {
		t.Errorf("assetsDir() = %q, want $%s", dir, assetsEnv)
	}

	t.Setenv(assetsEnv, "")
	dir, err = assetsDir()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(dir, "/.cache/testbin") {
		t.Errorf("assetsDir() = %q, want <repo>/.cache/testbin", dir)
	}
}

// fatalRecorder is a testing.TB whose Fatal and Fatalf record the message and
// end the goroutine, as the real ones do, without failing the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStartControlPlaneWithoutBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("StartControlPlane itself skips under -short")
	}
	t.Setenv(assetsEnv, t.TempDir())
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartControlPlane(r)
	}()
	<-done
	if !strings.Contains(r.msg, "run make testbin") {
		t.Errorf("StartControlPlane without binaries failed with %q, want a hint to run make testbin", r.msg)
	}
}
