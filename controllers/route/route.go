package route

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
)

// Event reason and condition reasons, as upstream's route controller has them.
const (
	reasonFailedToCreate  = "FailedToCreateRoute"
	reasonRouteCreated    = "RouteCreated"
	reasonNoRouteCreated  = "NoRouteCreated"
	messageRouteCreated   = "RouteController created a route"
	messageNoRouteCreated = "RouteController failed to create a route"
)

// checkClusterCIDRs accepts one CIDR or an IPv4 and an IPv6 one.
func checkClusterCIDRs(cidrs []netip.Prefix) error {
	switch {
	case len(cidrs) == 1:
		return nil
	case len(cidrs) == 2 && cidrs[0].Addr().Is4() != cidrs[1].Addr().Is4():
		return nil
	case len(cidrs) == 0:
		return errors.New("no cluster CIDR (--cluster-cidr)")
	default:
		return fmt.Errorf("cluster CIDRs %v: want one CIDR, or an IPv4 and an IPv6 CIDR (--cluster-cidr)", cidrs)
	}
}

// conditionFor is the NetworkUnavailable condition for a Node whose routes
// all exist (routesCreated) or not.
func conditionFor(routesCreated bool) v1.NodeCondition {
	if routesCreated {
		return v1.NodeCondition{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionFalse, Reason: reasonRouteCreated, Message: messageRouteCreated}
	}
	return v1.NodeCondition{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionTrue, Reason: reasonNoRouteCreated, Message: messageNoRouteCreated}
}

func conditionOf(n *v1.Node) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeNetworkUnavailable {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// sameAddresses compares two address lists as sets.
func sameAddresses(a, b []v1.NodeAddress) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
