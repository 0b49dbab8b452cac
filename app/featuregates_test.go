package app

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	cmfeatures "k8s.io/controller-manager/pkg/features"
)

// parseUpstream parses args as the command does and returns the command
// and its options, valid but for the flags.
func parseUpstream(t *testing.T, args ...string) (*cobra.Command, *Options, error) {
	t.Helper()
	var o *Options
	cmd := NewCommand(WithDefaults(func(opts *Options) {
		valid := validOptions(t)
		opts.CloudProvider, opts.Kubeconfig = valid.CloudProvider, valid.Kubeconfig
		o = opts
	}))
	cmd.Flags().SetOutput(io.Discard) // deprecation notices
	return cmd, o, cmd.ParseFlags(args)
}

func TestUpstreamFlagsRejectBadValues(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "unknown feature gate", args: []string{"--feature-gates=NoSuchGate=true"}, want: []string{`"--feature-gates"`, "unrecognized feature gate: NoSuchGate"}},
		{name: "feature gate without value", args: []string{"--feature-gates=ContextualLogging"}, want: []string{`"--feature-gates"`, "missing bool value for ContextualLogging"}},
		{name: "feature gate not a bool", args: []string{"--feature-gates=ContextualLogging=maybe"}, want: []string{`"--feature-gates"`, "ContextualLogging=maybe"}},
		{name: "alpha log option without its gate", args: []string{"--log-text-split-stream"}, want: []string{"LoggingAlphaOptions"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, o, err := parseUpstream(t, tt.args...)
			if err == nil {
				err = o.Validate()
			}
			if err == nil {
				t.Fatalf("%v accepted", tt.args)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not mention %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestFeatureGatesAreHonoured(t *testing.T) {
	// Alpha logging options need their gate, as upstream.
	_, o, err := parseUpstream(t, "--feature-gates=LoggingAlphaOptions=true", "--log-text-split-stream")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("--log-text-split-stream with LoggingAlphaOptions: %v", err)
	}

	// The command applies them to the process's gates, which libraries read.
	gate := cmfeatures.CloudControllerManagerWatchBasedRoutesReconciliation
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, gate, false)
	_, o, err = parseUpstream(t, "--feature-gates="+string(gate)+"=true")
	if err != nil {
		t.Fatal(err)
	}
	if err := applyFeatureGates(o.FeatureGates); err != nil {
		t.Fatal(err)
	}
	if !utilfeature.DefaultFeatureGate.Enabled(gate) {
		t.Errorf("%s not enabled in the process's feature gates", gate)
	}
}
