package emulator

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// extensionAtomicRoutes is the Neutron extension of the routers'
// add_extraroutes and remove_extraroutes actions.
const extensionAtomicRoutes = "extraroute-atomic"

// NetworkExtensionsWithout is the default set of Neutron extensions less
// the named ones, for Options.NetworkExtensions: with
// NetworkExtensionsWithout("extraroute-atomic") a router's routes change
// only by a PUT of the router, as on a Neutron older than Ussuri.
func NetworkExtensionsWithout(aliases ...string) []string {
	return slices.DeleteFunc(slices.Clone(defaultNetworkExtensions), func(a string) bool { return slices.Contains(aliases, a) })
}

// Route is a static route of a router (the extraroute extension):
// traffic to Destination (a CIDR) goes to NextHop (an address).
type Route struct {
	Destination string
	NextHop     string
}

// Router is a Neutron router.
type Router struct {
	// ID is generated when empty.
	ID   string
	Name string
	// ProjectID defaults to the default project.
	ProjectID string
	// InterfaceSubnets are the subnets the router has an interface on.
	// When there are any, a route's next hop must be an address of one of
	// them, as Neutron requires; when there are none, any next hop goes.
	InterfaceSubnets []string
	// Routes are the router's static routes.
	Routes []Route
	// RevisionNumber counts the router's changes; read only.
	RevisionNumber int
}

func (r Router) clone() Router {
	r.InterfaceSubnets = slices.Clone(r.InterfaceSubnets)
	r.Routes = slices.Clone(r.Routes)
	return r
}

// AddRouter adds a router. Its routes are checked as a PUT checks them.
func (e *Emulator) AddRouter(r Router) (Router, error) {
	e.lockState()
	defer e.mu.Unlock()
	r = r.clone()
	if r.ID == "" {
		r.ID = newUUID()
	}
	if e.neutron.routers[r.ID] != nil {
		return Router{}, fmt.Errorf("router %s exists", r.ID)
	}
	if r.ProjectID == "" {
		r.ProjectID = e.keystone.defaultProject
	}
	for _, id := range r.InterfaceSubnets {
		if e.neutron.subnets[id] == nil {
			return Router{}, fmt.Errorf("router %s: no subnet %s", r.Name, id)
		}
	}
	routes, err := e.checkRoutesLocked(&r, r.Routes)
	if err != nil {
		return Router{}, fmt.Errorf("router %s: %w", r.Name, err)
	}
	r.Routes = routes
	r.RevisionNumber = 1
	e.neutron.routers[r.ID] = &r
	e.neutron.created[r.ID] = e.opts.Now()
	return r.clone(), nil
}

// Router returns a router by ID.
func (e *Emulator) Router(id string) (Router, bool) {
	e.lockState()
	defer e.mu.Unlock()
	r := e.neutron.routers[id]
	if r == nil {
		return Router{}, false
	}
	return r.clone(), true
}

