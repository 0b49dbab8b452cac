package emulator

import (
	"net/http"
	"strings"
)

// defaultNetworkExtensions are the Neutron extensions listed by default, a
// part of what an ML2/OVS deployment has.
var defaultNetworkExtensions = []string{
	"agent", "allowed-address-pairs", "binding", "external-net", "ext-gw-mode",
	"extraroute", "extraroute-atomic", "port-security", "quotas", "router",
	"security-group", "standard-attr-description", "standard-attr-tag",
}

func (e *Emulator) routeNeutron(mux *http.ServeMux) {
	for _, iface := range Interfaces {
		e.routeNotFound(mux, Network, iface)
		e.route(mux, http.MethodGet, "{$}", Network, iface, false, func(c *call) {
			c.json(http.StatusOK, map[string]any{"versions": []any{map[string]any{
				"id":     "v2.0",
				"status": "CURRENT",
				"links":  []any{map[string]any{"rel": "self", "href": e.endpoint(Network, c.iface) + "/v2.0/"}},
			}}})
		})
		e.route(mux, http.MethodGet, "v2.0/extensions", Network, iface, true, e.listNetworkExtensions)
		e.route(mux, http.MethodGet, "v2.0/extensions/{alias}", Network, iface, true, e.getNetworkExtension)
	}
}

func (e *Emulator) networkExtensionView(alias string) map[string]any {
	return map[string]any{
		"alias":       alias,
		"name":        alias,
		"description": "The " + alias + " extension.",
		"updated":     "2013-01-01T10:00:00-00:00",
		"links":       []any{},
	}
}

// listNetworkExtensions is GET /v2.0/extensions.
func (e *Emulator) listNetworkExtensions(c *call) {
	list := make([]any, 0, len(e.opts.NetworkExtensions))
	for _, alias := range e.opts.NetworkExtensions {
		list = append(list, e.networkExtensionView(alias))
	}
	c.json(http.StatusOK, map[string]any{"extensions": list})
}

// getNetworkExtension is GET /v2.0/extensions/{alias}.
func (e *Emulator) getNetworkExtension(c *call) {
	alias := c.r.PathValue("alias")
	for _, a := range e.opts.NetworkExtensions {
		if a == alias {
			c.json(http.StatusOK, map[string]any{"extension": e.networkExtensionView(alias)})
			return
		}
	}
	c.fail(http.StatusNotFound, "Extension with alias "+alias+" does not exist")
}

// neutronErrorType is the type of Neutron's error body for a status.
func neutronErrorType(status int) string {
	return "HTTP" + strings.ReplaceAll(http.StatusText(status), " ", "")
}
