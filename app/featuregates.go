package app

import (
	"fmt"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	metricsfeatures "k8s.io/component-base/metrics/features"

	// Registers the controller-manager feature gates.
	_ "k8s.io/controller-manager/pkg/features/register"
)

// The process's feature gates know what upstream's cloud-controller-manager
// knows: the apiserver's (registered by its package), the controller
// manager's, and those of metrics and logging, which upstream's command adds.
func init() {
	utilruntime.Must(metricsfeatures.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
}

// applyFeatureGates sets the process's feature gates, which the Kubernetes
// libraries read, to what --feature-gates set.
func applyFeatureGates(gates featuregate.MutableVersionedFeatureGate) error {
	set := map[string]bool{}
	for gate := range gates.GetAllVersioned() {
		if gates.ExplicitlySet(gate) {
			set[string(gate)] = gates.Enabled(gate)
		}
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(set); err != nil {
		return fmt.Errorf("--feature-gates: %w", err)
	}
	return nil
}
