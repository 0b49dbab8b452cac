// Package openstack is the OpenStack cloud provider, registered as
// "openstack". It reads openstack-cloud-controller-manager's cloud.conf, so
// an operator keeps theirs: [Global] (Keystone and credentials, or a
// clouds.yaml), [LoadBalancer] (Octavia), [Networking] (Node addresses)
// and [Route] (the router of pod routes). Keys it does not support are
// named in a warning and ignored; a bad or missing value is an error that
// lists every problem. Secrets print as <redacted>.
package openstack
