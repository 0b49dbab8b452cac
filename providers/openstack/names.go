package openstack

import (
	"fmt"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
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
// checkLoadBalancerName refuses a cut one before a load balancer is made.
func loadBalancerName(clusterName string, svc *v1.Service) string {
	return cut(fullLoadBalancerName(clusterName, svc), maxNameLength)
}

func fullLoadBalancerName(clusterName string, svc *v1.Service) string {
	return fmt.Sprintf("kube_service_%s_%s_%s", clusterName, svc.Namespace, svc.Name)
}

// checkLoadBalancerName refuses a Service whose load-balancer name would be
// cut: two such Services could share a name, and so a load balancer.
func checkLoadBalancerName(clusterName string, svc *v1.Service) error {
	if n := len(fullLoadBalancerName(clusterName, svc)); n > maxNameLength {
		return fmt.Errorf("the load-balancer name kube_service_<cluster>_<namespace>_<name> of Service %s/%s is %d characters, more than the %d Octavia takes; "+
			"shorten --cluster-name (%d characters; at most %d fit every namespace and name of 63)",
			svc.Namespace, svc.Name, n, maxNameLength, len(clusterName), maxNameLength-len("kube_service___")-2*63)
	}
	return nil
}

// upstreamLBDescription is the description openstack-cloud-controller-manager
// gives a Service's load balancer.
func upstreamLBDescription(clusterName string, svc *v1.Service) string {
	return fmt.Sprintf("Kubernetes external service %s/%s from cluster %s", svc.Namespace, svc.Name, clusterName)
}

// ownedByAnother reports whether a load balancer found under a Service's
// name has a description that ccmkit or openstack-cloud-controller-manager
// wrote for another Service, or another cluster: such a load balancer is
// never changed, deleted or reported as the Service's.
func ownedByAnother(lb *loadbalancers.LoadBalancer, clusterName string, svc *v1.Service) error {
	d := lb.Description
	if d == lbDescription(clusterName, svc) || d == upstreamLBDescription(clusterName, svc) {
		return nil
	}
	if strings.HasPrefix(d, "Kubernetes Service ") || strings.HasPrefix(d, "Kubernetes external service ") {
		return fmt.Errorf("load balancer %s (%s) is not Service %s/%s's in cluster %s: its description says %q", lb.Name, lb.ID, svc.Namespace, svc.Name, clusterName, d)
	}
	return nil
}
