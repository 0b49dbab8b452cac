// Package aws is the AWS cloud provider, registered as "aws", on
// aws-sdk-go-v2. It reads aws-cloud-controller-manager's --cloud-config,
// so an operator keeps theirs: [Global] (region, cluster ID, role to
// assume, node IP families, ...) and [ServiceOverride "name"] sections
// (custom endpoints and signing of EC2, ELB, ELBv2, STS and the instance
// metadata service). A bad file is one error that lists every problem.
//
// The provider offers InstancesV2 on EC2, LoadBalancer on ELB and Routes
// on EC2 route tables. Look-ups of instances by ID (the Nodes'
// providerIDs, aws:///<zone>/<instance-id>) that arrive within 50 ms are
// sent as one DescribeInstances; each caller waits only as long as its own
// context allows. A Node without a providerID is
// found by its name, the instance's private DNS name. With a cluster ID
// configured, instances without the cluster's tag are not the cluster's.
//
// LoadBalancer makes a Classic ELB for a Service, or a Network Load
// Balancer for one annotated service.beta.kubernetes.io/aws-load-balancer-type:
// nlb; "nlb-ip" and "external" are left to another controller
// (cloudprovider.ImplementedElsewhere). The load balancer is named as
// aws-cloud-controller-manager names it ("a" and the Service's UID without
// dashes, 32 characters), so that one it made is adopted, and it reads
// the same aws-load-balancer-* annotations: internal, subnets,
// additional-resource-tags, the healthcheck-* settings, ssl-cert,
// ssl-ports, backend-protocol, cross-zone-load-balancing-enabled and
// target-node-labels. All of them are checked before any request: a bad
// value is an error that names the annotation, and nothing changes.
// Changing the type or the internal annotation of an existing load
// balancer is refused in the same way.
//
// Subnets come from the subnets annotation, else from the VPC's subnets
// tagged kubernetes.io/role/elb (kubernetes.io/role/internal-elb for an
// internal load balancer) and kubernetes.io/cluster/<id>, one per zone. A
// Network Load Balancer has a listener and a target group per port, with
// the nodes' instances as targets on the NodePort (registered in chunks
// of 100), health-checked over TCP, or over HTTP on the health check
// NodePort for externalTrafficPolicy: Local; the nodes' security group
// lets the source ranges in on the NodePorts and the VPC in on the health
// check ports. A Classic ELB has a listener per port and a security
// group of its own, k8s-elb-<name>, open to loadBalancerSourceRanges
// (default 0.0.0.0/0) on the listener ports and for the ICMP messages of
// path MTU discovery, and let into the nodes' security group. Everything is tagged kubernetes.io/cluster/<id>=owned
// and kubernetes.io/service-name=<namespace>/<name>; only what has both
// tags is changed or deleted. A delete removes the load balancer, then
// its target groups, its rules in the nodes' security groups and its own
// security group, trying again for a while (never past the caller's
// context) while AWS still counts one as in use.
//
// Routes keeps the Nodes' pod routes in EC2 route tables: the one that
// [Global] RouteTableID names, else every table tagged with the cluster's
// tag (kubernetes.io/cluster/<id>, or KubernetesCluster=<id>); none is an
// error that says so. A route sends a pod CIDR to the instance whose
// private DNS name is the Node's name, in every such table. CreateRoute
// first turns the instance's source/destination check off (if it is on),
// replaces a blackhole or a route to another instance, and does nothing
// when the route is there; DeleteRoute of a missing route does nothing.
// ListRoutes names each route's Node from one DescribeInstances for all
// of them; a route in state blackhole, to an instance that is gone, or
// that the tables send to different instances is a blackhole. Routes to
// gateways, NAT gateways or peerings are never listed, replaced or
// deleted. Routes to another cluster's instances are not listed, so the
// route controller never deletes them; a CreateRoute or DeleteRoute of
// the same destination does replace or delete them.
//
// Every request carries its caller's context and goes through one HTTP
// client with dial, TLS-handshake and response-header timeouts. Throttled
// requests (RequestLimitExceeded, Throttling, HTTP 429, ...) are not
// retried by the SDK: they come back as *cloud.ThrottledError, so the
// guard's limiter backs every call off.
package aws
