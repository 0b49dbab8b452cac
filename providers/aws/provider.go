package aws

import (
	"context"
	"io"
	"sync"

	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/cloud"
)

// ProviderName is "aws".
const ProviderName = "aws"

func init() {
	cloud.RegisterProvider(ProviderName, newFromConfig)
}

// newFromConfig is the provider's factory. Without a --cloud-config every
// setting has its default and the region comes from the instance
// metadata service.
func newFromConfig(r io.Reader) (cloudprovider.Interface, error) {
	cfg := &Config{Global: GlobalConfig{NodeIPFamilies: []string{familyIPv4}}}
	if r != nil {
		var warnings []string
		var err error
		cfg, warnings, err = ParseConfig(r)
		logger := klog.Background().WithName(ProviderName)
		for _, w := range warnings {
			logger.Info("Ignoring part of the cloud config", "warning", w)
		}
		if err != nil {
			return nil, err
		}
	}
	return New(cfg)
}

// Cloud is the AWS provider. It implements InstancesV2 on EC2, LoadBalancer
// on ELB, and Routes on the cluster's EC2 route tables.
type Cloud struct {
	cfg       *Config
	clients   *clients
	instances *instances
	lbs       *loadBalancers
	routes    *routes
	// stop ends the provider's life: requests in flight are cancelled.
	stop     context.CancelFunc
	initOnce sync.Once
}

var _ cloudprovider.Interface = (*Cloud)(nil)

// New builds the provider from a parsed config. It makes no request,
// except to the instance metadata service when the config names no
// region.
func New(cfg *Config) (*Cloud, error) {
	return newCloud(context.Background(), cfg, defaultClientOptions(), defaultBatchOptions)
}

func newCloud(ctx context.Context, cfg *Config, opts clientOptions, batch batchOptions) (*Cloud, error) {
	c, err := newClients(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	life, stop := context.WithCancel(context.Background())
	logger := klog.Background().WithName(ProviderName)
	if cfg.Global.clusterID() == "" {
		logger.Info("No cluster ID in the cloud config (KubernetesClusterID): every instance in the region is taken as the cluster's", "region", c.region)
	}
	logger.V(2).Info("AWS provider ready", "region", c.region, "clusterID", cfg.Global.clusterID(), "nodeIPFamilies", cfg.Global.NodeIPFamilies)
	inst := newInstances(life, c.ec2, c.region, cfg.Global, batch)
	return &Cloud{
		cfg:       cfg,
		clients:   c,
		instances: inst,
		lbs:       newLoadBalancers(c, inst, cfg.Global),
		routes:    newRoutes(c.ec2, inst, cfg.Global),
		stop:      stop,
	}, nil
}

// Initialize ties the provider's life to stop: when it closes, requests
// in flight are cancelled.
func (c *Cloud) Initialize(_ cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	c.initOnce.Do(func() {
		go func() {
			<-stop
			c.stop()
		}()
	})
}

// LoadBalancer returns the load balancers on ELB: Classic ELBs, and
// Network Load Balancers for Services annotated as nlb.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.lbs, true }

// Instances is not offered: ccmkit's controllers use InstancesV2.
func (c *Cloud) Instances() (cloudprovider.Instances, bool) { return nil, false }

// InstancesV2 returns the instances on EC2.
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c.instances, true }

// Zones is not offered: InstanceMetadata has the zone and region.
func (c *Cloud) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters is not offered.
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// Routes returns the pod routes in the cluster's EC2 route tables.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) { return c.routes, true }

// ProviderName is "aws".
func (c *Cloud) ProviderName() string { return ProviderName }

// HasClusterID is true when the config names the cluster
// (KubernetesClusterID or KubernetesClusterTag).
func (c *Cloud) HasClusterID() bool { return c.cfg.Global.clusterID() != "" }
