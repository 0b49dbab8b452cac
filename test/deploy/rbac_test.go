package deploy

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/test/harness"
)

const (
	// uninitializedTaint is what kubelet --cloud-provider=external sets.
	uninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"
	// flowTimeout bounds each wait for the CCM: a -race build on a busy
	// 2-core machine is slow to start and to sync.
	flowTimeout = 90 * time.Second
)

// serviceAccountUser is the user name of a ServiceAccount in kube-system.
func serviceAccountUser(name string) string {
	return "system:serviceaccount:" + systemNamespace + ":" + name
}

// access is one request, as a SubjectAccessReview asks about it.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	r := a.resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	if a.group != "" {
		r += "." + a.group
	}
	if a.name != "" {
		r += " " + a.namespace + "/" + a.name
	} else if a.namespace != "" {
		r += " in " + a.namespace
	}
	return a.verb + " " + r
}

// allowed asks the apiserver whether the ServiceAccount sa may do a.
func allowed(ctx context.Context, client kubernetes.Interface, sa string, a access) (bool, error) {
	review, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   serviceAccountUser(sa),
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + systemNamespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource,
				Namespace: a.namespace, Name: a.name,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("creating a SubjectAccessReview: %w", err)
	}
	return review.Status.Allowed, nil
}

// waitAllowed waits until the apiserver's RBAC cache has the bindings that
// allow sa to do a.
func waitAllowed(ctx context.Context, t testing.TB, client kubernetes.Interface, sa string, a access) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return allowed(ctx, client, sa, a)
	})
	if err != nil {
		t.Fatalf("ServiceAccount %s may not %s: %v", sa, a, err)
	}
}

// expectedAccess is what RBAC must allow and deny each ServiceAccount.
func expectedAccess(saCredentials bool) (allow, deny map[string][]access) {
	reads := []access{
		{verb: "list", resource: "nodes"},
		{verb: "watch", resource: "nodes"},
		{verb: "list", resource: "services"},
		{verb: "watch", resource: "services"},
		{verb: "create", resource: "events", namespace: "default"},
		{verb: "patch", resource: "events", namespace: "default"},
		{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: systemNamespace, name: ccmName},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: systemNamespace},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: systemNamespace, name: ccmName},
		{verb: "watch", group: "coordination.k8s.io", resource: "leases", namespace: systemNamespace, name: ccmName},
		{verb: "get", resource: "configmaps", namespace: systemNamespace, name: "extension-apiserver-authentication"},
		{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews"},
		{verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews"},
	}
	var (
		getNode            = access{verb: "get", resource: "nodes", name: "n"}
		patchNode          = access{verb: "patch", resource: "nodes", name: "n"}
		deleteNode         = access{verb: "delete", resource: "nodes", name: "n"}
		patchNodeStatus    = access{verb: "patch", resource: "nodes", subresource: "status", name: "n"}
		getService         = access{verb: "get", resource: "services", namespace: "default", name: "s"}
		patchService       = access{verb: "patch", resource: "services", namespace: "default", name: "s"}
		patchServiceStatus = access{verb: "patch", resource: "services", subresource: "status", namespace: "default", name: "s"}
	)
	writes := []access{getNode, patchNode, deleteNode, patchNodeStatus, getService, patchService, patchServiceStatus}
	never := []access{
		{verb: "get", resource: "secrets", namespace: systemNamespace, name: "cloud-config"},
		{verb: "list", resource: "secrets"},
		{verb: "list", resource: "pods"},
		{verb: "create", resource: "nodes"},
		{verb: "update", resource: "nodes", name: "n"},
		{verb: "update", resource: "nodes", subresource: "status", name: "n"},
		{verb: "delete", resource: "services", namespace: "default", name: "s"},
		{verb: "update", resource: "services", namespace: "default", name: "s"},
		{verb: "get", resource: "configmaps", namespace: systemNamespace, name: "kube-proxy"},
		{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: systemNamespace, name: "kube-controller-manager"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: systemNamespace, name: "kube-scheduler"},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: "default"},
		{verb: "create", resource: "serviceaccounts", namespace: systemNamespace},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: systemNamespace, name: "default"},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: systemNamespace, name: ccmName},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
	}
	allow, deny = map[string][]access{}, map[string][]access{}
	if !saCredentials {
		allow[ccmName] = append(reads, writes...)
		deny[ccmName] = append(never,
			access{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: systemNamespace, name: "route-controller"})
		return allow, deny
	}
	allow[ccmName] = reads
	deny[ccmName] = append(never, writes...)
	for _, sa := range controllerServiceAccounts {
		allow[ccmName] = append(allow[ccmName],
			access{verb: "get", resource: "serviceaccounts", namespace: systemNamespace, name: sa},
			access{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: systemNamespace, name: sa})
	}
	allow["cloud-node-controller"] = []access{patchNode, patchNodeStatus}
	allow["node-controller"] = []access{getNode, patchNode, deleteNode}
	allow["service-controller"] = []access{getService, patchService, patchServiceStatus}
	allow["route-controller"] = []access{patchNodeStatus}
	for _, sa := range controllerServiceAccounts {
		deny[sa] = append([]access{{verb: "list", resource: "nodes"}, {verb: "list", resource: "services"}}, never...)
		for _, w := range writes {
			if !slices.Contains(allow[sa], w) {
				deny[sa] = append(deny[sa], w)
			}
		}
	}
	return allow, deny
}

