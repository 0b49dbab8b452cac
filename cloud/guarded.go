package cloud

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

// The guarded method sets. Arguments are deep-copied before they reach the
// provider: a detached call may outlive its caller's use of them.

type instancesV2 struct {
	g *Guard
	p cloudprovider.InstancesV2
}

var _ cloudprovider.InstancesV2 = (*instancesV2)(nil)

func (i *instancesV2) nodeRequest(method string, node *v1.Node) request {
	return request{
		method:      method,
		obj:         objectKey{kind: KindNode, key: node.Name},
		fingerprint: node.Spec.ProviderID,
		timeout:     i.g.opts.CallTimeout,
		ref:         node,
	}
}

func (i *instancesV2) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	node = node.DeepCopy()
	return do(ctx, i.g, i.nodeRequest("InstanceExists", node), func(ctx context.Context) (bool, error) {
		return i.p.InstanceExists(ctx, node)
	})
}

func (i *instancesV2) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	node = node.DeepCopy()
	return do(ctx, i.g, i.nodeRequest("InstanceShutdown", node), func(ctx context.Context) (bool, error) {
		return i.p.InstanceShutdown(ctx, node)
	})
}

func (i *instancesV2) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	node = node.DeepCopy()
	return do(ctx, i.g, i.nodeRequest("InstanceMetadata", node), func(ctx context.Context) (*cloudprovider.InstanceMetadata, error) {
		return i.p.InstanceMetadata(ctx, node)
	})
}

type loadBalancer struct {
	g *Guard
	p cloudprovider.LoadBalancer
}

var _ cloudprovider.LoadBalancer = (*loadBalancer)(nil)

func (l *loadBalancer) serviceRequest(method string, mutating bool, svc *v1.Service, nodes []*v1.Node) request {
	timeout := l.g.opts.CallTimeout
	if mutating {
		timeout = l.g.opts.LBCallTimeout
	}
	return request{
		method:      method,
		obj:         objectKey{kind: KindService, key: svc.Namespace + "/" + svc.Name},
		mutating:    mutating,
		fingerprint: serviceFingerprint(svc, nodes),
		timeout:     timeout,
		ref:         svc,
	}
}

func (l *loadBalancer) GetLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	type answer struct {
		status *v1.LoadBalancerStatus
		exists bool
	}
	svc = svc.DeepCopy()
	a, err := do(ctx, l.g, l.serviceRequest("GetLoadBalancer", false, svc, nil), func(ctx context.Context) (answer, error) {
		status, exists, err := l.p.GetLoadBalancer(ctx, clusterName, svc)
		return answer{status, exists}, err
	})
	return a.status, a.exists, err
}

// GetLoadBalancerName is a naming function without a cloud call in every
// provider; it is passed through unguarded.
func (l *loadBalancer) GetLoadBalancerName(ctx context.Context, clusterName string, svc *v1.Service) string {
	return l.p.GetLoadBalancerName(ctx, clusterName, svc)
}

func (l *loadBalancer) EnsureLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	svc, nodes = svc.DeepCopy(), copyNodes(nodes)
	return do(ctx, l.g, l.serviceRequest("EnsureLoadBalancer", true, svc, nodes), func(ctx context.Context) (*v1.LoadBalancerStatus, error) {
		return l.p.EnsureLoadBalancer(ctx, clusterName, svc, nodes)
	})
}

func (l *loadBalancer) UpdateLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) error {
	svc, nodes = svc.DeepCopy(), copyNodes(nodes)
	_, err := do(ctx, l.g, l.serviceRequest("UpdateLoadBalancer", true, svc, nodes), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.p.UpdateLoadBalancer(ctx, clusterName, svc, nodes)
	})
	return err
}

func (l *loadBalancer) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, svc *v1.Service) error {
	svc = svc.DeepCopy()
	_, err := do(ctx, l.g, l.serviceRequest("EnsureLoadBalancerDeleted", true, svc, nil), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.p.EnsureLoadBalancerDeleted(ctx, clusterName, svc)
	})
	return err
}

type routes struct {
	g *Guard
	p cloudprovider.Routes
}

var _ cloudprovider.Routes = (*routes)(nil)

func (r *routes) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	req := request{
		method:      "ListRoutes",
		obj:         objectKey{kind: KindRoute, key: clusterName},
		fingerprint: clusterName,
		timeout:     r.g.opts.CallTimeout,
	}
	return do(ctx, r.g, req, func(ctx context.Context) ([]*cloudprovider.Route, error) {
		return r.p.ListRoutes(ctx, clusterName)
	})
}

func (r *routes) CreateRoute(ctx context.Context, clusterName string, nameHint string, route *cloudprovider.Route) error {
	route = copyRoute(route)
	_, err := do(ctx, r.g, r.routeRequest("CreateRoute", nameHint, route), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.p.CreateRoute(ctx, clusterName, nameHint, route)
	})
	return err
}

func (r *routes) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	route = copyRoute(route)
	_, err := do(ctx, r.g, r.routeRequest("DeleteRoute", "", route), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.p.DeleteRoute(ctx, clusterName, route)
	})
	return err
}

func (r *routes) routeRequest(method, nameHint string, route *cloudprovider.Route) request {
	return request{
		method:      method,
		obj:         objectKey{kind: KindRoute, key: route.DestinationCIDR},
		mutating:    true,
		fingerprint: fingerprint(nameHint, route),
		timeout:     r.g.opts.CallTimeout,
		ref:         routeNode(route),
	}
}

// routeNode is the Node a route leads to, for events; nil if it names none.
func routeNode(route *cloudprovider.Route) runtime.Object {
	if route.TargetNode == "" {
		return nil
	}
	// Node events take the Node's name as their UID, as the kubelet's do.
	return &v1.ObjectReference{Kind: "Node", Name: string(route.TargetNode), UID: types.UID(route.TargetNode)}
}

func copyNodes(nodes []*v1.Node) []*v1.Node {
	if nodes == nil {
		return nil
	}
	out := make([]*v1.Node, len(nodes))
	for i, n := range nodes {
		out[i] = n.DeepCopy()
	}
	return out
}

func copyRoute(r *cloudprovider.Route) *cloudprovider.Route {
	c := *r
	c.TargetNodeAddresses = append([]v1.NodeAddress(nil), r.TargetNodeAddresses...)
	return &c
}

// serviceFingerprint covers what a provider reads to build a load balancer:
// the Service's identity, annotations and spec, and the nodes' identity,
// addresses and labels (not their status heartbeats).
func serviceFingerprint(svc *v1.Service, nodes []*v1.Node) string {
	type node struct {
		Name       string
		ProviderID string
		Addresses  []v1.NodeAddress
		Labels     map[string]string
	}
	ns := make([]node, len(nodes))
	for i, n := range nodes {
		ns[i] = node{n.Name, n.Spec.ProviderID, n.Status.Addresses, n.Labels}
	}
	return fingerprint(svc.UID, svc.Annotations, svc.Spec, ns)
}

func fingerprint(parts ...any) string {
	b, err := json.Marshal(parts)
	if err != nil {
		// Every part is a plain API value; this cannot happen, but a
		// fingerprint that never matches is the safe answer if it does.
		return "unmarshalable"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
