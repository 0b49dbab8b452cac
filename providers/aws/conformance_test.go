package aws

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ccmkit/ccmkit/providers/providertest"
)

// control is the conformance suite's view of moto. The Nodes it returns
// are named, as kubelets on EC2 name them, by their instance's private
// DNS name.
type control struct {
	ec2   *ec2.Client
	elb   *elb.Client
	elbv2 *elbv2.Client
}

var _ providertest.Cloud = (*control)(nil)

func (c *control) AddInstance(ctx context.Context, name string) (*v1.Node, error) {
	out, err := c.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String(testAMI), MinCount: aws.Int32(1), MaxCount: aws.Int32(1), InstanceType: ec2types.InstanceTypeT3Medium,
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{
			{Key: aws.String("Name"), Value: aws.String(name)},
			{Key: aws.String(tagClusterPrefix + testCluster), Value: aws.String("owned")},
		}}},
	})
	if err != nil {
		return nil, err
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: aws.ToString(out.Instances[0].PrivateDnsName)}}, nil
}

// instanceID is the ID of the live instance whose private DNS name is name.
func (c *control) instanceID(ctx context.Context, name string) (string, error) {
	out, err := c.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String(filterPrivateDNSName), Values: []string{name}},
		{Name: aws.String(filterState), Values: aliveStates},
	}})
	if err != nil {
		return "", err
	}
	var ids []string
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			ids = append(ids, aws.ToString(in.InstanceId))
		}
	}
	if len(ids) != 1 {
		return "", fmt.Errorf("%d instances named %s", len(ids), name)
	}
	return ids[0], nil
}

func (c *control) StopInstance(ctx context.Context, name string) error {
	id, err := c.instanceID(ctx, name)
	if err != nil {
		return err
	}
	_, err = c.ec2.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
	return err
}

func (c *control) DeleteInstance(ctx context.Context, name string) error {
	id, err := c.instanceID(ctx, name)
	if err != nil {
		return err
	}
	_, err = c.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	return err
}

// LoadBalancers lists the Classic ELBs and Network Load Balancers by
// their Service tag.
func (c *control) LoadBalancers(ctx context.Context) ([]string, error) {
	return cloudLoadBalancers(ctx, c.elb, c.elbv2)
}

// Members lists the nodes, by private DNS name, that the Service's load
// balancer sends to: a Classic ELB's instances or a Network Load
// Balancer's targets.
func (c *control) Members(ctx context.Context, svc *v1.Service) ([]string, error) {
	return cloudMembers(ctx, c.ec2, c.elb, c.elbv2, loadBalancerName(svc))
}

// Addresses lists the load balancers' DNS names and the Elastic IPs.
func (c *control) Addresses(ctx context.Context) ([]string, error) {
	return cloudAddresses(ctx, c.ec2, c.elb, c.elbv2)
}

func TestConformance(t *testing.T) {
	c := newTestCloud(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	elbClient, elbv2Client := c.loadBalancerClients()
	c.tagDefaultSubnetsForLoadBalancers(t)
	// The pod routes go into the cluster's route table, found by its tag.
	c.createClusterRouteTable(t)
	providertest.Run(t, providertest.Suite{Provider: p, Cloud: &control{ec2: c.ec2, elb: elbClient, elbv2: elbv2Client}})
}
