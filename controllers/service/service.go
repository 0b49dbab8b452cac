package service

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
)

const (
	// finalizerCleanup keeps a Service until its load balancer is deleted.
	finalizerCleanup = "service.kubernetes.io/load-balancer-cleanup"
	// taintToBeDeleted is the Cluster Autoscaler's taint on a Node it is
	// about to delete; such a Node takes no new load-balancer traffic.
	taintToBeDeleted = "ToBeDeletedByClusterAutoscaler"
)

// Event reasons, as upstream's service controller has them.
const (
	reasonEnsuring        = "EnsuringLoadBalancer"
	reasonEnsured         = "EnsuredLoadBalancer"
	reasonSyncFailed      = "SyncLoadBalancerFailed"
	reasonUnavailable     = "UnAvailableLoadBalancer"
	reasonUpdated         = "UpdatedLoadBalancer"
	reasonUpdateFailed    = "UpdateLoadBalancerFailed"
	reasonDeleting        = "DeletingLoadBalancer"
	reasonDeleted         = "DeletedLoadBalancer"
	reasonDeleteFailed    = "DeleteLoadBalancerFailed"
	messageNoNodes        = "There are no available nodes for LoadBalancer"
	messageUpdatedHosts   = "Updated load balancer with new hosts"
	messageEnsuring       = "Ensuring load balancer"
	messageEnsured        = "Ensured load balancer"
	messageDeleting       = "Deleting load balancer"
	messageDeleted        = "Deleted load balancer"
	maxNodeNamesInMessage = 20
)

// wantsLoadBalancer reports whether svc asks this controller for a load
// balancer: type LoadBalancer and no class, or our class.
func wantsLoadBalancer(svc *v1.Service, class string) bool {
	if svc.Spec.Type != v1.ServiceTypeLoadBalancer {
		return false
	}
	c := svc.Spec.LoadBalancerClass
	return c == nil || (class != "" && *c == class)
}

// hasFinalizer reports whether svc carries the cleanup finalizer.
func hasFinalizer(svc *v1.Service) bool {
	return slices.Contains(svc.Finalizers, finalizerCleanup)
}

// needsCleanup reports whether svc has a load balancer of ours to delete:
// it carries the finalizer and is being deleted or no longer wants one
// from us (type changed, or class changed to one not ours).
func needsCleanup(svc *v1.Service, class string) bool {
	return hasFinalizer(svc) && (svc.DeletionTimestamp != nil || !wantsLoadBalancer(svc, class))
}

// lbSpec is what of a Service a load balancer is built from: the fields
// whose change makes upstream's controller re-ensure, plus the UID.
type lbSpec struct {
	UID                   types.UID
	Type                  v1.ServiceType
	Class                 string
	Ports                 []lbPort
	SourceRanges          []string
	SessionAffinity       v1.ServiceAffinity
	SessionAffinityConfig *v1.SessionAffinityConfig
	LoadBalancerIP        string
	ExternalIPs           []string
	Annotations           map[string]string
	ExternalTrafficPolicy v1.ServiceExternalTrafficPolicy
	HealthCheckNodePort   int32
	IPFamilies            []v1.IPFamily
}

// lbPort is a Service port as a load balancer sees it.
type lbPort struct {
	Name        string
	Protocol    v1.Protocol
	Port        int32
	NodePort    int32
	TargetPort  string
	AppProtocol string
}

func lbSpecOf(svc *v1.Service) lbSpec {
	s := lbSpec{
		UID:                   svc.UID,
		Type:                  svc.Spec.Type,
		SourceRanges:          svc.Spec.LoadBalancerSourceRanges,
		SessionAffinity:       svc.Spec.SessionAffinity,
		SessionAffinityConfig: svc.Spec.SessionAffinityConfig,
		LoadBalancerIP:        svc.Spec.LoadBalancerIP,
		ExternalIPs:           svc.Spec.ExternalIPs,
		Annotations:           svc.Annotations,
		ExternalTrafficPolicy: svc.Spec.ExternalTrafficPolicy,
		HealthCheckNodePort:   svc.Spec.HealthCheckNodePort,
		IPFamilies:            svc.Spec.IPFamilies,
	}
	if svc.Spec.LoadBalancerClass != nil {
		s.Class = *svc.Spec.LoadBalancerClass
	}
	for _, p := range svc.Spec.Ports {
		lp := lbPort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, NodePort: p.NodePort, TargetPort: p.TargetPort.String()}
		if p.AppProtocol != nil {
			lp.AppProtocol = *p.AppProtocol
		}
		s.Ports = append(s.Ports, lp)
	}
	return s
}

