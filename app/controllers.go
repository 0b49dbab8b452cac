package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/controller-manager/pkg/clientbuilder"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/controllers/node"
	"github.com/ccmkit/ccmkit/controllers/nodelifecycle"
	"github.com/ccmkit/ccmkit/controllers/route"
	"github.com/ccmkit/ccmkit/controllers/service"
)

// ControllerContext is what a controller is built from. Controllers reach
// the cloud only through Cloud, the guard.
type ControllerContext struct {
	// ClientBuilder gives each controller its own client, under its own
	// service account with --use-service-account-credentials.
	ClientBuilder clientbuilder.ControllerClientBuilder
	// Informers is the one shared informer factory; it is started after
	// every controller has been built.
	Informers informers.SharedInformerFactory
	// Events is the shared event broadcaster; controllers make recorders
	// from it.
	Events record.EventBroadcaster
	// Cloud is the guarded provider: this controller's own view of the
	// guard, so the results of its detached calls come back to its OnResult
	// callbacks alone. It tells objects about hung calls with Warning
	// events under the controller's name.
	Cloud *cloud.Guard
	// Options are the command-line options, read-only.
	Options *Options
}

// Controller is a built controller.
type Controller interface {
	// Run runs the controller until ctx is done. It returns an error when
	// the controller fails and cannot go on.
	Run(ctx context.Context) error
}

// NewControllerFunc builds a controller: it wires event handlers onto the
// shared informers and returns without starting anything.
type NewControllerFunc func(ctx context.Context, cc ControllerContext) (Controller, error)

// ControllerDescriptor names a controller and how it is built.
type ControllerDescriptor struct {
	Name    string
	Aliases []string
	New     NewControllerFunc
}

// builtinControllers lists ccmkit's controllers by name. A controller
// package adds its constructor here; the wiring needs no other change.
// WithControllers adds a binary's own.
var builtinControllers = []ControllerDescriptor{
	{Name: node.Name, Aliases: []string{"cloud-node-controller"}, New: newNodeController},
	{Name: nodelifecycle.Name, Aliases: []string{"cloud-node-lifecycle-controller"}, New: newNodeLifecycleController},
	{Name: service.Name, Aliases: []string{"service-lb-controller"}, New: newServiceController},
	{Name: route.Name, Aliases: []string{"node-route-controller"}, New: newRouteController},
}

// runFunc adapts a controller's Run(ctx) to Controller.
type runFunc func(ctx context.Context)

func (f runFunc) Run(ctx context.Context) error {
	f(ctx)
	return nil
}

// recorder returns an event recorder and a client for the named controller.
func (cc ControllerContext) clientAndRecorder(name, component string) (kubernetes.Interface, record.EventRecorder, error) {
	client, err := cc.ClientBuilder.Client(name)
	if err != nil {
		return nil, nil, fmt.Errorf("building the client of %s: %w", name, err)
	}
	return client, cc.Events.NewRecorder(scheme.Scheme, v1.EventSource{Component: component}), nil
}

func newNodeController(ctx context.Context, cc ControllerContext) (Controller, error) {
	client, recorder, err := cc.clientAndRecorder("cloud-node-controller", "cloud-node-controller")
	if err != nil {
		return nil, err
	}
	c, err := node.New(ctx, client, cc.Informers.Core().V1().Nodes(), cc.Cloud, recorder, node.Config{
		Workers:       int(cc.Options.ConcurrentNodeSyncs),
		RefreshPeriod: cc.Options.NodeStatusUpdateFrequency,
	})
	if err != nil {
		return nil, err
	}
	return runFunc(c.Run), nil
}

func newNodeLifecycleController(ctx context.Context, cc ControllerContext) (Controller, error) {
	client, recorder, err := cc.clientAndRecorder("node-controller", "cloud-node-lifecycle-controller")
	if err != nil {
		return nil, err
	}
	c, err := nodelifecycle.New(ctx, client, cc.Informers.Core().V1().Nodes(), cc.Cloud, recorder, nodelifecycle.Config{
		MonitorPeriod:       cc.Options.NodeMonitorPeriod,
		DeletionGracePeriod: cc.Options.NodeDeletionGracePeriod,
		Workers:             int(cc.Options.ConcurrentNodeLifecycleSyncs),
	})
	if err != nil {
		return nil, err
	}
	return runFunc(c.Run), nil
}

