package openstack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Defaults of the waits for Octavia.
const (
	// A load balancer is read pollInitial after a change, then at
	// doubling intervals up to pollMax: an update takes seconds, a create
	// a minute or more.
	defaultPollInitial = time.Second
	defaultPollMax     = 15 * time.Second
	// defaultBusyRetryAfter is how long a caller waits before it tries a
	// load balancer that Octavia is working on again.
	defaultBusyRetryAfter = 15 * time.Second
)

// loadBalancers implements cloudprovider.LoadBalancer on Octavia, with
// floating IPs from Neutron. Each Service port is a listener with a
// default pool of the nodes (InternalIP:NodePort) and, optionally, a
// health monitor. A load balancer is created in one request with all of
// them, then changed by difference, one change at a time, each once
// Octavia has made the one before; one that Octavia is working on (not
// ACTIVE) is never changed: the caller gets a retry-after error. Every
// request and every wait ends with the caller's context.
type loadBalancers struct {
	conn *session
	cfg  *LoadBalancerConfig

	pollInitial, pollMax time.Duration
	busyRetryAfter       time.Duration
}

var _ cloudprovider.LoadBalancer = (*loadBalancers)(nil)

func newLoadBalancers(conn *session, cfg *LoadBalancerConfig) *loadBalancers {
	return &loadBalancers{conn: conn, cfg: cfg, pollInitial: defaultPollInitial, pollMax: defaultPollMax, busyRetryAfter: defaultBusyRetryAfter}
}

// services returns the clients of Octavia and Neutron.
func (l *loadBalancers) services(ctx context.Context) (octavia, neutron *gophercloud.ServiceClient, err error) {
	c, err := l.conn.clients(ctx)
	if err != nil {
		return nil, nil, err
	}
	if octavia, err = c.loadBalancerClient(ctx); err != nil {
		return nil, nil, err
	}
	if neutron, err = c.networkClient(ctx); err != nil {
		return nil, nil, err
	}
	return octavia, neutron, nil
}

func withService(ctx context.Context, svc *v1.Service, name string) context.Context {
	return klog.NewContext(ctx, klog.FromContext(ctx).WithValues("service", klog.KObj(svc), "loadBalancer", name))
}

// GetLoadBalancerName is kube_service_<cluster>_<namespace>_<name>.
func (l *loadBalancers) GetLoadBalancerName(_ context.Context, clusterName string, svc *v1.Service) string {
	return loadBalancerName(clusterName, svc)
}

// GetLoadBalancer returns the address of a Service's load balancer: its
// floating IP, or its VIP when it has none.
func (l *loadBalancers) GetLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	oc, nc, err := l.services(ctx)
	if err != nil {
		return nil, false, err
	}
	lb, err := findLoadBalancer(ctx, oc, loadBalancerName(clusterName, svc))
	if err != nil || lb == nil {
		return nil, false, err
	}
	if err := ownedByAnother(lb, clusterName, svc); err != nil {
		// Another Service's address must not become this one's status.
		klog.FromContext(ctx).Info("Not this Service's load balancer", "service", klog.KObj(svc), "reason", err)
		return nil, false, nil
	}
	addr := lb.VipAddress
	fips, err := floatingIPsOf(ctx, nc, lb.VipPortID)
	if err != nil {
		return nil, false, err
	}
	if len(fips) > 0 {
		addr = fips[0].FloatingIP
	}
	return l.status(addr), true, nil
}

// status is the Service's status for an address: a hostname
// <address>.<suffix> when enable-ingress-hostname is set.
func (l *loadBalancers) status(addr string) *v1.LoadBalancerStatus {
	if l.cfg.EnableIngressHostname {
		return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{Hostname: addr + "." + l.cfg.IngressHostnameSuffix}}}
	}
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: addr, IPMode: ptr.To(v1.LoadBalancerIPModeVIP)}}}
}

