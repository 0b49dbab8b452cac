// Package app builds the cloud-controller-manager command: its flags,
// clients, the shared informers, serving (/healthz, /readyz, /metrics),
// leader election, the guard around the cloud provider and the
// controllers (cloud-node, cloud-node-lifecycle, service, route).
//
// A binary with its own provider is a main of a few lines:
//
//	func main() {
//		os.Exit(app.Main(
//			app.WithName("toy-cloud-controller-manager"),
//			app.WithProvider("toy", toy.New),
//		))
//	}
//
// Options add what the binary needs on top: WithProvider (a provider
// factory, made the default --cloud-provider), WithDefaults (other
// defaults, such as worker counts), WithFlags (the binary's own flags) and
// WithControllers (its own controllers, built from a ControllerContext and
// run under the same leader election, informers and guard). A provider
// registered with cloudprovider.RegisterCloudProvider in its package's
// init works too: import the package and name it with --cloud-provider.
//
// Run runs the controllers for Options already parsed, for tests and for
// binaries that build their own command; NewCommand returns the cobra
// command that Main executes.
package app
