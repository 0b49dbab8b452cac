// Package aws is the AWS cloud provider, registered as "aws", on
// aws-sdk-go-v2. It reads aws-cloud-controller-manager's --cloud-config,
// so an operator keeps theirs: [Global] (region, cluster ID, role to
// assume, node IP families, ...) and [ServiceOverride "name"] sections
// (custom endpoints and signing of EC2, ELB, ELBv2, STS and the instance
// metadata service). A bad file is one error that lists every problem.
//
// The provider offers InstancesV2 on EC2. Look-ups of instances by ID
// (the Nodes' providerIDs, aws:///<zone>/<instance-id>) that arrive
// within 50 ms are sent as one DescribeInstances; each caller waits only
// as long as its own context allows. A Node without a providerID is
// found by its name, the instance's private DNS name. With a cluster ID
// configured, instances without the cluster's tag are not the cluster's.
//
// Every request carries its caller's context and goes through one HTTP
// client with dial, TLS-handshake and response-header timeouts. Throttled
// requests (RequestLimitExceeded, Throttling, HTTP 429, ...) are not
// retried by the SDK: they come back as *cloud.ThrottledError, so the
// guard's limiter backs every call off.
package aws
