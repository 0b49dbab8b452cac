package openstack

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Secret is a credential read from the config. It prints as <redacted>
// however it is formatted or marshalled, so a logged Config shows no secret.
type Secret string

func (Secret) String() string { return "<redacted>" }

// GoString keeps %#v from printing the secret.
func (Secret) GoString() string { return `"<redacted>"` }

// MarshalJSON keeps JSON (and structured logs) from printing the secret.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"<redacted>"`), nil }

// MarshalText keeps text encodings from printing the secret.
func (Secret) MarshalText() ([]byte, error) { return []byte("<redacted>"), nil }

func (s Secret) set() bool { return s != "" }

func (s *Secret) fill(from string) {
	if *s == "" {
		*s = Secret(from)
	}
}

func fillString(dst *string, from string) {
	if *dst == "" {
		*dst = from
	}
}

// Config is the provider's --cloud-config: openstack-cloud-controller-manager's
// cloud.conf, an INI file.
type Config struct {
	Global       GlobalConfig
	LoadBalancer LoadBalancerConfig
	Networking   NetworkingConfig
	Route        RouteConfig
}

// GlobalConfig is [Global]: where Keystone is and how to authenticate.
type GlobalConfig struct {
	AuthURL    string
	Region     string
	Username   string
	UserID     string
	Password   Secret
	TenantID   string
	TenantName string
	// Domains of the user and of the project (tenant); DomainID/Name set both.
	DomainID, DomainName             string
	UserDomainID, UserDomainName     string
	TenantDomainID, TenantDomainName string
	ApplicationCredentialID          string
	ApplicationCredentialName        string
	ApplicationCredentialSecret      Secret
	TrustID                          string
	CAFile                           string
	CertFile, KeyFile                string
	TLSInsecure                      bool
	// EndpointType is the catalog interface: public (default), internal or admin.
	EndpointType string
	UseClouds    bool
	CloudsFile   string
	Cloud        string
}

// LoadBalancerConfig is [LoadBalancer]: Octavia and floating-IP defaults.
type LoadBalancerConfig struct {
	FloatingNetworkID     string
	FloatingSubnetID      string
	SubnetID              string
	MemberSubnetID        string
	NetworkID             string
	LBMethod              string
	LBProvider            string
	CreateMonitor         bool
	MonitorDelay          time.Duration
	MonitorTimeout        time.Duration
	MonitorMaxRetries     uint
	InternalLB            bool
	CascadeDelete         bool
	FlavorID              string
	AvailabilityZone      string
	EnableIngressHostname bool
	// IngressHostnameSuffix follows the address in the hostname a Service
	// gets when EnableIngressHostname is set: <address>.<suffix>.
	IngressHostnameSuffix string
	// Classes are the [LoadBalancerClass "name"] sections, by name: what a
	// Service's loadbalancer.openstack.org/class annotation picks.
	Classes map[string]*LoadBalancerClass
}

// LoadBalancerClass is a [LoadBalancerClass "name"] section: networks and
// subnets a Service picks by name. What a class sets wins over the
// Service's annotations and [LoadBalancer].
type LoadBalancerClass struct {
	FloatingNetworkID string
	FloatingSubnetID  string
	SubnetID          string
	MemberSubnetID    string
	NetworkID         string
}

// classSection is the prefix of the sections of load-balancer classes, as
// the INI reader keeps them: `loadbalancerclass "name"`.
const classSection = "loadbalancerclass "

func (c *LoadBalancerClass) keys() map[string]func(string) error {
	str := func(dst *string) func(string) error {
		return func(v string) error { *dst = v; return nil }
	}
	return map[string]func(string) error{
		"floating-network-id": str(&c.FloatingNetworkID),
		"floating-subnet-id":  str(&c.FloatingSubnetID),
		"subnet-id":           str(&c.SubnetID),
		"member-subnet-id":    str(&c.MemberSubnetID),
		"network-id":          str(&c.NetworkID),
	}
}

// NetworkingConfig is [Networking]: how Node addresses are chosen.
type NetworkingConfig struct {
	PublicNetworkNames   []string
	InternalNetworkNames []string
	IPv6SupportDisabled  bool
	// AddressSortOrder lists CIDRs; addresses in earlier ones come first.
	AddressSortOrder []netip.Prefix
}

// RouteConfig is [Route]: the Neutron router that carries pod routes.
type RouteConfig struct {
	RouterID string
}

