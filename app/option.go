package app

import (
	"github.com/spf13/pflag"
	cloudprovider "k8s.io/cloud-provider"
)

// Option customises the command that NewCommand and Main build: a binary
// of its own provider sets the provider, its defaults, flags and extra
// controllers, and gets the rest of ccmkit unchanged.
type Option func(*settings)

type settings struct {
	name        string
	provider    string
	providers   map[string]cloudprovider.Factory
	defaults    []func(*Options)
	flagSets    []namedFlagSet
	controllers []ControllerDescriptor
}

type namedFlagSet struct {
	name string
	fs   *pflag.FlagSet
}

func newSettings(opts []Option) *settings {
	s := &settings{name: "cloud-controller-manager"}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// WithName sets the command's name, as --help shows it. The default is
// cloud-controller-manager.
func WithName(name string) Option {
	return func(s *settings) { s.name = name }
}

// WithProvider adds a provider under name, beside those registered with
// cloudprovider.RegisterCloudProvider, and makes it the default of
// --cloud-provider. A provider that registers itself in its package's init
// needs no option: the operator names it with --cloud-provider, or
// WithDefaults makes it the default.
func WithProvider(name string, factory cloudprovider.Factory) Option {
	return func(s *settings) {
		if s.providers == nil {
			s.providers = map[string]cloudprovider.Factory{}
		}
		s.providers[name] = factory
		s.provider = name
	}
}

// WithDefaults changes option defaults before the flags are parsed: the
// flags still override them, and --help shows them as the defaults.
// Example: func(o *app.Options) { o.ConcurrentServiceSyncs = 4 }.
func WithDefaults(set func(*Options)) Option {
	return func(s *settings) { s.defaults = append(s.defaults, set) }
}

// WithFlags adds the binary's own flags to the command, shown in --help
// under the section name. The binary reads their values once the command
// runs, from the variables it bound them to.
func WithFlags(section string, fs *pflag.FlagSet) Option {
	return func(s *settings) { s.flagSets = append(s.flagSets, namedFlagSet{section, fs}) }
}

// WithControllers adds the binary's own controllers. They run beside
// ccmkit's under the same leader election, shared informers and guard;
// --controllers enables and disables them by name or alias like the
// others, and "*" includes them. A name or alias used twice is an error
// when the command runs.
func WithControllers(controllers ...ControllerDescriptor) Option {
	return func(s *settings) { s.controllers = append(s.controllers, controllers...) }
}
