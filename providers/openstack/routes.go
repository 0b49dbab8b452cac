package openstack

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/extraroutes"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
)

// Neutron extensions the routes tell apart.
const (
	// extensionAtomicRoutes adds and removes a router's routes in one
	// request each (add_extraroutes, remove_extraroutes), so that
	// concurrent writers do not overwrite each other.
	extensionAtomicRoutes = "extraroute-atomic"
	// extensionRevisionIfMatch makes Neutron honour If-Match:
	// revision_number=N on an update, refusing it with 412 when the
	// resource changed since it was read.
	extensionRevisionIfMatch = "revision-if-match"
)

// Defaults of the routes' read-modify-write of a router or a port.
const (
	// defaultRouteAttempts bounds the writes of one change that Neutron
	// refuses because another writer changed the resource first.
	defaultRouteAttempts = 20
	// defaultRouteRetryDelay is the longest wait before the first retry;
	// each retry waits a random part of attempt times this, so that
	// writers that collided do not collide again.
	defaultRouteRetryDelay = 50 * time.Millisecond
	// conflictRetryAfter is how long a caller waits before it tries a
	// change again that Neutron refused for now (409), or that kept
	// colliding with other writers.
	conflictRetryAfter = 10 * time.Second
)

// deviceOwnerCompute prefixes the device owner of a Nova server's ports.
const deviceOwnerCompute = "compute:"

// routeVia separates a route's destination and next hop in its name.
const routeVia = " via "

// routes implements cloudprovider.Routes on the static routes of one
// Neutron router ([Route] router-id). A route to a Node goes to the Node's
// InternalIP of the route's IP family; the Node's Neutron port gets the
// route's destination as an allowed address pair, so that port security
// lets the pods' traffic through. Routes are changed with Neutron's
// atomic add_extraroutes and remove_extraroutes when it has them; without
// them a change rewrites the router's routes, guarded by the router's
// revision number so that a concurrent writer's route is never lost.
type routes struct {
	conn      *session
	instances *instances
	routerID  string

	attempts   int
	retryDelay time.Duration

	// writing serialises this provider's rewrites of the router's routes,
	// which would otherwise mostly collide; a channel, so that a caller
	// can stop waiting for it.
	writing chan struct{}
	// listing is held while the extensions are read, and guards ext; a
	// channel, for the same reason.
	listing chan struct{}
	// ext are the aliases of Neutron's extensions, nil until read once.
	ext map[string]bool
}

var _ cloudprovider.Routes = (*routes)(nil)

func newRoutes(conn *session, inst *instances, routerID string) *routes {
	return &routes{
		conn: conn, instances: inst, routerID: routerID,
		attempts: defaultRouteAttempts, retryDelay: defaultRouteRetryDelay,
		writing: make(chan struct{}, 1), listing: make(chan struct{}, 1),
	}
}

// clients returns the session's clients and Neutron's.
func (r *routes) clients(ctx context.Context) (*clients, *gophercloud.ServiceClient, error) {
	c, err := r.conn.clients(ctx)
	if err != nil {
		return nil, nil, err
	}
	nc, err := c.networkClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c, nc, nil
}

func (r *routes) withRouter(ctx context.Context) (context.Context, klog.Logger) {
	logger := klog.FromContext(ctx).WithValues("router", r.routerID)
	return klog.NewContext(ctx, logger), logger
}

// extensions returns the aliases of Neutron's extensions, read on first
// use. A failure is not kept: the next call reads them again.
func (r *routes) extensions(ctx context.Context, nc *gophercloud.ServiceClient) (map[string]bool, error) {
	select {
	case r.listing <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("listing Neutron's extensions: %w", ctx.Err())
	}
	defer func() { <-r.listing }()
	if r.ext != nil {
		return r.ext, nil
	}
	pages, err := extensions.List(nc).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing Neutron's extensions: %w", err)
	}
	list, err := extensions.ExtractExtensions(pages)
	if err != nil {
		return nil, fmt.Errorf("listing Neutron's extensions: %w", err)
	}
	ext := make(map[string]bool, len(list))
	for _, e := range list {
		ext[e.Alias] = true
	}
	klog.FromContext(ctx).V(4).Info("Read Neutron's extensions", "atomicRoutes", ext[extensionAtomicRoutes], "revisionIfMatch", ext[extensionRevisionIfMatch])
	r.ext = ext
	return ext, nil
}

