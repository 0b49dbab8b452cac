// Package openstack is the OpenStack cloud provider, registered as
// "openstack". It reads openstack-cloud-controller-manager's cloud.conf, so
// an operator keeps theirs: [Global] (Keystone and credentials, or a
// clouds.yaml), [LoadBalancer] and [LoadBalancerClass "name"] (Octavia),
// [Networking] (Node addresses) and [Route] (the router of pod routes).
// Keys it does not support are named in a warning and ignored; a bad or
// missing value is an error that lists every problem. Secrets print as
// <redacted>.
//
// The provider offers InstancesV2 on Nova, LoadBalancer on Octavia with
// floating IPs from Neutron and, when [Route] router-id names a Neutron
// router, Routes on that router. It does not contact OpenStack when it is
// built: it authenticates on the first call (or in the background once
// Initialize is called), so a CCM starts while Keystone is down, and every
// call is bounded by its caller's context. Error texts never carry the
// password or the application credential secret.
//
// A Service's load balancer is named kube_service_<cluster>_<namespace>_<name>
// and tagged with that name. Each Service port (TCP or UDP) is a listener
// with a default pool of the nodes' InternalIP:NodePort and, when enabled,
// a health monitor (TCP, UDP-CONNECT, or for externalTrafficPolicy: Local
// HTTP GET /healthz on the health-check node port). A new load balancer is
// one fully populated create; an existing one is changed by difference,
// one change at a time and only while it is ACTIVE (otherwise the call is
// a retry-after error), members with one batch update per pool whose
// members differ. One in ERROR is deleted and created again on the next
// try. The Service's address is the floating IP on the VIP port (the one
// in spec.loadBalancerIP is adopted, else one is allocated on the floating
// network and marked as ccmkit's in its description), or the VIP for an
// internal load balancer; with enable-ingress-hostname it is the hostname
// <address>.<ingress-hostname-suffix>. Deletion is a cascade delete (or
// monitors, pools and listeners first with cascade-delete = false) and
// releases only the floating IPs ccmkit allocated, unless keep-floatingip.
//
// The Service annotations are openstack-cloud-controller-manager's, with
// the prefix loadbalancer.openstack.org/ (see the Annotation constants):
// floating-network-id, floating-subnet-id, subnet-id, member-subnet-id,
// network-id, keep-floatingip, lb-method, connection-limit,
// timeout-client-data, timeout-member-connect, timeout-member-data,
// enable-health-monitor, health-monitor-delay, health-monitor-timeout,
// health-monitor-max-retries, flavor-id, availability-zone and class (a
// [LoadBalancerClass "name"] of the cloud config), and
// service.beta.kubernetes.io/openstack-internal-load-balancer. A bad value
// is an error naming the annotation, found before anything is changed.
//
// A pod route is one of the router's static routes: the Node's pod CIDR
// goes to the Node's InternalIP of the CIDR's IP family, and the Node's
// Neutron port (the one holding that address) gets the CIDR as an allowed
// address pair, so that port security lets the pods' traffic pass. A
// listed route names the Node of the server whose fixed address is its
// next hop (the Node's name is the server's); a route whose next hop is
// no server's address is a blackhole, which the route controller deletes
// when it is inside the cluster CIDR. A route is named "<destination> via
// <next hop>". Creating adds the address pair first and the route second,
// deleting takes them away in the same order, and either is a no-op when
// done already. Neutron's extensions are read once, on the first change:
// with extraroute-atomic a route is added and removed in one request
// (add_extraroutes, remove_extraroutes); without it the router's routes
// are read, changed and written back with If-Match: revision_number=N
// (revision-if-match), and a write that another writer beat (412) is
// made again on a fresh read, a bounded number of times, so that no
// concurrent writer's route is lost. A port's address pairs are changed
// the same way.
package openstack
