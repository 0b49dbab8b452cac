package emulator_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/extraroutes"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
)

func routeStrings(rs []routers.Route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.DestinationCIDR+">"+r.NextHop)
	}
	slices.Sort(out)
	return out
}

// TestRouterRoutes: a PUT of a router's routes replaces them and moves
// its revision on, one with a stale If-Match is refused with 412 and
// changes nothing; a bad route, or one whose next hop is on no subnet of
// the router, is refused with 400; the router is listed and read as
// Neutron shows it.
func TestRouterRoutes(t *testing.T) {
	c := newLBCloud(t, emulator.Options{})
	ctx := t.Context()
	r, err := c.AddRouter(emulator.Router{Name: "r", InterfaceSubnets: []string{c.privateSubnet.ID}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := routers.Get(ctx, c.network, r.ID).Extract()
	if err != nil || got.Name != "r" || got.RevisionNumber != 1 || len(got.Routes) != 0 {
		t.Fatalf("GET router = %+v, %v", got, err)
	}
	pages, err := routers.List(c.network, routers.ListOpts{Name: "r"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list, err := routers.ExtractRouters(pages); err != nil || len(list) != 1 || list[0].ID != r.ID {
		t.Errorf("routers named r = %+v, %v", list, err)
	}

	routes := []routers.Route{{DestinationCIDR: "10.244.1.0/24", NextHop: "10.0.0.11"}}
	got, err = routers.Update(ctx, c.network, r.ID, routers.UpdateOpts{Routes: &routes, RevisionNumber: ptr.To(1)}).Extract()
	if err != nil || got.RevisionNumber != 2 || !slices.Equal(routeStrings(got.Routes), []string{"10.244.1.0/24>10.0.0.11"}) {
		t.Fatalf("PUT routes = %+v, %v", got, err)
	}
	stale := []routers.Route{{DestinationCIDR: "10.244.2.0/24", NextHop: "10.0.0.12"}}
	err = routers.Update(ctx, c.network, r.ID, routers.UpdateOpts{Routes: &stale, RevisionNumber: ptr.To(1)}).Err
	if !gophercloud.ResponseCodeIs(err, http.StatusPreconditionFailed) {
		t.Errorf("PUT with a stale revision = %v, want 412", err)
	}
	for name, bad := range map[string][]routers.Route{
		"not a CIDR":        {{DestinationCIDR: "10.244.3.0", NextHop: "10.0.0.11"}},
		"not an address":    {{DestinationCIDR: "10.244.3.0/24", NextHop: "node-1"}},
		"other IP versions": {{DestinationCIDR: "fd00::/64", NextHop: "10.0.0.11"}},
		"not connected":     {{DestinationCIDR: "10.244.3.0/24", NextHop: "192.168.0.1"}},
	} {
		if err := routers.Update(ctx, c.network, r.ID, routers.UpdateOpts{Routes: &bad}).Err; !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
			t.Errorf("PUT of a route %s = %v, want 400", name, err)
		}
	}
	if now, _ := c.Router(r.ID); now.RevisionNumber != 2 || len(now.Routes) != 1 {
		t.Errorf("after refused writes the router is %+v, want revision 2 and one route", now)
	}
	// The same routes again change nothing.
	got, err = routers.Update(ctx, c.network, r.ID, routers.UpdateOpts{Routes: &routes}).Extract()
	if err != nil || got.RevisionNumber != 2 {
		t.Errorf("PUT of the same routes = revision %d, %v; want 2", got.RevisionNumber, err)
	}
	none := []routers.Route{}
	got, err = routers.Update(ctx, c.network, r.ID, routers.UpdateOpts{Routes: &none, RevisionNumber: ptr.To(2)}).Extract()
	if err != nil || got.RevisionNumber != 3 || len(got.Routes) != 0 {
		t.Errorf("PUT of no routes = %+v, %v", got, err)
	}
	if err := routers.Get(ctx, c.network, "no-such-router").Err; !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("GET of a router that does not exist = %v, want 404", err)
	}
}

// TestRouterExtraRoutes: with extraroute-atomic, add_extraroutes adds
// routes (those there already stay once) and remove_extraroutes takes
// them off (those not there are ignored); without it, both are 404.
func TestRouterExtraRoutes(t *testing.T) {
	c := newLBCloud(t, emulator.Options{})
	ctx := t.Context()
	r, err := c.AddRouter(emulator.Router{Name: "r", Routes: []emulator.Route{{Destination: "10.244.0.0/24", NextHop: "10.0.0.10"}}})
	if err != nil {
		t.Fatal(err)
	}
	add := []routers.Route{{DestinationCIDR: "10.244.0.0/24", NextHop: "10.0.0.10"}, {DestinationCIDR: "10.244.1.0/24", NextHop: "10.0.0.11"}}
	got, err := extraroutes.Add(ctx, c.network, r.ID, extraroutes.Opts{Routes: &add}).Extract()
	want := []string{"10.244.0.0/24>10.0.0.10", "10.244.1.0/24>10.0.0.11"}
	if err != nil || got.RevisionNumber != 2 || !slices.Equal(routeStrings(got.Routes), want) {
		t.Fatalf("add_extraroutes = %+v, %v; want %v at revision 2", got, err, want)
	}
	remove := []routers.Route{{DestinationCIDR: "10.244.0.0/24", NextHop: "10.0.0.10"}, {DestinationCIDR: "10.244.7.0/24", NextHop: "10.0.0.17"}}
	got, err = extraroutes.Remove(ctx, c.network, r.ID, extraroutes.Opts{Routes: &remove}).Extract()
	if err != nil || got.RevisionNumber != 3 || !slices.Equal(routeStrings(got.Routes), want[1:]) {
		t.Errorf("remove_extraroutes = %+v, %v; want %v at revision 3", got, err, want[1:])
	}

	off := newLBCloud(t, emulator.Options{NetworkExtensions: emulator.NetworkExtensionsWithout("extraroute-atomic")})
	r, err = off.AddRouter(emulator.Router{Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if err := extraroutes.Add(ctx, off.network, r.ID, extraroutes.Opts{Routes: &add}).Err; !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("add_extraroutes without the extension = %v, want 404", err)
	}
	if err := extraroutes.Remove(ctx, off.network, r.ID, extraroutes.Opts{Routes: &add}).Err; !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("remove_extraroutes without the extension = %v, want 404", err)
	}
}

// TestRouterFaults: the router requests meet the faults like any other.
func TestRouterFaults(t *testing.T) {
	c := newLBCloud(t, emulator.Options{})
	r, err := c.AddRouter(emulator.Router{Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	c.AddFault(emulator.Fault{Service: emulator.Network, Path: "v2.0/routers/" + r.ID, Status: http.StatusServiceUnavailable, Count: 1})
	add := []routers.Route{{DestinationCIDR: "10.244.1.0/24", NextHop: "10.0.0.11"}}
	if err := extraroutes.Add(t.Context(), c.network, r.ID, extraroutes.Opts{Routes: &add}).Err; !gophercloud.ResponseCodeIs(err, http.StatusServiceUnavailable) {
		t.Errorf("add_extraroutes with a fault = %v, want 503", err)
	}
	if got, _ := c.Router(r.ID); len(got.Routes) != 0 {
		t.Errorf("the faulted request changed the router: %+v", got)
	}
}