// EnsureLoadBalancer creates the Service's load balancer or brings it in
// line with the Service and the nodes, and its floating IP, and returns
// its address. A bad annotation is an error naming it, found before any
// change. A load balancer in ERROR is deleted and the error returned, so
// that the retry creates it anew.
func (l *loadBalancers) EnsureLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	if err := checkLoadBalancerName(clusterName, svc); err != nil {
		return nil, err
	}
	opts, err := parseLBOptions(l.cfg, svc)
	if err != nil {
		return nil, err
	}
	spec := desiredLoadBalancer(clusterName, svc, nodes, opts)
	ctx = withService(ctx, svc, spec.name)
	oc, nc, err := l.services(ctx)
	if err != nil {
		return nil, err
	}
	if err := l.checkNetworks(ctx, nc, opts); err != nil {
		return nil, err
	}
	lb, err := findLoadBalancer(ctx, oc, spec.name)
	if err != nil {
		return nil, err
	}
	if lb != nil {
		if err := ownedByAnother(lb, clusterName, svc); err != nil {
			return nil, err
		}
	}
	if lb == nil {
		if lb, err = l.create(ctx, oc, nc, spec, nodes); err != nil {
			return nil, err
		}
	} else {
		if err := l.usable(ctx, oc, lb); err != nil {
			return nil, err
		}
		if err := l.reconcile(ctx, oc, lb, spec); err != nil {
			return nil, err
		}
	}
	addr, err := l.ensureAddress(ctx, nc, lb, spec, fipDescription(clusterName, svc))
	if err != nil {
		return nil, err
	}
	return l.status(addr), nil
}

// usable checks that a load balancer may be changed: one Octavia works on
// is a retry-after error, one in ERROR is deleted (with its children) and
// an error.
func (l *loadBalancers) usable(ctx context.Context, oc *gophercloud.ServiceClient, lb *loadbalancers.LoadBalancer) error {
	switch lb.ProvisioningStatus {
	case provisioningActive:
		return nil
	case provisioningError:
		klog.FromContext(ctx).Info("Deleting load balancer in ERROR, to create it again", "id", lb.ID)
		return errors.Join(fmt.Errorf("load balancer %s (%s) is in ERROR: it is deleted and created again on the next try", lb.Name, lb.ID),
			l.deleteLoadBalancer(ctx, oc, lb, true))
	default:
		return l.busy(lb)
	}
}

// checkNetworks checks the networks and subnets that a Service names,
// so that one that does not exist, or does not fit, is an error naming
// where it was set, before anything is changed.
func (l *loadBalancers) checkNetworks(ctx context.Context, nc *gophercloud.ServiceClient, o *lbOptions) error {
	for _, s := range []setting{o.memberSubnet, o.vipSubnet} {
		if s.id != "" {
			if _, err := getSubnet(ctx, nc, s); err != nil {
				return err
			}
		}
	}
	if o.vipNetwork.id != "" {
		if _, err := getNetwork(ctx, nc, o.vipNetwork); err != nil {
			return err
		}
	}
	if o.internal {
		return nil
	}
	if o.floatingNetwork.id != "" {
		external, err := getNetwork(ctx, nc, o.floatingNetwork)
		if err != nil {
			return err
		}
		if !external {
			return fmt.Errorf("%s: network %s is not external (router:external), so it has no floating IPs", o.floatingNetwork.source, o.floatingNetwork.id)
		}
	}
	if o.floatingSubnet.id != "" {
		s, err := getSubnet(ctx, nc, o.floatingSubnet)
		if err != nil {
			return err
		}
		if o.floatingNetwork.id != "" && s.NetworkID != o.floatingNetwork.id {
			return fmt.Errorf("%s: subnet %s is not a subnet of floating network %s", o.floatingSubnet.source, s.ID, o.floatingNetwork.id)
		}
		external, err := getNetwork(ctx, nc, setting{id: s.NetworkID, source: o.floatingSubnet.source})
		if err != nil {
			return err
		}
		if !external {
			return fmt.Errorf("%s: subnet %s is on network %s, which is not external (router:external)", o.floatingSubnet.source, s.ID, s.NetworkID)
		}
	}
	return nil
}

// getNetwork reads a network and reports whether it is external.
func getNetwork(ctx context.Context, nc *gophercloud.ServiceClient, s setting) (external bool, err error) {
	var n struct {
		External bool `json:"router:external"`
	}
	err = networks.Get(ctx, nc, s.id).ExtractInto(&n)
	if isNotFound(err) {
		return false, fmt.Errorf("%s: network %s does not exist", s.source, s.id)
	}
	if err != nil {
		return false, fmt.Errorf("reading network %s (%s): %w", s.id, s.source, err)
	}
	return n.External, nil
}

