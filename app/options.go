package app

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	apiserveroptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cloudprovider "k8s.io/cloud-provider"
	cliflag "k8s.io/component-base/cli/flag"
	componentbaseconfig "k8s.io/component-base/config"
	componentbaseoptions "k8s.io/component-base/config/options"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	netutils "k8s.io/utils/net"

	"github.com/ccmkit/ccmkit/cloud"
)

// Protobuf is the default content type of the Kubernetes clients.
const protobufContentType = "application/vnd.kubernetes.protobuf"

// Options are the command-line options of the cloud-controller-manager.
// Names, meanings and defaults follow the upstream cloud-controller-manager
// unless a doc comment says otherwise.
type Options struct {
	Kubeconfig string
	Master     string

	CloudProvider string
	CloudConfig   string

	Controllers []string
	ClusterName string
	ClusterCIDR string

	AllocateNodeCIDRs    bool
	ConfigureCloudRoutes bool

	// ConcurrentServiceSyncs: workers of the service controller; 10, where
	// upstream has 1, so a slow load balancer does not hold up the others.
	ConcurrentServiceSyncs int32
	// LoadBalancerClass: the spec.loadBalancerClass the service controller
	// handles besides Services without a class (new flag; empty: none).
	LoadBalancerClass string
	// NodeSyncCoalescePeriod: the shortest time between two recomputations
	// of the load balancers' node set after Node changes (new flag).
	NodeSyncCoalescePeriod time.Duration
	// LoadBalancerResyncPeriod: how often each load balancer is re-ensured
	// to repair drift; 0 disables it (new flag).
	LoadBalancerResyncPeriod time.Duration
	// ConcurrentNodeSyncs: workers of the cloud-node controller; 10, where
	// upstream has 1, so a slow instance lookup does not hold up the others.
	ConcurrentNodeSyncs int32
	// ConcurrentNodeLifecycleSyncs: parallel instance checks of the
	// cloud-node-lifecycle controller; 10, where upstream has 1.
	ConcurrentNodeLifecycleSyncs int32

	NodeMonitorPeriod time.Duration
	// NodeDeletionGracePeriod is how long after a Node's instance was first
	// seen gone it is checked again before the Node is deleted (new flag).
	NodeDeletionGracePeriod   time.Duration
	NodeStatusUpdateFrequency time.Duration
	// ConcurrentRouteSyncs bounds the route creates and deletes in flight
	// (new flag).
	ConcurrentRouteSyncs int32
	// RouteReconciliationPeriod is the full route resync period: 5m, where
	// upstream polls every 10s, as the route controller is event-driven.
	RouteReconciliationPeriod time.Duration

	LeaderElection componentbaseconfig.LeaderElectionConfiguration

	SecureServing  *apiserveroptions.SecureServingOptions
	Authentication *apiserveroptions.DelegatingAuthenticationOptions
	Authorization  *apiserveroptions.DelegatingAuthorizationOptions

	KubeAPIQPS         float32
	KubeAPIBurst       int32
	KubeAPIContentType string

	// FeatureGates holds --feature-gates: a copy of the process's feature
	// gates, so that a bad value fails as the flag is parsed, as upstream's
	// does. The command applies what it sets to the process's gates
	// (utilfeature.DefaultMutableFeatureGate), which the Kubernetes
	// libraries read.
	FeatureGates featuregate.MutableVersionedFeatureGate

	Profiling bool
	// ContentionProfiling enables block profiling with Profiling.
	ContentionProfiling          bool
	UseServiceAccountCredentials bool
	// ControllerStartInterval is the pause, jittered up to twice as long,
	// between starting two controllers.
	ControllerStartInterval time.Duration

	Logs        *logsapi.LoggingConfiguration
	ShowVersion bool

	// Cloud holds the guard's flags (--cloud-*).
	Cloud cloud.Options

	// extraControllers are a binary's own controllers (WithControllers).
	extraControllers []ControllerDescriptor
	// providers are a binary's own providers (WithProvider).
	providers map[string]cloudprovider.Factory
	// upstream holds the upstream flags that have no effect here.
	upstream upstreamOnly
}