// Load-balancer methods Octavia knows.
var lbMethods = []string{"ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"}

func defaultConfig() Config {
	return Config{LoadBalancer: LoadBalancerConfig{
		LBMethod:              "ROUND_ROBIN",
		MonitorDelay:          5 * time.Second,
		MonitorTimeout:        3 * time.Second,
		MonitorMaxRetries:     1,
		CascadeDelete:         true,
		IngressHostnameSuffix: "nip.io",
	}}
}

// ParseConfig reads a cloud.conf. It returns one error that lists every
// problem (a missing required key, a value of the wrong type), and, for a
// usable config, warnings naming the sections and keys it does not
// support, which are ignored.
func ParseConfig(r io.Reader) (*Config, []string, error) {
	entries, err := parseINI(r)
	if err != nil {
		return nil, nil, err
	}
	cfg := defaultConfig()
	keys := cfg.keys()
	var problems, warnings []string
	for _, e := range entries {
		section := keys[e.section]
		if name, ok := strings.CutPrefix(e.section, classSection); ok {
			section = cfg.LoadBalancer.class(strings.Trim(name, `"`)).keys()
		}
		if section == nil {
			warnings = append(warnings, fmt.Sprintf("line %d: section [%s] is not supported and is ignored", e.line, e.section))
			continue
		}
		set := section[e.key]
		if set == nil {
			warnings = append(warnings, fmt.Sprintf("line %d: [%s] %s is not supported and is ignored", e.line, sectionName(e.section), e.key))
			continue
		}
		if err := set(e.value); err != nil {
			problems = append(problems, fmt.Sprintf("line %d: [%s] %s: %v", e.line, sectionName(e.section), e.key, err))
		}
	}
	if len(problems) == 0 && cfg.Global.UseClouds {
		if err := cfg.Global.fillFromClouds(); err != nil {
			problems = append(problems, "[Global] use-clouds: "+err.Error())
		}
	}
	problems = append(problems, cfg.validate()...)
	if len(problems) > 0 {
		return nil, warnings, fmt.Errorf("openstack cloud config: %s", strings.Join(problems, "; "))
	}
	return &cfg, warnings, nil
}

// class returns the class of a name, adding it when there is none.
func (lb *LoadBalancerConfig) class(name string) *LoadBalancerClass {
	if lb.Classes == nil {
		lb.Classes = map[string]*LoadBalancerClass{}
	}
	c := lb.Classes[name]
	if c == nil {
		c = &LoadBalancerClass{}
		lb.Classes[name] = c
	}
	return c
}

func sectionName(s string) string {
	if name, ok := strings.CutPrefix(s, classSection); ok {
		return "LoadBalancerClass " + name
	}
	names := map[string]string{"global": "Global", "loadbalancer": "LoadBalancer", "networking": "Networking", "route": "Route"}
	if n, ok := names[s]; ok {
		return n
	}
	return s
}

