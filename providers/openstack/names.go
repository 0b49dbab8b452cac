package openstack

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ProviderName is the name the provider is registered under.
const ProviderName = "openstack"

// providerIDPrefix starts every providerID the provider sets.
const providerIDPrefix = ProviderName + "://"

// providerID returns the providerID of a Nova server: openstack:///<id>.
func providerID(serverID string) string { return providerIDPrefix + "/" + serverID }

// serverIDFromProviderID returns the server ID and the region of a
// providerID of the form openstack:///<id> (no region) or
// openstack://<region>/<id>.
func serverIDFromProviderID(pid string) (id, region string, err error) {
	rest, ok := strings.CutPrefix(pid, providerIDPrefix)
	if !ok {
		return "", "", fmt.Errorf("providerID %q is not an OpenStack one (%s/<server-id>)", pid, providerIDPrefix)
	}
	region, id, ok = strings.Cut(rest, "/")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", fmt.Errorf("providerID %q: want %s/<server-id> or %s<region>/<server-id>", pid, providerIDPrefix, providerIDPrefix)
	}
	return id, region, nil
}

// labelValue makes s a valid label value: characters a label value may
// not have become '-', it is cut to 63 characters, and it starts and ends
// with a letter or digit. Nova availability zones may hold anything.
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !labelChar(c) {
			b[i] = '-'
		}
	}
	out := string(b)
	if len(out) > validation.LabelValueMaxLength {
		out = out[:validation.LabelValueMaxLength]
	}
	return strings.Trim(out, "-_.")
}

func labelChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// maxNameLength is the longest name (and description) Octavia and
// Neutron take.
const maxNameLength = 255

// loadBalancerName is the Octavia name of a Service's load balancer:
// kube_service_<cluster>_<namespace>_<name>, cut to 255 characters.
func loadBalancerName(clusterName string, svc *v1.Service) string {
	return cut(fmt.Sprintf("kube_service_%s_%s_%s", clusterName, svc.Namespace, svc.Name), maxNameLength)
}
