package emulator

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// defaultNetworkExtensions are the Neutron extensions listed by default, a
// part of what an ML2/OVS deployment has.
var defaultNetworkExtensions = []string{
	"agent", "allowed-address-pairs", "binding", "external-net", "ext-gw-mode",
	"extraroute", "extraroute-atomic", "filter-validation", "port-security", "quotas", "revision-if-match",
	"router", "security-group", "standard-attr-description", "standard-attr-revisions", "standard-attr-tag",
}

// Device owners of the ports the emulator makes itself.
const (
	// DeviceOwnerOctavia owns the VIP port of a load balancer.
	DeviceOwnerOctavia = "Octavia"
	// deviceOwnerCompute prefixes the owner of a server's port; the
	// server's availability zone follows.
	deviceOwnerCompute = "compute:"
)

// Net is a Neutron network.
type Net struct {
	// ID is generated when empty.
	ID   string
	Name string
	// ProjectID defaults to the default project. A project sees its own
	// networks, shared ones and external ones.
	ProjectID string
	// External is router:external: floating IPs are allocated on it.
	External bool
	Shared   bool
	// Subnets are the IDs of the network's subnets; read only.
	Subnets []string
}

// Subnet is a Neutron subnet.
type Subnet struct {
	// ID is generated when empty.
	ID        string
	Name      string
	NetworkID string
	// ProjectID defaults to the network's.
	ProjectID string
	// CIDR is required; IPVersion follows it.
	CIDR      string
	IPVersion int
	// GatewayIP defaults to the first address of the CIDR.
	GatewayIP string
}

// FixedIP is an address of a port on a subnet.
type FixedIP struct {
	SubnetID  string
	IPAddress string
}

// AddressPair is an allowed address pair of a port: traffic from or to
// IPAddress (an address or a CIDR) passes the port's anti-spoofing.
type AddressPair struct {
	IPAddress  string
	MACAddress string
}

// Port is a Neutron port.
type Port struct {
	// ID is generated when empty.
	ID          string
	Name        string
	Description string
	NetworkID   string
	// ProjectID defaults to the network's.
	ProjectID   string
	DeviceID    string
	DeviceOwner string
	// MACAddress is generated when empty.
	MACAddress string
	// FixedIPs: an entry without an address gets a free one of its subnet
	// (of the network's first subnet when SubnetID is empty too); one
	// without a subnet is placed in the subnet that holds its address. No
	// entry at all gets one address of the network's first subnet.
	FixedIPs            []FixedIP
	AllowedAddressPairs []AddressPair
	Tags                []string
	// RevisionNumber counts the port's changes; read only.
	RevisionNumber int
}

func (p Port) clone() Port {
	p.FixedIPs = slices.Clone(p.FixedIPs)
	p.AllowedAddressPairs = slices.Clone(p.AllowedAddressPairs)
	p.Tags = slices.Clone(p.Tags)
	return p
}

// FloatingIP is a Neutron floating IP.
type FloatingIP struct {
	// ID is generated when empty.
	ID                string
	Description       string
	FloatingNetworkID string
	// FloatingIPAddress is allocated on the floating network when empty.
	FloatingIPAddress string
	// PortID is the associated port; empty when it is not associated.
	PortID string
	// FixedIPAddress is the port's address the floating IP maps to.
	FixedIPAddress string
	// ProjectID defaults to the default project.
	ProjectID      string
	Tags           []string
	RevisionNumber int
}

// neutronState is what Neutron knows.
type neutronState struct {
	networks map[string]*Net
	subnets  map[string]*Subnet
	ports    map[string]*Port
	fips     map[string]*FloatingIP
	routers  map[string]*Router
	created  map[string]time.Time // of every resource, by ID
	macSeq   int
}

func newNeutronState() neutronState {
	return neutronState{
		networks: map[string]*Net{}, subnets: map[string]*Subnet{},
		ports: map[string]*Port{}, fips: map[string]*FloatingIP{}, routers: map[string]*Router{},
		created: map[string]time.Time{},
	}
}

// AddNetwork adds a network.
func (e *Emulator) AddNetwork(n Net) (Net, error) {
	e.lockState()
	defer e.mu.Unlock()
	if n.ID == "" {
		n.ID = newUUID()
	}
	if e.neutron.networks[n.ID] != nil {
		return Net{}, fmt.Errorf("network %s exists", n.ID)
	}
	if n.ProjectID == "" {
		n.ProjectID = e.keystone.defaultProject
	}
	n.Subnets = nil
	e.neutron.networks[n.ID] = &n
	e.neutron.created[n.ID] = e.opts.Now()
	return n, nil
}