// keys binds each supported key (lower case) of each section to its field.
func (c *Config) keys() map[string]map[string]func(string) error {
	str := func(dst *string) func(string) error {
		return func(v string) error { *dst = v; return nil }
	}
	sec := func(dst *Secret) func(string) error {
		return func(v string) error { *dst = Secret(v); return nil }
	}
	boolean := func(dst *bool) func(string) error {
		return func(v string) error {
			b, err := parseBool(v)
			*dst = b
			return err
		}
	}
	duration := func(dst *time.Duration) func(string) error {
		return func(v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%q is not a duration (like 5s)", v)
			}
			*dst = d
			return nil
		}
	}
	list := func(dst *[]string) func(string) error {
		return func(v string) error { *dst = append(*dst, v); return nil }
	}
	g, lb, n := &c.Global, &c.LoadBalancer, &c.Networking
	return map[string]map[string]func(string) error{
		"global": {
			"auth-url":                      str(&g.AuthURL),
			"region":                        str(&g.Region),
			"username":                      str(&g.Username),
			"user-id":                       str(&g.UserID),
			"password":                      sec(&g.Password),
			"tenant-id":                     str(&g.TenantID),
			"tenant-name":                   str(&g.TenantName),
			"domain-id":                     str(&g.DomainID),
			"domain-name":                   str(&g.DomainName),
			"user-domain-id":                str(&g.UserDomainID),
			"user-domain-name":              str(&g.UserDomainName),
			"tenant-domain-id":              str(&g.TenantDomainID),
			"tenant-domain-name":            str(&g.TenantDomainName),
			"application-credential-id":     str(&g.ApplicationCredentialID),
			"application-credential-name":   str(&g.ApplicationCredentialName),
			"application-credential-secret": sec(&g.ApplicationCredentialSecret),
			"trust-id":                      str(&g.TrustID),
			"ca-file":                       str(&g.CAFile),
			"cert-file":                     str(&g.CertFile),
			"key-file":                      str(&g.KeyFile),
			"tls-insecure":                  boolean(&g.TLSInsecure),
			"os-endpoint-type":              str(&g.EndpointType),
			"use-clouds":                    boolean(&g.UseClouds),
			"clouds-file":                   str(&g.CloudsFile),
			"cloud":                         str(&g.Cloud),
		},
		"loadbalancer": {
			"floating-network-id": str(&lb.FloatingNetworkID),
			"floating-subnet-id":  str(&lb.FloatingSubnetID),
			"subnet-id":           str(&lb.SubnetID),
			"member-subnet-id":    str(&lb.MemberSubnetID),
			"network-id":          str(&lb.NetworkID),
			"lb-method": func(v string) error {
				lb.LBMethod = strings.ToUpper(v)
				return nil
			},
			"lb-provider":     str(&lb.LBProvider),
			"create-monitor":  boolean(&lb.CreateMonitor),
			"monitor-delay":   duration(&lb.MonitorDelay),
			"monitor-timeout": duration(&lb.MonitorTimeout),
			"monitor-max-retries": func(v string) error {
				u, err := parseUint(v)
				lb.MonitorMaxRetries = u
				return err
			},
			"internal-lb":             boolean(&lb.InternalLB),
			"cascade-delete":          boolean(&lb.CascadeDelete),
			"flavor-id":               str(&lb.FlavorID),
			"availability-zone":       str(&lb.AvailabilityZone),
			"enable-ingress-hostname": boolean(&lb.EnableIngressHostname),
			"ingress-hostname-suffix": str(&lb.IngressHostnameSuffix),
		},
		"networking": {
			"public-network-name":   list(&n.PublicNetworkNames),
			"internal-network-name": list(&n.InternalNetworkNames),
			"ipv6-support-disabled": boolean(&n.IPv6SupportDisabled),
			"address-sort-order": func(v string) error {
				for _, s := range strings.Split(v, ",") {
					p, err := netip.ParsePrefix(strings.TrimSpace(s))
					if err != nil {
						return fmt.Errorf("%q is not a CIDR", strings.TrimSpace(s))
					}
					n.AddressSortOrder = append(n.AddressSortOrder, p.Masked())
				}
				return nil
			},
		},
		"route": {
			"router-id": str(&c.Route.RouterID),
		},
	}
}

// validate lists what is missing or inconsistent.
func (c *Config) validate() []string {
	var problems []string
	g, lb := c.Global, c.LoadBalancer
	if g.Region == "" {
		problems = append(problems, "[Global] region is required")
	}
	if g.AuthURL == "" {
		problems = append(problems, "[Global] auth-url is required (or use-clouds with a clouds.yaml that has it)")
	}
	password := g.Password.set() && (g.Username != "" || g.UserID != "")
	appCred := g.ApplicationCredentialSecret.set() && (g.ApplicationCredentialID != "" ||
		(g.ApplicationCredentialName != "" && (g.UserID != "" || g.Username != "")))
	if !password && !appCred {
		problems = append(problems, "[Global] no credentials: set username (or user-id) and password, or application-credential-id and application-credential-secret")
	}
	if (g.CertFile == "") != (g.KeyFile == "") {
		problems = append(problems, "[Global] cert-file and key-file go together")
	}
	for key, path := range map[string]string{"ca-file": g.CAFile, "cert-file": g.CertFile, "key-file": g.KeyFile} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			problems = append(problems, fmt.Sprintf("[Global] %s: cannot read %s", key, path))
		}
	}
	switch g.EndpointType {
	case "", "public", "publicURL", "internal", "internalURL", "admin", "adminURL":
	default:
		problems = append(problems, fmt.Sprintf("[Global] os-endpoint-type: %q, want public, internal or admin", g.EndpointType))
	}
	if !slices.Contains(lbMethods, lb.LBMethod) {
		problems = append(problems, fmt.Sprintf("[LoadBalancer] lb-method: %q, want one of %s", lb.LBMethod, strings.Join(lbMethods, ", ")))
	}
	if lb.MonitorDelay <= 0 || lb.MonitorTimeout <= 0 {
		problems = append(problems, "[LoadBalancer] monitor-delay and monitor-timeout must be positive")
	} else if lb.MonitorTimeout > lb.MonitorDelay {
		problems = append(problems, fmt.Sprintf("[LoadBalancer] monitor-timeout (%s) must not exceed monitor-delay (%s)", lb.MonitorTimeout, lb.MonitorDelay))
	}
	if lb.EnableIngressHostname && strings.Trim(lb.IngressHostnameSuffix, ".") == "" {
		problems = append(problems, "[LoadBalancer] enable-ingress-hostname needs an ingress-hostname-suffix")
	}
	if lb.MonitorMaxRetries < 1 || lb.MonitorMaxRetries > 10 {
		problems = append(problems, fmt.Sprintf("[LoadBalancer] monitor-max-retries: %d, want 1 to 10", lb.MonitorMaxRetries))
	}
	return problems
}

