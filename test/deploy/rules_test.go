package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ccmkit/ccmkit/app"
	"github.com/ccmkit/ccmkit/providers/aws"
	"github.com/ccmkit/ccmkit/providers/fake"
	"github.com/ccmkit/ccmkit/providers/openstack"
)

// wildcards lists every "*" in the rules of the Roles and ClusterRoles among
// objs, and every aggregated ClusterRole (whose rules are whatever other
// roles add to it).
func wildcards(objs manifests) ([]string, error) {
	var found []string
	for _, obj := range objs {
		if obj.GroupVersionKind().Group != rbacv1.GroupName {
			continue
		}
		var rules []rbacv1.PolicyRule
		switch obj.GetKind() {
		case "ClusterRole":
			r := &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, r); err != nil {
				return nil, fmt.Errorf("%s: %w", key(obj), err)
			}
			if r.AggregationRule != nil {
				found = append(found, key(obj)+": aggregationRule")
			}
			rules = r.Rules
		case "Role":
			r := &rbacv1.Role{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, r); err != nil {
				return nil, fmt.Errorf("%s: %w", key(obj), err)
			}
			rules = r.Rules
		default:
			continue
		}
		for i, rule := range rules {
			for field, values := range map[string][]string{
				"apiGroups":       rule.APIGroups,
				"resources":       rule.Resources,
				"verbs":           rule.Verbs,
				"resourceNames":   rule.ResourceNames,
				"nonResourceURLs": rule.NonResourceURLs,
			} {
				for _, v := range values {
					if strings.Contains(v, "*") {
						found = append(found, fmt.Sprintf("%s: rules[%d].%s: %q", key(obj), i, field, v))
					}
				}
			}
		}
	}
	slices.Sort(found)
	return found, nil
}

func TestRBACHasNoWildcards(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			m := render(t, tg)
			found, err := wildcards(m)
			if err != nil {
				t.Fatal(err)
			}
			if len(found) > 0 {
				t.Errorf("wildcards in the RBAC rules:\n%s", strings.Join(found, "\n"))
			}
			roles := 0
			for _, obj := range m {
				if k := obj.GetKind(); k == "ClusterRole" || k == "Role" {
					roles++
				}
			}
			if roles == 0 {
				t.Error("no Role or ClusterRole rendered, so nothing was checked")
			}
		})
	}
}

// TestWildcardsAreFound shows that the check above catches each kind of
// wildcard.
func TestWildcardsAreFound(t *testing.T) {
	obj := func(kind, name string, rules []any, aggregated bool) *unstructured.Unstructured {
		o := map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1",
			"kind":       kind,
			"metadata":   map[string]any{"name": name},
			"rules":      rules,
		}
		if kind == "Role" {
			o["metadata"].(map[string]any)["namespace"] = "kube-system"
		}
		if aggregated {
			o["aggregationRule"] = map[string]any{"clusterRoleSelectors": []any{map[string]any{"matchLabels": map[string]any{"a": "b"}}}}
		}
		return &unstructured.Unstructured{Object: o}
	}
	rule := func(groups, resources, verbs []any) map[string]any {
		return map[string]any{"apiGroups": groups, "resources": resources, "verbs": verbs}
	}
	objs := manifests{
		obj("ClusterRole", "verbs", []any{rule([]any{""}, []any{"nodes"}, []any{"get", "*"})}, false),
		obj("ClusterRole", "groups", []any{rule([]any{"*"}, []any{"nodes"}, []any{"get"})}, false),
		obj("Role", "subresources", []any{rule([]any{""}, []any{"nodes/*"}, []any{"get"})}, false),
		obj("ClusterRole", "urls", []any{map[string]any{"nonResourceURLs": []any{"/debug/*"}, "verbs": []any{"get"}}}, false),
		obj("ClusterRole", "aggregated", nil, true),
		obj("ClusterRole", "fine", []any{rule([]any{""}, []any{"nodes"}, []any{"get"})}, false),
	}
	got, err := wildcards(objs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ClusterRole aggregated: aggregationRule",
		`ClusterRole groups: rules[0].apiGroups: "*"`,
		`ClusterRole urls: rules[0].nonResourceURLs: "/debug/*"`,
		`ClusterRole verbs: rules[0].verbs: "*"`,
		`Role kube-system/subresources: rules[0].resources: "nodes/*"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("wildcards() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// parseArgs parses args with the cloud-controller-manager's own flags.
func parseArgs(args []string) (*app.Options, error) {
	o := app.NewOptions()
	fs := pflag.NewFlagSet("cloud-controller-manager", pflag.ContinueOnError)
	for _, set := range o.Flags().FlagSets {
		fs.AddFlagSet(set)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("arguments that are no flags: %q", fs.Args())
	}
	return o, nil
}

func TestParseArgsRefusesUnknownFlags(t *testing.T) {
	if _, err := parseArgs([]string{"--cloud-provider=fake", "--leader-elected=true"}); err == nil {
		t.Error("parseArgs accepted --leader-elected")
	}
	o, err := parseArgs([]string{"--cloud-provider=fake", "--secure-port=1"})
	if err != nil || o.CloudProvider != "fake" || o.SecureServing.BindPort != 1 {
		t.Errorf("parseArgs() = %+v, %v", o, err)
	}
}

// TestCloudConfigTemplates reads each overlay's cloud.conf with its provider
// where this binary has it, so that a key the provider does not know fails
// here and not at an operator's first start.
func TestCloudConfigTemplates(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			conf := render(t, tg).cloudConfig(t)
			switch tg.provider {
			case fake.ProviderName:
				cfg, err := fake.ParseConfig(strings.NewReader(conf))
				if err != nil {
					t.Fatal(err)
				}
				if !cfg.AutoInstances.Enabled || cfg.LoadBalancers.VIPCIDR == "" {
					t.Errorf("fake cloud config %+v: want autoInstances and a VIP pool, or no Node is initialised and no load balancer gets an IP", cfg)
				}
				if cfg.AdminAddress != "" {
					t.Errorf("fake cloud config opens the admin API on %s in a cluster", cfg.AdminAddress)
				}
			case openstack.ProviderName:
				cfg, warnings, err := openstack.ParseConfig(strings.NewReader(conf))
				if err != nil {
					t.Fatal(err)
				}
				if len(warnings) > 0 {
					t.Errorf("keys the provider ignores: %q", warnings)
				}
				for name, v := range map[string]string{
					"[Global] auth-url":                  cfg.Global.AuthURL,
					"[Global] region":                    cfg.Global.Region,
					"[Global] application-credential-id": cfg.Global.ApplicationCredentialID,
					"[LoadBalancer] floating-network-id": cfg.LoadBalancer.FloatingNetworkID,
					"[LoadBalancer] subnet-id":           cfg.LoadBalancer.SubnetID,
				} {
					if !strings.HasPrefix(v, "<") && !strings.Contains(v, "://<") {
						t.Errorf("%s = %q, want a <placeholder>", name, v)
					}
				}
			case aws.ProviderName:
				cfg, warnings, err := aws.ParseConfig(strings.NewReader(conf))
				if err != nil {
					t.Fatal(err)
				}
				if len(warnings) > 0 {
					t.Errorf("keys the provider ignores: %q", warnings)
				}
				for name, v := range map[string]string{
					"[Global] Region":              cfg.Global.Region,
					"[Global] KubernetesClusterID": cfg.Global.KubernetesClusterID,
				} {
					if !strings.HasPrefix(v, "<") {
						t.Errorf("%s = %q, want a <placeholder>", name, v)
					}
				}
			default:
				t.Fatalf("no check for provider %q", tg.provider)
			}
		})
	}
}