func getSubnet(ctx context.Context, nc *gophercloud.ServiceClient, s setting) (*subnets.Subnet, error) {
	sub, err := subnets.Get(ctx, nc, s.id).Extract()
	if isNotFound(err) {
		return nil, fmt.Errorf("%s: subnet %s does not exist", s.source, s.id)
	}
	if err != nil {
		return nil, fmt.Errorf("reading subnet %s (%s): %w", s.id, s.source, err)
	}
	return sub, nil
}

// vipPlacement is where the VIP goes: the subnet or network the Service
// or the config names, else the subnet of the first node's address.
func (l *loadBalancers) vipPlacement(ctx context.Context, nc *gophercloud.ServiceClient, o *lbOptions, nodes []*v1.Node) (subnetID, networkID string, err error) {
	if o.vipSubnet.id != "" {
		s, err := getSubnet(ctx, nc, o.vipSubnet)
		if err != nil {
			return "", "", err
		}
		if o.vipNetwork.id != "" && o.vipNetwork.id != s.NetworkID {
			return "", "", fmt.Errorf("%s: subnet %s is not in network %s (%s)", o.vipSubnet.source, s.ID, o.vipNetwork.id, o.vipNetwork.source)
		}
		return s.ID, s.NetworkID, nil
	}
	if o.vipNetwork.id != "" {
		if _, err := getNetwork(ctx, nc, o.vipNetwork); err != nil {
			return "", "", err
		}
		return "", o.vipNetwork.id, nil
	}
	for _, n := range nodes {
		addr := nodeAddress(n, o.ipFamily)
		if addr == "" {
			continue
		}
		opts := ports.ListOpts{FixedIPs: []ports.FixedIPOpts{{IPAddress: addr}}}
		if id, _, err := serverIDFromProviderID(n.Spec.ProviderID); err == nil {
			opts.DeviceID = id
		}
		pages, err := ports.List(nc, opts).AllPages(ctx)
		if err != nil {
			return "", "", fmt.Errorf("finding the port of node %s (%s): %w", n.Name, addr, err)
		}
		list, err := ports.ExtractPorts(pages)
		if err != nil {
			return "", "", fmt.Errorf("finding the port of node %s (%s): %w", n.Name, addr, err)
		}
		for _, p := range list {
			for _, ip := range p.FixedIPs {
				if ip.IPAddress == addr {
					return ip.SubnetID, p.NetworkID, nil
				}
			}
		}
	}
	return "", "", errors.New("no subnet for the VIP: set [LoadBalancer] subnet-id (or network-id) or the annotation " +
		AnnotationSubnetID + ", or give the nodes ports in Neutron")
}

// create makes the load balancer with all its children in one request
// and waits until it is ACTIVE. One that goes into ERROR is deleted.
func (l *loadBalancers) create(ctx context.Context, oc, nc *gophercloud.ServiceClient, spec *lbSpec, nodes []*v1.Node) (*loadbalancers.LoadBalancer, error) {
	o := spec.opts
	subnetID, networkID, err := l.vipPlacement(ctx, nc, o, nodes)
	if err != nil {
		return nil, err
	}
	tags := []string{spec.name}
	opts := loadbalancers.CreateOpts{
		Name: spec.name, Description: spec.description, VipSubnetID: subnetID, VipNetworkID: networkID,
		Provider: o.provider, FlavorID: o.flavorID, AvailabilityZone: o.availabilityZone, Tags: tags,
	}
	if o.internal && o.loadBalancerIP != "" {
		opts.VipAddress = o.loadBalancerIP
	}
	members := 0
	for i := range spec.listeners {
		opts.Listeners = append(opts.Listeners, spec.listeners[i].createOpts(tags))
		members += len(spec.listeners[i].pool.members)
	}
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Creating load balancer", "listeners", len(spec.listeners), "members", members, "subnet", subnetID, "network", networkID)
	created, err := loadbalancers.Create(ctx, oc, opts).Extract()
	if err != nil {
		return nil, l.requestError("creating load balancer "+spec.name, err)
	}
	lb, err := l.waitActive(ctx, oc, created.ID)
	if errors.Is(err, errProvisioningFailed) {
		logger.Info("Deleting load balancer that went into ERROR, to create it again", "id", created.ID)
		return nil, errors.Join(fmt.Errorf("load balancer %s (%s) went into ERROR: it is deleted and created again on the next try", spec.name, created.ID),
			l.deleteLoadBalancer(ctx, oc, created, true))
	}
	if err != nil {
		return nil, err
	}
	logger.V(2).Info("Created load balancer", "id", lb.ID, "vip", lb.VipAddress)
	return lb, nil
}

