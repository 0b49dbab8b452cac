package cloud

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

// The guarded method sets. A detached call may outlive its caller's use of
// its arguments, so Services, routes and single Nodes are copied before they
// reach the provider. A load balancer's node list is not: its Nodes come
// from the informer cache, which no one changes (a provider must not either,
// as with upstream's controllers), and copying thousands of Nodes on every
// call would cost more memory than the cache itself. Only the slice is copied.

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
	svc, nodes = svc.DeepCopy(), slices.Clone(nodes)
	return do(ctx, l.g, l.serviceRequest("EnsureLoadBalancer", true, svc, nodes), func(ctx context.Context) (*v1.LoadBalancerStatus, error) {
		return l.p.EnsureLoadBalancer(ctx, clusterName, svc, nodes)
	})
}

func (l *loadBalancer) UpdateLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) error {
	svc, nodes = svc.DeepCopy(), slices.Clone(nodes)
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

func copyRoute(r *cloudprovider.Route) *cloudprovider.Route {
	c := *r
	c.TargetNodeAddresses = append([]v1.NodeAddress(nil), r.TargetNodeAddresses...)
	return &c
}

// serviceFingerprint covers what a provider reads to build a load balancer:
// the Service's identity, annotations and spec, and the nodes' identity,
// addresses and labels (not their status heartbeats). The nodes are hashed
// field by field: a JSON rendering of thousands of them on every call would
// be garbage of the size of the node cache.
func serviceFingerprint(svc *v1.Service, nodes []*v1.Node) string {
	h := sha256.New()
	w := fieldWriter{h: h, buf: make([]byte, 0, 4096)}
	w.field(fingerprint(svc.UID, svc.Annotations, svc.Spec))
	var keys []string
	for _, n := range nodes {
		w.field(n.Name)
		w.field(n.Spec.ProviderID)
		w.count(len(n.Status.Addresses))
		for _, a := range n.Status.Addresses {
			w.field(string(a.Type))
			w.field(a.Address)
		}
		keys = keys[:0]
		for k := range n.Labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		w.count(len(keys))
		for _, k := range keys {
			w.field(k)
			w.field(n.Labels[k])
		}
	}
	w.flush()
	return hex.EncodeToString(h.Sum(nil))
}

// fieldWriter writes fields to a hash through a small buffer. Every field
// ends with a 0 byte (API names, addresses and labels hold none) and every
// group starts with its length, so that no two node lists write the same
// bytes.
type fieldWriter struct {
	h   hash.Hash
	buf []byte
}

func (w *fieldWriter) field(s string) {
	w.buf = append(append(w.buf, s...), 0)
	if len(w.buf) >= cap(w.buf)/2 {
		w.flush()
	}
}

func (w *fieldWriter) count(n int) {
	w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(n))
}

func (w *fieldWriter) flush() {
	w.h.Write(w.buf)
	w.buf = w.buf[:0]
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