// providerNames lists the providers --cloud-provider accepts, for errors.
func (o *Options) providerNames() []string {
	names := cloud.Providers()
	for name := range o.providers {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// allControllers are ccmkit's controllers followed by the binary's own.
func (o *Options) allControllers() []ControllerDescriptor {
	return slices.Concat(builtinControllers, o.extraControllers)
}

// NewOptions returns the options with their defaults.
func NewOptions() *Options {
	o := &Options{
		Controllers:                  []string{"*"},
		ClusterName:                  "kubernetes",
		ConfigureCloudRoutes:         true,
		ConcurrentServiceSyncs:       10,
		NodeSyncCoalescePeriod:       time.Second,
		LoadBalancerResyncPeriod:     30 * time.Minute,
		ConcurrentNodeSyncs:          10,
		ConcurrentNodeLifecycleSyncs: 10,
		NodeMonitorPeriod:            5 * time.Second,
		NodeDeletionGracePeriod:      30 * time.Second,
		NodeStatusUpdateFrequency:    5 * time.Minute,
		RouteReconciliationPeriod:    5 * time.Minute,
		ConcurrentRouteSyncs:         10,
		LeaderElection: componentbaseconfig.LeaderElectionConfiguration{
			LeaderElect:       true,
			LeaseDuration:     durationOf(15 * time.Second),
			RenewDeadline:     durationOf(10 * time.Second),
			RetryPeriod:       durationOf(2 * time.Second),
			ResourceLock:      "leases",
			ResourceName:      "cloud-controller-manager",
			ResourceNamespace: "kube-system",
		},
		SecureServing:      apiserveroptions.NewSecureServingOptions(),
		Authentication:     apiserveroptions.NewDelegatingAuthenticationOptions(),
		Authorization:      apiserveroptions.NewDelegatingAuthorizationOptions(),
		KubeAPIQPS:         100,
		KubeAPIBurst:       200,
		KubeAPIContentType: protobufContentType,
		FeatureGates:       utilfeature.DefaultMutableFeatureGate.DeepCopy(),
		Profiling:          true,
		Logs:               logsapi.NewLoggingConfiguration(),
		Cloud:              cloud.DefaultOptions(),
		upstream:           newUpstreamOnly(),
	}
	o.Authentication.RemoteKubeConfigFileOptional = true
	o.Authorization.RemoteKubeConfigFileOptional = true
	// In-memory self-signed serving certificate unless --cert-dir or
	// --tls-cert-file say otherwise.
	o.SecureServing.ServerCert.CertDirectory = ""
	o.SecureServing.ServerCert.PairName = "cloud-controller-manager"
	o.SecureServing.BindPort = cloudprovider.CloudControllerManagerPort
	return o
}

// Flags returns the flags, grouped into named sets for the help text.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets

	fs := fss.FlagSet("generic")
	fs.StringVar(&o.CloudProvider, "cloud-provider", o.CloudProvider, "The provider for cloud services. Required.")
	fs.StringVar(&o.CloudConfig, "cloud-config", o.CloudConfig, "The path to the cloud provider configuration file. Empty string for no configuration file.")
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, fmt.Sprintf("A list of controllers to enable. '*' enables all on-by-default controllers, 'foo' enables the controller named 'foo', '-foo' disables the controller named 'foo'.\nAll controllers: %s\nAliases: %s",
		strings.Join(controllerNames(o.allControllers()), ", "), aliasHelp(o.allControllers())))
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "The instance prefix for the cluster.")
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", o.ClusterCIDR, "CIDR Range for Pods in cluster: one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma.")
	fs.BoolVar(&o.AllocateNodeCIDRs, "allocate-node-cidrs", o.AllocateNodeCIDRs, "Should CIDRs for Pods be allocated and set on the cloud provider. Requires --cluster-cidr.")
	fs.BoolVar(&o.ConfigureCloudRoutes, "configure-cloud-routes", o.ConfigureCloudRoutes, "Should CIDRs allocated by allocate-node-cidrs be configured on the cloud provider.")
	fs.Int32Var(&o.ConcurrentServiceSyncs, "concurrent-service-syncs", o.ConcurrentServiceSyncs, "The number of services that are allowed to sync concurrently (upstream default: 1).")
	fs.StringVar(&o.LoadBalancerClass, "load-balancer-class", o.LoadBalancerClass, "Also handle LoadBalancer Services with this spec.loadBalancerClass; Services without a class are always handled, other classes never.")
	fs.DurationVar(&o.NodeSyncCoalescePeriod, "node-sync-coalesce-period", o.NodeSyncCoalescePeriod, "Node changes update the load balancers' node sets at most once per period.")
	fs.DurationVar(&o.LoadBalancerResyncPeriod, "load-balancer-resync-period", o.LoadBalancerResyncPeriod, "How often each load balancer is re-ensured to repair drift in the cloud, spread over the period (0 disables).")
	fs.Int32Var(&o.ConcurrentNodeSyncs, "concurrent-node-syncs", o.ConcurrentNodeSyncs, "Number of workers concurrently synchronizing nodes (upstream default: 1).")
	fs.Int32Var(&o.ConcurrentNodeLifecycleSyncs, "concurrent-node-lifecycle-syncs", o.ConcurrentNodeLifecycleSyncs, "Number of Nodes the cloud-node-lifecycle controller checks in parallel (upstream default: 1).")
	fs.DurationVar(&o.NodeMonitorPeriod, "node-monitor-period", o.NodeMonitorPeriod, "The period for syncing NodeStatus in the cloud-node-lifecycle controller.")
	fs.DurationVar(&o.NodeDeletionGracePeriod, "node-deletion-grace-period", o.NodeDeletionGracePeriod, "How long after a Node's instance is first seen gone it is checked again; the Node is deleted only if it is still gone (upstream deletes on one observation).")
	fs.DurationVar(&o.NodeStatusUpdateFrequency, "node-status-update-frequency", o.NodeStatusUpdateFrequency, "Specifies how often the controller updates nodes' status.")
	fs.DurationVar(&o.RouteReconciliationPeriod, "route-reconciliation-period", o.RouteReconciliationPeriod, "The period of the full reconciliation of routes; routes also follow Node changes as they happen (upstream default: 10s polling).")
	fs.Int32Var(&o.ConcurrentRouteSyncs, "concurrent-route-syncs", o.ConcurrentRouteSyncs, "Most route creates and deletes in flight at once.")
	fs.BoolVar(&o.UseServiceAccountCredentials, "use-service-account-credentials", o.UseServiceAccountCredentials, "If true, use individual service account credentials for each controller.")

	fs = fss.FlagSet("cloud calls")
	fs.DurationVar(&o.Cloud.CallTimeout, "cloud-call-timeout", o.Cloud.CallTimeout, "Deadline of a cloud call (all but load-balancer create/update/delete).")
	fs.DurationVar(&o.Cloud.LBCallTimeout, "cloud-lb-call-timeout", o.Cloud.LBCallTimeout, "Deadline of load-balancer create, update and delete calls.")
	fs.DurationVar(&o.Cloud.DetachAfter, "cloud-call-detach-after", o.Cloud.DetachAfter, "How long a worker waits for a cloud call before the call goes on in the background and the worker moves on.")
	fs.IntVar(&o.Cloud.MaxInflight, "cloud-max-inflight-calls", o.Cloud.MaxInflight, "Most cloud calls in flight at once, detached and abandoned ones included; further calls fail fast as saturated.")
	fs.IntVar(&o.Cloud.MaxAbandoned, "cloud-max-abandoned-calls", o.Cloud.MaxAbandoned, "Most calls past their deadline that have not returned; further calls fail fast as saturated.")
	fs.DurationVar(&o.Cloud.FenceTimeout, "cloud-fence-timeout", o.Cloud.FenceTimeout, "How long past its deadline an abandoned mutating call still blocks other mutating calls for the same object.")
	fs.Float32Var(&o.Cloud.QPS, "cloud-api-qps", o.Cloud.QPS, "Cloud calls per second (0 = unlimited).")
	fs.IntVar(&o.Cloud.Burst, "cloud-api-burst", o.Cloud.Burst, "Burst of cloud calls above --cloud-api-qps (0 = 1 when a QPS is set).")

	fs = fss.FlagSet("leader election")
	componentbaseoptions.BindLeaderElectionFlags(&o.LeaderElection, fs)

	o.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	o.Authentication.AddFlags(fss.FlagSet("authentication"))
	o.Authorization.AddFlags(fss.FlagSet("authorization"))

	fs = fss.FlagSet("misc")
	fs.StringVar(&o.Master, "master", o.Master, "The address of the Kubernetes API server (overrides any value in kubeconfig).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to kubeconfig file with authorization and master location information (the master location can be overridden by the master flag).")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "QPS to use while talking with kubernetes apiserver.")
	fs.Int32Var(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst to use while talking with kubernetes apiserver.")
	fs.StringVar(&o.KubeAPIContentType, "kube-api-content-type", o.KubeAPIContentType, "Content type of requests sent to apiserver.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Enable profiling via web interface host:port/debug/pprof/")

	fs = fss.FlagSet("logs")
	logsapi.AddFlags(o.Logs, fs)
	fs.BoolVar(&o.ShowVersion, "version", false, "Print version information and quit.")

	o.addUpstreamFlags(&fss)
	return fss
}

