// Package openstack is the OpenStack cloud provider, registered as
// "openstack". It reads openstack-cloud-controller-manager's cloud.conf, so
// an operator keeps theirs: [Global] (Keystone and credentials, or a
// clouds.yaml), [LoadBalancer] (Octavia), [Networking] (Node addresses)
// and [Route] (the router of pod routes). Keys it does not support are
// named in a warning and ignored; a bad or missing value is an error that
// lists every problem. Secrets print as <redacted>.
//
// The provider offers InstancesV2 on Nova. It does not contact OpenStack
// when it is built: it authenticates on the first call (or in the
// background once Initialize is called), so a CCM starts while Keystone is
// down, and every call is bounded by its caller's context. Error texts
// never carry the password or the application credential secret.
package openstack
