package aws

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
)

// Filters and error codes of the route calls.
const (
	filterRouteTableTag     = "tag-key"
	codeRouteNotFound       = "InvalidRoute.NotFound"
	codeRouteTableNotFound  = "InvalidRouteTableID.NotFound"
	codeRouteTableMalformed = "InvalidRouteTableID.Malformed"
)

// maxIDsPerDescribe bounds the instance IDs of one DescribeInstances of
// ListRoutes, as EC2 bounds the values of a filter.
const maxIDsPerDescribe = 200

// routes implements cloudprovider.Routes on EC2 route tables: the one
// [Global] RouteTableID names, else every route table with the cluster's
// tag (kubernetes.io/cluster/<id>, or KubernetesCluster=<id>). A route
// sends a pod CIDR to a Node's instance, whose source/destination check
// is turned off so that it may receive the pods' traffic. With several
// tables, every route is kept in each of them.
//
// Only routes whose target is an instance, or a blackhole without a
// gateway as its target, are the routes' own: routes to gateways, NAT
// gateways, peerings and the local route are never listed, replaced or
// deleted.
type routes struct {
	ec2          *ec2.Client
	instances    *instances
	routeTableID string
	clusterID    string
}

var _ cloudprovider.Routes = (*routes)(nil)

func newRoutes(client *ec2.Client, inst *instances, g GlobalConfig) *routes {
	return &routes{ec2: client, instances: inst, routeTableID: g.RouteTableID, clusterID: g.clusterID()}
}

// tables returns the route tables of the cluster's routes: the configured
// one, else those with the cluster's tag. None is an error that says what
// to configure.
func (r *routes) tables(ctx context.Context) ([]ec2types.RouteTable, error) {
	in := &ec2.DescribeRouteTablesInput{}
	switch {
	case r.routeTableID != "":
		in.RouteTableIds = []string{r.routeTableID}
	case r.clusterID != "":
		// Filter values are alternatives: both tags are asked for in one
		// request, and the legacy tag's value is checked below.
		in.Filters = []ec2types.Filter{{Name: aws.String(filterRouteTableTag), Values: []string{tagClusterPrefix + r.clusterID, tagClusterLegacy}}}
	default:
		return nil, errors.New("no route table for the cluster's routes: set [Global] RouteTableID, " +
			"or a cluster ID (KubernetesClusterID) and tag the route table kubernetes.io/cluster/<id>")
	}
	var out []ec2types.RouteTable
	pages := ec2.NewDescribeRouteTablesPaginator(r.ec2, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			if code := errorCode(err); r.routeTableID != "" && (code == codeRouteTableNotFound || code == codeRouteTableMalformed) {
				return nil, fmt.Errorf("route table %s ([Global] RouteTableID) does not exist: %w", r.routeTableID, err)
			}
			return nil, fmt.Errorf("describing route tables: %w", err)
		}
		for _, t := range page.RouteTables {
			if r.routeTableID != "" || hasClusterTag(t.Tags, r.clusterID) {
				out = append(out, t)
			}
		}
	}
	if len(out) == 0 {
		if r.routeTableID != "" {
			return nil, fmt.Errorf("route table %s ([Global] RouteTableID) does not exist", r.routeTableID)
		}
		return nil, fmt.Errorf("no route table has the tag of cluster %s (%s%s, or %s=%s); tag the cluster's route table or set [Global] RouteTableID",
			r.clusterID, tagClusterPrefix, r.clusterID, tagClusterLegacy, r.clusterID)
	}
	return out, nil
}

// routeTarget is what a route in a table sends to, as far as the routes
// are concerned.
type routeTarget int

const (
	// targetForeign: a gateway, NAT gateway, peering, the local route, or
	// a network interface of no instance. Not the routes' own.
	targetForeign routeTarget = iota
	// targetInstance: an instance, whose ID the route names.
	targetInstance
	// targetBlackhole: a route in state blackhole whose target was an
	// instance or its network interface.
	targetBlackhole
)

