package aws

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/arn"

	"github.com/ccmkit/ccmkit/internal/ini"
)

// Config is the provider's --cloud-config: aws-cloud-controller-manager's
// INI file.
type Config struct {
	Global GlobalConfig
	// ServiceOverrides are the [ServiceOverride "name"] sections, in the
	// order of the file.
	ServiceOverrides []ServiceOverride
}

// GlobalConfig is [Global].
type GlobalConfig struct {
	// Zone is an availability zone; when Region is not set, the region is
	// the zone's.
	Zone string
	// Region is the region whose APIs are called; when neither it nor Zone
	// is set, it is read from the instance metadata service (IMDSv2).
	Region string
	// VPC, SubnetID and RouteTableID name the VPC, the subnet of load
	// balancers and the route table of pod routes.
	VPC          string
	SubnetID     string
	RouteTableID string
	// RoleARN is an IAM role to assume for every call; SourceARN is sent
	// with the AssumeRole request (x-amz-source-arn), for trust policies
	// with an aws:SourceArn condition.
	RoleARN   string
	SourceARN string
	// KubernetesClusterTag is the legacy cluster ID (tag KubernetesCluster=<id>);
	// KubernetesClusterID the cluster ID (tag kubernetes.io/cluster/<id>).
	// When one is set, instances without the cluster's tag are not the
	// cluster's.
	KubernetesClusterTag string
	KubernetesClusterID  string
	// DisableSecurityGroupIngress keeps load balancers from adding ingress
	// rules to the nodes' security group.
	DisableSecurityGroupIngress bool
	// ElbSecurityGroup is a security group that every Classic ELB uses
	// instead of one of its own.
	ElbSecurityGroup string
	// NodeIPFamilies lists "ipv4" and "ipv6" in the order of the Nodes'
	// addresses; default ["ipv4"].
	NodeIPFamilies []string
	// ClusterServiceLoadBalancerHealthProbeMode is "ServiceNodePort" (the
	// default: each port is probed) or "Shared" (one HTTP probe of
	// kube-proxy); the port and path of the shared probe follow.
	ClusterServiceLoadBalancerHealthProbeMode       string
	ClusterServiceSharedLoadBalancerHealthProbePort int32
	ClusterServiceSharedLoadBalancerHealthProbePath string
	// NLBSecurityGroupMode is "" or "Managed" (a security group of its own
	// for each Network Load Balancer).
	NLBSecurityGroupMode string
}

// ServiceOverride is a [ServiceOverride "name"] section: a custom endpoint
// and signing of one service in one region.
type ServiceOverride struct {
	// Name is the section's name.
	Name string
	// Service is the service as written: ec2, elasticloadbalancing (elb),
	// elasticloadbalancingv2 (elbv2), sts or ec2imds, or the SDK's service
	// ID ("EC2", "Elastic Load Balancing", ...).
	Service       string
	Region        string
	URL           string
	SigningRegion string
	// SigningName, when set, replaces the service's name in signatures.
	SigningName string
	// SigningMethod is accepted for compatibility; requests are always
	// signed with SigV4.
	SigningMethod string
}

// Services that overrides can name, by the provider's own names.
const (
	serviceEC2   = "ec2"
	serviceELB   = "elb"
	serviceELBv2 = "elbv2"
	serviceSTS   = "sts"
	serviceIMDS  = "imds"
)

// serviceNames maps the spellings of a service (lower case, without
// spaces) to the provider's name for it.
var serviceNames = map[string]string{
	"ec2":                    serviceEC2,
	"elasticloadbalancing":   serviceELB,
	"elb":                    serviceELB,
	"elasticloadbalancingv2": serviceELBv2,
	"elbv2":                  serviceELBv2,
	"sts":                    serviceSTS,
	"ec2imds":                serviceIMDS,
	"imds":                   serviceIMDS,
	"ec2metadata":            serviceIMDS,
}

// canonicalService is the provider's name of an override's service, or ""
// for a service the provider does not call.
func canonicalService(s string) string {
	return serviceNames[strings.ToLower(strings.ReplaceAll(s, " ", ""))]
}

// Health-probe and security-group modes.
const (
	probeModeShared          = "Shared"
	probeModeServiceNodePort = "ServiceNodePort"
	nlbSecurityGroupManaged  = "Managed"
)

// IP families of NodeIPFamilies.
const (
	familyIPv4 = "ipv4"
	familyIPv6 = "ipv6"
)

