package emulator

import "net/http"

// routeOctavia serves Octavia's version document, so that clients find
// the load-balancer endpoint of the catalog. Load balancers, listeners,
// pools, members and monitors are not served yet.
func (e *Emulator) routeOctavia(mux *http.ServeMux) {
	for _, iface := range Interfaces {
		e.routeNotFound(mux, LoadBalancer, iface)
		e.route(mux, http.MethodGet, "{$}", LoadBalancer, iface, false, func(c *call) {
			self := []any{map[string]any{"rel": "self", "href": e.endpoint(LoadBalancer, c.iface) + "/v2/"}}
			c.json(http.StatusOK, map[string]any{"versions": []any{
				map[string]any{"id": "v2.0", "status": "SUPPORTED", "updated": "2016-12-11T00:00:00Z", "links": self},
				map[string]any{"id": "v2.27", "status": "CURRENT", "updated": "2023-05-05T00:00:00Z", "links": self},
			}})
		})
	}
}
