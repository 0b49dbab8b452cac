package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const (
	// systemNamespace holds everything namespaced that the manifests create.
	systemNamespace = "kube-system"
	// ccmName names the ServiceAccount, the DaemonSet and its container.
	ccmName = "cloud-controller-manager"
	// ccmRoleName names the ClusterRole and ClusterRoleBinding of the CCM.
	ccmRoleName = "ccmkit:cloud-controller-manager"
	// cloudConfigSecret is the Secret with the cloud-config, key cloudConfigKey.
	cloudConfigSecret = "cloud-config"
	cloudConfigKey    = "cloud.conf"
	// cloudConfigPath is where the DaemonSet mounts the cloud-config.
	cloudConfigPath = "/etc/ccmkit/cloud.conf"
	// saCredentialsComponent is the component for --use-service-account-credentials.
	saCredentialsComponent = "components/service-account-credentials"
)

// controllerServiceAccounts are the ServiceAccounts that the CCM's controllers
// use with --use-service-account-credentials, named as app/controllers.go asks
// for them.
var controllerServiceAccounts = []string{"cloud-node-controller", "node-controller", "service-controller", "route-controller"}

// target is one kustomization that an operator would apply.
type target struct {
	name     string
	overlay  string // a directory under deploy/overlays
	provider string // its --cloud-provider
	// saCredentials adds the service-account-credentials component.
	saCredentials bool
}

var targets = []target{
	{name: "fake", overlay: "fake", provider: "fake"},
	{name: "openstack", overlay: "openstack", provider: "openstack"},
	{name: "aws", overlay: "aws", provider: "aws"},
	{name: "fake+service-account-credentials", overlay: "fake", provider: "fake", saCredentials: true},
}

// deployDir returns the absolute path of deploy/ (go test runs in test/deploy).
func deployDir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "base", "kustomization.yaml")); err != nil {
		t.Fatalf("no kustomize base in %s: %v", dir, err)
	}
	return dir
}