// router reads the router.
func (r *routes) router(ctx context.Context, nc *gophercloud.ServiceClient) (*routers.Router, error) {
	router, err := routers.Get(ctx, nc, r.routerID).Extract()
	if isNotFound(err) {
		return nil, fmt.Errorf("router %s ([Route] router-id) does not exist", r.routerID)
	}
	if err != nil {
		return nil, routeRequestError("reading router "+r.routerID, err)
	}
	return router, nil
}

// routeName names a route by its destination and next hop, which is all
// Neutron keeps of it. DeleteRoute reads the next hop back from it.
func routeName(destination, nextHop string) string { return destination + routeVia + nextHop }

// ListRoutes returns the router's routes, each with the Node (the server
// named so) whose fixed address is its next hop. A route whose next hop is
// no server's address is a blackhole.
func (r *routes) ListRoutes(ctx context.Context, _ string) ([]*cloudprovider.Route, error) {
	out, err := r.list(ctx)
	return out, r.conn.redact(err)
}

func (r *routes) list(ctx context.Context) ([]*cloudprovider.Route, error) {
	c, nc, err := r.clients(ctx)
	if err != nil {
		return nil, err
	}
	router, err := r.router(ctx, nc)
	if err != nil {
		return nil, err
	}
	out := make([]*cloudprovider.Route, 0, len(router.Routes))
	if len(router.Routes) == 0 {
		return out, nil
	}
	byAddress, err := r.serversByAddress(ctx, c)
	if err != nil {
		return nil, err
	}
	for _, rt := range router.Routes {
		route := &cloudprovider.Route{Name: routeName(rt.DestinationCIDR, rt.NextHop), DestinationCIDR: rt.DestinationCIDR}
		s := byAddress[canonicalAddr(rt.NextHop)]
		if s == nil {
			route.Blackhole = true
		} else {
			// Node names are lower case; the kubelet lowercases the
			// host name it registers.
			route.TargetNode = types.NodeName(strings.ToLower(s.Name))
			route.TargetNodeAddresses = nodeAddresses(serverAddresses{
				ByNetwork: s.Addresses, AccessIPv4: s.AccessIPv4, AccessIPv6: s.AccessIPv6,
			}, r.instances.networking)
		}
		out = append(out, route)
	}
	slices.SortFunc(out, func(a, b *cloudprovider.Route) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// serversByAddress maps the fixed addresses of the project's servers to
// the servers, in one listing. Servers on their way out do not count.
func (r *routes) serversByAddress(ctx context.Context, c *clients) (map[string]*server, error) {
	pages, err := servers.List(c.compute, servers.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing servers: %w", err)
	}
	var list []server
	if err := servers.ExtractServersInto(pages, &list); err != nil {
		return nil, fmt.Errorf("reading servers: %w", err)
	}
	out := map[string]*server{}
	for i := range list {
		s := &list[i]
		if s.gone() {
			continue
		}
		for _, addrs := range s.Addresses {
			for _, a := range addrs {
				if a.Type == "floating" {
					continue
				}
				if _, taken := out[canonicalAddr(a.Addr)]; !taken {
					out[canonicalAddr(a.Addr)] = s
				}
			}
		}
	}
	return out, nil
}

// canonicalAddr is an address in one spelling, so that IPv6 addresses
// written differently compare equal.
func canonicalAddr(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return s
	}
	return a.Unmap().String()
}

// sameRoute reports whether two routes have the same destination and next
// hop, however they are spelt.
func sameRoute(a, b routers.Route) bool {
	return samePrefix(a.DestinationCIDR, b.DestinationCIDR) && canonicalAddr(a.NextHop) == canonicalAddr(b.NextHop)
}

// samePrefix reports whether two CIDRs (or addresses) are the same.
func samePrefix(a, b string) bool {
	pa, errA := parsePrefix(a)
	pb, errB := parsePrefix(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return pa == pb
}

// parsePrefix reads a CIDR, masked, or an address as a one-address CIDR.
func parsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// destination reads a route's destination CIDR.
func destination(route *cloudprovider.Route) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(route.DestinationCIDR)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("route destination %q is not a CIDR", route.DestinationCIDR)
	}
	return p.Masked(), nil
}

// internalAddress is the first InternalIP of addrs of the family of dest.
func internalAddress(addrs []v1.NodeAddress, dest netip.Prefix) string {
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a.Address)
		if err == nil && a.Type == v1.NodeInternalIP && ip.Unmap().Is4() == dest.Addr().Is4() {
			return ip.Unmap().String()
		}
	}
	return ""
}