func (s lbSpec) equal(o lbSpec) bool { return equality.Semantic.DeepEqual(s, o) }

// eligible reports whether a Node takes load-balancer traffic: not being
// deleted, not excluded by label (any value that does not parse as false
// excludes, as upstream), not tainted for deletion by the autoscaler.
// Readiness does not matter: a NotReady Node's kube-proxy may still serve.
func eligible(node *v1.Node) bool {
	if node.DeletionTimestamp != nil {
		return false
	}
	if v, ok := node.Labels[v1.LabelNodeExcludeBalancers]; ok {
		if excluded, err := strconv.ParseBool(v); err != nil || excluded {
			return false
		}
	}
	return !slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == taintToBeDeleted })
}

// eligibleNodes returns the eligible Nodes sorted by name, so that the same
// set gives the same call arguments.
func eligibleNodes(nodes []*v1.Node) []*v1.Node {
	out := make([]*v1.Node, 0, len(nodes))
	for _, n := range nodes {
		if eligible(n) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *v1.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// hostsKey identifies a host set: each Node's name, providerID and
// InternalIPs, the parts of a Node a load balancer's members are built
// from. Nodes must be sorted by name.
func hostsKey(nodes []*v1.Node) string {
	h := sha256.New()
	for _, n := range nodes {
		h.Write([]byte(n.Name))
		h.Write([]byte{0})
		h.Write([]byte(n.Spec.ProviderID))
		for _, a := range n.Status.Addresses {
			if a.Type == v1.NodeInternalIP {
				h.Write([]byte{0})
				h.Write([]byte(a.Address))
			}
		}
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hostChangeMatters reports whether a Node update can change the host set.
func hostChangeMatters(old, cur *v1.Node) bool {
	return eligible(old) != eligible(cur) || old.Spec.ProviderID != cur.Spec.ProviderID ||
		!slices.Equal(internalIPs(old), internalIPs(cur))
}

func internalIPs(n *v1.Node) []string {
	var ips []string
	for _, a := range n.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			ips = append(ips, a.Address)
		}
	}
	return ips
}

// statusEqual compares two load-balancer statuses, nil and empty alike.
// An ingress IP without ipMode equals one with ipMode VIP: the apiserver
// defaults it so, and a provider that leaves it out would otherwise have
// the status written again at every Ensure.
func statusEqual(a, b *v1.LoadBalancerStatus) bool {
	var ai, bi []v1.LoadBalancerIngress
	if a != nil {
		ai = a.Ingress
	}
	if b != nil {
		bi = b.Ingress
	}
	if len(ai) == 0 && len(bi) == 0 {
		return true
	}
	return equality.Semantic.DeepEqual(withDefaultIPMode(ai), withDefaultIPMode(bi))
}

// withDefaultIPMode returns a copy of ingress with the apiserver's default
// ipMode (VIP) on each IP that has none.
func withDefaultIPMode(ingress []v1.LoadBalancerIngress) []v1.LoadBalancerIngress {
	out := slices.Clone(ingress)
	for i := range out {
		if out[i].IP != "" && out[i].IPMode == nil {
			mode := v1.LoadBalancerIPModeVIP
			out[i].IPMode = &mode
		}
	}
	return out
}

// nodeNamesForMessage lists up to maxNodeNamesInMessage names.
func nodeNamesForMessage(nodes []*v1.Node) string {
	var names []string
	for i, n := range nodes {
		if i == maxNodeNamesInMessage {
			names = append(names, "<"+strconv.Itoa(len(nodes)-i)+" more>")
			break
		}
		names = append(names, n.Name)
	}
	return strings.Join(names, ", ")
}
