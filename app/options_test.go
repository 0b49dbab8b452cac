package app

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	fakecloud "k8s.io/cloud-provider/fake"

	"github.com/ccmkit/ccmkit/cloud"
)

func init() {
	cloud.RegisterProvider("options-test", func(io.Reader) (cloudprovider.Interface, error) { return &fakecloud.Cloud{}, nil })
}

// validOptions returns options that pass Validate, with a kubeconfig file.
func validOptions(t *testing.T) *Options {
	t.Helper()
	o := NewOptions()
	o.CloudProvider = "options-test"
	o.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(o.Kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return o
}

func parse(t *testing.T, o *Options, args ...string) error {
	t.Helper()
	fss := o.Flags()
	cmdFlags := fss.FlagSet("all")
	for _, fs := range fss.FlagSets {
		cmdFlags.AddFlagSet(fs)
	}
	return cmdFlags.Parse(args)
}

func TestDefaultsFollowUpstream(t *testing.T) {
	o := NewOptions()
	if err := parse(t, o); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"secure-port", o.SecureServing.BindPort, 10258},
		{"leader-elect", o.LeaderElection.LeaderElect, true},
		{"leader-elect-lease-duration", o.LeaderElection.LeaseDuration.Duration, 15 * time.Second},
		{"leader-elect-renew-deadline", o.LeaderElection.RenewDeadline.Duration, 10 * time.Second},
		{"leader-elect-retry-period", o.LeaderElection.RetryPeriod.Duration, 2 * time.Second},
		{"leader-elect-resource-lock", o.LeaderElection.ResourceLock, "leases"},
		{"leader-elect-resource-name", o.LeaderElection.ResourceName, "cloud-controller-manager"},
		{"leader-elect-resource-namespace", o.LeaderElection.ResourceNamespace, "kube-system"},
		{"kube-api-content-type", o.KubeAPIContentType, "application/vnd.kubernetes.protobuf"},
		{"kube-api-qps", o.KubeAPIQPS, float32(100)},
		{"kube-api-burst", o.KubeAPIBurst, int32(200)},
		{"cluster-name", o.ClusterName, "kubernetes"},
		{"configure-cloud-routes", o.ConfigureCloudRoutes, true},
		{"node-status-update-frequency", o.NodeStatusUpdateFrequency, 5 * time.Minute},
		{"node-monitor-period", o.NodeMonitorPeriod, 5 * time.Second},
		{"authorization-always-allow-paths", strings.Join(o.Authorization.AlwaysAllowPaths, ","), "/healthz,/readyz,/livez"},
		{"cloud-call-timeout", o.Cloud.CallTimeout, 60 * time.Second},
		{"cloud-lb-call-timeout", o.Cloud.LBCallTimeout, 10 * time.Minute},
		{"cloud-call-detach-after", o.Cloud.DetachAfter, 10 * time.Second},
		{"cloud-max-inflight-calls", o.Cloud.MaxInflight, 256},
		{"cloud-max-abandoned-calls", o.Cloud.MaxAbandoned, 64},
		{"cloud-fence-timeout", o.Cloud.FenceTimeout, 5 * time.Minute},
		{"cloud-api-qps", o.Cloud.QPS, float32(0)},
		// ccmkit's own defaults.
		{"concurrent-service-syncs", o.ConcurrentServiceSyncs, int32(10)},
		{"load-balancer-class", o.LoadBalancerClass, ""},
		{"node-sync-coalesce-period", o.NodeSyncCoalescePeriod, time.Second},
		{"load-balancer-resync-period", o.LoadBalancerResyncPeriod, 30 * time.Minute},
		{"concurrent-route-syncs", o.ConcurrentRouteSyncs, int32(10)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("--%s default = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestEveryDocumentedFlagExists(t *testing.T) {
	fss := NewOptions().Flags()
	var names []string
	for _, fs := range fss.FlagSets {
		fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	}
	for _, want := range strings.Fields(`kubeconfig master cloud-provider cloud-config controllers cluster-name
		cluster-cidr allocate-node-cidrs configure-cloud-routes concurrent-service-syncs concurrent-node-syncs
		node-monitor-period node-status-update-frequency route-reconciliation-period leader-elect
		leader-elect-lease-duration leader-elect-renew-deadline leader-elect-retry-period
		leader-elect-resource-lock leader-elect-resource-name leader-elect-resource-namespace secure-port
		bind-address cert-dir tls-cert-file tls-private-key-file authentication-kubeconfig
		authorization-kubeconfig authentication-skip-lookup authorization-always-allow-paths kube-api-qps
		kube-api-burst kube-api-content-type profiling use-service-account-credentials v logging-format
		concurrent-node-lifecycle-syncs node-deletion-grace-period load-balancer-class
		node-sync-coalesce-period load-balancer-resync-period concurrent-route-syncs
		version cloud-call-timeout cloud-lb-call-timeout cloud-call-detach-after cloud-max-inflight-calls
		cloud-max-abandoned-calls cloud-fence-timeout cloud-api-qps cloud-api-burst`) {
		if !slices.Contains(names, want) {
			t.Errorf("flag --%s is missing", want)
		}
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	o := validOptions(t)
	if err := o.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	err := parse(t, o,
		"--cloud-provider=nope",
		"--cloud-config=/does/not/exist",
		"--controllers=cloud-node,bogus",
		"--cluster-cidr=10.0.0.0/8,10.1.0.0/16",
		"--concurrent-node-syncs=0",
		"--cloud-call-timeout=0s",
		"--cloud-max-abandoned-calls=-1",
		"--leader-elect-renew-deadline=20s",
		"--leader-elect-resource-lock=configmaps",
		"--kube-api-content-type=text/plain",
		"--logging-format=xml",
		"--load-balancer-class=not a class!",
		"--node-sync-coalesce-period=0s",
		"--load-balancer-resync-period=-1m",
		"--concurrent-route-syncs=0",
	)
	if err != nil {
		t.Fatal(err)
	}
	err = o.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{
		`--cloud-provider: unknown provider "nope"; compiled-in providers:`,
		"options-test",
		"--cloud-config: cannot read /does/not/exist",
		`--controllers: unknown controller "bogus"`,
		"--cluster-cidr:",
		"--concurrent-node-syncs: must be greater than 0",
		"--cloud-call-timeout: must be greater than 0",
		"--cloud-max-abandoned-calls: must be greater than 0",
		"--leader-elect-renew-deadline: 20s must be less than --leader-elect-lease-duration",
		`--leader-elect-resource-lock: "configmaps" is not supported`,
		"--kube-api-content-type:",
		"xml",
		`--load-balancer-class: "not a class!"`,
		"--node-sync-coalesce-period: must be greater than 0",
		"--load-balancer-resync-period: must not be negative",
		"--concurrent-route-syncs: must be greater than 0",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors do not mention %q:\n%v", want, err)
		}
	}
}

func TestValidateCloudProviderRequired(t *testing.T) {
	o := validOptions(t)
	o.CloudProvider = ""
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "--cloud-provider: is required; compiled-in providers: ") {
		t.Fatalf("error = %v, want --cloud-provider required", err)
	}
}

func TestValidateClusterCIDR(t *testing.T) {
	tests := []struct {
		value string
		ok    bool
	}{
		{"10.244.0.0/16", true},
		{"fd00::/48", true},
		{"10.244.0.0/16,fd00::/48", true},
		{"10.244.0.0/16,10.245.0.0/16", false},
		{"10.244.0.0/16,fd00::/48,10.1.0.0/16", false},
		{"not-a-cidr", false},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			if err := validateClusterCIDR(tt.value); (err == nil) != tt.ok {
				t.Errorf("validateClusterCIDR(%q) = %v, want ok=%v", tt.value, err, tt.ok)
			}
		})
	}
}