// AddSubnet adds a subnet to a network.
func (e *Emulator) AddSubnet(s Subnet) (Subnet, error) {
	e.lockState()
	defer e.mu.Unlock()
	n := e.neutron.networks[s.NetworkID]
	if n == nil {
		return Subnet{}, fmt.Errorf("subnet %s: no network %s", s.Name, s.NetworkID)
	}
	prefix, err := netip.ParsePrefix(s.CIDR)
	if err != nil {
		return Subnet{}, fmt.Errorf("subnet %s: %w", s.Name, err)
	}
	prefix = prefix.Masked()
	s.CIDR = prefix.String()
	s.IPVersion = 4
	if prefix.Addr().Is6() {
		s.IPVersion = 6
	}
	if s.GatewayIP == "" {
		s.GatewayIP = prefix.Addr().Next().String()
	}
	if s.ID == "" {
		s.ID = newUUID()
	}
	if e.neutron.subnets[s.ID] != nil {
		return Subnet{}, fmt.Errorf("subnet %s exists", s.ID)
	}
	if s.ProjectID == "" {
		s.ProjectID = n.ProjectID
	}
	e.neutron.subnets[s.ID] = &s
	e.neutron.created[s.ID] = e.opts.Now()
	n.Subnets = append(n.Subnets, s.ID)
	return s, nil
}

// AddPort adds a port, allocating the addresses it asks for.
func (e *Emulator) AddPort(p Port) (Port, error) {
	e.lockState()
	defer e.mu.Unlock()
	out, err := e.addPortLocked(p.clone())
	if err != nil {
		return Port{}, err
	}
	return out.clone(), nil
}

func (e *Emulator) addPortLocked(p Port) (*Port, error) {
	n := e.neutron.networks[p.NetworkID]
	if n == nil {
		return nil, fmt.Errorf("network %s not found", p.NetworkID)
	}
	if p.ID == "" {
		p.ID = newUUID()
	}
	if e.neutron.ports[p.ID] != nil {
		return nil, fmt.Errorf("port %s exists", p.ID)
	}
	if p.ProjectID == "" {
		p.ProjectID = n.ProjectID
	}
	if p.MACAddress == "" {
		e.neutron.macSeq++
		s := e.neutron.macSeq
		p.MACAddress = fmt.Sprintf("fa:16:3e:%02x:%02x:%02x", s>>16&0xff, s>>8&0xff, s&0xff)
	}
	if len(p.FixedIPs) == 0 {
		p.FixedIPs = []FixedIP{{}}
	}
	for i, f := range p.FixedIPs {
		f, err := e.placeFixedIPLocked(n, f)
		if err != nil {
			return nil, fmt.Errorf("port %s: %w", p.Name, err)
		}
		p.FixedIPs[i] = f
	}
	e.neutron.ports[p.ID] = &p
	e.neutron.created[p.ID] = e.opts.Now()
	return &p, nil
}

// placeFixedIPLocked finds the subnet of a fixed IP and its address.
func (e *Emulator) placeFixedIPLocked(n *Net, f FixedIP) (FixedIP, error) {
	var sub *Subnet
	switch {
	case f.SubnetID != "":
		sub = e.neutron.subnets[f.SubnetID]
		if sub == nil || sub.NetworkID != n.ID {
			return f, fmt.Errorf("subnet %s is not a subnet of network %s", f.SubnetID, n.ID)
		}
	case f.IPAddress != "":
		addr, err := netip.ParseAddr(f.IPAddress)
		if err != nil {
			return f, fmt.Errorf("%q is not an IP address", f.IPAddress)
		}
		for _, id := range n.Subnets {
			if netip.MustParsePrefix(e.neutron.subnets[id].CIDR).Contains(addr) {
				sub = e.neutron.subnets[id]
				break
			}
		}
		if sub == nil {
			return f, fmt.Errorf("no subnet of network %s holds %s", n.ID, f.IPAddress)
		}
	default:
		if len(n.Subnets) == 0 {
			return f, fmt.Errorf("network %s has no subnet", n.ID)
		}
		sub = e.neutron.subnets[n.Subnets[0]]
	}
	f.SubnetID = sub.ID
	if f.IPAddress == "" {
		a, err := e.allocateLocked(sub)
		if err != nil {
			return f, err
		}
		f.IPAddress = a
		return f, nil
	}
	addr, err := netip.ParseAddr(f.IPAddress)
	if err != nil || !netip.MustParsePrefix(sub.CIDR).Contains(addr) {
		return f, fmt.Errorf("%s is not an address of subnet %s", f.IPAddress, sub.ID)
	}
	if e.addressInUseLocked(addr.String()) {
		return f, fmt.Errorf("%w: %s on subnet %s", errAddressInUse, f.IPAddress, sub.ID)
	}
	return f, nil
}

var errAddressInUse = fmt.Errorf("IP address already allocated")

