package main

import (
	"testing"

	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	metricsfeatures "k8s.io/component-base/metrics/features"
	cmfeatures "k8s.io/controller-manager/pkg/features"

	"github.com/ccmkit/ccmkit/app"
)

// TestUpstreamFeatureGatesAreKnown: --feature-gates knows the gates that
// upstream's cloud-controller-manager registers besides the apiserver's
// (which every binary importing k8s.io/apiserver has). The test lives here,
// away from the app tests, which import upstream's command and with it
// upstream's registrations.
func TestUpstreamFeatureGatesAreKnown(t *testing.T) {
	upstream := featuregate.NewFeatureGate()
	for _, add := range []func(featuregate.MutableVersionedFeatureGate) error{
		cmfeatures.SetupCurrentKubernetesSpecificFeatureGates, // by k8s.io/cloud-provider/options
		metricsfeatures.AddFeatureGates,                       // by k8s.io/cloud-provider/app
		logsapi.AddFeatureGates,                               // by k8s.io/cloud-provider/app
	} {
		if err := add(upstream); err != nil {
			t.Fatal(err)
		}
	}
	var o *app.Options
	app.NewCommand(app.WithDefaults(func(opts *app.Options) { o = opts }))
	known := o.FeatureGates.GetAllVersioned()
	for gate := range upstream.GetAllVersioned() {
		if _, ok := known[gate]; !ok {
			t.Errorf("--feature-gates does not know upstream's %s", gate)
		}
	}
}