// cloudsYAML is the part of a clouds.yaml the provider reads.
type cloudsYAML struct {
	Clouds map[string]struct {
		Auth struct {
			AuthURL                     string `json:"auth_url"`
			Username                    string `json:"username"`
			UserID                      string `json:"user_id"`
			Password                    string `json:"password"`
			ProjectID                   string `json:"project_id"`
			ProjectName                 string `json:"project_name"`
			DomainID                    string `json:"domain_id"`
			DomainName                  string `json:"domain_name"`
			UserDomainID                string `json:"user_domain_id"`
			UserDomainName              string `json:"user_domain_name"`
			ProjectDomainID             string `json:"project_domain_id"`
			ProjectDomainName           string `json:"project_domain_name"`
			ApplicationCredentialID     string `json:"application_credential_id"`
			ApplicationCredentialName   string `json:"application_credential_name"`
			ApplicationCredentialSecret string `json:"application_credential_secret"`
		} `json:"auth"`
		RegionName string `json:"region_name"`
		Interface  string `json:"interface"`
		CACert     string `json:"cacert"`
		Cert       string `json:"cert"`
		Key        string `json:"key"`
	} `json:"clouds"`
}

// fillFromClouds fills the keys the INI leaves empty from a clouds.yaml:
// clouds-file, else $OS_CLIENT_CONFIG_FILE, else the standard places.
func (g *GlobalConfig) fillFromClouds() error {
	path := g.CloudsFile
	if path == "" {
		path = os.Getenv("OS_CLIENT_CONFIG_FILE")
	}
	if path == "" {
		home, _ := os.UserHomeDir()
		for _, p := range []string{"clouds.yaml", filepath.Join(home, ".config", "openstack", "clouds.yaml"), "/etc/openstack/clouds.yaml"} {
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		return errors.New("no clouds.yaml found (set clouds-file)")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, errors.Unwrap(err))
	}
	var file cloudsYAML
	if err := yaml.Unmarshal(b, &file); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	name := g.Cloud
	if name == "" {
		name = os.Getenv("OS_CLOUD")
	}
	if name == "" {
		name = "openstack"
	}
	cloud, ok := file.Clouds[name]
	if !ok {
		return fmt.Errorf("%s has no cloud %q", path, name)
	}
	a := cloud.Auth
	for _, f := range []struct {
		dst  *string
		from string
	}{
		{&g.AuthURL, a.AuthURL}, {&g.Username, a.Username}, {&g.UserID, a.UserID},
		{&g.TenantID, a.ProjectID}, {&g.TenantName, a.ProjectName},
		{&g.DomainID, a.DomainID}, {&g.DomainName, a.DomainName},
		{&g.UserDomainID, a.UserDomainID}, {&g.UserDomainName, a.UserDomainName},
		{&g.TenantDomainID, a.ProjectDomainID}, {&g.TenantDomainName, a.ProjectDomainName},
		{&g.ApplicationCredentialID, a.ApplicationCredentialID}, {&g.ApplicationCredentialName, a.ApplicationCredentialName},
		{&g.Region, cloud.RegionName}, {&g.EndpointType, cloud.Interface},
		{&g.CAFile, cloud.CACert}, {&g.CertFile, cloud.Cert}, {&g.KeyFile, cloud.Key},
	} {
		fillString(f.dst, f.from)
	}
	g.Password.fill(a.Password)
	g.ApplicationCredentialSecret.fill(a.ApplicationCredentialSecret)
	return nil
}
