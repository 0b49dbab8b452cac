package openstack

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const fullConfig = `
; A cloud.conf as openstack-cloud-controller-manager reads it.
[Global]
auth-url = https://keystone.example:5000/v3
Region = RegionOne
username = ccm
password = "s3cr;t \"quoted\""   ; a comment after a quoted value
user-domain-name = Default
tenant-name = k8s
tenant-domain-name = Default
tls-insecure = yes
os-endpoint-type = internal

[LoadBalancer]
floating-network-id = ext-net-id
subnet-id = subnet-id
lb-method = least_connections
lb-provider = ovn
create-monitor = true
monitor-delay = 10s
monitor-timeout = 4s
monitor-max-retries = 3
internal-lb = false
cascade-delete = false
enable-ingress-hostname
ingress-hostname-suffix = lb.example

[LoadBalancerClass "dmz"]
floating-network-id = dmz-net
floating-subnet-id = dmz-subnet
subnet-id = vip-subnet
member-subnet-id = member-subnet
network-id = vip-net

[Networking]
public-network-name = public
public-network-name = public2
internal-network-name = private # trailing comment
ipv6-support-disabled = true
address-sort-order = 10.0.0.0/8, 192.168.0.0/16

[Route]
router-id = router-1
`

func TestParseConfigFull(t *testing.T) {
	cfg, warnings, err := ParseConfig(strings.NewReader(fullConfig))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	g, lb, n := cfg.Global, cfg.LoadBalancer, cfg.Networking
	checks := []struct {
		name      string
		got, want any
	}{
		{"auth-url", g.AuthURL, "https://keystone.example:5000/v3"},
		{"region (key case-insensitive)", g.Region, "RegionOne"},
		{"password", string(g.Password), `s3cr;t "quoted"`},
		{"tls-insecure", g.TLSInsecure, true},
		{"os-endpoint-type", g.EndpointType, "internal"},
		{"lb-method", lb.LBMethod, "LEAST_CONNECTIONS"},
		{"lb-provider", lb.LBProvider, "ovn"},
		{"create-monitor", lb.CreateMonitor, true},
		{"monitor-delay", lb.MonitorDelay, 10 * time.Second},
		{"monitor-timeout", lb.MonitorTimeout, 4 * time.Second},
		{"monitor-max-retries", lb.MonitorMaxRetries, uint(3)},
		{"cascade-delete", lb.CascadeDelete, false},
		{"enable-ingress-hostname (bare key)", lb.EnableIngressHostname, true},
		{"ingress-hostname-suffix", lb.IngressHostnameSuffix, "lb.example"},
		{"classes", len(lb.Classes), 1},
		{"class dmz", fmt.Sprintf("%+v", lb.Classes["dmz"]), fmt.Sprintf("%+v", &LoadBalancerClass{
			FloatingNetworkID: "dmz-net", FloatingSubnetID: "dmz-subnet", SubnetID: "vip-subnet", MemberSubnetID: "member-subnet", NetworkID: "vip-net"})},
		{"public-network-name (repeated)", strings.Join(n.PublicNetworkNames, ","), "public,public2"},
		{"internal-network-name", strings.Join(n.InternalNetworkNames, ","), "private"},
		{"ipv6-support-disabled", n.IPv6SupportDisabled, true},
		{"address-sort-order", fmt.Sprint(n.AddressSortOrder), fmt.Sprint([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/16")})},
		{"router-id", cfg.Route.RouterID, "router-1"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, _, err := ParseConfig(strings.NewReader("[Global]\nauth-url=http://k\nregion=r\napplication-credential-id=id\napplication-credential-secret=s\n"))
	if err != nil {
		t.Fatal(err)
	}
	lb := cfg.LoadBalancer
	if lb.LBMethod != "ROUND_ROBIN" || !lb.CascadeDelete || lb.IngressHostnameSuffix != "nip.io" || lb.Classes != nil || lb.MonitorDelay != 5*time.Second || lb.MonitorTimeout != 3*time.Second || lb.MonitorMaxRetries != 1 || lb.CreateMonitor {
		t.Errorf("defaults = %+v", lb)
	}
}

// TestParseConfigListsEveryProblem: one error names every bad or missing
// value; unsupported keys and sections are warnings only.
func TestParseConfigListsEveryProblem(t *testing.T) {
	_, warnings, err := ParseConfig(strings.NewReader(`
[Global]
username = u
tls-insecure = maybe
cert-file = /nonexistent/cert.pem
os-endpoint-type = private
[LoadBalancer]
lb-method = RANDOM
monitor-delay = 5
monitor-max-retries = -1
[Networking]
address-sort-order = 10.0.0.0/8,not-a-cidr
`))
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{
		"[Global] region is required",
		"[Global] auth-url is required",
		"[Global] no credentials",
		`[Global] tls-insecure: "maybe" is not a boolean`,
		"[Global] cert-file and key-file go together",
		"[Global] cert-file: cannot read /nonexistent/cert.pem",
		`[Global] os-endpoint-type: "private"`,
		`[LoadBalancer] lb-method: "RANDOM"`,
		`[LoadBalancer] monitor-delay: "5" is not a duration`,
		`[LoadBalancer] monitor-max-retries: "-1" is not a non-negative integer`,
		`[Networking] address-sort-order: "not-a-cidr" is not a CIDR`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}

	_, warnings, err = ParseConfig(strings.NewReader(`
[Global]
auth-url = http://k
region = r
user-id = u
password = p
bs-version = v3
[LoadBalancerClass "office"]
floating-subnet-tags = office
[BlockStorage]
bs-version = v3
[Metadata]
search-order = configDrive
`))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(warnings, "\n")
	for _, want := range []string{"[Global] bs-version is not supported", `[LoadBalancerClass "office"] floating-subnet-tags is not supported`, "section [blockstorage] is not supported", "section [metadata] is not supported"} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings do not say %q:\n%s", want, got)
		}
	}
}

func TestParseConfigSyntaxErrors(t *testing.T) {
	for _, bad := range []string{
		"key = value\n",
		"[Global\nregion = r\n",
		"[Global]\nregion = \"unterminated\n",
		"[Global]\n= value\n",
		"[Global]\nregion = bad\\escape\n",
	} {
		if _, _, err := ParseConfig(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%q: %v, want an error naming the line", bad, err)
		}
	}
}

// TestSecretsNeverPrinted: however a Config is printed or marshalled, the
// password and the application-credential secret do not show.
func TestSecretsNeverPrinted(t *testing.T) {
	cfg, _, err := ParseConfig(strings.NewReader("[Global]\nauth-url=http://k\nregion=r\nusername=u\npassword=hunter2\napplication-credential-id=i\napplication-credential-secret=swordfish\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), fmt.Sprintf("%v", *cfg), string(b)} {
		if strings.Contains(out, "hunter2") || strings.Contains(out, "swordfish") {
			t.Errorf("a secret is printed: %s", out)
		}
		if !strings.Contains(out, "redacted") {
			t.Errorf("no <redacted> marker: %s", out)
		}
	}
}

// TestCloudsYAML: with use-clouds, a clouds.yaml fills what the INI leaves
// empty; what the INI sets wins.
func TestCloudsYAML(t *testing.T) {
	dir := t.TempDir()
	clouds := filepath.Join(dir, "clouds.yaml")
	if err := os.WriteFile(clouds, []byte(`
clouds:
  prod:
    auth:
      auth_url: https://keystone.prod:5000/v3
      username: from-yaml
      password: yaml-secret
      project_name: k8s
      user_domain_name: Default
    region_name: RegionTwo
    interface: internal
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := ParseConfig(strings.NewReader(fmt.Sprintf("[Global]\nuse-clouds = true\nclouds-file = %s\ncloud = prod\nusername = from-ini\n", clouds)))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Global
	if g.AuthURL != "https://keystone.prod:5000/v3" || g.Region != "RegionTwo" || g.TenantName != "k8s" || g.EndpointType != "internal" || string(g.Password) != "yaml-secret" {
		t.Errorf("not filled from clouds.yaml: %+v (password set: %v)", g, g.Password.set())
	}
	if g.Username != "from-ini" {
		t.Errorf("username = %q, want the INI's value", g.Username)
	}

	_, _, err = ParseConfig(strings.NewReader(fmt.Sprintf("[Global]\nuse-clouds = true\nclouds-file = %s\ncloud = staging\n", clouds)))
	if err == nil || !strings.Contains(err.Error(), `no cloud "staging"`) {
		t.Errorf("unknown cloud: %v", err)
	}
}
