// Package route is the route controller. For every Node with
// spec.podCIDRs it keeps one cloud route per pod CIDR inside the cluster
// CIDRs (an IPv4 and an IPv6 route on a dual-stack cluster) pointing at the
// Node, deletes the routes inside the cluster CIDRs that are blackholes or
// belong to no Node, and never touches a route outside them. It sets each
// Node's NetworkUnavailable condition from whether its routes exist.
//
// It is event-driven: Node changes that matter (a Node added or deleted,
// its pod CIDRs or addresses changed) trigger one reconciliation per short
// window, and a full reconciliation runs once per resync period. Creates
// and deletes run in the background with bounded concurrency, so a hung
// call delays no other route; a failed one is retried with back-off.
package route