func (e *Emulator) addressInUseLocked(addr string) bool {
	for _, p := range e.neutron.ports {
		for _, f := range p.FixedIPs {
			if f.IPAddress == addr {
				return true
			}
		}
	}
	for _, f := range e.neutron.fips {
		if f.FloatingIPAddress == addr {
			return true
		}
	}
	return false
}

// allocateLocked returns the first free address of a subnet; the
// gateway and, for IPv4, the broadcast address are never given out.
func (e *Emulator) allocateLocked(sub *Subnet) (string, error) {
	prefix := netip.MustParsePrefix(sub.CIDR)
	last := prefix.Addr()
	if prefix.Addr().Is4() {
		b := prefix.Addr().As4()
		for i := prefix.Bits(); i < 32; i++ {
			b[i/8] |= 1 << (7 - i%8)
		}
		last = netip.AddrFrom4(b)
	}
	for a := prefix.Addr().Next(); a.IsValid() && prefix.Contains(a); a = a.Next() {
		if a.String() == sub.GatewayIP || (a.Is4() && a == last) {
			continue
		}
		if !e.addressInUseLocked(a.String()) {
			return a.String(), nil
		}
	}
	return "", fmt.Errorf("no more IP addresses available on subnet %s", sub.ID)
}

// deletePortLocked deletes a port; a floating IP associated with it is
// disassociated, as Neutron does.
func (e *Emulator) deletePortLocked(id string) {
	delete(e.neutron.ports, id)
	delete(e.neutron.created, id)
	for _, f := range e.neutron.fips {
		if f.PortID == id {
			f.PortID, f.FixedIPAddress = "", ""
			f.RevisionNumber++
		}
	}
}