// Validate reports every invalid option at once, each naming its flag. It
// contacts nothing.
func (o *Options) Validate() error {
	var errs []error
	add := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}

	_, own := o.providers[o.CloudProvider]
	switch {
	case o.CloudProvider == "":
		add("cloud-provider", "is required; compiled-in providers: %s", strings.Join(o.providerNames(), ", "))
	case !own && !cloudprovider.IsCloudProvider(o.CloudProvider):
		add("cloud-provider", "unknown provider %q; compiled-in providers: %s", o.CloudProvider, strings.Join(o.providerNames(), ", "))
	}
	if o.CloudConfig != "" {
		if st, err := os.Stat(o.CloudConfig); err != nil {
			add("cloud-config", "cannot read %s: %v", o.CloudConfig, errors.Unwrap(err))
		} else if st.IsDir() {
			add("cloud-config", "%s is a directory", o.CloudConfig)
		}
	}
	if err := checkDescriptors(o.allControllers()); err != nil {
		errs = append(errs, err)
	} else if _, err := enabledControllers(o.allControllers(), o.Controllers); err != nil {
		add("controllers", "%v", err)
	}
	if o.ClusterName == "" {
		add("cluster-name", "must not be empty")
	}
	if o.ClusterCIDR != "" {
		if err := validateClusterCIDR(o.ClusterCIDR); err != nil {
			add("cluster-cidr", "%v", err)
		}
	} else if o.AllocateNodeCIDRs {
		add("cluster-cidr", "is required with --allocate-node-cidrs")
	}
	positive := func(flag string, v int64) {
		if v <= 0 {
			add(flag, "must be greater than 0, got %d", v)
		}
	}
	positiveDuration := func(flag string, d time.Duration) {
		if d <= 0 {
			add(flag, "must be greater than 0, got %s", d)
		}
	}
	positive("concurrent-service-syncs", int64(o.ConcurrentServiceSyncs))
	positive("concurrent-node-syncs", int64(o.ConcurrentNodeSyncs))
	positive("concurrent-node-lifecycle-syncs", int64(o.ConcurrentNodeLifecycleSyncs))
	positiveDuration("node-monitor-period", o.NodeMonitorPeriod)
	positiveDuration("node-status-update-frequency", o.NodeStatusUpdateFrequency)
	if o.NodeDeletionGracePeriod < 0 {
		add("node-deletion-grace-period", "must not be negative, got %s", o.NodeDeletionGracePeriod)
	}
	positiveDuration("route-reconciliation-period", o.RouteReconciliationPeriod)
	positive("concurrent-route-syncs", int64(o.ConcurrentRouteSyncs))
	positiveDuration("node-sync-coalesce-period", o.NodeSyncCoalescePeriod)
	if o.LoadBalancerResyncPeriod < 0 {
		add("load-balancer-resync-period", "must not be negative, got %s", o.LoadBalancerResyncPeriod)
	}
	if o.LoadBalancerClass != "" {
		for _, msg := range validation.IsQualifiedName(o.LoadBalancerClass) {
			add("load-balancer-class", "%q: %s", o.LoadBalancerClass, msg)
		}
	}

	positiveDuration("cloud-call-timeout", o.Cloud.CallTimeout)
	positiveDuration("cloud-lb-call-timeout", o.Cloud.LBCallTimeout)
	positiveDuration("cloud-call-detach-after", o.Cloud.DetachAfter)
	positiveDuration("cloud-fence-timeout", o.Cloud.FenceTimeout)
	positive("cloud-max-inflight-calls", int64(o.Cloud.MaxInflight))
	positive("cloud-max-abandoned-calls", int64(o.Cloud.MaxAbandoned))
	if o.Cloud.MaxAbandoned > o.Cloud.MaxInflight && o.Cloud.MaxInflight > 0 {
		add("cloud-max-abandoned-calls", "%d is more than --cloud-max-inflight-calls (%d)", o.Cloud.MaxAbandoned, o.Cloud.MaxInflight)
	}
	if o.Cloud.QPS < 0 {
		add("cloud-api-qps", "must not be negative, got %v", o.Cloud.QPS)
	}
	if o.Cloud.Burst < 0 {
		add("cloud-api-burst", "must not be negative, got %d", o.Cloud.Burst)
	}

	if o.LeaderElection.LeaderElect {
		le := o.LeaderElection
		positiveDuration("leader-elect-lease-duration", le.LeaseDuration.Duration)
		positiveDuration("leader-elect-renew-deadline", le.RenewDeadline.Duration)
		positiveDuration("leader-elect-retry-period", le.RetryPeriod.Duration)
		if le.RenewDeadline.Duration >= le.LeaseDuration.Duration {
			add("leader-elect-renew-deadline", "%s must be less than --leader-elect-lease-duration (%s)", le.RenewDeadline.Duration, le.LeaseDuration.Duration)
		}
		if le.ResourceLock != "leases" {
			add("leader-elect-resource-lock", "%q is not supported; the only lock is \"leases\"", le.ResourceLock)
		}
		if le.ResourceName == "" {
			add("leader-elect-resource-name", "must not be empty")
		}
		if le.ResourceNamespace == "" {
			add("leader-elect-resource-namespace", "must not be empty")
		}
	}

	if o.KubeAPIQPS <= 0 {
		add("kube-api-qps", "must be greater than 0, got %v", o.KubeAPIQPS)
	}
	positive("kube-api-burst", int64(o.KubeAPIBurst))
	switch o.KubeAPIContentType {
	case protobufContentType, "application/json":
	default:
		add("kube-api-content-type", "%q is not one of %s, application/json", o.KubeAPIContentType, protobufContentType)
	}
	if o.Kubeconfig == "" && o.Master == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		add("kubeconfig", "neither --kubeconfig nor --master is set, and not running in a cluster")
	}
	if o.Kubeconfig != "" {
		if _, err := os.Stat(o.Kubeconfig); err != nil {
			add("kubeconfig", "cannot read %s: %v", o.Kubeconfig, errors.Unwrap(err))
		}
	}

	errs = append(errs, o.validateUpstream()...)
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	for _, err := range logsapi.Validate(o.Logs, o.FeatureGates, nil) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateClusterCIDR accepts one CIDR or a dual-stack pair.
// clusterCIDRs parses a validated --cluster-cidr.
func clusterCIDRs(value string) ([]netip.Prefix, error) {
	if value == "" {
		return nil, errors.New("--cluster-cidr: is required by the route controller; set it, or pass --configure-cloud-routes=false")
	}
	var out []netip.Prefix
	for _, s := range strings.Split(value, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--cluster-cidr: %w", err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func validateClusterCIDR(value string) error {
	cidrs, err := netutils.ParseCIDRs(strings.Split(value, ","))
	if err != nil {
		return err
	}
	switch len(cidrs) {
	case 1:
		return nil
	case 2:
		if dual, _ := netutils.IsDualStackCIDRs(cidrs); !dual {
			return fmt.Errorf("%q: two CIDRs must be one IPv4 and one IPv6", value)
		}
		return nil
	default:
		return fmt.Errorf("%q: at most two CIDRs (one IPv4, one IPv6)", value)
	}
}

func durationOf(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// publicAddress is the address the self-signed serving certificate is for.
var selfSignedIPs = []net.IP{netutils.ParseIPSloppy("127.0.0.1")}