// reconcile brings an ACTIVE load balancer's children in line with the
// spec, one change at a time: listeners no port wants go first, then each
// port's listener, pool, monitor and members, then the ownership tag.
func (l *loadBalancers) reconcile(ctx context.Context, oc *gophercloud.ServiceClient, lb *loadbalancers.LoadBalancer, spec *lbSpec) error {
	cur, err := readChildren(ctx, oc, lb.ID)
	if err != nil {
		return err
	}
	tags := []string{spec.name}
	wanted := map[listenerKey]bool{}
	for _, ls := range spec.listeners {
		wanted[ls.key] = true
	}
	for _, key := range sortedKeys(cur.listeners) {
		if !wanted[key] {
			if err := l.deleteListener(ctx, oc, lb.ID, cur, cur.listeners[key]); err != nil {
				return err
			}
		}
	}
	for i := range spec.listeners {
		if err := l.reconcileListener(ctx, oc, lb.ID, cur, &spec.listeners[i], tags); err != nil {
			return err
		}
	}
	if !slices.Contains(lb.Tags, spec.name) {
		newTags := append(slices.Clone(lb.Tags), spec.name)
		return l.change(ctx, oc, lb.ID, "tagging load balancer "+lb.ID, func() error {
			return loadbalancers.Update(ctx, oc, lb.ID, loadbalancers.UpdateOpts{Tags: &newTags}).Err
		})
	}
	return nil
}

func sortedKeys(m map[listenerKey]*listeners.Listener) []listenerKey {
	keys := make([]listenerKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b listenerKey) int {
		if a.port != b.port {
			return a.port - b.port
		}
		return cmp.Compare(a.protocol, b.protocol)
	})
	return keys
}

// deleteListener deletes a listener and its default pool (which takes
// its members and monitor along).
func (l *loadBalancers) deleteListener(ctx context.Context, oc *gophercloud.ServiceClient, lbID string, cur *lbChildren, ls *listeners.Listener) error {
	if p := cur.poolOf(ls); p != nil {
		if err := l.change(ctx, oc, lbID, "deleting pool "+p.ID, func() error {
			return tolerateNotFound(pools.Delete(ctx, oc, p.ID).ExtractErr())
		}); err != nil {
			return err
		}
	}
	return l.change(ctx, oc, lbID, "deleting listener "+ls.ID+" ("+listenerKey{ls.Protocol, ls.ProtocolPort}.String()+")", func() error {
		return tolerateNotFound(listeners.Delete(ctx, oc, ls.ID).ExtractErr())
	})
}

