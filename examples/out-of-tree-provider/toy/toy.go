// Package toy is a cloud provider for the out-of-tree example: its
// instances come from a JSON file (the --cloud-config), and every load
// balancer gets the one address the file names.
package toy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
)

// ProviderName is the --cloud-provider of the toy cloud.
const ProviderName = "toy"

// Config is the --cloud-config file:
//
//	{"instances": {"node-1": {"id": "i-1", "type": "small", "zone": "zone-a",
//	  "region": "region-1", "internalIP": "10.0.0.1"}},
//	 "loadBalancerIP": "203.0.113.10"}
type Config struct {
	Instances      map[string]Instance `json:"instances"`
	LoadBalancerIP string              `json:"loadBalancerIP"`
}

// Instance is a machine of the toy cloud, by the name of its Node.
type Instance struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Zone       string `json:"zone"`
	Region     string `json:"region"`
	InternalIP string `json:"internalIP"`
}

// Cloud is the toy provider. It implements InstancesV2 and LoadBalancer.
type Cloud struct {
	cfg Config
}

// New reads the config; it is the provider's factory.
func New(config io.Reader) (cloudprovider.Interface, error) {
	if config == nil {
		return nil, errors.New("the toy cloud needs --cloud-config")
	}
	var cfg Config
	dec := json.NewDecoder(config)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("reading the toy cloud config: %w", err)
	}
	if cfg.LoadBalancerIP == "" {
		return nil, errors.New("the toy cloud config needs loadBalancerIP")
	}
	return &Cloud{cfg: cfg}, nil
}

var (
	_ cloudprovider.Interface    = (*Cloud)(nil)
	_ cloudprovider.InstancesV2  = (*Cloud)(nil)
	_ cloudprovider.LoadBalancer = (*Cloud)(nil)
)

func (c *Cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

func (c *Cloud) ProviderName() string { return ProviderName }

func (c *Cloud) HasClusterID() bool { return true }

func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c, true }

func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c, true }

func (c *Cloud) Instances() (cloudprovider.Instances, bool) { return nil, false }

func (c *Cloud) Zones() (cloudprovider.Zones, bool) { return nil, false }

func (c *Cloud) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

func (c *Cloud) Routes() (cloudprovider.Routes, bool) { return nil, false }

// InstanceExists reports whether the file lists the Node.
func (c *Cloud) InstanceExists(_ context.Context, node *v1.Node) (bool, error) {
	_, ok := c.cfg.Instances[node.Name]
	return ok, nil
}

// InstanceShutdown is always false: toy machines never stop.
func (c *Cloud) InstanceShutdown(context.Context, *v1.Node) (bool, error) { return false, nil }

// InstanceMetadata returns the Node's entry in the file.
func (c *Cloud) InstanceMetadata(_ context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	in, ok := c.cfg.Instances[node.Name]
	if !ok {
		return nil, cloudprovider.InstanceNotFound
	}
	md := &cloudprovider.InstanceMetadata{
		ProviderID:   ProviderName + "://" + in.ID,
		InstanceType: in.Type,
		Zone:         in.Zone,
		Region:       in.Region,
	}
	if in.InternalIP != "" {
		md.NodeAddresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: in.InternalIP}}
	}
	return md, nil
}

// GetLoadBalancer reports every load balancer as existing, at the one IP.
func (c *Cloud) GetLoadBalancer(context.Context, string, *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	return c.status(), true, nil
}

// GetLoadBalancerName names a Service's load balancer.
func (c *Cloud) GetLoadBalancerName(_ context.Context, clusterName string, svc *v1.Service) string {
	return clusterName + "-" + svc.Namespace + "-" + svc.Name
}

// EnsureLoadBalancer returns the one IP.
func (c *Cloud) EnsureLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) (*v1.LoadBalancerStatus, error) {
	return c.status(), nil
}

// UpdateLoadBalancer has nothing to update.
func (c *Cloud) UpdateLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) error {
	return nil
}

// EnsureLoadBalancerDeleted has nothing to delete.
func (c *Cloud) EnsureLoadBalancerDeleted(context.Context, string, *v1.Service) error { return nil }

func (c *Cloud) status() *v1.LoadBalancerStatus {
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: c.cfg.LoadBalancerIP}}}
}
