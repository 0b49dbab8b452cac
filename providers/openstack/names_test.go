package openstack

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestProviderID(t *testing.T) {
	if got := providerID("abc-123"); got != "openstack:///abc-123" {
		t.Errorf("providerID = %q", got)
	}
	for pid, want := range map[string][2]string{
		"openstack:///abc-123":          {"abc-123", ""},
		"openstack://RegionOne/abc-123": {"abc-123", "RegionOne"},
	} {
		if id, region, err := serverIDFromProviderID(pid); err != nil || id != want[0] || region != want[1] {
			t.Errorf("serverIDFromProviderID(%q) = %q, %q, %v; want %q", pid, id, region, err, want)
		}
	}
	for _, bad := range []string{"", "aws:///i-1", "openstack://", "openstack:///", "openstack://r/a/b", "abc-123"} {
		if _, _, err := serverIDFromProviderID(bad); err == nil {
			t.Errorf("serverIDFromProviderID(%q) succeeded", bad)
		}
	}
}

func TestLabelValue(t *testing.T) {
	tests := map[string]string{
		"nova":                  "nova",
		"az 1 (west)":           "az-1--west",
		"-edge-":                "edge",
		strings.Repeat("z", 80): strings.Repeat("z", 63),
		"zone:a/b":              "zone-a-b",
	}
	for in, want := range tests {
		got := labelValue(in)
		if got != want {
			t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
		}
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("labelValue(%q) = %q is not a label value: %v", in, got, errs)
		}
	}
}

func TestLoadBalancerName(t *testing.T) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	if got := loadBalancerName("prod", svc); got != "kube_service_prod_shop_web" {
		t.Errorf("loadBalancerName = %q", got)
	}
	svc.Name = strings.Repeat("n", 300)
	if got := loadBalancerName("prod", svc); len(got) != 255 || !strings.HasPrefix(got, "kube_service_prod_shop_n") {
		t.Errorf("long name: %d characters", len(got))
	}
}
