package node

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	nodehelpers "k8s.io/cloud-provider/node/helpers"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Keys and reasons.
const (
	taintUninitialized       = cloudproviderapi.TaintExternalCloudProvider
	annotationProvidedNodeIP = cloudproviderapi.AnnotationAlphaProvidedIPAddr
	// annotationCloudLabels lists the additional labels from the cloud that
	// this controller set, so it updates and removes only those.
	annotationCloudLabels = "node.ccmkit.io/cloud-labels"

	reasonSynced          = "Synced"
	reasonInitFailed      = "FailedToInitializeNode"
	reasonAddressMismatch = "ProvidedNodeIPNotFound"
)

var metav1PatchOptions = metav1.PatchOptions{}

var initDuration = metrics.NewHistogram(&metrics.HistogramOpts{
	Name:           "cloud_node_initialization_duration_seconds",
	Help:           "Time from a Node's creation to the removal of its uninitialized taint.",
	Buckets:        []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
	StabilityLevel: metrics.ALPHA,
})

func init() {
	legacyregistry.MustRegister(initDuration)
}

func uninitialized(node *v1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == taintUninitialized })
}

func withoutTaint(taints []v1.Taint, key string) []v1.Taint {
	return slices.DeleteFunc(slices.Clone(taints), func(t v1.Taint) bool { return t.Key == key })
}

// desiredAddresses returns the Node's addresses from the cloud's, or nil
// when they are what the Node has. The kubelet's Hostname address is kept
// when the cloud has none; a provided node IP must be one of the cloud's
// addresses and comes first.
func desiredAddresses(node *v1.Node, cloudAddresses []v1.NodeAddress) ([]v1.NodeAddress, error) {
	if len(cloudAddresses) == 0 {
		return nil, nil
	}
	addresses := slices.Clone(cloudAddresses)
	if !slices.ContainsFunc(addresses, func(a v1.NodeAddress) bool { return a.Type == v1.NodeHostName }) {
		for _, a := range node.Status.Addresses {
			if a.Type == v1.NodeHostName {
				addresses = append(addresses, a)
			}
		}
	}
	if ip := node.Annotations[annotationProvidedNodeIP]; ip != "" {
		ordered, err := nodehelpers.GetNodeAddressesFromNodeIP(ip, addresses)
		if err != nil {
			return nil, fmt.Errorf("provided node IP %q is not one of the cloud's addresses %v: %w", ip, cloudAddresses, err)
		}
		addresses = ordered
	}
	if slices.Equal(addresses, node.Status.Addresses) {
		return nil, nil
	}
	return addresses, nil
}

// applyCloudLabels sets the instance-type, zone and region labels (stable
// and beta) and the provider's additional labels on node. Additional
// labels under kubernetes.io or k8s.io are never set, nor ones the Node
// already has that this controller did not set; those it did set follow
// the cloud, including their removal.
func applyCloudLabels(node *v1.Node, md *cloudprovider.InstanceMetadata) {
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	set := func(value string, keys ...string) {
		if value == "" {
			return
		}
		for _, k := range keys {
			node.Labels[k] = value
		}
	}
	set(md.InstanceType, v1.LabelInstanceTypeStable, v1.LabelInstanceType)
	set(md.Zone, v1.LabelTopologyZone, v1.LabelFailureDomainBetaZone)
	set(md.Region, v1.LabelTopologyRegion, v1.LabelFailureDomainBetaRegion)

	managed := managedLabels(node)
	var now []string
	for k, v := range md.AdditionalLabels {
		if reservedLabel(k) {
			continue
		}
		if _, has := node.Labels[k]; has && !managed[k] {
			continue
		}
		node.Labels[k] = v
		now = append(now, k)
	}
	for k := range managed {
		if _, still := md.AdditionalLabels[k]; !still {
			delete(node.Labels, k)
		}
	}
	slices.Sort(now)
	switch {
	case len(now) > 0:
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[annotationCloudLabels] = strings.Join(now, ",")
	case node.Annotations != nil:
		delete(node.Annotations, annotationCloudLabels)
	}
}

func managedLabels(node *v1.Node) map[string]bool {
	managed := map[string]bool{}
	if v := node.Annotations[annotationCloudLabels]; v != "" {
		for _, k := range strings.Split(v, ",") {
			managed[k] = true
		}
	}
	return managed
}

// reservedLabel reports keys under the kubernetes.io and k8s.io domains.
func reservedLabel(key string) bool {
	prefix, _, found := strings.Cut(key, "/")
	if !found {
		return false
	}
	for _, domain := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == domain || strings.HasSuffix(prefix, "."+domain) {
			return true
		}
	}
	return false
}
