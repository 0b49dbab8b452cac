package openstack

import (
	"errors"
	"io"
	"sync"

	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/cloud"
)

func init() {
	cloud.RegisterProvider(ProviderName, newFromConfig)
}

// errNoConfig is the factory's error when --cloud-config is not given.
var errNoConfig = errors.New("no cloud config: the openstack provider reads its cloud.conf from --cloud-config")

// newFromConfig is the provider's factory: it reads a cloud.conf.
func newFromConfig(r io.Reader) (cloudprovider.Interface, error) {
	if r == nil {
		return nil, errNoConfig
	}
	cfg, warnings, err := ParseConfig(r)
	logger := klog.Background().WithName(ProviderName)
	for _, w := range warnings {
		// A warning names a line, a section and a key, never a value.
		logger.Info("Ignoring part of the cloud config", "warning", w)
	}
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// Cloud is the OpenStack provider. It implements InstancesV2 on Nova,
// LoadBalancer on Octavia and Neutron and, with [Route] router-id, Routes
// on a Neutron router.
type Cloud struct {
	cfg           *Config
	conn          *session
	instances     *instances
	loadBalancers *loadBalancers
	// routes is nil without [Route] router-id.
	routes   *routes
	initOnce sync.Once
}

var _ cloudprovider.Interface = (*Cloud)(nil)

// New builds the provider from a parsed config. It checks what can be
// checked without a request (the auth URL, that gophercloud can make a
// token request of the credentials, the CA and client certificate files)
// and does not contact OpenStack: it connects on first use (see session).
func New(cfg *Config) (*Cloud, error) { return newCloud(cfg, defaultHTTPTimeouts) }

func newCloud(cfg *Config, timeouts httpTimeouts) (*Cloud, error) {
	if err := checkAuth(cfg.Global); err != nil {
		return nil, err
	}
	httpClient, err := newHTTPClient(cfg.Global, timeouts)
	if err != nil {
		return nil, err
	}
	conn := newSession(cfg, httpClient)
	c := &Cloud{
		cfg:           cfg,
		conn:          conn,
		instances:     &instances{conn: conn, region: cfg.Global.Region, networking: cfg.Networking},
		loadBalancers: newLoadBalancers(conn, &cfg.LoadBalancer),
	}
	if cfg.Route.RouterID != "" {
		c.routes = newRoutes(conn, c.instances, cfg.Route.RouterID)
	}
	return c, nil
}

// Initialize starts connecting to OpenStack in the background, so that a
// wrong password or an unreachable Keystone shows in the log at once, not
// at the first Node. An attempt still under way ends when stop is closed.
func (c *Cloud) Initialize(_ cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	c.initOnce.Do(func() {
		go func() {
			<-stop
			c.conn.close()
		}()
		go func() {
			// The attempt logs its own failure.
			_, _ = c.conn.clients(c.conn.ctx)
		}()
	})
}

// LoadBalancer returns the load balancers on Octavia.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.loadBalancers, true }

// Instances is not offered: ccmkit's controllers use InstancesV2.
func (c *Cloud) Instances() (cloudprovider.Instances, bool) { return nil, false }

// InstancesV2 returns the instances on Nova.
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c.instances, true }

// Zones is not offered: InstanceMetadata has the zone and region.
func (c *Cloud) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters is not offered.
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// Routes returns the routes on the Neutron router of [Route] router-id;
// without it, routes are not offered.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) {
	if c.routes == nil {
		return nil, false
	}
	return c.routes, true
}

// ProviderName is "openstack".
func (c *Cloud) ProviderName() string { return ProviderName }

// HasClusterID is true: load-balancer names carry the cluster's name.
func (c *Cloud) HasClusterID() bool { return true }
