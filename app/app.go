package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"

	// Registers the json logging format.
	_ "k8s.io/component-base/logs/json/register"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/leaderelection"
)

// Version is the ccmkit version, set at build time with
// -ldflags "-X github.com/ccmkit/ccmkit/app.Version=v1.2.3".
var Version = ""

// controllerStopTimeout bounds how long shutdown waits for the controllers
// before the Lease is released.
const controllerStopTimeout = 5 * time.Second

// NewCommand returns the cloud-controller-manager command.
func NewCommand(opts ...Option) *cobra.Command {
	s := newSettings(opts)
	o := NewOptions()
	o.extraControllers = s.controllers
	o.providers = s.providers
	if s.provider != "" {
		o.CloudProvider = s.provider
	}
	for _, d := range s.defaults {
		d(o)
	}
	cmd := &cobra.Command{
		Use:   s.name,
		Short: "Runs the cloud-node, cloud-node-lifecycle, service and route controllers against a cloud provider",
		Long: `The cloud-controller-manager initialises Nodes from the cloud, follows their instances'
lifecycle, provisions load balancers for Services of type LoadBalancer and programs pod-CIDR
routes. Every cloud call has a deadline, and a hung call never holds a worker for longer than
--cloud-call-detach-after.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%q does not take arguments, got %q", cmd.CommandPath(), args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.ShowVersion {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "ccmkit cloud-controller-manager", version())
				return err
			}
			if err := o.Validate(); err != nil {
				return fmt.Errorf("invalid flags:\n%w", err)
			}
			if err := applyFeatureGates(o.FeatureGates); err != nil {
				return err
			}
			if err := logsapi.ValidateAndApply(o.Logs, utilfeature.DefaultFeatureGate); err != nil {
				return err
			}
			cliflag.PrintFlags(cmd.Flags())
			for _, f := range ignoredFlags(cmd.Flags()) {
				klog.Background().Info("Flag has no effect in this cloud-controller-manager", "flag", "--"+f.name, "reason", f.reason)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return Run(ctx, o)
		},
	}
	fss := o.Flags()
	for _, f := range s.flagSets {
		fss.FlagSet(f.name).AddFlagSet(f.fs)
	}
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// Run runs the cloud-controller-manager with validated options until ctx is
// done (then it releases the Lease and returns nil) or the Lease is lost
// (then it returns leaderelection.ErrLost).
func Run(ctx context.Context, o *Options) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting cloud-controller-manager", "version", version(), "provider", o.CloudProvider)

	provider, err := newProvider(o)
	if err != nil {
		return err
	}

	restConfig, err := clientcmd.BuildConfigFromFlags(o.Master, o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	restConfig.QPS = o.KubeAPIQPS
	restConfig.Burst = int(o.KubeAPIBurst)
	restConfig.ContentType = o.KubeAPIContentType
	restConfig.AcceptContentTypes = o.KubeAPIContentType + ",application/json"
	restConfig = restclient.AddUserAgent(restConfig, "cloud-controller-manager")
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("building the Kubernetes client: %w", err)
	}

	// Serving comes up first: a standby answers health checks too.
	var (
		info  *server.SecureServingInfo
		authn server.AuthenticationInfo
		authz server.AuthorizationInfo
	)
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, selfSignedIPs); err != nil {
		return fmt.Errorf("generating the self-signed serving certificate: %w", err)
	}
	if err := o.SecureServing.ApplyTo(&info); err != nil {
		return fmt.Errorf("--secure-port/--bind-address: %w", err)
	}
	if info != nil {
		if err := o.Authentication.ApplyTo(&authn, info, nil); err != nil {
			return fmt.Errorf("delegated authentication: %w", err)
		}
		if err := o.Authorization.ApplyTo(&authz); err != nil {
			return fmt.Errorf("delegated authorization: %w", err)
		}
	}

	state := &runState{}
	var liveness []healthz.HealthChecker
	watchDog := leaderelection.NewWatchDog(20 * time.Second)
	if o.LeaderElection.LeaderElect {
		liveness = append(liveness, watchDog)
	}
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	if info != nil {
		if _, err := serve(serveCtx, o, info, &authn, &authz, liveness, state); err != nil {
			return err
		}
	}

	lead := func(ctx context.Context, lease *leaderelection.Lease) {
		runControllers(ctx, o, restConfig, provider, state, lease)
	}
	if !o.LeaderElection.LeaderElect {
		lead(ctx, nil)
		return nil
	}
	identity, err := leaderelection.NewIdentity()
	if err != nil {
		return err
	}
	le := o.LeaderElection
	err = leaderelection.Run(ctx, leaderelection.Config{
		Client:        client,
		Namespace:     le.ResourceNamespace,
		Name:          le.ResourceName,
		Identity:      identity,
		LeaseDuration: le.LeaseDuration.Duration,
		RenewDeadline: le.RenewDeadline.Duration,
		RetryPeriod:   le.RetryPeriod.Duration,
		WatchDog:      watchDog,
		StopTimeout:   controllerStopTimeout,
	}, lead)
	if err == nil {
		logger.Info("Shut down: controllers stopped, Lease released")
	}
	return err
}

// newProvider builds the provider from --cloud-provider and --cloud-config.
// A provider that panics on its config is reported as an error.
func newProvider(o *Options) (provider cloudprovider.Interface, err error) {
	defer func() {
		if p := recover(); p != nil {
			provider, err = nil, fmt.Errorf("cloud provider %q failed on --cloud-config %s: %v", o.CloudProvider, o.CloudConfig, p)
		}
	}()
	// A provider without a config gets a nil io.Reader, not a nil *os.File.
	var config io.Reader
	if o.CloudConfig != "" {
		f, err := os.Open(o.CloudConfig)
		if err != nil {
			return nil, fmt.Errorf("--cloud-config: %w", err)
		}
		defer f.Close() //nolint:errcheck // read-only
		config = f
	}
	if factory, ok := o.providers[o.CloudProvider]; ok {
		provider, err = factory(config)
	} else {
		provider, err = cloudprovider.GetCloudProvider(o.CloudProvider, config)
	}
	if err != nil {
		return nil, fmt.Errorf("--cloud-config: cloud provider %q: %w", o.CloudProvider, err)
	}
	if provider == nil {
		return nil, fmt.Errorf("--cloud-provider: %q is not a provider compiled into this binary; compiled-in providers: %s", o.CloudProvider, strings.Join(o.providerNames(), ", "))
	}
	return provider, nil
}

// runControllers runs while this process leads: it initialises the provider,
// builds the enabled controllers on one shared informer factory, starts the
// informers and runs the controllers until ctx is done. Every write to the
// apiserver and every mutating cloud call first checks that the Lease is
// still held (lease is nil without leader election).
func runControllers(ctx context.Context, o *Options, restConfig *restclient.Config, provider cloudprovider.Interface, state *runState, lease *leaderelection.Lease) {
	logger := klog.FromContext(ctx)
	restConfig = fenceWrites(restConfig, lease.Held)
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Building the controllers' client")
		state.controllerFailed("all (building their client failed)")
		<-ctx.Done()
		return
	}
	var builder clientbuilder.ControllerClientBuilder = clientbuilder.SimpleControllerClientBuilder{ClientConfig: restConfig}
	if o.UseServiceAccountCredentials {
		// The anonymous copy drops the write fence; the builder's clients
		// are made from this one and keep it.
		anonymous := fenceWrites(restclient.AnonymousClientConfig(restConfig), lease.Held)
		builder = clientbuilder.NewDynamicClientBuilder(anonymous, client.CoreV1(), metav1.NamespaceSystem)
	}
	provider.Initialize(builder, ctx.Done())
	guard := cloud.New(provider, o.Cloud)
	defer guard.Close()
	guard.RequireLease(lease.Held)
	state.setGuard(guard)

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(StripUnused))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	cc := ControllerContext{ClientBuilder: builder, Informers: factory, Events: broadcaster, Cloud: guard, Options: o}

	enabled, _ := enabledControllers(o.allControllers(), o.Controllers) // validated before
	type built struct {
		name string
		c    Controller
	}
	var run []built
	for _, d := range enabled {
		cc := cc
		cc.Cloud = guard.For(d.Name, broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: d.Name + "-controller"}))
		c, err := d.New(klog.NewContext(ctx, logger.WithName(d.Name)), cc)
		if errors.Is(err, cloud.ErrNotSupported) || errors.Is(err, errDisabled) {
			logger.Info("Controller skipped", "controller", d.Name, "reason", err.Error())
			continue
		}
		if err != nil {
			utilruntime.HandleErrorWithContext(ctx, err, "Building controller failed", "controller", d.Name)
			state.controllerFailed(d.Name)
			continue
		}
		run = append(run, built{d.Name, c})
	}
	factory.Start(ctx.Done())
	state.setInformers(factory)

	var wg sync.WaitGroup
	for i, b := range run {
		if i > 0 && o.ControllerStartInterval > 0 {
			t := time.NewTimer(wait.Jitter(o.ControllerStartInterval, 1.0))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		wg.Go(func() {
			ctx := klog.NewContext(ctx, logger.WithName(b.name))
			logger.Info("Starting controller", "controller", b.name)
			if err := runController(ctx, b.c); err != nil && ctx.Err() == nil {
				utilruntime.HandleErrorWithContext(ctx, err, "Controller failed", "controller", b.name)
				state.controllerFailed(b.name)
			}
		})
	}
	<-ctx.Done()
	wg.Wait()
	factory.Shutdown()
}

// fenceWrites returns a copy of config whose requests that write (every
// method but GET, HEAD and OPTIONS) fail without being sent when held
// fails: a process that cannot prove it holds the Lease writes nothing.
func fenceWrites(config *restclient.Config, held func() error) *restclient.Config {
	config = restclient.CopyConfig(config)
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper { return writeFence{next: rt, held: held} })
	return config
}

type writeFence struct {
	next http.RoundTripper
	held func() error
}

func (w writeFence) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if err := w.held(); err != nil {
			return nil, fmt.Errorf("%s %s not sent: %w", req.Method, req.URL.Path, err)
		}
	}
	return w.next.RoundTrip(req)
}

// runController runs c and turns a panic into an error, so one controller's
// bug marks it failed in /readyz instead of taking the others down.
func runController(ctx context.Context, c Controller) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return c.Run(ctx)
}

// StripUnused is the shared informers' transform: it drops what neither a
// controller nor a compiled-in provider reads, which is most of a large
// cluster's cache:
//   - everywhere: managedFields, and the annotation kubectl apply keeps the
//     whole last-applied object in;
//   - on a Node, of its status only the addresses and the Ready and
//     NetworkUnavailable conditions are kept: images, capacity,
//     allocatable, nodeInfo, volumes, daemon endpoints, config, features,
//     runtime handlers and other conditions (memory, disk and PID pressure,
//     node-problem-detector's) go.
//
// The README's "Sizing" section measures what it saves.
func StripUnused(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		meta := m.GetObjectMeta()
		meta.SetManagedFields(nil)
		if a := meta.GetAnnotations(); a[v1.LastAppliedConfigAnnotation] != "" {
			delete(a, v1.LastAppliedConfigAnnotation)
			meta.SetAnnotations(a)
		}
	}
	if n, ok := obj.(*v1.Node); ok {
		kept := v1.NodeStatus{Addresses: n.Status.Addresses}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady || c.Type == v1.NodeNetworkUnavailable {
				kept.Conditions = append(kept.Conditions, c)
			}
		}
		n.Status = kept
	}
	return obj, nil
}

// Main runs the command and returns the process exit code.
func Main(opts ...Option) int {
	cmd := NewCommand(opts...)
	if err := cmd.Execute(); err != nil {
		if errors.Is(err, leaderelection.ErrLost) {
			klog.Background().Error(err, "Exiting")
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		klog.Flush()
		return 1
	}
	klog.Flush()
	return 0
}
