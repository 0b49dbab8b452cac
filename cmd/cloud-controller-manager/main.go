// Command cloud-controller-manager runs ccmkit with the providers compiled
// into it.
package main

import (
	"os"

	"github.com/ccmkit/ccmkit/app"

	// The compiled-in providers.
	_ "github.com/ccmkit/ccmkit/providers/aws"
	_ "github.com/ccmkit/ccmkit/providers/fake"
	_ "github.com/ccmkit/ccmkit/providers/openstack"
)

func main() {
	os.Exit(app.Main())
}