// zonePattern is an availability zone, whose region is its first part:
// us-east-1a -> us-east-1, us-gov-west-1b -> us-gov-west-1,
// us-west-2-lax-1a (a Local Zone) -> us-west-2.
var zonePattern = regexp.MustCompile(`^((?:[a-z]+-)+\d+)[a-z0-9-]+$`)

// regionOfZone returns the region of an availability zone.
func regionOfZone(zone string) (string, bool) {
	m := zonePattern.FindStringSubmatch(zone)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// obsoleteKeys are keys that aws-cloud-controller-manager reads or once
// read and that this provider does not use: they are accepted with a
// warning, so an existing file still works. Any other unknown key is an
// error.
var obsoleteKeys = map[string]string{
	"disablestrictzonecheck":               "DisableStrictZoneCheck",
	"supportedtopologyinstancetypepattern": "SupportedTopologyInstanceTypePattern",
}

// ParseConfig reads the INI file of aws-cloud-controller-manager. It
// returns one error that names every problem: a line it cannot read, an
// unknown section or key, a value of the wrong type, a ServiceOverride
// without Service, Region, URL or SigningRegion, a bad NodeIPFamilies
// value, and inconsistent settings. Warnings name what is accepted but
// not used. The file holds no secret (credentials come from the SDK's
// chain), so messages quote the values they reject.
func ParseConfig(r io.Reader) (*Config, []string, error) {
	cfg := &Config{}
	var problems, warnings []string
	entries, err := ini.Parse(r)
	var syntax *ini.SyntaxError
	switch {
	case errors.As(err, &syntax):
		problems = append(problems, syntax.Problems...)
	case err != nil:
		return nil, nil, fmt.Errorf("aws cloud config: %w", err)
	}

	// overrides are the ServiceOverride sections by name; a name may
	// appear in more than one header.
	overrides := map[string]*ServiceOverride{}
	var overrideNames []string
	unknownSections := map[string]bool{}
	var families []string
	familiesSet := false
	for _, e := range entries {
		where := fmt.Sprintf("line %d: [%s]", e.Line, sectionName(e))
		switch e.Section {
		case "global":
			if e.Subsection != "" {
				problems = append(problems, fmt.Sprintf("line %d: [Global] takes no subsection name", e.Line))
				continue
			}
			if e.Key == "nodeipfamilies" {
				// A list: each line adds one or more (comma-separated)
				// families; an empty value clears what came before.
				familiesSet = true
				if e.Blank || e.Value == "" {
					families = nil
					continue
				}
				for _, f := range strings.Split(e.Value, ",") {
					families = append(families, strings.ToLower(strings.TrimSpace(f)))
				}
				continue
			}
			if name, ok := obsoleteKeys[e.Key]; ok {
				warnings = append(warnings, fmt.Sprintf("line %d: [Global] %s is not used by this provider and is ignored", e.Line, name))
				continue
			}
			if err := cfg.Global.set(e); err != nil {
				problems = append(problems, fmt.Sprintf("%s %v", where, err))
			}
		case "serviceoverride":
			o := overrides[e.Subsection]
			if o == nil {
				o = &ServiceOverride{Name: e.Subsection}
				overrides[e.Subsection] = o
				overrideNames = append(overrideNames, e.Subsection)
			}
			if err := o.set(e); err != nil {
				problems = append(problems, fmt.Sprintf("%s %v", where, err))
			}
		default:
			if !unknownSections[e.Section] {
				unknownSections[e.Section] = true
				problems = append(problems, fmt.Sprintf("line %d: unknown section [%s] (the provider reads [Global] and [ServiceOverride \"name\"])", e.SectionLine, e.Section))
			}
		}
	}
	for _, name := range overrideNames {
		cfg.ServiceOverrides = append(cfg.ServiceOverrides, *overrides[name])
	}
	if familiesSet {
		cfg.Global.NodeIPFamilies = families
	}
	if len(cfg.Global.NodeIPFamilies) == 0 {
		cfg.Global.NodeIPFamilies = []string{familyIPv4}
	}

	p, w := cfg.validate()
	problems = append(problems, p...)
	warnings = append(warnings, w...)
	if len(problems) > 0 {
		return nil, warnings, fmt.Errorf("aws cloud config: %s", strings.Join(problems, "; "))
	}
	return cfg, warnings, nil
}

// sectionName is how an entry's section is written in messages.
func sectionName(e ini.Entry) string {
	switch e.Section {
	case "global":
		return "Global"
	case "serviceoverride":
		return fmt.Sprintf("ServiceOverride %q", e.Subsection)
	}
	return e.Section
}

// stringValue is e's value; a bare key has none.
func stringValue(e ini.Entry, name string) (string, error) {
	if e.Blank {
		return "", fmt.Errorf("%s has no value (write %s = ...)", name, name)
	}
	return e.Value, nil
}

// set sets the [Global] key of e.
func (g *GlobalConfig) set(e ini.Entry) error {
	fields := []struct {
		name string
		dst  *string
	}{
		{"Zone", &g.Zone},
		{"Region", &g.Region},
		{"VPC", &g.VPC},
		{"SubnetID", &g.SubnetID},
		{"RouteTableID", &g.RouteTableID},
		{"RoleARN", &g.RoleARN},
		{"SourceARN", &g.SourceARN},
		{"KubernetesClusterTag", &g.KubernetesClusterTag},
		{"KubernetesClusterID", &g.KubernetesClusterID},
		{"ElbSecurityGroup", &g.ElbSecurityGroup},
		{"ClusterServiceLoadBalancerHealthProbeMode", &g.ClusterServiceLoadBalancerHealthProbeMode},
		{"ClusterServiceSharedLoadBalancerHealthProbePath", &g.ClusterServiceSharedLoadBalancerHealthProbePath},
		{"NLBSecurityGroupMode", &g.NLBSecurityGroupMode},
	}
	for _, f := range fields {
		if strings.ToLower(f.name) == e.Key {
			v, err := stringValue(e, f.name)
			*f.dst = v
			return err
		}
	}
	switch e.Key {
	case "disablesecuritygroupingress":
		b, err := ini.ParseBool(e)
		if err != nil {
			return fmt.Errorf("DisableSecurityGroupIngress: %w", err)
		}
		g.DisableSecurityGroupIngress = b
		return nil
	case "clusterservicesharedloadbalancerhealthprobeport":
		const name = "ClusterServiceSharedLoadBalancerHealthProbePort"
		v, err := stringValue(e, name)
		if err != nil {
			return err
		}
		port, err := strconv.ParseInt(v, 10, 32)
		if err != nil || port < 1 || port > 65535 {
			return fmt.Errorf("%s: %q is not a port (1-65535)", name, v)
		}
		g.ClusterServiceSharedLoadBalancerHealthProbePort = int32(port)
		return nil
	}
	return fmt.Errorf("unknown key %s", e.Key)
}

// set sets the [ServiceOverride] key of e.
func (o *ServiceOverride) set(e ini.Entry) error {
	fields := []struct {
		name string
		dst  *string
	}{
		{"Service", &o.Service},
		{"Region", &o.Region},
		{"URL", &o.URL},
		{"SigningRegion", &o.SigningRegion},
		{"SigningName", &o.SigningName},
		{"SigningMethod", &o.SigningMethod},
	}
	for _, f := range fields {
		if strings.ToLower(f.name) == e.Key {
			v, err := stringValue(e, f.name)
			*f.dst = strings.TrimSpace(v)
			return err
		}
	}
	return fmt.Errorf("unknown key %s (a ServiceOverride has Service, Region, URL, SigningRegion, SigningName, SigningMethod)", e.Key)
}

// validate lists the problems of settings that each parsed well, and
// warnings about what is accepted but not used.
func (c *Config) validate() (problems, warnings []string) {
	g := &c.Global
	if g.Zone != "" {
		zoneRegion, ok := regionOfZone(g.Zone)
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("[Global] Zone: %q is not an availability zone (like us-east-1a)", g.Zone))
		case g.Region != "" && g.Region != zoneRegion:
			problems = append(problems, fmt.Sprintf("[Global] Zone %s is not in Region %s", g.Zone, g.Region))
		}
	}
	if g.RoleARN != "" {
		if _, err := arn.Parse(g.RoleARN); err != nil {
			problems = append(problems, fmt.Sprintf("[Global] RoleARN: %q is not an ARN", g.RoleARN))
		}
	}
	if g.SourceARN != "" {
		if _, err := arn.Parse(g.SourceARN); err != nil {
			problems = append(problems, fmt.Sprintf("[Global] SourceARN: %q is not an ARN", g.SourceARN))
		}
		if g.RoleARN == "" {
			warnings = append(warnings, "[Global] SourceARN is only sent when assuming RoleARN, which is not set")
		}
	}
	if g.KubernetesClusterTag != "" && g.KubernetesClusterID != "" && g.KubernetesClusterTag != g.KubernetesClusterID {
		problems = append(problems, fmt.Sprintf("[Global] KubernetesClusterTag %q and KubernetesClusterID %q name different clusters", g.KubernetesClusterTag, g.KubernetesClusterID))
	}
	var seen []string
	for _, f := range g.NodeIPFamilies {
		switch {
		case f != familyIPv4 && f != familyIPv6:
			problems = append(problems, fmt.Sprintf("[Global] NodeIPFamilies: %q is not ipv4 or ipv6", f))
		case slices.Contains(seen, f):
			problems = append(problems, fmt.Sprintf("[Global] NodeIPFamilies: %s is listed twice", f))
		default:
			seen = append(seen, f)
		}
	}
	switch g.ClusterServiceLoadBalancerHealthProbeMode {
	case "", probeModeShared, probeModeServiceNodePort:
	default:
		problems = append(problems, fmt.Sprintf("[Global] ClusterServiceLoadBalancerHealthProbeMode: %q is not %s or %s",
			g.ClusterServiceLoadBalancerHealthProbeMode, probeModeServiceNodePort, probeModeShared))
	}
	if p := g.ClusterServiceSharedLoadBalancerHealthProbePath; p != "" && !strings.HasPrefix(p, "/") {
		problems = append(problems, fmt.Sprintf("[Global] ClusterServiceSharedLoadBalancerHealthProbePath: %q does not start with /", p))
	}
	if m := g.NLBSecurityGroupMode; m != "" && m != nlbSecurityGroupManaged {
		problems = append(problems, fmt.Sprintf("[Global] NLBSecurityGroupMode: %q is not %s", m, nlbSecurityGroupManaged))
	}
	// Accepted, so that an upstream file still works, but not acted on:
	// an operator who relies on one of them is told.
	for _, unused := range []struct {
		key string
		set bool
	}{
		{"SubnetID", g.SubnetID != ""},
		{"ClusterServiceLoadBalancerHealthProbeMode = " + probeModeShared, g.ClusterServiceLoadBalancerHealthProbeMode == probeModeShared},
		{"ClusterServiceSharedLoadBalancerHealthProbePort", g.ClusterServiceSharedLoadBalancerHealthProbePort != 0},
		{"ClusterServiceSharedLoadBalancerHealthProbePath", g.ClusterServiceSharedLoadBalancerHealthProbePath != ""},
		{"NLBSecurityGroupMode = " + nlbSecurityGroupManaged, g.NLBSecurityGroupMode == nlbSecurityGroupManaged},
	} {
		if unused.set {
			warnings = append(warnings, fmt.Sprintf("[Global] %s is accepted but not acted on by this provider yet", unused.key))
		}
	}

	type serviceRegion struct{ service, region string }
	first := map[serviceRegion]string{}
	for _, o := range c.ServiceOverrides {
		section := fmt.Sprintf("[ServiceOverride %q]", o.Name)
		var missing []string
		for _, f := range []struct{ key, value string }{
			{"Service", o.Service}, {"Region", o.Region}, {"URL", o.URL}, {"SigningRegion", o.SigningRegion},
		} {
			if f.value == "" {
				missing = append(missing, f.key)
			}
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("%s lacks %s", section, strings.Join(missing, ", ")))
		}
		if o.URL != "" {
			u, err := url.Parse(o.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				problems = append(problems, fmt.Sprintf("%s URL: %q is not an http or https URL", section, o.URL))
			}
		}
		if o.Service == "" {
			continue
		}
		service := canonicalService(o.Service)
		if service == "" {
			warnings = append(warnings, fmt.Sprintf("%s Service %q is not one the provider calls (ec2, elasticloadbalancing, elasticloadbalancingv2, sts, ec2imds); ignored", section, o.Service))
			continue
		}
		key := serviceRegion{service, o.Region}
		if other, dup := first[key]; dup {
			problems = append(problems, fmt.Sprintf("%s overrides %s in %s again (first in [ServiceOverride %q])", section, o.Service, o.Region, other))
			continue
		}
		first[key] = o.Name
	}
	return problems, warnings
}

// override returns the override of a service (the provider's name) in a
// region, if any. The instance metadata service has no region: its
// override applies whatever the region.
func (c *Config) override(service, region string) (ServiceOverride, bool) {
	for _, o := range c.ServiceOverrides {
		if canonicalService(o.Service) == service && (service == serviceIMDS || o.Region == region) {
			return o, true
		}
	}
	return ServiceOverride{}, false
}

// clusterID is the configured cluster ID, "" when none.
func (g *GlobalConfig) clusterID() string {
	if g.KubernetesClusterID != "" {
		return g.KubernetesClusterID
	}
	return g.KubernetesClusterTag
}