// tableRoute is one route of a table for a destination.
type tableRoute struct {
	table      string
	target     routeTarget
	instanceID string
}

// targetOf tells what a route sends to.
func targetOf(rt ec2types.Route) routeTarget {
	gateway := aws.ToString(rt.GatewayId)
	switch {
	case gateway != "" || rt.NatGatewayId != nil || rt.TransitGatewayId != nil || rt.VpcPeeringConnectionId != nil ||
		rt.EgressOnlyInternetGatewayId != nil || rt.CarrierGatewayId != nil || rt.LocalGatewayId != nil ||
		rt.CoreNetworkArn != nil || rt.OdbNetworkArn != nil:
		return targetForeign
	case rt.State == ec2types.RouteStateBlackhole:
		// An instance's route whose instance is gone: EC2 may keep only its
		// network interface, or nothing, as its target.
		return targetBlackhole
	case aws.ToString(rt.InstanceId) != "":
		return targetInstance
	default:
		return targetForeign
	}
}

// destination is a route's destination, normalised; false for a route to
// a prefix list.
func destination(rt ec2types.Route) (netip.Prefix, bool) {
	s := aws.ToString(rt.DestinationCidrBlock)
	if s == "" {
		s = aws.ToString(rt.DestinationIpv6CidrBlock)
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	return p.Masked(), true
}

// parseDestination reads a route's DestinationCIDR.
func parseDestination(cidr string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("route destination %q is not a CIDR: %w", cidr, err)
	}
	return p.Masked(), nil
}

// routeFor returns the route of a table for dest, if any.
func routeFor(t ec2types.RouteTable, dest netip.Prefix) (ec2types.Route, bool) {
	for _, rt := range t.Routes {
		if d, ok := destination(rt); ok && d == dest {
			return rt, true
		}
	}
	return ec2types.Route{}, false
}

// byDestination gathers the routes of the tables that are the routes'
// own, by destination.
func byDestination(tables []ec2types.RouteTable) map[netip.Prefix][]tableRoute {
	out := map[netip.Prefix][]tableRoute{}
	for _, t := range tables {
		for _, rt := range t.Routes {
			dest, ok := destination(rt)
			if !ok {
				continue
			}
			target := targetOf(rt)
			if target == targetForeign {
				continue
			}
			out[dest] = append(out[dest], tableRoute{table: aws.ToString(t.RouteTableId), target: target, instanceID: aws.ToString(rt.InstanceId)})
		}
	}
	return out
}

// ListRoutes lists the routes to instances, each with its instance's Node
// name (the private DNS name), found with one DescribeInstances for all
// of them. A route is a blackhole when EC2 says so, when its instance is
// gone, or when the tables send its destination to different instances;
// the route controller deletes it and, if a Node still needs it, creates
// it again. A route to a live instance without the cluster's tag is not
// the cluster's and is left out, and so is one that some of several
// tables lack: CreateRoute completes it, as the Node's route is missing.
func (r *routes) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	tables, err := r.tables(ctx)
	if err != nil {
		return nil, err
	}
	dests := byDestination(tables)
	var ids []string
	for _, trs := range dests {
		for _, tr := range trs {
			if tr.instanceID != "" && !slices.Contains(ids, tr.instanceID) {
				ids = append(ids, tr.instanceID)
			}
		}
	}
	found, err := r.describeInstances(ctx, ids)
	if err != nil {
		return nil, err
	}
	return routesOf(klog.FromContext(ctx), clusterName, len(tables), dests, found, r.clusterID), nil
}

// describeInstances returns the instances with the IDs, by ID; a missing
// ID names no instance.
func (r *routes) describeInstances(ctx context.Context, ids []string) (map[string]ec2types.Instance, error) {
	found := make(map[string]ec2types.Instance, len(ids))
	for chunk := range slices.Chunk(ids, maxIDsPerDescribe) {
		list, err := r.instances.describeByIDs(ctx, chunk)
		if err != nil {
			return nil, fmt.Errorf("describing the instances of routes: %w", err)
		}
		for _, in := range list {
			found[aws.ToString(in.InstanceId)] = in
		}
	}
	return found, nil
}

