// Command toy-cloud-controller-manager is ccmkit with the toy provider.
package main

import (
	"os"

	"github.com/ccmkit/ccmkit/app"

	"github.com/ccmkit/ccmkit/examples/out-of-tree-provider/toy"
)

func main() {
	os.Exit(app.Main(app.WithName("toy-cloud-controller-manager"), app.WithProvider(toy.ProviderName, toy.New)))
}
