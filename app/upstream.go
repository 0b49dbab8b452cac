package app

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	cpoptions "k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
)

// upstreamOnly holds the flags of the upstream cloud-controller-manager
// that ccmkit accepts, so that an upstream manifest starts unchanged, but
// does not act on. Each one an operator sets is named in a warning at
// start-up (see ignoredFlags).
type upstreamOnly struct {
	AllowUntaggedCloud          bool
	CIDRAllocatorType           string
	ConcurrentNodeStatusUpdates int32
	ExternalCloudVolumePlugin   string
	MinResyncPeriod             time.Duration
	NodeSyncPeriod              time.Duration
	EnableLeaderMigration       bool
	LeaderMigrationConfig       string
	Webhook                     *cpoptions.WebhookOptions
	WebhookServing              *cpoptions.WebhookServingOptions
}

func newUpstreamOnly() upstreamOnly {
	return upstreamOnly{
		CIDRAllocatorType: "RangeAllocator",
		MinResyncPeriod:   12 * time.Hour,
		Webhook:           cpoptions.NewWebhookOptions(),
		WebhookServing:    cpoptions.NewWebhookServingOptions(cpoptions.ProviderDefaults{}),
	}
}

// addUpstreamFlags adds the upstream-only flags to the named sets upstream
// has them in, with upstream's names, defaults and deprecations.
func (o *Options) addUpstreamFlags(fss *cliflag.NamedFlagSets) {
	u := &o.upstream
	fs := fss.FlagSet("generic")
	fs.DurationVar(&u.MinResyncPeriod, "min-resync-period", u.MinResyncPeriod, "No effect: ccmkit's informers do not resync; each controller has its own resync period.")
	fs.DurationVar(&o.ControllerStartInterval, "controller-start-interval", o.ControllerStartInterval, "Interval between starting controllers (jittered up to twice as long).")
	fs.StringVar(&u.CIDRAllocatorType, "cidr-allocator-type", u.CIDRAllocatorType, "No effect: ccmkit does not allocate pod CIDRs. Type of CIDR allocator to use.")
	fs.StringVar(&u.ExternalCloudVolumePlugin, "external-cloud-volume-plugin", u.ExternalCloudVolumePlugin, "No effect: used by kube-controller-manager's volume controllers only.")
	fs.BoolVar(&u.AllowUntaggedCloud, "allow-untagged-cloud", u.AllowUntaggedCloud, "No effect. Allow the cluster to run without the cluster-id on cloud instances.")
	_ = fs.MarkDeprecated("allow-untagged-cloud", "This flag is deprecated and will be removed in a future release. A cluster-id will be required on cloud instances.")
	fs.DurationVar(&u.NodeSyncPeriod, "node-sync-period", u.NodeSyncPeriod, "No effect.")
	_ = fs.MarkDeprecated("node-sync-period", "This flag is currently no-op and will be deleted.")
	fs.Int32Var(&u.ConcurrentNodeStatusUpdates, "concurrent-node-status-updates", u.ConcurrentNodeStatusUpdates, "No effect: the cloud-node controller refreshes Nodes on its --concurrent-node-syncs workers.")
	o.FeatureGates.AddFlag(fs)

	fs = fss.FlagSet("leader migration")
	fs.BoolVar(&u.EnableLeaderMigration, "enable-leader-migration", u.EnableLeaderMigration, "No effect: leader migration from kube-controller-manager is not supported.")
	fs.StringVar(&u.LeaderMigrationConfig, "leader-migration-config", u.LeaderMigrationConfig, "No effect: leader migration from kube-controller-manager is not supported.")

	fs = fss.FlagSet("misc")
	fs.BoolVar(&o.ContentionProfiling, "contention-profiling", o.ContentionProfiling, "Enable block profiling, if profiling is enabled.")

	u.Webhook.AddFlags(fss.FlagSet("webhook"), nil, nil)
	u.WebhookServing.AddFlags(fss.FlagSet("webhook serving"))
}

// validateUpstream checks the upstream-only flags as upstream does, so a
// value upstream refuses is refused here too.
func (o *Options) validateUpstream() []error {
	u := o.upstream
	var errs []error
	if u.ConcurrentNodeStatusUpdates < 0 {
		errs = append(errs, fmt.Errorf("--concurrent-node-status-updates: must not be negative, got %d", u.ConcurrentNodeStatusUpdates))
	}
	if o.ControllerStartInterval < 0 {
		errs = append(errs, fmt.Errorf("--controller-start-interval: must not be negative, got %s", o.ControllerStartInterval))
	}
	errs = append(errs, u.Webhook.Validate(nil, nil)...)
	errs = append(errs, u.WebhookServing.Validate()...)
	if p := u.WebhookServing.BindPort; p != 0 && p == o.SecureServing.BindPort {
		errs = append(errs, fmt.Errorf("--webhook-secure-port: %d is also --secure-port", p))
	}
	return errs
}

// ignoredFlag is a flag the operator set that ccmkit does not act on.
type ignoredFlag struct {
	name, reason string
}

// ignoredFlags lists the flags set in fs that have no effect, or only part
// of upstream's, with why.
func ignoredFlags(fs *pflag.FlagSet) []ignoredFlag {
	reasons := []ignoredFlag{
		{"min-resync-period", "ccmkit's informers do not resync; each controller resyncs on its own period"},
		{"cidr-allocator-type", "ccmkit does not allocate pod CIDRs"},
		{"external-cloud-volume-plugin", "only kube-controller-manager's volume controllers use it"},
		{"allow-untagged-cloud", "deprecated upstream; providers decide how they use the cluster ID"},
		{"node-sync-period", "deprecated and a no-op upstream"},
		{"concurrent-node-status-updates", "the cloud-node controller refreshes Nodes on its --concurrent-node-syncs workers"},
		{"enable-leader-migration", "leader migration from kube-controller-manager is not supported; migrate with the cloud controllers stopped in kube-controller-manager first"},
		{"leader-migration-config", "leader migration from kube-controller-manager is not supported"},
		{"feature-gates", "the gates are set in the process, where the logging and client libraries read theirs; no ccmkit controller reads a gate"},
		{"webhooks", "ccmkit serves no webhooks"},
	}
	var out []ignoredFlag
	for _, r := range reasons {
		if fs.Changed(r.name) {
			out = append(out, r)
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed && strings.HasPrefix(f.Name, "webhook-") {
			out = append(out, ignoredFlag{f.Name, "ccmkit serves no webhooks"})
		}
	})
	return out
}