// nextHop is the address a route to a Node goes to: the Node's InternalIP
// of the route's family, from the route, else from the Node's server.
func (r *routes) nextHop(ctx context.Context, c *clients, route *cloudprovider.Route, dest netip.Prefix) (string, error) {
	if hop := internalAddress(route.TargetNodeAddresses, dest); hop != "" {
		return hop, nil
	}
	s, err := r.instances.findByName(ctx, c, string(route.TargetNode))
	if err != nil {
		return "", err
	}
	addrs := nodeAddresses(serverAddresses{ByNetwork: s.Addresses, AccessIPv4: s.AccessIPv4, AccessIPv6: s.AccessIPv6}, r.instances.networking)
	if hop := internalAddress(addrs, dest); hop != "" {
		return hop, nil
	}
	family := "IPv4"
	if !dest.Addr().Is4() {
		family = "IPv6"
	}
	return "", fmt.Errorf("node %s has no %s InternalIP for the route to %s", route.TargetNode, family, dest)
}

// CreateRoute routes the route's destination to its Node: the Node's
// port first gets the destination as an allowed address pair, then the
// router gets the route. A route the router has is left as it is.
func (r *routes) CreateRoute(ctx context.Context, _ string, _ string, route *cloudprovider.Route) error {
	return r.conn.redact(r.create(ctx, route))
}

func (r *routes) create(ctx context.Context, route *cloudprovider.Route) error {
	dest, err := destination(route)
	if err != nil {
		return err
	}
	ctx, logger := r.withRouter(ctx)
	c, nc, err := r.clients(ctx)
	if err != nil {
		return err
	}
	hop, err := r.nextHop(ctx, c, route, dest)
	if err != nil {
		return err
	}
	ext, err := r.extensions(ctx, nc)
	if err != nil {
		return err
	}
	want := routers.Route{DestinationCIDR: dest.String(), NextHop: hop}
	// The pair goes first: a route without it would be listed, and never
	// made again, while port security drops its traffic.
	if err := r.ensurePairs(ctx, nc, ext, hop, dest.String(), true); err != nil {
		return err
	}
	if ext[extensionAtomicRoutes] {
		err = extraroutes.Add(ctx, nc, r.routerID, extraroutes.Opts{Routes: &[]routers.Route{want}}).Err
		if err != nil {
			return routeRequestError("adding route "+routeName(want.DestinationCIDR, hop)+" to router "+r.routerID, err)
		}
	} else {
		err = r.rewriteRoutes(ctx, nc, ext, func(have []routers.Route) ([]routers.Route, bool) {
			if slices.ContainsFunc(have, func(rt routers.Route) bool { return sameRoute(rt, want) }) {
				return nil, false
			}
			return append(slices.Clone(have), want), true
		})
		if err != nil {
			return err
		}
	}
	logger.V(2).Info("Created route", "destination", want.DestinationCIDR, "nextHop", hop, "node", route.TargetNode)
	return nil
}

// DeleteRoute takes the route off the router, and its destination off the
// allowed address pairs of the next hop's port (which may be gone). The
// next hop is read from the route's name, else it is the Node's
// InternalIP; when the Node is gone too, every route to the destination
// goes. Of a route the router does not have, only the pair is removed.
func (r *routes) DeleteRoute(ctx context.Context, _ string, route *cloudprovider.Route) error {
	return r.conn.redact(r.remove(ctx, route))
}