func TestClusterCIDRs(t *testing.T) {
	got, err := clusterCIDRs("10.244.1.0/16, fd00:10::1/56")
	if err != nil || len(got) != 2 || got[0].String() != "10.244.0.0/16" || got[1].String() != "fd00:10::/56" {
		t.Errorf("clusterCIDRs = %v, %v; want the two masked prefixes", got, err)
	}
	if _, err := clusterCIDRs(""); err == nil || !strings.Contains(err.Error(), "--cluster-cidr") {
		t.Errorf("empty --cluster-cidr: %v, want an error naming the flag", err)
	}
}

func TestEnabledControllers(t *testing.T) {
	tests := []struct {
		name    string
		flags   []string
		want    []string
		wantErr string
	}{
		{name: "all", flags: []string{"*"}, want: []string{"cloud-node", "cloud-node-lifecycle", "service", "route"}},
		{name: "one", flags: []string{"service"}, want: []string{"service"}},
		{name: "all but one", flags: []string{"-route", "*"}, want: []string{"cloud-node", "cloud-node-lifecycle", "service"}},
		{name: "upstream aliases", flags: []string{"cloud-node-controller", "service-lb-controller", "node-route-controller", "cloud-node-lifecycle-controller"}, want: []string{"cloud-node", "cloud-node-lifecycle", "service", "route"}},
		{name: "disabled alias wins", flags: []string{"*", "-service-lb-controller"}, want: []string{"cloud-node", "cloud-node-lifecycle", "route"}},
		{name: "none", flags: nil, want: nil},
		{name: "unknown", flags: []string{"*", "nodeipam"}, wantErr: `unknown controller "nodeipam"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := enabledControllers(builtinControllers, tt.flags)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, c := range got {
				names = append(names, c.Name)
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("enabled = %v, want %v", names, tt.want)
			}
		})
	}
}

func TestStripUnused(t *testing.T) {
	conditions := []v1.NodeCondition{
		{Type: v1.NodeReady, Status: v1.ConditionTrue},
		{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse},
		{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionFalse},
		{Type: "KernelDeadlock", Status: v1.ConditionFalse},
	}
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "n", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
			Labels:      map[string]string{v1.LabelTopologyZone: "a"},
			Annotations: map[string]string{v1.LastAppliedConfigAnnotation: "{}", "alpha.kubernetes.io/provided-node-ip": "10.0.0.1"},
		},
		Spec: v1.NodeSpec{ProviderID: "fake://1", PodCIDRs: []string{"10.244.0.0/24"}, Taints: []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoSchedule}}},
		Status: v1.NodeStatus{
			Images:     []v1.ContainerImage{{Names: []string{"busybox"}}},
			Capacity:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("4")},
			NodeInfo:   v1.NodeSystemInfo{KubeletVersion: "v1.37.0"},
			Conditions: conditions,
			Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}},
		},
	}
	want := n.DeepCopy()
	want.ManagedFields = nil
	delete(want.Annotations, v1.LastAppliedConfigAnnotation)
	want.Status = v1.NodeStatus{Addresses: n.Status.Addresses, Conditions: []v1.NodeCondition{conditions[0], conditions[2]}}
	out, err := StripUnused(n)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("stripped Node (-want +got):\n%s", diff)
	}

	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			Annotations: map[string]string{v1.LastAppliedConfigAnnotation: "{}", "service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}},
		Spec:   v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Port: 80}}},
		Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}}},
	}
	wantSvc := svc.DeepCopy()
	wantSvc.ManagedFields = nil
	delete(wantSvc.Annotations, v1.LastAppliedConfigAnnotation)
	out, _ = StripUnused(svc)
	if diff := cmp.Diff(wantSvc, out); diff != "" {
		t.Errorf("stripped Service (-want +got):\n%s", diff)
	}
}