// Routers returns every router, by ID.
func (e *Emulator) Routers() []Router {
	e.lockState()
	defer e.mu.Unlock()
	out := make([]Router, 0, len(e.neutron.routers))
	for _, r := range e.neutron.routers {
		out = append(out, r.clone())
	}
	slices.SortFunc(out, func(a, b Router) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// UpdateRouter changes a router as another client of Neutron would; its
// revision goes up.
func (e *Emulator) UpdateRouter(id string, change func(*Router)) error {
	e.lockState()
	defer e.mu.Unlock()
	r := e.neutron.routers[id]
	if r == nil {
		return fmt.Errorf("no router %s", id)
	}
	change(r)
	r.RevisionNumber++
	return nil
}

// checkRoutesLocked validates routes as Neutron does: a destination is a
// CIDR, a next hop an address of the same IP version, on a subnet the
// router has an interface on when it has any. It returns the routes
// normalised (the destination masked), without duplicates.
func (e *Emulator) checkRoutesLocked(r *Router, routes []Route) ([]Route, error) {
	return e.checkRoutesConnectedLocked(r, routes, true)
}

// checkRoutesConnectedLocked is checkRoutesLocked, with the next hops'
// connection to the router checked only when connected is set: a route
// is taken off a router even when its next hop is no longer on it.
func (e *Emulator) checkRoutesConnectedLocked(r *Router, routes []Route, connected bool) ([]Route, error) {
	out := make([]Route, 0, len(routes))
	for _, rt := range routes {
		dest, err := netip.ParsePrefix(rt.Destination)
		if err != nil {
			return nil, fmt.Errorf("invalid format for routes: '%s' is not a valid CIDR", rt.Destination)
		}
		hop, err := netip.ParseAddr(rt.NextHop)
		if err != nil {
			return nil, fmt.Errorf("invalid format for routes: '%s' is not a valid IP address", rt.NextHop)
		}
		if dest.Addr().Is4() != hop.Is4() {
			return nil, fmt.Errorf("invalid format for routes: destination %s and nexthop %s are of different IP versions", rt.Destination, rt.NextHop)
		}
		if connected && len(r.InterfaceSubnets) > 0 && !slices.ContainsFunc(r.InterfaceSubnets, func(id string) bool {
			s := e.neutron.subnets[id]
			return s != nil && netip.MustParsePrefix(s.CIDR).Contains(hop)
		}) {
			return nil, fmt.Errorf("invalid format for routes: the nexthop %s is not connected with router %s", rt.NextHop, r.ID)
		}
		n := Route{Destination: dest.Masked().String(), NextHop: hop.String()}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// routerHandlers are Neutron's router requests.
func (e *Emulator) routerHandlers() []neutronHandler {
	return []neutronHandler{
		{http.MethodGet, "v2.0/routers", e.listRouters},
		{http.MethodGet, "v2.0/routers/{id}", e.getRouter},
		{http.MethodPut, "v2.0/routers/{id}", e.updateRouter},
		{http.MethodPut, "v2.0/routers/{id}/add_extraroutes", e.addExtraRoutes},
		{http.MethodPut, "v2.0/routers/{id}/remove_extraroutes", e.removeExtraRoutes},
	}
}

func (e *Emulator) routerView(r *Router) map[string]any {
	created := neutronTime(e.neutron.created[r.ID])
	routes := make([]any, 0, len(r.Routes))
	for _, rt := range r.Routes {
		routes = append(routes, map[string]any{"destination": rt.Destination, "nexthop": rt.NextHop})
	}
	return map[string]any{
		"id": r.ID, "name": r.Name, "description": "", "status": "ACTIVE", "admin_state_up": true,
		"external_gateway_info": nil, "distributed": false, "ha": false, "routes": routes,
		"project_id": r.ProjectID, "tenant_id": r.ProjectID, "availability_zone_hints": []string{},
		"availability_zones": []string{"nova"}, "flavor_id": nil, "tags": []string{},
		"revision_number": r.RevisionNumber, "created_at": created, "updated_at": created,
	}
}

// listRouters is GET /v2.0/routers.
func (e *Emulator) listRouters(c *call) {
	e.lockState()
	var views []map[string]any
	for _, r := range e.neutron.routers {
		if r.ProjectID == c.token.projectID {
			views = append(views, e.routerView(r))
		}
	}
	e.mu.Unlock()
	sortViews(views)
	if list, ok := c.filterViews(views, nil); ok {
		c.json(http.StatusOK, map[string]any{"routers": list})
	}
}

func (e *Emulator) routerOf(c *call) *Router {
	r := e.neutron.routers[c.r.PathValue("id")]
	if r == nil || r.ProjectID != c.token.projectID {
		return nil
	}
	return r
}

func (c *call) routerNotFound() {
	c.fail(http.StatusNotFound, "Router "+c.r.PathValue("id")+" could not be found")
}

// getRouter is GET /v2.0/routers/{id}.
func (e *Emulator) getRouter(c *call) {
	e.lockState()
	var view map[string]any
	if r := e.routerOf(c); r != nil {
		view = e.routerView(r)
	}
	e.mu.Unlock()
	if view == nil {
		c.routerNotFound()
		return
	}
	c.json(http.StatusOK, map[string]any{"router": view})
}

type routeBody struct {
	Destination string `json:"destination"`
	NextHop     string `json:"nexthop"`
}

func routesOf(body []routeBody) []Route {
	out := make([]Route, 0, len(body))
	for _, b := range body {
		out = append(out, Route(b))
	}
	return out
}

// updateRouter is PUT /v2.0/routers/{id}: the name and the routes (which
// replace the router's), with an If-Match revision precondition. The
// revision goes up when something changed.
func (e *Emulator) updateRouter(c *call) {
	var body struct {
		Router struct {
			Name         *string        `json:"name"`
			Description  *string        `json:"description"`
			AdminStateUp *bool          `json:"admin_state_up"`
			Routes       *[]routeBody   `json:"routes"`
			Gateway      map[string]any `json:"external_gateway_info"`
		} `json:"router"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.Router
	if b.Gateway != nil {
		c.fail(http.StatusBadRequest, "The emulator does not model external gateways")
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	r := e.routerOf(c)
	if r == nil {
		c.routerNotFound()
		return
	}
	if !c.ifMatch(r.RevisionNumber) {
		return
	}
	changed := false
	if b.Routes != nil {
		routes, err := e.checkRoutesLocked(r, routesOf(*b.Routes))
		if err != nil {
			c.fail(http.StatusBadRequest, err.Error())
			return
		}
		changed = !slices.Equal(routes, r.Routes)
		r.Routes = routes
	}
	if b.Name != nil && *b.Name != r.Name {
		r.Name, changed = *b.Name, true
	}
	if changed {
		r.RevisionNumber++
	}
	c.json(http.StatusOK, map[string]any{"router": e.routerView(r)})
}

// addExtraRoutes is PUT /v2.0/routers/{id}/add_extraroutes: the routes
// are added to the router's, those it has already are left as they are.
func (e *Emulator) addExtraRoutes(c *call) {
	e.changeExtraRoutes(c, true, func(have []Route, routes []Route) []Route {
		for _, rt := range routes {
			if !slices.Contains(have, rt) {
				have = append(have, rt)
			}
		}
		return have
	})
}

// removeExtraRoutes is PUT /v2.0/routers/{id}/remove_extraroutes: the
// routes are taken off the router; those it does not have are ignored.
func (e *Emulator) removeExtraRoutes(c *call) {
	e.changeExtraRoutes(c, false, func(have []Route, routes []Route) []Route {
		return slices.DeleteFunc(have, func(rt Route) bool { return slices.Contains(routes, rt) })
	})
}

// changeExtraRoutes serves the atomic route actions, which exist only
// with the extraroute-atomic extension. The request names routes only;
// the answer is the router.
func (e *Emulator) changeExtraRoutes(c *call, adding bool, apply func(have, routes []Route) []Route) {
	if !slices.Contains(e.opts.NetworkExtensions, extensionAtomicRoutes) {
		c.fail(http.StatusNotFound, "The resource could not be found.")
		return
	}
	var body struct {
		Router struct {
			Routes *[]routeBody `json:"routes"`
		} `json:"router"`
	}
	if !c.decode(&body) {
		return
	}
	if body.Router.Routes == nil {
		c.fail(http.StatusBadRequest, "Invalid input: the router's routes are required")
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	r := e.routerOf(c)
	if r == nil {
		c.routerNotFound()
		return
	}
	routes, err := e.checkRoutesConnectedLocked(r, routesOf(*body.Router.Routes), adding)
	if err != nil {
		c.fail(http.StatusBadRequest, err.Error())
		return
	}
	next := apply(slices.Clone(r.Routes), routes)
	if !slices.Equal(next, r.Routes) {
		r.Routes = next
		r.RevisionNumber++
	}
	c.json(http.StatusOK, map[string]any{"router": e.routerView(r)})
}