func (r *routes) remove(ctx context.Context, route *cloudprovider.Route) error {
	dest, err := destination(route)
	if err != nil {
		return err
	}
	ctx, logger := r.withRouter(ctx)
	c, nc, err := r.clients(ctx)
	if err != nil {
		return err
	}
	hop, err := r.deletedNextHop(ctx, c, route, dest)
	if err != nil {
		return err
	}
	router, err := r.router(ctx, nc)
	if err != nil {
		return err
	}
	matches := func(rt routers.Route) bool {
		return samePrefix(rt.DestinationCIDR, dest.String()) && (hop == "" || canonicalAddr(rt.NextHop) == hop)
	}
	var gone []routers.Route
	for _, rt := range router.Routes {
		if matches(rt) {
			gone = append(gone, rt)
		}
	}
	if len(gone) == 0 && hop == "" {
		return nil
	}
	ext, err := r.extensions(ctx, nc)
	if err != nil {
		return err
	}
	if len(gone) == 0 {
		// The route went another way (an operator, or a removal whose
		// pair change failed after it): its pair must not stay behind.
		return r.ensurePairs(ctx, nc, ext, hop, dest.String(), false)
	}
	// The pairs go first: should the route's removal fail, the route is
	// still listed, and its deletion tried again.
	for _, rt := range gone {
		if err := r.ensurePairs(ctx, nc, ext, canonicalAddr(rt.NextHop), dest.String(), false); err != nil {
			return err
		}
	}
	if ext[extensionAtomicRoutes] {
		err = extraroutes.Remove(ctx, nc, r.routerID, extraroutes.Opts{Routes: &gone}).Err
		if err != nil {
			return routeRequestError("removing the routes to "+dest.String()+" from router "+r.routerID, err)
		}
	} else {
		err = r.rewriteRoutes(ctx, nc, ext, func(have []routers.Route) ([]routers.Route, bool) {
			next := slices.DeleteFunc(slices.Clone(have), func(rt routers.Route) bool {
				return slices.ContainsFunc(gone, func(g routers.Route) bool { return sameRoute(g, rt) })
			})
			return next, len(next) != len(have)
		})
		if err != nil {
			return err
		}
	}
	for _, rt := range gone {
		logger.V(2).Info("Deleted route", "destination", rt.DestinationCIDR, "nextHop", rt.NextHop, "node", route.TargetNode)
	}
	return nil
}

// deletedNextHop is the next hop of a route to delete; empty when it
// cannot be known (the route's Node and its server are gone).
func (r *routes) deletedNextHop(ctx context.Context, c *clients, route *cloudprovider.Route, dest netip.Prefix) (string, error) {
	if d, hop, ok := strings.Cut(route.Name, routeVia); ok && samePrefix(d, dest.String()) {
		if a, err := netip.ParseAddr(hop); err == nil {
			return a.Unmap().String(), nil
		}
	}
	if route.TargetNode == "" && len(route.TargetNodeAddresses) == 0 {
		return "", nil
	}
	hop, err := r.nextHop(ctx, c, route, dest)
	if errors.Is(err, cloudprovider.InstanceNotFound) {
		return "", nil
	}
	return hop, err
}

// rewriteRoutes changes the router's routes by a read, a change and a
// write of them all. With revision-if-match the write holds only if the
// router is as it was read; when another writer came first, the router
// is read again and the change made anew, up to r.attempts times.
// change returns false when there is nothing to change.
func (r *routes) rewriteRoutes(ctx context.Context, nc *gophercloud.ServiceClient, ext map[string]bool,
	change func([]routers.Route) ([]routers.Route, bool)) error {
	select {
	case r.writing <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("waiting to change router %s: %w", r.routerID, ctx.Err())
	}
	defer func() { <-r.writing }()
	logger := klog.FromContext(ctx)
	for attempt := 1; ; attempt++ {
		router, err := r.router(ctx, nc)
		if err != nil {
			return err
		}
		next, changed := change(router.Routes)
		if !changed {
			return nil
		}
		opts := routers.UpdateOpts{Routes: &next}
		if ext[extensionRevisionIfMatch] {
			opts.RevisionNumber = &router.RevisionNumber
		}
		err = routers.Update(ctx, nc, r.routerID, opts).Err
		if err == nil {
			return nil
		}
		if !gophercloud.ResponseCodeIs(err, http.StatusPreconditionFailed) {
			return routeRequestError("changing the routes of router "+r.routerID, err)
		}
		if attempt >= r.attempts {
			return api.NewRetryError(fmt.Sprintf("changing the routes of router %s: another writer changed it first %d times", r.routerID, attempt), conflictRetryAfter)
		}
		logger.V(4).Info("The router changed since it was read; reading it again", "revision", router.RevisionNumber, "attempt", attempt)
		if err := r.backoff(ctx, attempt); err != nil {
			return fmt.Errorf("changing the routes of router %s: %w", r.routerID, err)
		}
	}
}

// backoff waits a random time up to attempt times retryDelay, or until
// ctx is done.
func (r *routes) backoff(ctx context.Context, attempt int) error {
	limit := time.Duration(attempt) * r.retryDelay
	if limit <= 0 {
		return ctx.Err()
	}
	return sleep(ctx, rand.N(limit)) //nolint:gosec // jitter, not a secret
}

