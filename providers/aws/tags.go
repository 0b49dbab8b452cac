package aws

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// Tags that mark a resource as a cluster's.
const (
	// tagClusterPrefix + <cluster ID> is the cluster tag; its value is
	// "owned" or "shared".
	tagClusterPrefix = "kubernetes.io/cluster/"
	// tagClusterLegacy = <cluster ID> is the cluster tag of old clusters.
	tagClusterLegacy = "KubernetesCluster"
)

// hasClusterTag reports whether tags mark a resource as clusterID's. With
// no cluster ID, every resource is.
func hasClusterTag(tags []ec2types.Tag, clusterID string) bool {
	if clusterID == "" {
		return true
	}
	key := tagClusterPrefix + clusterID
	for _, t := range tags {
		k := aws.ToString(t.Key)
		if k == key || (k == tagClusterLegacy && aws.ToString(t.Value) == clusterID) {
			return true
		}
	}
	return false
}
