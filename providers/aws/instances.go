package aws

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
)

// Filters of DescribeInstances.
const (
	filterInstanceID     = "instance-id"
	filterPrivateDNSName = "private-dns-name"
	filterState          = "instance-state-name"
)

// aliveStates are every state but terminated: an instance that a Node's
// name may still belong to.
var aliveStates = []string{
	string(ec2types.InstanceStateNamePending),
	string(ec2types.InstanceStateNameRunning),
	string(ec2types.InstanceStateNameShuttingDown),
	string(ec2types.InstanceStateNameStopping),
	string(ec2types.InstanceStateNameStopped),
}

// instances implements InstancesV2 on EC2.
type instances struct {
	ec2       *ec2.Client
	region    string
	clusterID string
	families  []string
	batcher   *instanceBatcher
}

var _ cloudprovider.InstancesV2 = (*instances)(nil)

func newInstances(ctx context.Context, client *ec2.Client, region string, g GlobalConfig, batch batchOptions) *instances {
	i := &instances{ec2: client, region: region, clusterID: g.clusterID(), families: g.NodeIPFamilies}
	i.batcher = newInstanceBatcher(ctx, i.describeByIDs, batch)
	return i
}

// describe returns every instance DescribeInstances lists for in, all
// pages of it.
func (i *instances) describe(ctx context.Context, in *ec2.DescribeInstancesInput) ([]ec2types.Instance, error) {
	var out []ec2types.Instance
	pages := ec2.NewDescribeInstancesPaginator(i.ec2, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	return out, nil
}

// describeByIDs is the batcher's request. EC2 fails a request by IDs as a
// whole when one of them names no instance; then the same IDs are asked
// for again through a filter, which leaves the missing ones out.
func (i *instances) describeByIDs(ctx context.Context, ids []string) ([]ec2types.Instance, error) {
	list, err := i.describe(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	switch errorCode(err) {
	case codeInstanceNotFound:
		if len(ids) == 1 {
			return nil, nil
		}
	case codeInstanceMalformed:
		if len(ids) == 1 {
			return nil, err
		}
	default:
		return list, err
	}
	return i.describe(ctx, &ec2.DescribeInstancesInput{
		Filters: []ec2types.Filter{{Name: aws.String(filterInstanceID), Values: ids}},
	})
}

// find returns a Node's instance: by providerID when the Node has one
// (batched with other look-ups), else by its name, which is the
// instance's private DNS name. None is cloudprovider.InstanceNotFound, so
// the lifecycle controller can delete the Node.
//
// With a cluster ID, only instances with the cluster's tag are the
// cluster's. One found by name without it is skipped; one that the Node's
// providerID names is an error instead of InstanceNotFound, so that a tag
// missing from running instances never gets their Nodes deleted.
func (i *instances) find(ctx context.Context, node *v1.Node) (*ec2types.Instance, error) {
	if node.Spec.ProviderID == "" {
		return i.findByName(ctx, node.Name)
	}
	id, err := instanceIDFromProviderID(node.Spec.ProviderID)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node.Name, err)
	}
	in, err := i.batcher.get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("describing instance %s of node %s: %w", id, node.Name, err)
	}
	if in == nil {
		return nil, fmt.Errorf("instance %s of node %s: %w", id, node.Name, cloudprovider.InstanceNotFound)
	}
	if !hasClusterTag(in.Tags, i.clusterID) {
		return nil, fmt.Errorf("instance %s of node %s lacks the tag of cluster %s (%s%s, or %s=%s)",
			id, node.Name, i.clusterID, tagClusterPrefix, i.clusterID, tagClusterLegacy, i.clusterID)
	}
	return in, nil
}

// findByName returns the instance, not terminated and the cluster's,
// whose private DNS name is name. Several is an error: the Node cannot be
// told which one it is.
func (i *instances) findByName(ctx context.Context, name string) (*ec2types.Instance, error) {
	list, err := i.describe(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String(filterPrivateDNSName), Values: []string{name}},
		{Name: aws.String(filterState), Values: aliveStates},
	}})
	if err != nil {
		return nil, fmt.Errorf("describing the instance named %s: %w", name, err)
	}
	var found []ec2types.Instance
	for _, in := range list {
		if hasClusterTag(in.Tags, i.clusterID) {
			found = append(found, in)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no instance of the cluster has the private DNS name %s: %w", name, cloudprovider.InstanceNotFound)
	case 1:
		return &found[0], nil
	default:
		ids := make([]string, 0, len(found))
		for _, in := range found {
			ids = append(ids, aws.ToString(in.InstanceId))
		}
		return nil, fmt.Errorf("%d instances have the private DNS name %s (%s); set the Node's providerID", len(found), name, strings.Join(ids, ", "))
	}
}

// state is the instance's state, "" when EC2 gave none.
func state(in *ec2types.Instance) ec2types.InstanceStateName {
	if in.State == nil {
		return ""
	}
	return in.State.Name
}

// gone reports whether an instance no longer counts as existing.
func gone(in *ec2types.Instance) bool {
	s := state(in)
	return s == "" || s == ec2types.InstanceStateNameTerminated
}

// InstanceExists is false when the instance is not found or terminated.
func (i *instances) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	in, err := i.find(ctx, node)
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !gone(in), nil
}

// InstanceShutdown is true when the instance is stopped.
func (i *instances) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	in, err := i.find(ctx, node)
	if err != nil {
		return false, err
	}
	return state(in) == ec2types.InstanceStateNameStopped, nil
}

// InstanceMetadata returns the providerID (the Node's own when it has
// one), instance type, availability zone, region and addresses of the
// Node's instance.
func (i *instances) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	in, err := i.find(ctx, node)
	if err != nil {
		return nil, err
	}
	id := aws.ToString(in.InstanceId)
	if gone(in) {
		return nil, fmt.Errorf("instance %s of node %s is terminated: %w", id, node.Name, cloudprovider.InstanceNotFound)
	}
	zone := ""
	if in.Placement != nil {
		zone = aws.ToString(in.Placement.AvailabilityZone)
	}
	pid := node.Spec.ProviderID
	if pid == "" {
		pid = providerID(zone, id)
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID:    pid,
		InstanceType:  string(in.InstanceType),
		Zone:          zone,
		Region:        i.region,
		NodeAddresses: nodeAddresses(in, i.families),
	}, nil
}