// ensurePairs adds cidr to (add) or removes it from the allowed address
// pairs of the ports that hold the address hop: the server's, when other
// ports hold it too. Without a port, adding is an error, removing is
// done.
func (r *routes) ensurePairs(ctx context.Context, nc *gophercloud.ServiceClient, ext map[string]bool, hop, cidr string, add bool) error {
	pages, err := ports.List(nc, ports.ListOpts{FixedIPs: []ports.FixedIPOpts{{IPAddress: hop}}}).AllPages(ctx)
	if err != nil {
		return routeRequestError("finding the port of "+hop, err)
	}
	list, err := ports.ExtractPorts(pages)
	if err != nil {
		return fmt.Errorf("finding the port of %s: %w", hop, err)
	}
	list = slices.DeleteFunc(list, func(p ports.Port) bool {
		return !slices.ContainsFunc(p.FixedIPs, func(ip ports.IP) bool { return canonicalAddr(ip.IPAddress) == hop })
	})
	if len(list) > 1 {
		compute := slices.DeleteFunc(slices.Clone(list), func(p ports.Port) bool { return !strings.HasPrefix(p.DeviceOwner, deviceOwnerCompute) })
		if len(compute) > 0 {
			list = compute
		}
	}
	if len(list) == 0 {
		if add {
			return fmt.Errorf("no Neutron port holds the next hop %s of the route to %s", hop, cidr)
		}
		return nil
	}
	for i := range list {
		if err := r.ensurePair(ctx, nc, ext, &list[i], cidr, add); err != nil {
			return err
		}
	}
	return nil
}

// hasPair reports whether a pair is cidr for the port's own MAC address.
func hasPair(p *ports.Port, pair ports.AddressPair, cidr string) bool {
	return samePrefix(pair.IPAddress, cidr) && (pair.MACAddress == "" || strings.EqualFold(pair.MACAddress, p.MACAddress))
}

// ensurePair adds cidr to or removes it from one port's allowed address
// pairs, with the same read-modify-write as rewriteRoutes.
func (r *routes) ensurePair(ctx context.Context, nc *gophercloud.ServiceClient, ext map[string]bool, p *ports.Port, cidr string, add bool) error {
	logger := klog.FromContext(ctx)
	id := p.ID
	for attempt := 1; ; attempt++ {
		present := slices.ContainsFunc(p.AllowedAddressPairs, func(pair ports.AddressPair) bool { return hasPair(p, pair, cidr) })
		if present == add {
			return nil
		}
		var pairs []ports.AddressPair
		if add {
			pairs = append(slices.Clone(p.AllowedAddressPairs), ports.AddressPair{IPAddress: cidr})
		} else {
			pairs = slices.DeleteFunc(slices.Clone(p.AllowedAddressPairs), func(pair ports.AddressPair) bool { return hasPair(p, pair, cidr) })
		}
		opts := ports.UpdateOpts{AllowedAddressPairs: &pairs}
		if ext[extensionRevisionIfMatch] {
			opts.RevisionNumber = &p.RevisionNumber
		}
		err := ports.Update(ctx, nc, id, opts).Err
		switch {
		case err == nil:
			logger.V(2).Info("Changed the allowed address pairs of a port", "port", id, "cidr", cidr, "added", add)
			return nil
		case isNotFound(err) && !add:
			return nil
		case !gophercloud.ResponseCodeIs(err, http.StatusPreconditionFailed):
			return routeRequestError("changing the allowed address pairs of port "+id, err)
		case attempt >= r.attempts:
			return api.NewRetryError(fmt.Sprintf("changing the allowed address pairs of port %s: another writer changed it first %d times", id, attempt), conflictRetryAfter)
		}
		logger.V(4).Info("The port changed since it was read; reading it again", "port", id, "attempt", attempt)
		if err := r.backoff(ctx, attempt); err != nil {
			return fmt.Errorf("changing the allowed address pairs of port %s: %w", id, err)
		}
		p, err = ports.Get(ctx, nc, id).Extract()
		if isNotFound(err) && !add {
			return nil
		}
		if err != nil {
			return routeRequestError("reading port "+id, err)
		}
	}
}

// routeRequestError turns a failed Neutron request of the routes into
// what the caller should do (requestError), a 409 into a retry after
// conflictRetryAfter.
func routeRequestError(what string, err error) error {
	return requestError(what, err, conflictRetryAfter)
}