// routesOf turns the routes of nTables tables by destination into the
// routes ListRoutes reports, sorted by destination.
func routesOf(logger klog.Logger, clusterName string, nTables int, dests map[netip.Prefix][]tableRoute,
	found map[string]ec2types.Instance, clusterID string,
) []*cloudprovider.Route {
	out := []*cloudprovider.Route{}
	for dest, trs := range dests {
		route := &cloudprovider.Route{Name: clusterName + "-" + dest.String(), DestinationCIDR: dest.String()}
		var instanceIDs []string
		for _, tr := range trs {
			if tr.target == targetBlackhole {
				route.Blackhole = true
			}
			if tr.instanceID != "" && !slices.Contains(instanceIDs, tr.instanceID) {
				instanceIDs = append(instanceIDs, tr.instanceID)
			}
		}
		if len(instanceIDs) > 1 {
			logger.V(2).Info("Route tables send a destination to different instances; reporting it as a blackhole", "destination", dest, "instances", instanceIDs)
			route.Blackhole = true
		}
		if len(instanceIDs) == 1 {
			in, ok := found[instanceIDs[0]]
			switch {
			case !ok || gone(&in):
				route.Blackhole = true
			case !route.Blackhole && !hasClusterTag(in.Tags, clusterID):
				logger.V(4).Info("Route to an instance of no cluster node; not listed", "destination", dest, "instance", instanceIDs[0])
				continue
			}
			if ok {
				route.TargetNode = types.NodeName(aws.ToString(in.PrivateDnsName))
			}
		}
		if !route.Blackhole {
			if route.TargetNode == "" {
				logger.V(4).Info("Route to an instance without a private DNS name; not listed", "destination", dest, "instance", instanceIDs)
				continue
			}
			if len(trs) < nTables {
				logger.V(4).Info("Route missing from some route tables; not listed, so that it is created there", "destination", dest, "inTables", len(trs), "tables", nTables)
				continue
			}
		}
		out = append(out, route)
	}
	slices.SortFunc(out, func(a, b *cloudprovider.Route) int { return strings.Compare(a.DestinationCIDR, b.DestinationCIDR) })
	return out
}

// CreateRoute sends the route's destination to the instance of its
// TargetNode (found by private DNS name) in every route table: it turns
// the instance's source/destination check off if it is on, creates the
// route where it is missing, replaces it where it is a blackhole or goes
// to another instance, and leaves it where it already goes to the
// instance. A route of the destination to a gateway is never replaced: it
// is an error.
func (r *routes) CreateRoute(ctx context.Context, _ string, _ string, route *cloudprovider.Route) error {
	dest, err := parseDestination(route.DestinationCIDR)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("destination", dest, "node", route.TargetNode)
	// The tables first: without one, the instance is left as it is.
	tables, err := r.tables(ctx)
	if err != nil {
		return err
	}
	in, err := r.instances.findByName(ctx, string(route.TargetNode))
	if err != nil {
		return fmt.Errorf("route %s to node %s: %w", dest, route.TargetNode, err)
	}
	id := aws.ToString(in.InstanceId)
	if aws.ToBool(in.SourceDestCheck) || in.SourceDestCheck == nil {
		logger.V(2).Info("Turning off the instance's source/destination check", "instance", id)
		_, err := r.ec2.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{
			InstanceId:      aws.String(id),
			SourceDestCheck: &ec2types.AttributeBooleanValue{Value: aws.Bool(false)},
		})
		if err != nil {
			return fmt.Errorf("turning off the source/destination check of instance %s of node %s: %w", id, route.TargetNode, err)
		}
	}
	for _, t := range tables {
		if err := r.ensureRoute(ctx, logger, t, dest, id); err != nil {
			return fmt.Errorf("route %s to node %s: %w", dest, route.TargetNode, err)
		}
	}
	return nil
}

