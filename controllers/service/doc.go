// Package service is the service controller. It provisions a cloud load
// balancer for each Service of type LoadBalancer that is ours (no
// spec.loadBalancerClass, or the class given by --load-balancer-class),
// writes its address to status.loadBalancer, and deletes it when the
// Service goes away or stops wanting it, guarded by the
// service.kubernetes.io/load-balancer-cleanup finalizer.
//
// Node changes do not sync load balancers directly: they mark the eligible
// node set dirty, the set is recomputed at most once per coalesce period,
// and only the Services whose host set changed are enqueued, into the same
// queue as Service changes. One Service is therefore never synced by two
// workers at once, and a burst of Node changes costs each load balancer
// one UpdateLoadBalancer call. Every load balancer is re-ensured once per
// resync period, at a point of the period of its own, to repair drift.
package service
