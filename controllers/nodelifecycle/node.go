package nodelifecycle

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudproviderapi "k8s.io/cloud-provider/api"
)

// Keys, reasons and tunables.
const (
	// taintShutdown marks a Node whose instance is shut down.
	taintShutdown = cloudproviderapi.TaintNodeShutdown

	// reasonDeletingNode is the Normal Event before a Node is deleted.
	reasonDeletingNode = "DeletingNode"
	// reasonDeletingNodeFailed is the Warning Event when the delete fails.
	reasonDeletingNodeFailed = "DeletingNodeFailed"

	// maxRetryPeriods bounds the back-off of a failing check, in monitor
	// periods: a failing check is retried after one period, then two, four,
	// up to this many, so a failing cloud API is not asked about every Node
	// every period.
	maxRetryPeriods = 10
)

// shutdownTaint is the taint of a Node whose instance is shut down.
func shutdownTaint() v1.Taint {
	return v1.Taint{Key: taintShutdown, Effect: v1.TaintEffectNoSchedule}
}

// goneObservation is the first time a Node's instance was seen gone, for
// that Node (UID) and that instance (providerID): a Node re-registered under
// the same name, or pointed at another instance, starts afresh.
type goneObservation struct {
	uid        types.UID
	providerID string
	// at is when the check that found the instance gone had returned: the
	// instance was gone at some point before it.
	at time.Time
}

// about reports whether the observation was made for node as it is now.
func (o goneObservation) about(node *v1.Node) bool {
	return o.uid == node.UID && o.providerID == node.Spec.ProviderID
}

// ready reports whether the Node's Ready condition is True. A missing
// condition is not Ready: the kubelet has not reported yet.
func ready(node *v1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == v1.NodeReady {
			return cond.Status == v1.ConditionTrue
		}
	}
	return false
}

func hasTaint(node *v1.Node, key string) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == key })
}

// withShutdownTaint returns a copy of taints with the shutdown taint added,
// and whether that changed anything.
func withShutdownTaint(taints []v1.Taint) ([]v1.Taint, bool) {
	if slices.ContainsFunc(taints, func(t v1.Taint) bool { return t.Key == taintShutdown }) {
		return taints, false
	}
	return append(slices.Clone(taints), shutdownTaint()), true
}

// withoutShutdownTaint returns a copy of taints without the shutdown taint,
// and whether that changed anything.
func withoutShutdownTaint(taints []v1.Taint) ([]v1.Taint, bool) {
	out := slices.DeleteFunc(slices.Clone(taints), func(t v1.Taint) bool { return t.Key == taintShutdown })
	return out, len(out) != len(taints)
}