// ensureRoute makes table t send dest to the instance.
func (r *routes) ensureRoute(ctx context.Context, logger klog.Logger, t ec2types.RouteTable, dest netip.Prefix, instanceID string) error {
	tableID := aws.ToString(t.RouteTableId)
	logger = logger.WithValues("routeTable", tableID, "instance", instanceID)
	existing, ok := routeFor(t, dest)
	if !ok {
		in := &ec2.CreateRouteInput{RouteTableId: aws.String(tableID), InstanceId: aws.String(instanceID)}
		setDestination(dest, &in.DestinationCidrBlock, &in.DestinationIpv6CidrBlock)
		logger.V(2).Info("Creating route")
		if _, err := r.ec2.CreateRoute(ctx, in); err != nil {
			return fmt.Errorf("creating it in route table %s: %w", tableID, err)
		}
		return nil
	}
	switch target := targetOf(existing); {
	case target == targetForeign:
		return fmt.Errorf("route table %s sends %s to %s, not to an instance; it is left as it is", tableID, dest, describeTarget(existing))
	case target == targetInstance && aws.ToString(existing.InstanceId) == instanceID:
		return nil
	}
	in := &ec2.ReplaceRouteInput{RouteTableId: aws.String(tableID), InstanceId: aws.String(instanceID)}
	setDestination(dest, &in.DestinationCidrBlock, &in.DestinationIpv6CidrBlock)
	logger.V(2).Info("Replacing route", "state", existing.State, "previousInstance", aws.ToString(existing.InstanceId))
	if _, err := r.ec2.ReplaceRoute(ctx, in); err != nil {
		return fmt.Errorf("replacing it in route table %s: %w", tableID, err)
	}
	return nil
}

// setDestination sets the IPv4 or the IPv6 destination of a request.
func setDestination(dest netip.Prefix, v4, v6 **string) {
	if dest.Addr().Is4() {
		*v4 = aws.String(dest.String())
	} else {
		*v6 = aws.String(dest.String())
	}
}

// describeTarget names a route's target for messages.
func describeTarget(rt ec2types.Route) string {
	for _, id := range []*string{
		rt.GatewayId, rt.NatGatewayId, rt.TransitGatewayId, rt.VpcPeeringConnectionId, rt.EgressOnlyInternetGatewayId,
		rt.CarrierGatewayId, rt.LocalGatewayId, rt.CoreNetworkArn, rt.OdbNetworkArn, rt.NetworkInterfaceId,
	} {
		if aws.ToString(id) != "" {
			return aws.ToString(id)
		}
	}
	return "no target"
}

// DeleteRoute deletes the route's destination from every route table
// that sends it to an instance or has it as a blackhole. A table without
// it is fine; a route of the destination to a gateway is left alone.
func (r *routes) DeleteRoute(ctx context.Context, _ string, route *cloudprovider.Route) error {
	dest, err := parseDestination(route.DestinationCIDR)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("destination", dest, "node", route.TargetNode)
	tables, err := r.tables(ctx)
	if err != nil {
		return err
	}
	for _, t := range tables {
		tableID := aws.ToString(t.RouteTableId)
		existing, ok := routeFor(t, dest)
		if !ok {
			continue
		}
		if targetOf(existing) == targetForeign {
			logger.V(4).Info("Leaving a route to a gateway alone", "routeTable", tableID, "target", describeTarget(existing))
			continue
		}
		in := &ec2.DeleteRouteInput{RouteTableId: aws.String(tableID)}
		setDestination(dest, &in.DestinationCidrBlock, &in.DestinationIpv6CidrBlock)
		logger.V(2).Info("Deleting route", "routeTable", tableID, "instance", aws.ToString(existing.InstanceId), "state", existing.State)
		if _, err := r.ec2.DeleteRoute(ctx, in); err != nil && errorCode(err) != codeRouteNotFound {
			return fmt.Errorf("deleting route %s from route table %s: %w", dest, tableID, err)
		}
	}
	return nil
}