// reconcileListener brings one port's listener, pool, monitor and members
// in line.
func (l *loadBalancers) reconcileListener(ctx context.Context, oc *gophercloud.ServiceClient, lbID string, cur *lbChildren, want *listenerSpec, tags []string) error {
	ls := cur.listeners[want.key]
	if ls == nil {
		return l.change(ctx, oc, lbID, "creating listener "+want.key.String(), func() error {
			opts := want.createOpts(tags)
			opts.LoadbalancerID = lbID
			return listeners.Create(ctx, oc, opts).Err
		})
	}
	if opts := want.update(ls, tags); opts != nil {
		if err := l.change(ctx, oc, lbID, "updating listener "+ls.ID, func() error {
			return listeners.Update(ctx, oc, ls.ID, *opts).Err
		}); err != nil {
			return err
		}
	}
	pool := cur.poolOf(ls)
	if pool != nil && pool.Protocol != want.pool.protocol {
		// A pool's protocol does not change: it is replaced.
		if err := l.change(ctx, oc, lbID, "deleting pool "+pool.ID+" of protocol "+pool.Protocol, func() error {
			return tolerateNotFound(pools.Delete(ctx, oc, pool.ID).ExtractErr())
		}); err != nil {
			return err
		}
		pool = nil
	}
	if pool == nil {
		return l.change(ctx, oc, lbID, "creating the pool of listener "+ls.ID, func() error {
			opts := want.pool.createOpts(tags)
			opts.ListenerID = ls.ID
			return pools.Create(ctx, oc, opts).Err
		})
	}
	if opts := want.pool.update(pool, tags); opts != nil {
		if err := l.change(ctx, oc, lbID, "updating pool "+pool.ID, func() error {
			return pools.Update(ctx, oc, pool.ID, *opts).Err
		}); err != nil {
			return err
		}
	}
	if err := l.reconcileMonitor(ctx, oc, lbID, pool, cur.monitors[pool.ID], want.pool.monitor); err != nil {
		return err
	}
	return l.reconcileMembers(ctx, oc, lbID, pool, cur.members[pool.ID], &want.pool)
}

func (l *loadBalancers) reconcileMonitor(ctx context.Context, oc *gophercloud.ServiceClient, lbID string, pool *pools.Pool, cur *monitors.Monitor, want *monitorSpec) error {
	create := func() error {
		return l.change(ctx, oc, lbID, "creating the health monitor of pool "+pool.ID, func() error {
			return monitors.Create(ctx, oc, want.createOpts(pool.ID)).Err
		})
	}
	remove := func() error {
		return l.change(ctx, oc, lbID, "deleting health monitor "+cur.ID, func() error {
			return tolerateNotFound(monitors.Delete(ctx, oc, cur.ID).ExtractErr())
		})
	}
	switch {
	case cur == nil && want == nil:
		return nil
	case cur == nil:
		return create()
	case want == nil:
		return remove()
	}
	opts, replace := want.update(cur)
	switch {
	case replace:
		if err := remove(); err != nil {
			return err
		}
		return create()
	case opts != nil:
		return l.change(ctx, oc, lbID, "updating health monitor "+cur.ID, func() error {
			return monitors.Update(ctx, oc, cur.ID, *opts).Err
		})
	}
	return nil
}

// reconcileMembers sets a pool's members in one batch update, and only
// when they differ from the spec's.
func (l *loadBalancers) reconcileMembers(ctx context.Context, oc *gophercloud.ServiceClient, lbID string, pool *pools.Pool, cur []pools.Member, want *poolSpec) error {
	w, g := memberSet(want.members, cur)
	if slices.Equal(w, g) {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Setting pool members", "pool", pool.ID, "members", len(want.members), "had", len(cur))
	return l.change(ctx, oc, lbID, "setting the members of pool "+pool.ID, func() error {
		return pools.BatchUpdateMembers(ctx, oc, pool.ID, want.batchOpts()).Err
	})
}

// UpdateLoadBalancer points the pools of a Service's load balancer at a
// new set of nodes, with one batch update per pool whose members change.
func (l *loadBalancers) UpdateLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) error {
	opts, err := parseLBOptions(l.cfg, svc)
	if err != nil {
		return err
	}
	spec := desiredLoadBalancer(clusterName, svc, nodes, opts)
	ctx = withService(ctx, svc, spec.name)
	oc, _, err := l.services(ctx)
	if err != nil {
		return err
	}
	lb, err := findLoadBalancer(ctx, oc, spec.name)
	if err != nil {
		return err
	}
	if lb == nil {
		return fmt.Errorf("load balancer %s does not exist", spec.name)
	}
	if err := ownedByAnother(lb, clusterName, svc); err != nil {
		return err
	}
	switch lb.ProvisioningStatus {
	case provisioningActive:
	case provisioningError:
		return fmt.Errorf("load balancer %s (%s) is in ERROR", lb.Name, lb.ID)
	default:
		return l.busy(lb)
	}
	cur, err := readChildren(ctx, oc, lb.ID)
	if err != nil {
		return err
	}
	for i := range spec.listeners {
		want := &spec.listeners[i]
		ls := cur.listeners[want.key]
		if ls == nil {
			return fmt.Errorf("load balancer %s has no listener for port %s", lb.ID, want.key)
		}
		pool := cur.poolOf(ls)
		if pool == nil {
			return fmt.Errorf("listener %s of load balancer %s has no pool", ls.ID, lb.ID)
		}
		if err := l.reconcileMembers(ctx, oc, lb.ID, pool, cur.members[pool.ID], &want.pool); err != nil {
			return err
		}
	}
	return nil
}

