package aws

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fullConfig has every key, spelt in mixed case as operators do.
const fullConfig = `
; aws-cloud-controller-manager's cloud config
[global]
Zone = us-east-1a
region = us-east-1
VPC = vpc-123
SubnetID = subnet-123
RouteTableID = rtb-123
RoleARN = arn:aws:iam::123456789012:role/ccm
SourceARN = arn:aws:eks:us-east-1:123456789012:cluster/prod
KubernetesClusterTag = prod
kubernetesclusterid = prod
DisableSecurityGroupIngress = true
ElbSecurityGroup = sg-123
NodeIPFamilies = ipv6
NodeIPFamilies = IPv4
ClusterServiceLoadBalancerHealthProbeMode = Shared
ClusterServiceSharedLoadBalancerHealthProbePort = 10256
ClusterServiceSharedLoadBalancerHealthProbePath = /healthz
NLBSecurityGroupMode = Managed

[ServiceOverride "1"]
Service = ec2
Region = us-east-1
URL = https://ec2.example.internal
SigningRegion = us-east-1
SigningName = ec2
SigningMethod = v4

[ServiceOverride "elb"]
Service = Elastic Load Balancing v2
Region = us-east-1
URL = "https://elbv2.example.internal" ; quoted
SigningRegion = us-east-1
`

func TestParseConfigFull(t *testing.T) {
	cfg, warnings, err := ParseConfig(strings.NewReader(fullConfig))
	if err != nil {
		t.Fatal(err)
	}
	// The full file sets every key that is accepted but not acted on.
	wantWarnings := []string{
		"[Global] SubnetID is accepted but not acted on by this provider yet",
		"[Global] ClusterServiceLoadBalancerHealthProbeMode = Shared is accepted but not acted on by this provider yet",
		"[Global] ClusterServiceSharedLoadBalancerHealthProbePort is accepted but not acted on by this provider yet",
		"[Global] ClusterServiceSharedLoadBalancerHealthProbePath is accepted but not acted on by this provider yet",
		"[Global] NLBSecurityGroupMode = Managed is accepted but not acted on by this provider yet",
	}
	if !slices.Equal(warnings, wantWarnings) {
		t.Errorf("warnings:\n got %q\nwant %q", warnings, wantWarnings)
	}
	want := Config{
		Global: GlobalConfig{
			Zone: "us-east-1a", Region: "us-east-1", VPC: "vpc-123", SubnetID: "subnet-123", RouteTableID: "rtb-123",
			RoleARN: "arn:aws:iam::123456789012:role/ccm", SourceARN: "arn:aws:eks:us-east-1:123456789012:cluster/prod",
			KubernetesClusterTag: "prod", KubernetesClusterID: "prod",
			DisableSecurityGroupIngress: true, ElbSecurityGroup: "sg-123",
			NodeIPFamilies: []string{"ipv6", "ipv4"},
			ClusterServiceLoadBalancerHealthProbeMode:       "Shared",
			ClusterServiceSharedLoadBalancerHealthProbePort: 10256,
			ClusterServiceSharedLoadBalancerHealthProbePath: "/healthz",
			NLBSecurityGroupMode:                            "Managed",
		},
		ServiceOverrides: []ServiceOverride{
			{Name: "1", Service: "ec2", Region: "us-east-1", URL: "https://ec2.example.internal", SigningRegion: "us-east-1", SigningName: "ec2", SigningMethod: "v4"},
			{Name: "elb", Service: "Elastic Load Balancing v2", Region: "us-east-1", URL: "https://elbv2.example.internal", SigningRegion: "us-east-1"},
		},
	}
	if !reflect.DeepEqual(*cfg, want) {
		t.Errorf("ParseConfig:\n got %+v\nwant %+v", *cfg, want)
	}
	if o, ok := cfg.override(serviceELBv2, "us-east-1"); !ok || o.Name != "elb" {
		t.Errorf("override(elbv2, us-east-1) = %+v, %v; want the section \"elb\"", o, ok)
	}
	if _, ok := cfg.override(serviceEC2, "eu-west-1"); ok {
		t.Error("an override applies to a region it does not name")
	}
	if _, ok := cfg.override(serviceELB, "us-east-1"); ok {
		t.Error("the elbv2 override applies to elb")
	}
}

func TestParseConfigDefaults(t *testing.T) {
	for _, conf := range []string{"", "[Global]\n", "[Global]\nNodeIPFamilies = ipv6\nNodeIPFamilies =\n"} {
		cfg, _, err := ParseConfig(strings.NewReader(conf))
		if err != nil {
			t.Fatalf("ParseConfig(%q): %v", conf, err)
		}
		if !reflect.DeepEqual(cfg.Global.NodeIPFamilies, []string{"ipv4"}) {
			t.Errorf("ParseConfig(%q): NodeIPFamilies = %v, want [ipv4]", conf, cfg.Global.NodeIPFamilies)
		}
	}
	cfg, _, err := ParseConfig(strings.NewReader("[Global]\nNodeIPFamilies = ipv4, ipv6\n"))
	if err != nil || !reflect.DeepEqual(cfg.Global.NodeIPFamilies, []string{"ipv4", "ipv6"}) {
		t.Errorf("comma-separated NodeIPFamilies = %+v, %v; want [ipv4 ipv6]", cfg, err)
	}
}

