package cloud

import (
	"slices"
	"sync"

	cloudprovider "k8s.io/cloud-provider"
)

var (
	providersMu sync.Mutex
	providers   []string
)

// RegisterProvider registers a provider factory with k8s.io/cloud-provider
// under name and remembers the name, so that errors can list the providers
// compiled into the binary. Call it from the provider package's init.
func RegisterProvider(name string, factory cloudprovider.Factory) {
	providersMu.Lock()
	defer providersMu.Unlock()
	cloudprovider.RegisterCloudProvider(name, factory)
	providers = append(providers, name)
}

// Providers returns the names registered with RegisterProvider, sorted.
// Providers registered with cloudprovider.RegisterCloudProvider directly
// work too but are not listed.
func Providers() []string {
	providersMu.Lock()
	defer providersMu.Unlock()
	out := slices.Clone(providers)
	slices.Sort(out)
	return out
}