// EnsureLoadBalancerDeleted deletes a Service's load balancer and the
// floating IPs ccmkit made for it, unless keep-floatingip is set. A load
// balancer that does not exist is deleted already.
func (l *loadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, svc *v1.Service) error {
	r := &annotationReader{svc: svc}
	keep, _ := r.boolean(AnnotationKeepFloatingIP, false)
	if len(r.errs) > 0 {
		return errors.Join(r.errs...)
	}
	name := loadBalancerName(clusterName, svc)
	ctx = withService(ctx, svc, name)
	oc, nc, err := l.services(ctx)
	if err != nil {
		return err
	}
	lb, err := findLoadBalancer(ctx, oc, name)
	if err != nil {
		return err
	}
	if lb != nil {
		if err := ownedByAnother(lb, clusterName, svc); err != nil {
			// This Service has no load balancer of its own to delete.
			klog.FromContext(ctx).Info("Not deleting a load balancer that is not this Service's", "reason", err)
			lb = nil
		}
	}
	if lb != nil && lb.ProvisioningStatus != provisioningActive && lb.ProvisioningStatus != provisioningError {
		return l.busy(lb)
	}
	if !keep {
		if err := l.releaseFloatingIPs(ctx, nc, fipDescription(clusterName, svc)); err != nil {
			return err
		}
	}
	if lb == nil {
		return nil
	}
	return l.deleteLoadBalancer(ctx, oc, lb, l.cfg.CascadeDelete)
}

// deleteLoadBalancer deletes a load balancer and waits until it is gone:
// in one cascading request, or its monitors, pools and listeners first.
// One in ERROR is deleted in cascade, as Octavia does not change its
// children.
func (l *loadBalancers) deleteLoadBalancer(ctx context.Context, oc *gophercloud.ServiceClient, lb *loadbalancers.LoadBalancer, cascade bool) error {
	logger := klog.FromContext(ctx)
	cascade = cascade || lb.ProvisioningStatus == provisioningError
	if !cascade {
		cur, err := readChildren(ctx, oc, lb.ID)
		if err != nil {
			return err
		}
		for poolID, m := range cur.monitors {
			if err := l.change(ctx, oc, lb.ID, "deleting health monitor "+m.ID+" of pool "+poolID, func() error {
				return tolerateNotFound(monitors.Delete(ctx, oc, m.ID).ExtractErr())
			}); err != nil {
				return err
			}
		}
		for id := range cur.pools {
			if err := l.change(ctx, oc, lb.ID, "deleting pool "+id, func() error {
				return tolerateNotFound(pools.Delete(ctx, oc, id).ExtractErr())
			}); err != nil {
				return err
			}
		}
		for _, key := range sortedKeys(cur.listeners) {
			id := cur.listeners[key].ID
			if err := l.change(ctx, oc, lb.ID, "deleting listener "+id, func() error {
				return tolerateNotFound(listeners.Delete(ctx, oc, id).ExtractErr())
			}); err != nil {
				return err
			}
		}
	}
	logger.V(2).Info("Deleting load balancer", "id", lb.ID, "cascade", cascade)
	err := loadbalancers.Delete(ctx, oc, lb.ID, loadbalancers.DeleteOpts{Cascade: cascade}).ExtractErr()
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return l.requestError("deleting load balancer "+lb.ID, err)
	}
	if err := l.waitGone(ctx, oc, lb.ID); err != nil {
		return err
	}
	logger.V(2).Info("Deleted load balancer", "id", lb.ID)
	return nil
}

// isIPv6 reports whether an address is an IPv6 one.
func isIPv6(addr string) bool {
	a, err := netip.ParseAddr(addr)
	return err == nil && a.Is6() && !a.Is4In6()
}
