package aws

import (
	"net"
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"
)

// TestRegistered: the factory is registered as "aws", and a config with
// overrides builds a working provider.
func TestRegistered(t *testing.T) {
	c := newTestCloud(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	p, err := cloudprovider.GetCloudProvider(ProviderName, strings.NewReader(c.conf()))
	if err != nil {
		t.Fatal(err)
	}
	if p == nil || p.ProviderName() != ProviderName || !p.HasClusterID() {
		t.Fatalf("provider = %+v", p)
	}
	stop := make(chan struct{})
	defer close(stop)
	p.Initialize(nil, stop)
	instances, ok := p.InstancesV2()
	if !ok {
		t.Fatal("no InstancesV2")
	}
	if exists, err := instances.InstanceExists(t.Context(), node("n", "aws:///us-east-1a/i-0123456789abcdef0")); err != nil || exists {
		t.Errorf("InstanceExists(unknown) = %v, %v; want false", exists, err)
	}
	if _, ok := p.LoadBalancer(); !ok {
		t.Error("LoadBalancer not offered")
	}
	if _, ok := p.Routes(); !ok {
		t.Error("Routes not offered")
	}
}

func TestFactoryErrors(t *testing.T) {
	_, err := cloudprovider.GetCloudProvider(ProviderName, strings.NewReader("[Global]\nRegion = us-east-1\nNodeIPFamilies = ipv7\nBogus = 1\n"))
	if err == nil || !strings.Contains(err.Error(), "ipv7") || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("factory with a bad config = %v; want an error naming both problems", err)
	}

	// Without a config the region comes from the instance metadata
	// service; off EC2 that is a clear error.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://"+l.Addr().String())
	_ = l.Close()
	if _, err := newFromConfig(nil); err == nil || !strings.Contains(err.Error(), "set Region") {
		t.Errorf("factory without a config, off EC2 = %v; want an error that says to set Region", err)
	}
}

func TestFactoryWithoutConfig(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imdsServer(t, "sa-east-1").URL)
	p, err := newFromConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := p.(*Cloud)
	t.Cleanup(c.stop)
	if c.clients.region != "sa-east-1" || c.HasClusterID() || strings.Join(c.cfg.Global.NodeIPFamilies, ",") != "ipv4" {
		t.Errorf("provider without a config: region %q, cluster ID %v, families %v; want sa-east-1, none, ipv4",
			c.clients.region, c.HasClusterID(), c.cfg.Global.NodeIPFamilies)
	}
}
