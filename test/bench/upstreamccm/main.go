// Command upstreamccm is upstream's cloud-controller-manager, as
// k8s.io/cloud-provider/app builds it, with ccmkit's fake provider
// compiled in: the memory bench runs it beside ccmkit's binary.
package main

import (
	"os"

	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	// Registers the provider "fake".
	_ "github.com/ccmkit/ccmkit/providers/fake"
)

func main() {
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatalf("initialising the options: %v", err)
	}
	cmd := app.NewCloudControllerManagerCommand(opts, initCloud, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	os.Exit(cli.Run(cmd))
}

func initCloud(c *config.CompletedConfig) cloudprovider.Interface {
	cc := c.ComponentConfig.KubeCloudShared.CloudProvider
	cloud, err := cloudprovider.InitCloudProvider(cc.Name, cc.CloudConfigFile)
	if err != nil || cloud == nil {
		klog.Fatalf("initialising cloud provider %q: %v", cc.Name, err)
	}
	return cloud
}