func newServiceController(ctx context.Context, cc ControllerContext) (Controller, error) {
	client, recorder, err := cc.clientAndRecorder("service-controller", "service-controller")
	if err != nil {
		return nil, err
	}
	c, err := service.New(ctx, client, cc.Informers.Core().V1().Services(), cc.Informers.Core().V1().Nodes(), cc.Cloud, recorder, service.Config{
		ClusterName:            cc.Options.ClusterName,
		LoadBalancerClass:      cc.Options.LoadBalancerClass,
		Workers:                int(cc.Options.ConcurrentServiceSyncs),
		NodeSyncCoalescePeriod: cc.Options.NodeSyncCoalescePeriod,
		ResyncPeriod:           cc.Options.LoadBalancerResyncPeriod,
	})
	if err != nil {
		return nil, err
	}
	return runFunc(c.Run), nil
}

// errDisabled is wrapped by a constructor whose controller the flags turn off.
var errDisabled = errors.New("disabled by the flags")

func newRouteController(ctx context.Context, cc ControllerContext) (Controller, error) {
	if !cc.Options.ConfigureCloudRoutes {
		return nil, fmt.Errorf("%s: --configure-cloud-routes=false: %w", route.Name, errDisabled)
	}
	if _, ok := cc.Cloud.Routes(); !ok {
		return nil, fmt.Errorf("%s: routes are %w %q", route.Name, cloud.ErrNotSupported, cc.Cloud.ProviderName())
	}
	cidrs, err := clusterCIDRs(cc.Options.ClusterCIDR)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", route.Name, err)
	}
	client, recorder, err := cc.clientAndRecorder("route-controller", "route_controller")
	if err != nil {
		return nil, err
	}
	c, err := route.New(ctx, client, cc.Informers.Core().V1().Nodes(), cc.Cloud, recorder, route.Config{
		ClusterName:  cc.Options.ClusterName,
		ClusterCIDRs: cidrs,
		Workers:      int(cc.Options.ConcurrentRouteSyncs),
		ResyncPeriod: cc.Options.RouteReconciliationPeriod,
	})
	if err != nil {
		return nil, err
	}
	return runFunc(c.Run), nil
}

func controllerNames(all []ControllerDescriptor) []string {
	names := make([]string, len(all))
	for i, c := range all {
		names[i] = c.Name
	}
	return names
}

func aliasHelp(all []ControllerDescriptor) string {
	var parts []string
	for _, c := range all {
		for _, a := range c.Aliases {
			parts = append(parts, a+"="+c.Name)
		}
	}
	return strings.Join(parts, ", ")
}

// canonicalName resolves a controller name or alias.
func canonicalName(all []ControllerDescriptor, name string) (string, bool) {
	for _, c := range all {
		if c.Name == name || slices.Contains(c.Aliases, name) {
			return c.Name, true
		}
	}
	return "", false
}

// checkDescriptors reports controllers without a name or constructor, and
// names or aliases used twice.
func checkDescriptors(all []ControllerDescriptor) error {
	var errs []error
	seen := map[string]string{}
	for _, c := range all {
		if c.Name == "" || c.New == nil {
			errs = append(errs, fmt.Errorf("controller %q needs a name and a constructor", c.Name))
			continue
		}
		for _, n := range append([]string{c.Name}, c.Aliases...) {
			if other, ok := seen[n]; ok {
				errs = append(errs, fmt.Errorf("%q names both controller %s and controller %s", n, other, c.Name))
				continue
			}
			seen[n] = c.Name
		}
	}
	return errors.Join(errs...)
}

// enabledControllers applies --controllers: "*" enables every controller,
// "name" enables one, "-name" disables one, whatever their order.
func enabledControllers(all []ControllerDescriptor, flags []string) ([]ControllerDescriptor, error) {
	every := false
	enabled, disabled := map[string]bool{}, map[string]bool{}
	var unknown []string
	for _, f := range flags {
		f = strings.TrimSpace(f)
		if f == "*" {
			every = true
			continue
		}
		name, off := strings.CutPrefix(f, "-")
		canonical, ok := canonicalName(all, name)
		if !ok {
			unknown = append(unknown, fmt.Sprintf("%q", f))
			continue
		}
		if off {
			disabled[canonical] = true
		} else {
			enabled[canonical] = true
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown controller %s; controllers are %s (aliases %s)", strings.Join(unknown, ", "), strings.Join(controllerNames(all), ", "), aliasHelp(all))
	}
	var out []ControllerDescriptor
	for _, c := range all {
		if !disabled[c.Name] && (every || enabled[c.Name]) {
			out = append(out, c)
		}
	}
	return out, nil
}