// TestParseConfigListsEveryProblem: one error names each problem, with
// its line where it has one.
func TestParseConfigListsEveryProblem(t *testing.T) {
	const conf = `[Global]
Region = us-east-1
Zone = eu-west-1b
Regoin = typo
DisableSecurityGroupIngress = perhaps
ClusterServiceSharedLoadBalancerHealthProbePort = 70000
NodeIPFamilies = ipv4
NodeIPFamilies = ipv5
NodeIPFamilies = ipv4
RoleARN = not-an-arn
KubernetesClusterTag = a
KubernetesClusterID = b
ClusterServiceLoadBalancerHealthProbeMode = Sometimes
NLBSecurityGroupMode = Unmanaged
VPC
bad key = 1

[ServiceOverride "incomplete"]
Service = ec2
URL = ftp://ec2.example

[ServiceOverride "dup"]
Service = EC2
Region = us-east-1
URL = https://a.example
SigningRegion = us-east-1
Colour = blue

[ServiceOverride "dup2"]
Service = ec2
Region = us-east-1
URL = https://b.example
SigningRegion = us-east-1

[Unknown]
key = 1
key2 = 2
`
	_, _, err := ParseConfig(strings.NewReader(conf))
	if err == nil {
		t.Fatal("ParseConfig accepted a bad config")
	}
	msg := err.Error()
	for _, want := range []string{
		"line 4: [Global] unknown key regoin",
		`line 5: [Global] DisableSecurityGroupIngress: "perhaps" is not a boolean`,
		`line 6: [Global] ClusterServiceSharedLoadBalancerHealthProbePort: "70000" is not a port`,
		`NodeIPFamilies: "ipv5" is not ipv4 or ipv6`,
		"NodeIPFamilies: ipv4 is listed twice",
		`RoleARN: "not-an-arn" is not an ARN`,
		`KubernetesClusterTag "a" and KubernetesClusterID "b" name different clusters`,
		"Zone eu-west-1b is not in Region us-east-1",
		`ClusterServiceLoadBalancerHealthProbeMode: "Sometimes"`,
		`NLBSecurityGroupMode: "Unmanaged" is not Managed`,
		"line 15: [Global] VPC has no value",
		"line 16: bad key",
		`[ServiceOverride "incomplete"] lacks Region, SigningRegion`,
		`[ServiceOverride "incomplete"] URL: "ftp://ec2.example" is not an http or https URL`,
		`line 27: [ServiceOverride "dup"] unknown key colour`,
		`[ServiceOverride "dup2"] overrides ec2 in us-east-1 again (first in [ServiceOverride "dup"])`,
		"line 35: unknown section [unknown]",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(msg, "unknown section"); n != 1 {
		t.Errorf("the unknown section is named %d times, want once", n)
	}
	if strings.Count(msg, "\n") != 0 || !strings.HasPrefix(msg, "aws cloud config: ") {
		t.Errorf("the error is not one line starting with \"aws cloud config: \":\n%s", msg)
	}
}

func TestParseConfigWarnings(t *testing.T) {
	const conf = `[Global]
Region = us-east-1
DisableStrictZoneCheck = true
SourceARN = arn:aws:eks:us-east-1:123456789012:cluster/prod
[ServiceOverride "kms"]
Service = kms
Region = us-east-1
URL = https://kms.example
SigningRegion = us-east-1
`
	cfg, warnings, err := ParseConfig(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"line 3: [Global] DisableStrictZoneCheck is not used by this provider and is ignored",
		"[Global] SourceARN is only sent when assuming RoleARN, which is not set",
		`[ServiceOverride "kms"] Service "kms" is not one the provider calls`,
	}
	if len(warnings) != len(want) {
		t.Fatalf("warnings = %q, want %d", warnings, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(warnings[i], w) {
			t.Errorf("warning %d = %q, want %q...", i, warnings[i], w)
		}
	}
	if _, ok := cfg.override(serviceEC2, "us-east-1"); ok {
		t.Error("a kms override applies to ec2")
	}
}

func TestRegionOfZone(t *testing.T) {
	for zone, want := range map[string]string{
		"us-east-1a":              "us-east-1",
		"us-gov-west-1b":          "us-gov-west-1",
		"ap-southeast-2c":         "ap-southeast-2",
		"us-west-2-lax-1a":        "us-west-2",
		"us-east-1-wl1-bos-wlz-1": "us-east-1",
		"us-east-1":               "",
		"nova":                    "",
	} {
		got, ok := regionOfZone(zone)
		if got != want || ok != (want != "") {
			t.Errorf("regionOfZone(%s) = %q, %v; want %q", zone, got, ok, want)
		}
	}
}

func TestCanonicalService(t *testing.T) {
	for name, want := range map[string]string{
		"ec2": serviceEC2, "EC2": serviceEC2,
		"elasticloadbalancing": serviceELB, "Elastic Load Balancing": serviceELB, "elb": serviceELB,
		"elasticloadbalancingv2": serviceELBv2, "Elastic Load Balancing v2": serviceELBv2,
		"sts": serviceSTS, "STS": serviceSTS,
		"ec2imds": serviceIMDS,
		"kms":     "", "s3": "",
	} {
		if got := canonicalService(name); got != want {
			t.Errorf("canonicalService(%q) = %q, want %q", name, got, want)
		}
	}
}