// Ports returns every port.
func (e *Emulator) Ports() []Port {
	e.lockState()
	defer e.mu.Unlock()
	out := make([]Port, 0, len(e.neutron.ports))
	for _, p := range e.neutron.ports {
		out = append(out, p.clone())
	}
	slices.SortFunc(out, func(a, b Port) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Port returns a port by ID.
func (e *Emulator) Port(id string) (Port, bool) {
	e.lockState()
	defer e.mu.Unlock()
	p := e.neutron.ports[id]
	if p == nil {
		return Port{}, false
	}
	return p.clone(), true
}

// AddFloatingIP adds a floating IP, as a user does who allocates one
// before a Service asks for it.
func (e *Emulator) AddFloatingIP(f FloatingIP) (FloatingIP, error) {
	e.lockState()
	defer e.mu.Unlock()
	if f.ProjectID == "" {
		f.ProjectID = e.keystone.defaultProject
	}
	out, _, err := e.addFloatingIPLocked(f, "")
	if err != nil {
		return FloatingIP{}, err
	}
	return *out, nil
}

// addFloatingIPLocked allocates a floating IP. It returns the HTTP status
// of a failure with the error.
func (e *Emulator) addFloatingIPLocked(f FloatingIP, subnetID string) (*FloatingIP, int, error) {
	n := e.neutron.networks[f.FloatingNetworkID]
	if n == nil {
		return nil, http.StatusNotFound, fmt.Errorf("network %s could not be found", f.FloatingNetworkID)
	}
	if !n.External {
		return nil, http.StatusBadRequest, fmt.Errorf("bad floatingip request: network %s is not a valid external network", n.ID)
	}
	fixed := FixedIP{SubnetID: subnetID, IPAddress: f.FloatingIPAddress}
	placed, err := e.placeFixedIPLocked(n, fixed)
	if err != nil {
		if strings.Contains(err.Error(), errAddressInUse.Error()) {
			return nil, http.StatusConflict, err
		}
		return nil, http.StatusBadRequest, err
	}
	f.FloatingIPAddress = placed.IPAddress
	if f.PortID != "" {
		if status, err := e.associateLocked(&f, f.PortID, f.FixedIPAddress); err != nil {
			return nil, status, err
		}
	}
	if f.ID == "" {
		f.ID = newUUID()
	}
	f.Tags = slices.Clone(f.Tags)
	e.neutron.fips[f.ID] = &f
	e.neutron.created[f.ID] = e.opts.Now()
	return &f, 0, nil
}

// associateLocked points a floating IP at a port's address. A fixed
// address may have one floating IP per external network.
func (e *Emulator) associateLocked(f *FloatingIP, portID, fixedIP string) (int, error) {
	p := e.neutron.ports[portID]
	if p == nil {
		return http.StatusNotFound, fmt.Errorf("port %s could not be found", portID)
	}
	if fixedIP == "" {
		for _, ip := range p.FixedIPs {
			if a, err := netip.ParseAddr(ip.IPAddress); err == nil && a.Is4() {
				fixedIP = ip.IPAddress
				break
			}
		}
		if fixedIP == "" {
			return http.StatusBadRequest, fmt.Errorf("port %s has no IPv4 address to associate a floating IP with", portID)
		}
	} else if !slices.ContainsFunc(p.FixedIPs, func(ip FixedIP) bool { return ip.IPAddress == fixedIP }) {
		return http.StatusBadRequest, fmt.Errorf("port %s does not have fixed IP %s", portID, fixedIP)
	}
	for _, other := range e.neutron.fips {
		if other.ID != f.ID && other.PortID == portID && other.FixedIPAddress == fixedIP && other.FloatingNetworkID == f.FloatingNetworkID {
			return http.StatusConflict, fmt.Errorf("fixed IP %s of port %s already has floating IP %s on external network %s",
				fixedIP, portID, other.FloatingIPAddress, f.FloatingNetworkID)
		}
	}
	f.PortID, f.FixedIPAddress = portID, fixedIP
	return 0, nil
}

// FloatingIPs returns every floating IP.
func (e *Emulator) FloatingIPs() []FloatingIP {
	e.lockState()
	defer e.mu.Unlock()
	out := make([]FloatingIP, 0, len(e.neutron.fips))
	for _, f := range e.neutron.fips {
		c := *f
		c.Tags = slices.Clone(f.Tags)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b FloatingIP) int { return strings.Compare(a.FloatingIPAddress, b.FloatingIPAddress) })
	return out
}

// addServerPortsLocked gives a server the Neutron ports of its fixed
// addresses on networks Neutron knows by name, as Nova's servers have.
func (e *Emulator) addServerPortsLocked(s *Server) error {
	names := slices.Sorted(maps.Keys(s.Addresses))
	for _, name := range names {
		var n *Net
		for _, cand := range e.neutron.networks {
			if cand.Name == name && (cand.ProjectID == s.ProjectID || cand.Shared) {
				n = cand
				break
			}
		}
		if n == nil {
			continue
		}
		for _, a := range s.Addresses[name] {
			if a.Type != "fixed" {
				continue
			}
			p := Port{NetworkID: n.ID, ProjectID: s.ProjectID, DeviceID: s.ID,
				DeviceOwner: deviceOwnerCompute + s.AvailabilityZone, MACAddress: a.MAC,
				FixedIPs: []FixedIP{{IPAddress: a.Addr}}}
			if _, err := e.addPortLocked(p); err != nil {
				return fmt.Errorf("server %s: %w", s.Name, err)
			}
		}
	}
	return nil
}

func (e *Emulator) deleteServerPortsLocked(serverID string) {
	for id, p := range e.neutron.ports {
		if p.DeviceID == serverID && strings.HasPrefix(p.DeviceOwner, deviceOwnerCompute) {
			e.deletePortLocked(id)
		}
	}
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
		for _, r := range append([]neutronHandler{
			{http.MethodGet, "v2.0/extensions", e.listNetworkExtensions},
			{http.MethodGet, "v2.0/extensions/{alias}", e.getNetworkExtension},
			{http.MethodGet, "v2.0/networks", e.listNetworks},
			{http.MethodGet, "v2.0/networks/{id}", e.getNetwork},
			{http.MethodGet, "v2.0/subnets", e.listSubnets},
			{http.MethodGet, "v2.0/subnets/{id}", e.getSubnet},
			{http.MethodGet, "v2.0/ports", e.listPorts},
			{http.MethodPost, "v2.0/ports", e.createPort},
			{http.MethodGet, "v2.0/ports/{id}", e.getPort},
			{http.MethodPut, "v2.0/ports/{id}", e.updatePort},
			{http.MethodDelete, "v2.0/ports/{id}", e.deletePort},
			{http.MethodGet, "v2.0/floatingips", e.listFloatingIPs},
			{http.MethodPost, "v2.0/floatingips", e.createFloatingIP},
			{http.MethodGet, "v2.0/floatingips/{id}", e.getFloatingIP},
			{http.MethodPut, "v2.0/floatingips/{id}", e.updateFloatingIP},
			{http.MethodDelete, "v2.0/floatingips/{id}", e.deleteFloatingIP},
		}, e.routerHandlers()...) {
			e.route(mux, r.method, r.path, Network, iface, true, r.h)
		}
	}
}

