package app

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	cloudprovider "k8s.io/cloud-provider"
	fakecloud "k8s.io/cloud-provider/fake"
)

type noopController struct{}

func (noopController) Run(context.Context) error { return nil }

func newNoop(context.Context, ControllerContext) (Controller, error) { return noopController{}, nil }

// parseCommand builds the command with opts, parses args as its flags
// and returns the options the command runs with.
func parseCommand(t *testing.T, opts []Option, args ...string) (*Options, error) {
	t.Helper()
	var got *Options
	opts = append(opts, WithDefaults(func(o *Options) { got = o }))
	cmd := NewCommand(opts...)
	if err := cmd.ParseFlags(args); err != nil {
		return got, err
	}
	return got, nil
}

func TestWithDefaultsAndFlags(t *testing.T) {
	extra := pflag.NewFlagSet("toy", pflag.ContinueOnError)
	endpoint := extra.String("toy-endpoint", "http://localhost", "The toy cloud's endpoint.")
	opts := []Option{
		WithName("toy-cloud-controller-manager"),
		WithDefaults(func(o *Options) { o.ConcurrentServiceSyncs = 3; o.ClusterName = "toy" }),
		WithFlags("toy cloud", extra),
	}
	o, err := parseCommand(t, opts, "--toy-endpoint=http://toy:8080", "--cluster-name=prod")
	if err != nil {
		t.Fatal(err)
	}
	if *endpoint != "http://toy:8080" {
		t.Errorf("--toy-endpoint = %q", *endpoint)
	}
	if o.ConcurrentServiceSyncs != 3 {
		t.Errorf("--concurrent-service-syncs = %d, want the binary's default 3", o.ConcurrentServiceSyncs)
	}
	if o.ClusterName != "prod" {
		t.Errorf("--cluster-name = %q: the flag must override the binary's default", o.ClusterName)
	}

	cmd := NewCommand(opts...)
	var help bytes.Buffer
	cmd.SetOut(&help)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"toy-cloud-controller-manager", "Toy cloud flags:", "--toy-endpoint", "--concurrent-service-syncs int32", "(default 3)"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestWithProvider(t *testing.T) {
	var read []string
	factory := func(config io.Reader) (cloudprovider.Interface, error) {
		if config == nil {
			read = append(read, "<nil>")
		} else {
			b, err := io.ReadAll(config)
			if err != nil {
				return nil, err
			}
			read = append(read, string(b))
		}
		return &fakecloud.Cloud{}, nil
	}
	o, err := parseCommand(t, []Option{WithProvider("toy", factory)})
	if err != nil {
		t.Fatal(err)
	}
	if o.CloudProvider != "toy" {
		t.Fatalf("--cloud-provider = %q, want the binary's provider as default", o.CloudProvider)
	}
	o.Kubeconfig = validOptions(t).Kubeconfig
	if err := o.Validate(); err != nil {
		t.Fatalf("the binary's provider is not accepted: %v", err)
	}
	if _, err := newProvider(o); err != nil {
		t.Fatal(err)
	}
	o.CloudConfig = filepath.Join(t.TempDir(), "toy.conf")
	if err := os.WriteFile(o.CloudConfig, []byte("endpoint: x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newProvider(o); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(read, []string{"<nil>", "endpoint: x"}) {
		t.Errorf("the factory read %q, want a nil reader and then the file", read)
	}

	o.CloudProvider = "nope"
	err = o.Validate()
	if err == nil || !strings.Contains(err.Error(), "toy") || !strings.Contains(err.Error(), "options-test") {
		t.Errorf("error %v does not list both the binary's and the registered providers", err)
	}
}

func TestWithControllers(t *testing.T) {
	toy := ControllerDescriptor{Name: "toy-firewall", Aliases: []string{"firewall"}, New: newNoop}
	o, err := parseCommand(t, []Option{WithControllers(toy)}, "--controllers=*,-route")
	if err != nil {
		t.Fatal(err)
	}
	enabled, err := enabledControllers(o.allControllers(), o.Controllers)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range enabled {
		names = append(names, d.Name)
	}
	if want := []string{"cloud-node", "cloud-node-lifecycle", "service", "toy-firewall"}; !slices.Equal(names, want) {
		t.Errorf("enabled %v, want %v", names, want)
	}

	o, err = parseCommand(t, []Option{WithControllers(toy)}, "--controllers=-firewall,*")
	if err != nil {
		t.Fatal(err)
	}
	if enabled, _ := enabledControllers(o.allControllers(), o.Controllers); slices.ContainsFunc(enabled, func(d ControllerDescriptor) bool { return d.Name == toy.Name }) {
		t.Error("the alias did not disable the binary's controller")
	}
}

func TestWithControllersRejectsClashes(t *testing.T) {
	for name, d := range map[string]ControllerDescriptor{
		"name of ccmkit's":  {Name: "service", New: newNoop},
		"alias of ccmkit's": {Name: "lb", Aliases: []string{"node-route-controller"}, New: newNoop},
		"no constructor":    {Name: "toy"},
	} {
		t.Run(name, func(t *testing.T) {
			o := validOptions(t)
			o.extraControllers = []ControllerDescriptor{d}
			if err := o.Validate(); err == nil {
				t.Errorf("%+v accepted", d.Name)
			}
		})
	}
}