// token returns a one-hour token of the ServiceAccount kube-system/sa.
func token(ctx context.Context, t testing.TB, client kubernetes.Interface, sa string) string {
	t.Helper()
	tr, err := client.CoreV1().ServiceAccounts(systemNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", systemNamespace, sa, err)
	}
	return tr.Status.Token
}

// tokenConfig is admin's REST config with a bearer token instead of admin's
// client certificate.
func tokenConfig(admin *rest.Config, bearer string) *rest.Config {
	return &rest.Config{
		Host:            admin.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData},
		BearerToken:     bearer,
	}
}

// writeKubeconfig writes a kubeconfig for cfg (server, CA and token).
func writeKubeconfig(t testing.TB, cfg *rest.Config, user string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts[user] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: user}
	kc.CurrentContext = user
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	return path
}

// ccmArgs turns the DaemonSet's args into args for a CCM next to the test
// apiserver: the cloud-config from the Secret, and the harness's loopback
// port instead of 10258 on all addresses. Everything else is as deployed,
// the in-memory serving certificate included.
func ccmArgs(t testing.TB, m manifests) []string {
	t.Helper()
	cloudConfig := filepath.Join(t.TempDir(), cloudConfigKey)
	if err := os.WriteFile(cloudConfig, []byte(m.cloudConfig(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	ds := m.daemonSet(t)
	var args []string
	for _, arg := range ds.Spec.Template.Spec.Containers[0].Args {
		switch {
		case strings.HasPrefix(arg, "--cloud-config="):
			args = append(args, "--cloud-config="+cloudConfig)
		case strings.HasPrefix(arg, "--bind-address="), strings.HasPrefix(arg, "--secure-port="):
		default:
			args = append(args, arg)
		}
	}
	if countFlag(args, "--cluster-cidr") != 1 {
		t.Fatalf("the DaemonSet's args %q have no --cluster-cidr for the route controller", args)
	}
	return append(args, "--cert-dir=", "--controllers=cloud-node,cloud-node-lifecycle,service,route")
}

func TestCCMWorksWithTheDeployedRBAC(t *testing.T) {
	runWithDeployedRBAC(t, target{name: "fake", overlay: "fake", provider: "fake"})
}

func TestCCMWorksWithServiceAccountCredentials(t *testing.T) {
	runWithDeployedRBAC(t, target{name: "fake+service-account-credentials", overlay: "fake", provider: "fake", saCredentials: true})
}

// runWithDeployedRBAC applies the ServiceAccounts and RBAC that tg renders to
// a real apiserver (RBAC enforced), and runs the CCM binary with tg's
// DaemonSet args under the ServiceAccount's token, for its API calls and its
// delegated authentication and authorization alike. Each controller must do
// its work, and nothing may be forbidden.
func runWithDeployedRBAC(t *testing.T, tg target) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	admin := cp.Client
	waitForObjects(ctx, t, admin)
	if len(cp.Config.CAData) == 0 {
		t.Fatal("the control plane's REST config has no CA data for a kubeconfig")
	}

	if tg.saCredentials {
		// kube-apiserver binds roles of kube-controller-manager's own to its
		// ServiceAccounts node-controller, service-controller and
		// route-controller, which the CCM's controllers share; without those
		// bindings, only the component's roles are left to test. The
		// apiserver creates them only when it starts.
		for _, sa := range controllerServiceAccounts {
			err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, "system:controller:"+sa, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}

	m := render(t, tg)
	a := newApplier(t, cp.Config)
	for _, obj := range m.rbacObjects() {
		if err := a.apply(ctx, obj, false); err != nil {
			t.Fatal(err)
		}
	}

	// RBAC is enforced: a ServiceAccount without bindings may not list Nodes.
	if _, err := admin.CoreV1().ServiceAccounts(systemNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "unbound"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	unbound, err := kubernetes.NewForConfig(tokenConfig(cp.Config, token(ctx, t, admin, "unbound")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unbound.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("an unbound ServiceAccount listing Nodes: %v, want Forbidden (is RBAC on?)", err)
	}

	// With --use-service-account-credentials the CCM's own ServiceAccount
	// may not write Nodes or Services, so the flows below passing proves that
	// the controllers wrote with their own ServiceAccounts' tokens.
	allow, deny := expectedAccess(tg.saCredentials)
	for sa, list := range allow {
		for _, want := range list {
			waitAllowed(ctx, t, admin, sa, want)
		}
	}
	for sa, list := range deny {
		for _, never := range list {
			ok, err := allowed(ctx, admin, sa, never)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				t.Errorf("ServiceAccount %s may %s", sa, never)
			}
		}
	}

	saConfig := tokenConfig(cp.Config, token(ctx, t, admin, ccmName))
	kubeconfig := writeKubeconfig(t, saConfig, ccmName)
	ccm := harness.StartCCM(t, harness.CCMOptions{Kubeconfig: kubeconfig, Args: ccmArgs(t, m)})
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the CCM to hold the Lease", func(ctx context.Context) (bool, error) {
		lease, err := admin.CoordinationV1().Leases(systemNamespace).Get(ctx, ccmName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") != "", err
	})

	// cloud-node: the Node is initialised from the cloud.
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "control-plane-0"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: uninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule},
		}},
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "Node "+node.Name+" initialised", func(ctx context.Context) (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == uninitializedTaint })
		return !tainted && strings.HasPrefix(n.Spec.ProviderID, fake.ProviderName+"://") &&
			n.Labels[corev1.LabelTopologyZone] != "" && len(n.Status.Addresses) > 0, nil
	})

	// service: the LoadBalancer Service gets a VIP from the configured pool,
	// and an Event says so.
	cfg, err := fake.ParseConfig(strings.NewReader(m.cloudConfig(t)))
	if err != nil {
		t.Fatal(err)
	}
	pool := netip.MustParsePrefix(cfg.LoadBalancers.VIPCIDR)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := admin.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "Service "+svc.Name+" to get a load-balancer IP", func(ctx context.Context) (bool, error) {
		s, err := admin.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, nil
		}
		ip, err := netip.ParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
		if err != nil || !pool.Contains(ip) {
			return false, fmt.Errorf("load-balancer IP %q is not in the pool %s", s.Status.LoadBalancer.Ingress[0].IP, pool)
		}
		return slices.Contains(s.Finalizers, "service.kubernetes.io/load-balancer-cleanup"), nil
	})
	waitFor(ctx, t, "the Event EnsuredLoadBalancer", func(ctx context.Context) (bool, error) {
		events, err := admin.CoreV1().Events(svc.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return e.InvolvedObject.Name == svc.Name && e.Reason == "EnsuredLoadBalancer"
		}), nil
	})

	// route: a Node with a pod CIDR gets its route and NetworkUnavailable=False.
	worker := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-0"},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}},
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, worker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "Node "+worker.Name+" NetworkUnavailable=False", func(ctx context.Context) (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, worker.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionFalse && c.Reason == "RouteCreated"
		}), nil
	})

	// Delegated authentication and authorization of the secure port work
	// with the ServiceAccount's rights: /metrics for an authorized token, not
	// for anonymous.
	if status, _, err := ccm.Get(ctx, "/metrics", ""); err != nil || (status != 401 && status != 403) {
		t.Errorf("GET /metrics without a token = %d, %v; want 401 or 403", status, err)
	}
	metricsToken := cp.MetricsToken(ctx, t)
	if status, _, err := ccm.Get(ctx, "/metrics", metricsToken); err != nil || status != 200 {
		t.Errorf("GET /metrics with an authorized token = %d, %v; want 200", status, err)
	}
	waitFor(ctx, t, "/readyz", func(ctx context.Context) (bool, error) {
		status, _, err := ccm.Get(ctx, "/readyz", "")
		return err == nil && status == 200, nil
	})

	log := ccm.Log()
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("the CCM was refused something: %s", line)
		}
	}
}

// waitFor polls cond until it holds, for flowTimeout at most.
func waitFor(ctx context.Context, t testing.TB, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, flowTimeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	t.Logf("%s after %s", what, time.Since(start).Round(time.Millisecond))
}
