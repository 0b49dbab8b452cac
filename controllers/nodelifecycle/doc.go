// Package nodelifecycle is the cloud-node-lifecycle controller. It removes
// Nodes whose machine is gone from the cloud and marks Nodes whose machine is
// shut down, the part of a Node's life that only the cloud can see.
//
// Every monitor period it looks at each Node that is not Ready (its Ready
// condition False, Unknown or missing) and asks the cloud, through the guard,
// whether its instance exists:
//
//   - Gone (false, or cloudprovider.InstanceNotFound): the first observation
//     is remembered, and the Node is deleted only when a check that starts at
//     least the deletion grace period later still finds it gone, because cloud
//     APIs are eventually consistent (upstream deletes on one observation).
//     The delete carries the Node's UID as a precondition, so a Node that was
//     re-registered under the same name is never deleted by an old decision.
//   - Present and shut down: the node.cloudprovider.kubernetes.io/shutdown
//     taint (NoSchedule) is added.
//   - An error, a timeout, or a retry-after from the guard (call in progress,
//     guard saturated) says nothing about the instance: the Node is never
//     deleted on it, and a first observation is kept as it was.
//
// A Ready Node that carries the shutdown taint has it removed, without a cloud
// call, and a Ready Node's remembered observation is dropped.
//
// Checks run on a bounded number of workers, and a Node whose check is queued,
// waiting for a retry or running is not queued again, so a hung cloud call
// (which the guard releases after its detach window) never holds up the scan.
package nodelifecycle
