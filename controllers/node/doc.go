// Package node is the cloud-node controller. It initialises Nodes that the
// kubelet registered with the node.cloudprovider.kubernetes.io/uninitialized
// taint (kubelet --cloud-provider=external): providerID, instance-type,
// zone and region labels, the provider's additional labels and addresses
// from one InstanceMetadata call, then the taint is removed. Afterwards it
// refreshes each Node's addresses and cloud labels once per period, at a
// point of the period of its own, so many Nodes make a steady trickle of
// cloud calls rather than bursts.
package node