// kustomization returns the directory to render for tg: the overlay itself,
// or a kustomization of the overlay plus the service-account-credentials
// component, written as an operator would.
func kustomization(t testing.TB, tg target) string {
	t.Helper()
	overlay := filepath.Join(deployDir(t), "overlays", tg.overlay)
	if !tg.saCredentials {
		return overlay
	}
	dir := t.TempDir()
	// kustomize takes only relative paths.
	overlayRel, err := filepath.Rel(dir, overlay)
	if err != nil {
		t.Fatal(err)
	}
	componentRel, err := filepath.Rel(dir, filepath.Join(deployDir(t), saCredentialsComponent))
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
components:
- %s
`, overlayRel, componentRel)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// manifests are the objects that one kustomization renders.
type manifests []*unstructured.Unstructured

// render runs kustomize (as `kustomize build`) on tg.
func render(t testing.TB, tg target) manifests {
	t.Helper()
	dir := kustomization(t, tg)
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out manifests
	for _, r := range resMap.Resources() {
		// Through JSON, so that numbers have the types the apimachinery
		// helpers expect.
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("rendered object %s: %v", r.CurId(), err)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(data); err != nil {
			t.Fatalf("rendered object %s: %v", r.CurId(), err)
		}
		out = append(out, obj)
	}
	return out
}

// key names an object as "Kind namespace/name" (or "Kind name").
func key(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() == "" {
		return obj.GetKind() + " " + obj.GetName()
	}
	return obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
}

func (m manifests) keys() []string {
	out := make([]string, 0, len(m))
	for _, obj := range m {
		out = append(out, key(obj))
	}
	slices.Sort(out)
	return out
}

// get decodes the object named by k ("Kind namespace/name") into into.
func (m manifests) get(t testing.TB, k string, into any) {
	t.Helper()
	for _, obj := range m {
		if key(obj) == k {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, into, true); err != nil {
				t.Fatalf("decoding %s: %v", k, err)
			}
			return
		}
	}
	t.Fatalf("the manifests have no %s; they have %v", k, m.keys())
}

func (m manifests) daemonSet(t testing.TB) *appsv1.DaemonSet {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	m.get(t, "DaemonSet "+systemNamespace+"/"+ccmName, ds)
	return ds
}

// cloudConfig returns the cloud.conf of the Secret cloud-config.
func (m manifests) cloudConfig(t testing.TB) string {
	t.Helper()
	s := &corev1.Secret{}
	m.get(t, "Secret "+systemNamespace+"/"+cloudConfigSecret, s)
	if v, ok := s.StringData[cloudConfigKey]; ok {
		return v
	}
	v, ok := s.Data[cloudConfigKey]
	if !ok {
		t.Fatalf("Secret %s has no key %s", cloudConfigSecret, cloudConfigKey)
	}
	return string(v)
}

// rbacObjects returns the ServiceAccounts and RBAC objects: what the CCM's
// identity and rights are made of.
func (m manifests) rbacObjects() manifests {
	var out manifests
	for _, obj := range m {
		if obj.GetKind() == "ServiceAccount" || obj.GroupVersionKind().Group == rbacv1.GroupName {
			out = append(out, obj)
		}
	}
	return out
}

// wantKeys lists every object that tg must render, and nothing else.
func wantKeys(tg target) []string {
	want := []string{
		"ServiceAccount kube-system/cloud-controller-manager",
		"ClusterRole ccmkit:cloud-controller-manager",
		"ClusterRoleBinding ccmkit:cloud-controller-manager",
		"ClusterRoleBinding ccmkit:cloud-controller-manager:auth-delegator",
		"Role kube-system/ccmkit:cloud-controller-manager:leader-election",
		"RoleBinding kube-system/ccmkit:cloud-controller-manager:leader-election",
		"RoleBinding kube-system/ccmkit:cloud-controller-manager:authentication-reader",
		"DaemonSet kube-system/cloud-controller-manager",
		"Secret kube-system/cloud-config",
	}
	if tg.saCredentials {
		want = append(want,
			"Role kube-system/ccmkit:cloud-controller-manager:controller-tokens",
			"RoleBinding kube-system/ccmkit:cloud-controller-manager:controller-tokens")
		for _, sa := range controllerServiceAccounts {
			want = append(want,
				"ServiceAccount kube-system/"+sa,
				"ClusterRole ccmkit:controller:"+sa,
				"ClusterRoleBinding ccmkit:controller:"+sa)
		}
	}
	slices.Sort(want)
	return want
}

func TestOverlaysRender(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			m := render(t, tg)
			if got, want := m.keys(), wantKeys(tg); !slices.Equal(got, want) {
				t.Errorf("rendered objects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, obj := range m {
				if got := obj.GetLabels()["app.kubernetes.io/part-of"]; got != "ccmkit" {
					t.Errorf("%s: label app.kubernetes.io/part-of = %q, want ccmkit", key(obj), got)
				}
			}

			checkBindings(t, m, tg)
			checkDaemonSet(t, m.daemonSet(t), tg)
			if m.cloudConfig(t) == "" {
				t.Errorf("Secret %s: %s is empty", cloudConfigSecret, cloudConfigKey)
			}
		})
	}
}

// checkBindings checks that every binding gives its role to the CCM's own
// ServiceAccount (or, for a controller's role, to that controller's), and
// that the delegated-auth bindings name the roles kube-apiserver bootstraps.
func checkBindings(t *testing.T, m manifests, tg target) {
	t.Helper()
	wantRef := map[string]rbacv1.RoleRef{
		"ClusterRoleBinding ccmkit:cloud-controller-manager":                            {APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ccmRoleName},
		"ClusterRoleBinding ccmkit:cloud-controller-manager:auth-delegator":             {APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		"RoleBinding kube-system/ccmkit:cloud-controller-manager:leader-election":       {APIGroup: rbacv1.GroupName, Kind: "Role", Name: "ccmkit:cloud-controller-manager:leader-election"},
		"RoleBinding kube-system/ccmkit:cloud-controller-manager:authentication-reader": {APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
	}
	wantSubject := map[string]string{}
	if tg.saCredentials {
		wantRef["RoleBinding kube-system/ccmkit:cloud-controller-manager:controller-tokens"] = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "ccmkit:cloud-controller-manager:controller-tokens"}
		for _, sa := range controllerServiceAccounts {
			k := "ClusterRoleBinding ccmkit:controller:" + sa
			wantRef[k] = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ccmkit:controller:" + sa}
			wantSubject[k] = sa
		}
	}
	for k, ref := range wantRef {
		subject := ccmName
		if s, ok := wantSubject[k]; ok {
			subject = s
		}
		want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: subject, Namespace: systemNamespace}}
		var gotRef rbacv1.RoleRef
		var gotSubjects []rbacv1.Subject
		if strings.HasPrefix(k, "ClusterRoleBinding ") {
			b := &rbacv1.ClusterRoleBinding{}
			m.get(t, k, b)
			gotRef, gotSubjects = b.RoleRef, b.Subjects
		} else {
			b := &rbacv1.RoleBinding{}
			m.get(t, k, b)
			gotRef, gotSubjects = b.RoleRef, b.Subjects
		}
		if gotRef != ref {
			t.Errorf("%s: roleRef %+v, want %+v", k, gotRef, ref)
		}
		if !slices.Equal(gotSubjects, want) {
			t.Errorf("%s: subjects %+v, want %+v", k, gotSubjects, want)
		}
	}

	// With its own credentials for each controller, the CCM itself only
	// reads and records events.
	role := &rbacv1.ClusterRole{}
	m.get(t, "ClusterRole "+ccmRoleName, role)
	for _, rule := range role.Rules {
		for _, verb := range rule.Verbs {
			writes := !slices.Contains([]string{"get", "list", "watch"}, verb) && !slices.Contains(rule.Resources, "events")
			if tg.saCredentials && writes {
				t.Errorf("ClusterRole %s grants %s on %v, which the controllers' own ServiceAccounts do with --use-service-account-credentials", ccmRoleName, verb, rule.Resources)
			}
		}
	}
}

// checkDaemonSet checks what makes the DaemonSet run on control-plane nodes
// before they are initialised, and run hardened.
func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, tg target) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	if got := pod.NodeSelector; len(got) != 1 || got["node-role.kubernetes.io/control-plane"] != "" {
		t.Errorf("nodeSelector %v, want only node-role.kubernetes.io/control-plane: \"\"", got)
	}
	for _, want := range []struct {
		key    string
		effect corev1.TaintEffect
	}{
		{"node-role.kubernetes.io/control-plane", corev1.TaintEffectNoSchedule},
		{"node.cloudprovider.kubernetes.io/uninitialized", corev1.TaintEffectNoSchedule},
		{"node.kubernetes.io/not-ready", corev1.TaintEffectNoSchedule},
		{"node.kubernetes.io/not-ready", corev1.TaintEffectNoExecute},
		{"node.kubernetes.io/unreachable", corev1.TaintEffectNoSchedule},
		{"node.kubernetes.io/unreachable", corev1.TaintEffectNoExecute},
	} {
		// Exists on the key tolerates the taint whatever its value.
		if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
			return tol.Key == want.key && tol.Operator == corev1.TolerationOpExists &&
				(tol.Effect == want.effect || tol.Effect == "") && tol.TolerationSeconds == nil
		}) {
			t.Errorf("no toleration of the taint %s:%s for good", want.key, want.effect)
		}
	}
	if !pod.HostNetwork {
		t.Error("hostNetwork is false: the CCM must run before the pod network exists")
	}
	if pod.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName %q, want system-cluster-critical", pod.PriorityClassName)
	}
	if pod.ServiceAccountName != ccmName {
		t.Errorf("serviceAccountName %q, want %s", pod.ServiceAccountName, ccmName)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v, want runAsNonRoot, a non-root runAsUser and the RuntimeDefault seccomp profile", psc)
	}

	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != "ccmkit/cloud-controller-manager:latest" {
		t.Errorf("image %q, want the placeholder ccmkit/cloud-controller-manager:latest (set by kustomize images)", c.Image)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
		(sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("container securityContext %+v, want a read-only root filesystem, no privilege escalation, all capabilities dropped", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v, want cpu and memory", c.Resources.Requests)
	}

	opts, err := parseArgs(c.Args)
	if err != nil {
		t.Fatalf("container args %q are not the CCM's flags: %v", c.Args, err)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || g.Scheme != corev1.URISchemeHTTPS || g.Port.IntValue() != opts.SecureServing.BindPort {
			t.Errorf("%s probe %s %s port %s, want HTTPS %s on --secure-port %d", p.name, g.Scheme, g.Path, g.Port.String(), p.path, opts.SecureServing.BindPort)
		}
	}

	for _, flag := range []string{"--cloud-provider", "--use-service-account-credentials", "--cloud-config"} {
		if n := countFlag(c.Args, flag); n != 1 {
			t.Errorf("%s appears %d times in %q, want once", flag, n, c.Args)
		}
	}
	switch {
	case opts.CloudProvider != tg.provider:
		t.Errorf("--cloud-provider=%q, want %q", opts.CloudProvider, tg.provider)
	case opts.CloudConfig != cloudConfigPath:
		t.Errorf("--cloud-config=%q, want %s", opts.CloudConfig, cloudConfigPath)
	case !opts.LeaderElection.LeaderElect:
		t.Error("--leader-elect is false: replicas on every control-plane node would all run controllers")
	case opts.UseServiceAccountCredentials != tg.saCredentials:
		t.Errorf("--use-service-account-credentials=%v, want %v", opts.UseServiceAccountCredentials, tg.saCredentials)
	case opts.SecureServing.BindPort != 10258 || opts.SecureServing.BindAddress.String() != "0.0.0.0":
		t.Errorf("serving on %s:%d, want 0.0.0.0:10258", opts.SecureServing.BindAddress, opts.SecureServing.BindPort)
	case opts.SecureServing.ServerCert.CertDirectory != "":
		t.Errorf("--cert-dir=%s, on a read-only root filesystem; want the in-memory certificate", opts.SecureServing.ServerCert.CertDirectory)
	case opts.ConfigureCloudRoutes && opts.ClusterCIDR == "":
		t.Error("the route controller runs without --cluster-cidr, which marks it failed in /readyz: set --cluster-cidr or --configure-cloud-routes=false")
	case opts.ClusterName == "":
		t.Error("--cluster-name is empty")
	}

	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if filepath.Join(c.VolumeMounts[i].MountPath, cloudConfigKey) == cloudConfigPath {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("volume mounts %+v, want %s read-only", c.VolumeMounts, filepath.Dir(cloudConfigPath))
	}
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	if i < 0 || pod.Volumes[i].Secret == nil || pod.Volumes[i].Secret.SecretName != cloudConfigSecret {
		t.Fatalf("volume %q is not the Secret %s", mount.Name, cloudConfigSecret)
	}
	secret := pod.Volumes[i].Secret
	if len(secret.Items) != 1 || secret.Items[0].Key != cloudConfigKey || secret.Items[0].Path != cloudConfigKey {
		t.Errorf("Secret volume items %+v, want %s at %s", secret.Items, cloudConfigKey, cloudConfigKey)
	}
	// Readable by the non-root user through its fsGroup, by no one else.
	if secret.DefaultMode == nil || *secret.DefaultMode != 0o440 || psc.FSGroup == nil || psc.RunAsGroup == nil || *psc.FSGroup != *psc.RunAsGroup {
		t.Errorf("Secret volume mode %v with fsGroup %v, want 0440 with the fsGroup of the runAsGroup", secret.DefaultMode, psc.FSGroup)
	}
}

// countFlag counts the args that set flag (as --flag=value).
func countFlag(args []string, flag string) int {
	n := 0
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			n++
		}
	}
	return n
}