// neutronHandler serves one of Neutron's requests.
type neutronHandler struct {
	method, path string
	h            func(*call)
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

// Views, as Neutron shows its resources. e.mu is held.

func (e *Emulator) networkView(n *Net) map[string]any {
	created := neutronTime(e.neutron.created[n.ID])
	return map[string]any{
		"id": n.ID, "name": n.Name, "status": "ACTIVE", "admin_state_up": true,
		"subnets": append([]string{}, n.Subnets...), "shared": n.Shared, "router:external": n.External,
		"project_id": n.ProjectID, "tenant_id": n.ProjectID, "mtu": 1500, "description": "",
		"tags": []string{}, "revision_number": 1, "created_at": created, "updated_at": created,
	}
}

func (e *Emulator) subnetView(s *Subnet) map[string]any {
	created := neutronTime(e.neutron.created[s.ID])
	return map[string]any{
		"id": s.ID, "name": s.Name, "network_id": s.NetworkID, "cidr": s.CIDR, "ip_version": s.IPVersion,
		"gateway_ip": s.GatewayIP, "enable_dhcp": true, "allocation_pools": []any{},
		"project_id": s.ProjectID, "tenant_id": s.ProjectID, "dns_nameservers": []string{},
		"host_routes": []any{}, "service_types": []string{}, "description": "", "tags": []string{},
		"revision_number": 1, "created_at": created, "updated_at": created,
	}
}

func (e *Emulator) portView(p *Port) map[string]any {
	created := neutronTime(e.neutron.created[p.ID])
	fixed := make([]any, 0, len(p.FixedIPs))
	for _, f := range p.FixedIPs {
		fixed = append(fixed, map[string]any{"subnet_id": f.SubnetID, "ip_address": f.IPAddress})
	}
	pairs := make([]any, 0, len(p.AllowedAddressPairs))
	for _, a := range p.AllowedAddressPairs {
		pairs = append(pairs, map[string]any{"ip_address": a.IPAddress, "mac_address": a.MACAddress})
	}
	return map[string]any{
		"id": p.ID, "name": p.Name, "description": p.Description, "network_id": p.NetworkID,
		"project_id": p.ProjectID, "tenant_id": p.ProjectID, "mac_address": p.MACAddress,
		"admin_state_up": true, "status": "ACTIVE", "device_id": p.DeviceID, "device_owner": p.DeviceOwner,
		"fixed_ips": fixed, "allowed_address_pairs": pairs, "security_groups": []string{},
		"port_security_enabled": true, "tags": cloneTags(p.Tags), "revision_number": p.RevisionNumber,
		"created_at": created, "updated_at": created,
	}
}

func (e *Emulator) floatingIPView(f *FloatingIP) map[string]any {
	created := neutronTime(e.neutron.created[f.ID])
	status := "DOWN"
	var portID, fixed any
	if f.PortID != "" {
		status, portID, fixed = "ACTIVE", f.PortID, f.FixedIPAddress
	}
	return map[string]any{
		"id": f.ID, "description": f.Description, "floating_network_id": f.FloatingNetworkID,
		"floating_ip_address": f.FloatingIPAddress, "port_id": portID, "fixed_ip_address": fixed,
		"router_id": nil, "status": status, "project_id": f.ProjectID, "tenant_id": f.ProjectID,
		"tags": cloneTags(f.Tags), "revision_number": f.RevisionNumber, "port_forwardings": []any{},
		"created_at": created, "updated_at": created,
	}
}

// networkVisible: a project sees its networks, shared and external ones.
func networkVisible(n *Net, project string) bool {
	return n.ProjectID == project || n.Shared || n.External
}

// listNetworks is GET /v2.0/networks.
func (e *Emulator) listNetworks(c *call) {
	e.lockState()
	var views []map[string]any
	for _, n := range e.neutron.networks {
		if networkVisible(n, c.token.projectID) {
			views = append(views, e.networkView(n))
		}
	}
	e.mu.Unlock()
	sortViews(views)
	if list, ok := c.filterViews(views, nil); ok {
		c.json(http.StatusOK, map[string]any{"networks": list})
	}
}

// getNetwork is GET /v2.0/networks/{id}.
func (e *Emulator) getNetwork(c *call) {
	id := c.r.PathValue("id")
	e.lockState()
	n := e.neutron.networks[id]
	var view map[string]any
	if n != nil && networkVisible(n, c.token.projectID) {
		view = e.networkView(n)
	}
	e.mu.Unlock()
	if view == nil {
		c.fail(http.StatusNotFound, "Network "+id+" could not be found.")
		return
	}
	c.json(http.StatusOK, map[string]any{"network": view})
}

// listSubnets is GET /v2.0/subnets.
func (e *Emulator) listSubnets(c *call) {
	e.lockState()
	var views []map[string]any
	for _, s := range e.neutron.subnets {
		if networkVisible(e.neutron.networks[s.NetworkID], c.token.projectID) {
			views = append(views, e.subnetView(s))
		}
	}
	e.mu.Unlock()
	sortViews(views)
	if list, ok := c.filterViews(views, nil); ok {
		c.json(http.StatusOK, map[string]any{"subnets": list})
	}
}

// getSubnet is GET /v2.0/subnets/{id}.
func (e *Emulator) getSubnet(c *call) {
	id := c.r.PathValue("id")
	e.lockState()
	s := e.neutron.subnets[id]
	var view map[string]any
	if s != nil && networkVisible(e.neutron.networks[s.NetworkID], c.token.projectID) {
		view = e.subnetView(s)
	}
	e.mu.Unlock()
	if view == nil {
		c.fail(http.StatusNotFound, "Subnet "+id+" could not be found.")
		return
	}
	c.json(http.StatusOK, map[string]any{"subnet": view})
}

// fixedIPsFilter is the fixed_ips filter of ports: each value is
// ip_address=A, subnet_id=S or ip_address_substr=P, and a port matches
// when one of its fixed IPs matches all of them.
func fixedIPsFilter(view map[string]any, values []string) bool {
	fixed, _ := view["fixed_ips"].([]any)
	return slices.ContainsFunc(fixed, func(f any) bool {
		ip := f.(map[string]any)
		for _, v := range values {
			key, want, _ := strings.Cut(v, "=")
			switch key {
			case "ip_address":
				if ip["ip_address"] != want {
					return false
				}
			case "subnet_id":
				if ip["subnet_id"] != want {
					return false
				}
			case "ip_address_substr":
				if !strings.Contains(ip["ip_address"].(string), want) {
					return false
				}
			default:
				return false
			}
		}
		return true
	})
}

// listPorts is GET /v2.0/ports.
func (e *Emulator) listPorts(c *call) {
	e.lockState()
	var views []map[string]any
	for _, p := range e.neutron.ports {
		if p.ProjectID == c.token.projectID {
			views = append(views, e.portView(p))
		}
	}
	e.mu.Unlock()
	sortViews(views)
	if list, ok := c.filterViews(views, map[string]filter{"fixed_ips": fixedIPsFilter}); ok {
		c.json(http.StatusOK, map[string]any{"ports": list})
	}
}

func (e *Emulator) portOf(c *call) *Port {
	p := e.neutron.ports[c.r.PathValue("id")]
	if p == nil || p.ProjectID != c.token.projectID {
		return nil
	}
	return p
}

// getPort is GET /v2.0/ports/{id}.
func (e *Emulator) getPort(c *call) {
	e.lockState()
	var view map[string]any
	if p := e.portOf(c); p != nil {
		view = e.portView(p)
	}
	e.mu.Unlock()
	if view == nil {
		c.fail(http.StatusNotFound, "Port "+c.r.PathValue("id")+" could not be found.")
		return
	}
	c.json(http.StatusOK, map[string]any{"port": view})
}

type fixedIPBody struct {
	SubnetID  string `json:"subnet_id"`
	IPAddress string `json:"ip_address"`
}

type addressPairBody struct {
	IPAddress  string `json:"ip_address"`
	MACAddress string `json:"mac_address,omitempty"`
}

type portBody struct {
	NetworkID           string             `json:"network_id"`
	Name                *string            `json:"name"`
	Description         *string            `json:"description"`
	AdminStateUp        *bool              `json:"admin_state_up"`
	MACAddress          string             `json:"mac_address"`
	FixedIPs            []fixedIPBody      `json:"fixed_ips"`
	DeviceID            *string            `json:"device_id"`
	DeviceOwner         *string            `json:"device_owner"`
	ProjectID           string             `json:"project_id"`
	TenantID            string             `json:"tenant_id"`
	SecurityGroups      *[]string          `json:"security_groups"`
	AllowedAddressPairs *[]addressPairBody `json:"allowed_address_pairs"`
	Tags                []string           `json:"tags"`
}

func pairsOf(body []addressPairBody, mac string) []AddressPair {
	out := make([]AddressPair, 0, len(body))
	for _, a := range body {
		m := a.MACAddress
		if m == "" {
			m = mac
		}
		out = append(out, AddressPair{IPAddress: a.IPAddress, MACAddress: m})
	}
	return out
}

func validPairs(pairs []AddressPair) error {
	for _, a := range pairs {
		if _, err := netip.ParseAddr(a.IPAddress); err == nil {
			continue
		}
		if _, err := netip.ParsePrefix(a.IPAddress); err != nil {
			return fmt.Errorf("'%s' is not a valid IP address or CIDR", a.IPAddress)
		}
	}
	return nil
}

// createPort is POST /v2.0/ports.
func (e *Emulator) createPort(c *call) {
	var body struct {
		Port portBody `json:"port"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.Port
	p := Port{NetworkID: b.NetworkID, ProjectID: c.token.projectID, MACAddress: b.MACAddress, Tags: b.Tags}
	if b.Name != nil {
		p.Name = *b.Name
	}
	if b.Description != nil {
		p.Description = *b.Description
	}
	if b.DeviceID != nil {
		p.DeviceID = *b.DeviceID
	}
	if b.DeviceOwner != nil {
		p.DeviceOwner = *b.DeviceOwner
	}
	for _, f := range b.FixedIPs {
		p.FixedIPs = append(p.FixedIPs, FixedIP(f))
	}
	if b.AllowedAddressPairs != nil {
		p.AllowedAddressPairs = pairsOf(*b.AllowedAddressPairs, "")
		if err := validPairs(p.AllowedAddressPairs); err != nil {
			c.fail(http.StatusBadRequest, "Invalid input for allowed_address_pairs: "+err.Error())
			return
		}
	}
	e.lockState()
	n := e.neutron.networks[b.NetworkID]
	if n == nil || (n.ProjectID != c.token.projectID && !n.Shared) {
		e.mu.Unlock()
		c.fail(http.StatusNotFound, "Network "+b.NetworkID+" could not be found.")
		return
	}
	created, err := e.addPortLocked(p)
	if err != nil {
		e.mu.Unlock()
		status := http.StatusBadRequest
		if strings.Contains(err.Error(), errAddressInUse.Error()) {
			status = http.StatusConflict
		}
		c.fail(status, err.Error())
		return
	}
	for i := range created.AllowedAddressPairs {
		if created.AllowedAddressPairs[i].MACAddress == "" {
			created.AllowedAddressPairs[i].MACAddress = created.MACAddress
		}
	}
	view := e.portView(created)
	e.mu.Unlock()
	c.json(http.StatusCreated, map[string]any{"port": view})
}

// updatePort is PUT /v2.0/ports/{id}: name, description, device and
// allowed address pairs, with an If-Match revision precondition.
func (e *Emulator) updatePort(c *call) {
	var body struct {
		Port portBody `json:"port"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.Port
	if b.NetworkID != "" || b.MACAddress != "" || b.FixedIPs != nil || b.ProjectID != "" || b.TenantID != "" {
		c.fail(http.StatusBadRequest, "Cannot update read-only attribute of a port")
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	p := e.portOf(c)
	if p == nil {
		c.fail(http.StatusNotFound, "Port "+c.r.PathValue("id")+" could not be found.")
		return
	}
	if !c.ifMatch(p.RevisionNumber) {
		return
	}
	if b.AllowedAddressPairs != nil {
		pairs := pairsOf(*b.AllowedAddressPairs, p.MACAddress)
		if err := validPairs(pairs); err != nil {
			c.fail(http.StatusBadRequest, "Invalid input for allowed_address_pairs: "+err.Error())
			return
		}
		p.AllowedAddressPairs = pairs
	}
	if b.Name != nil {
		p.Name = *b.Name
	}
	if b.Description != nil {
		p.Description = *b.Description
	}
	if b.DeviceID != nil {
		p.DeviceID = *b.DeviceID
	}
	if b.DeviceOwner != nil {
		p.DeviceOwner = *b.DeviceOwner
	}
	if b.Tags != nil {
		p.Tags = slices.Clone(b.Tags)
	}
	p.RevisionNumber++
	c.json(http.StatusOK, map[string]any{"port": e.portView(p)})
}

// deletePort is DELETE /v2.0/ports/{id}. Octavia's VIP ports are Octavia's
// to delete.
func (e *Emulator) deletePort(c *call) {
	e.lockState()
	defer e.mu.Unlock()
	p := e.portOf(c)
	if p == nil {
		c.fail(http.StatusNotFound, "Port "+c.r.PathValue("id")+" could not be found.")
		return
	}
	if p.DeviceOwner == DeviceOwnerOctavia {
		c.fail(http.StatusConflict, "Port "+p.ID+" is the VIP port of load balancer "+p.DeviceID+" and cannot be deleted.")
		return
	}
	e.deletePortLocked(p.ID)
	c.w.WriteHeader(http.StatusNoContent)
}

// listFloatingIPs is GET /v2.0/floatingips.
func (e *Emulator) listFloatingIPs(c *call) {
	e.lockState()
	var views []map[string]any
	for _, f := range e.neutron.fips {
		if f.ProjectID == c.token.projectID {
			views = append(views, e.floatingIPView(f))
		}
	}
	e.mu.Unlock()
	sortViews(views)
	if list, ok := c.filterViews(views, nil); ok {
		c.json(http.StatusOK, map[string]any{"floatingips": list})
	}
}

func (e *Emulator) floatingIPOf(c *call) *FloatingIP {
	f := e.neutron.fips[c.r.PathValue("id")]
	if f == nil || f.ProjectID != c.token.projectID {
		return nil
	}
	return f
}

// getFloatingIP is GET /v2.0/floatingips/{id}.
func (e *Emulator) getFloatingIP(c *call) {
	e.lockState()
	var view map[string]any
	if f := e.floatingIPOf(c); f != nil {
		view = e.floatingIPView(f)
	}
	e.mu.Unlock()
	if view == nil {
		c.fail(http.StatusNotFound, "Floating IP "+c.r.PathValue("id")+" could not be found")
		return
	}
	c.json(http.StatusOK, map[string]any{"floatingip": view})
}

type floatingIPBody struct {
	Description       *string         `json:"description"`
	FloatingNetworkID string          `json:"floating_network_id"`
	FloatingIPAddress string          `json:"floating_ip_address"`
	PortID            json.RawMessage `json:"port_id"`
	FixedIPAddress    string          `json:"fixed_ip_address"`
	SubnetID          string          `json:"subnet_id"`
	ProjectID         string          `json:"project_id"`
	TenantID          string          `json:"tenant_id"`
}

// portIDOf reads a port_id attribute: absent, null or a port's ID.
func portIDOf(raw json.RawMessage) (id string, set bool, err error) {
	if raw == nil {
		return "", false, nil
	}
	if isJSONNull(raw) {
		return "", true, nil
	}
	err = json.Unmarshal(raw, &id)
	return id, true, err
}

// createFloatingIP is POST /v2.0/floatingips.
func (e *Emulator) createFloatingIP(c *call) {
	var body struct {
		FloatingIP floatingIPBody `json:"floatingip"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.FloatingIP
	portID, _, err := portIDOf(b.PortID)
	if err != nil {
		c.fail(http.StatusBadRequest, "Invalid input for port_id")
		return
	}
	if b.FloatingNetworkID == "" {
		c.fail(http.StatusBadRequest, "Invalid input for floating_network_id: it is required")
		return
	}
	f := FloatingIP{FloatingNetworkID: b.FloatingNetworkID, FloatingIPAddress: b.FloatingIPAddress,
		PortID: portID, FixedIPAddress: b.FixedIPAddress, ProjectID: c.token.projectID}
	if b.Description != nil {
		f.Description = *b.Description
	}
	e.lockState()
	if portID != "" {
		if p := e.neutron.ports[portID]; p == nil || p.ProjectID != c.token.projectID {
			e.mu.Unlock()
			c.fail(http.StatusNotFound, "Port "+portID+" could not be found.")
			return
		}
	}
	created, status, err := e.addFloatingIPLocked(f, b.SubnetID)
	if err != nil {
		e.mu.Unlock()
		c.fail(status, err.Error())
		return
	}
	view := e.floatingIPView(created)
	e.mu.Unlock()
	c.json(http.StatusCreated, map[string]any{"floatingip": view})
}

// updateFloatingIP is PUT /v2.0/floatingips/{id}: associate (port_id),
// disassociate (port_id null) and the description.
func (e *Emulator) updateFloatingIP(c *call) {
	var body struct {
		FloatingIP floatingIPBody `json:"floatingip"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.FloatingIP
	if b.FloatingNetworkID != "" || b.FloatingIPAddress != "" || b.SubnetID != "" {
		c.fail(http.StatusBadRequest, "Cannot update read-only attribute of a floating IP")
		return
	}
	portID, portSet, err := portIDOf(b.PortID)
	if err != nil {
		c.fail(http.StatusBadRequest, "Invalid input for port_id")
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	f := e.floatingIPOf(c)
	if f == nil {
		c.fail(http.StatusNotFound, "Floating IP "+c.r.PathValue("id")+" could not be found")
		return
	}
	if !c.ifMatch(f.RevisionNumber) {
		return
	}
	if portSet {
		if portID == "" {
			f.PortID, f.FixedIPAddress = "", ""
		} else {
			if p := e.neutron.ports[portID]; p == nil || p.ProjectID != c.token.projectID {
				c.fail(http.StatusNotFound, "Port "+portID+" could not be found.")
				return
			}
			changed := *f
			if status, err := e.associateLocked(&changed, portID, b.FixedIPAddress); err != nil {
				c.fail(status, err.Error())
				return
			}
			*f = changed
		}
	}
	if b.Description != nil {
		f.Description = *b.Description
	}
	f.RevisionNumber++
	c.json(http.StatusOK, map[string]any{"floatingip": e.floatingIPView(f)})
}

// deleteFloatingIP is DELETE /v2.0/floatingips/{id}.
func (e *Emulator) deleteFloatingIP(c *call) {
	e.lockState()
	defer e.mu.Unlock()
	f := e.floatingIPOf(c)
	if f == nil {
		c.fail(http.StatusNotFound, "Floating IP "+c.r.PathValue("id")+" could not be found")
		return
	}
	delete(e.neutron.fips, f.ID)
	delete(e.neutron.created, f.ID)
	c.w.WriteHeader(http.StatusNoContent)
}

// sortViews orders views by ID, as a list of Neutron or Octavia is.
func sortViews(views []map[string]any) {
	slices.SortFunc(views, func(a, b map[string]any) int { return strings.Compare(a["id"].(string), b["id"].(string)) })
}
