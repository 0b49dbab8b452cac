// Package openstack is the OpenStack cloud provider, registered as
// "openstack". It reads openstack-cloud-controller-manager's cloud.conf, so
// an operator keeps theirs: [Global] (Keystone and credentials, or a
// clouds.yaml), [LoadBalancer] and [LoadBalancerClass "name"] (Octavia),
// [Networking] (Node addresses) and [Route] (the router of pod routes).
// Keys it does not support are named in a warning and ignored; a bad or
// missing value is an error that lists every problem. Secrets print as
// <redacted>.
//
// The provider offers InstancesV2 on Nova and LoadBalancer on Octavia
// with floating IPs from Neutron. It does not contact OpenStack when it is
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
package openstack
