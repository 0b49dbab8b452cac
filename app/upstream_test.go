package app

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	cloudprovider "k8s.io/cloud-provider"
	upstreamapp "k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	cpoptions "k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
)

// TestEveryUpstreamFlagIsAccepted diffs the flags of upstream's
// cloud-controller-manager command, as k8s.io/cloud-provider builds it,
// against this command's: an upstream manifest must not fail on an unknown
// flag.
func TestEveryUpstreamFlagIsAccepted(t *testing.T) {
	uo, err := cpoptions.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	noCloud := func(*cloudcontrollerconfig.CompletedConfig) cloudprovider.Interface { return nil }
	upstream := upstreamapp.NewCloudControllerManagerCommand(uo, noCloud, upstreamapp.DefaultInitFuncConstructors, map[string]string{}, cliflag.NamedFlagSets{}, make(chan struct{}))
	cmd := NewCommand()
	cmd.InitDefaultHelpFlag() // cobra adds --help when the command runs
	ours := cmd.Flags()
	var missing []string
	upstream.Flags().VisitAll(func(f *pflag.Flag) {
		if ours.Lookup(f.Name) == nil {
			missing = append(missing, "--"+f.Name)
		}
	})
	if len(missing) > 0 {
		t.Errorf("upstream flags this command does not accept: %s", strings.Join(missing, " "))
	}
}

func parseFlags(t *testing.T, o *Options, args ...string) (*pflag.FlagSet, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	for _, set := range o.Flags().FlagSets {
		fs.AddFlagSet(set)
	}
	return fs, fs.Parse(args)
}

// TestUpstreamOnlyFlagsAreNamed: the upstream flags without effect parse,
// pass validation and are each named by ignoredFlags, with a reason; the
// two that act do not; left at their defaults none is named.
func TestUpstreamOnlyFlagsAreNamed(t *testing.T) {
	o := validOptions(t)
	fs, err := parseFlags(t, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := ignoredFlags(fs); len(got) != 0 {
		t.Errorf("defaults named as set: %v", got)
	}

	o = validOptions(t)
	fs, err = parseFlags(t, o,
		"--webhook-secure-port=10270", "--webhook-bind-address=127.0.0.1", "--feature-gates=AllAlpha=false",
		"--min-resync-period=1h", "--concurrent-node-status-updates=2", "--controller-start-interval=1s",
		"--cidr-allocator-type=CloudAllocator", "--external-cloud-volume-plugin=gce", "--enable-leader-migration",
		"--leader-migration-config=/etc/migration.yaml", "--contention-profiling", "--allow-untagged-cloud", "--node-sync-period=1m")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("valid upstream values refused: %v", err)
	}
	var named []string
	for _, f := range ignoredFlags(fs) {
		if f.reason == "" {
			t.Errorf("--%s named without a reason", f.name)
		}
		named = append(named, f.name)
	}
	slices.Sort(named)
	want := []string{"allow-untagged-cloud", "cidr-allocator-type", "concurrent-node-status-updates", "enable-leader-migration",
		"external-cloud-volume-plugin", "feature-gates", "leader-migration-config", "min-resync-period", "node-sync-period",
		"webhook-bind-address", "webhook-secure-port"}
	if !slices.Equal(named, want) {
		t.Errorf("named %v, want %v", named, want)
	}
	if !o.ContentionProfiling || o.ControllerStartInterval.String() != "1s" {
		t.Errorf("acted-on flags not set: contention profiling %v, controller start interval %s", o.ContentionProfiling, o.ControllerStartInterval)
	}
}

// TestUpstreamOnlyFlagsRefuseBadValues: a value upstream refuses is a clear
// error naming the flag.
func TestUpstreamOnlyFlagsRefuseBadValues(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
		atParse bool
	}{
		{args: []string{"--webhook-secure-port=70000"}, wantErr: "webhook-secure-port"},
		{args: []string{"--webhooks=nosuchwebhook"}, wantErr: "nosuchwebhook"},
		{args: []string{"--webhook-secure-port=10258"}, wantErr: "is also --secure-port"},
		{args: []string{"--concurrent-node-status-updates=-1"}, wantErr: "--concurrent-node-status-updates"},
		{args: []string{"--controller-start-interval=-1s"}, wantErr: "--controller-start-interval"},
		{args: []string{"--feature-gates=NoSuchGate=true"}, wantErr: "NoSuchGate", atParse: true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			o := validOptions(t)
			_, err := parseFlags(t, o, tt.args...)
			if !tt.atParse {
				if err != nil {
					t.Fatalf("parse: %v", err)
				}
				err = o.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want one naming %q", err, tt.wantErr)
			}
		})
	}
}
