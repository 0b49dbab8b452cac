package emulator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Flavor is a Nova flavor.
type Flavor struct {
	// ID is generated when empty.
	ID    string
	Name  string
	VCPUs int
	// RAM is in MiB, Disk in GiB.
	RAM  int
	Disk int
}

// Address is one address of a server on a network.
type Address struct {
	Addr string
	// Version is 4 or 6; it follows Addr when zero.
	Version int
	// Type is "fixed" (the default) or "floating".
	Type string
	MAC  string
}

// Server is a Nova server.
type Server struct {
	// ID is generated when empty.
	ID   string
	Name string
	// ProjectID defaults to the default project; a token sees only the
	// servers of its project.
	ProjectID string
	// Status defaults to ACTIVE; SHUTOFF, SOFT_DELETED, ERROR, ... as Nova's.
	Status string
	// Flavor is the flavor's name; default "m1.small". A flavor of that name
	// is made when there is none.
	Flavor string
	// AvailabilityZone defaults to "nova".
	AvailabilityZone string
	// Addresses by network name.
	Addresses  map[string][]Address
	AccessIPv4 string
	AccessIPv6 string
	Metadata   map[string]string
	// Created is set by AddServer; servers are listed newest first.
	Created time.Time
}

func (s Server) clone() Server {
	s.Metadata = maps.Clone(s.Metadata)
	addrs := make(map[string][]Address, len(s.Addresses))
	for k, v := range s.Addresses {
		addrs[k] = slices.Clone(v)
	}
	s.Addresses = addrs
	return s
}

// microversion is a Nova API microversion, major.minor.
type microversion struct{ major, minor int }

func parseMicroversion(s string) (microversion, bool) {
	major, minor, ok := strings.Cut(s, ".")
	if !ok {
		return microversion{}, false
	}
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil || ma < 0 || mi < 0 {
		return microversion{}, false
	}
	return microversion{ma, mi}, true
}

func (m microversion) atLeast(s string) bool {
	o, _ := parseMicroversion(s)
	return m.major > o.major || (m.major == o.major && m.minor >= o.minor)
}

func (m microversion) String() string { return fmt.Sprintf("%d.%d", m.major, m.minor) }

const minComputeMicroversion = "2.1"

// novaState is what Nova knows.
type novaState struct {
	servers   map[string]*Server
	serverSeq int
	flavors   map[string]*Flavor // by ID
}

func newNovaState() novaState {
	return novaState{servers: map[string]*Server{}, flavors: map[string]*Flavor{}}
}

// AddFlavor adds a flavor.
func (e *Emulator) AddFlavor(f Flavor) (Flavor, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f.Name == "" {
		return Flavor{}, fmt.Errorf("a flavor needs a name")
	}
	if e.flavorNamed(f.Name) != nil {
		return Flavor{}, fmt.Errorf("flavor %s exists", f.Name)
	}
	return *e.addFlavorLocked(f), nil
}

func (e *Emulator) addFlavorLocked(f Flavor) *Flavor {
	if f.ID == "" {
		f.ID = newID()
	}
	e.nova.flavors[f.ID] = &f
	return &f
}

func (e *Emulator) flavorNamed(name string) *Flavor {
	for _, f := range e.nova.flavors {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// AddServer adds a server and returns it with its defaults filled in.
// Nova allows several servers with one name; so does the emulator. Each
// fixed address on a network Neutron has (by name, of the server's project
// or shared) gets a Neutron port of the server, as Nova's servers have.
func (e *Emulator) AddServer(s Server) (Server, error) {
	s = s.clone()
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.ID == "" {
		s.ID = newUUID()
	}
	if e.nova.servers[s.ID] != nil {
		return Server{}, fmt.Errorf("server %s exists", s.ID)
	}
	if s.ProjectID == "" {
		s.ProjectID = e.keystone.defaultProject
	}
	if e.keystone.projects[s.ProjectID] == nil {
		return Server{}, fmt.Errorf("server %s: no project %s", s.Name, s.ProjectID)
	}
	if s.Status == "" {
		s.Status = "ACTIVE"
	}
	if s.Flavor == "" {
		s.Flavor = "m1.small"
	}
	if e.flavorNamed(s.Flavor) == nil {
		e.addFlavorLocked(Flavor{Name: s.Flavor, VCPUs: 1, RAM: 2048, Disk: 20})
	}
	if s.AvailabilityZone == "" {
		s.AvailabilityZone = "nova"
	}
	for network, addrs := range s.Addresses {
		for i, a := range addrs {
			ip, err := netip.ParseAddr(a.Addr)
			if err != nil {
				return Server{}, fmt.Errorf("server %s: network %s: %w", s.Name, network, err)
			}
			if a.Version == 0 {
				a.Version = 4
				if ip.Is6() && !ip.Is4In6() {
					a.Version = 6
				}
			}
			if a.Type == "" {
				a.Type = "fixed"
			}
			addrs[i] = a
		}
	}
	if err := e.addServerPortsLocked(&s); err != nil {
		e.deleteServerPortsLocked(s.ID)
		return Server{}, err
	}
	e.nova.serverSeq++
	s.Created = e.opts.Now().UTC().Truncate(time.Second).Add(time.Duration(e.nova.serverSeq) * time.Microsecond)
	e.nova.servers[s.ID] = &s
	return s.clone(), nil
}

// UpdateServer changes a server.
func (e *Emulator) UpdateServer(id string, change func(*Server)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.nova.servers[id]
	if s == nil {
		return fmt.Errorf("no server %s", id)
	}
	change(s)
	return nil
}

// SetStatus sets a server's status (ACTIVE, SHUTOFF, SOFT_DELETED, ...).
func (e *Emulator) SetStatus(id, status string) error {
	return e.UpdateServer(id, func(s *Server) { s.Status = status })
}

// DeleteServer deletes a server: it is gone from lists and a GET of it is
// 404, and its Neutron ports are gone.
func (e *Emulator) DeleteServer(id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.nova.servers[id] == nil {
		return fmt.Errorf("no server %s", id)
	}
	delete(e.nova.servers, id)
	e.deleteServerPortsLocked(id)
	return nil
}

// Server returns a server by ID.
func (e *Emulator) Server(id string) (Server, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.nova.servers[id]
	if s == nil {
		return Server{}, false
	}
	return s.clone(), true
}

// ServersNamed returns the servers named exactly name, oldest first.
func (e *Emulator) ServersNamed(name string) []Server {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Server
	for _, s := range e.nova.servers {
		if s.Name == name {
			out = append(out, s.clone())
		}
	}
	slices.SortFunc(out, func(a, b Server) int { return a.Created.Compare(b.Created) })
	return out
}

func (e *Emulator) routeNova(mux *http.ServeMux) {
	for _, iface := range Interfaces {
		e.routeNotFound(mux, Compute, iface)
		e.route(mux, http.MethodGet, "{$}", Compute, iface, false, func(c *call) {
			c.json(http.StatusOK, map[string]any{"versions": []any{e.novaVersion(c.iface)}})
		})
		for _, p := range []string{"v2.1", "v2.1/{$}"} {
			e.route(mux, http.MethodGet, p, Compute, iface, false, func(c *call) {
				c.json(http.StatusOK, map[string]any{"version": e.novaVersion(c.iface)})
			})
		}
		e.route(mux, http.MethodGet, "v2.1/servers/detail", Compute, iface, true, e.listServers)
		e.route(mux, http.MethodGet, "v2.1/servers/{id}", Compute, iface, true, e.getServer)
		e.route(mux, http.MethodGet, "v2.1/flavors/{id}", Compute, iface, true, e.getFlavor)
	}
}

func (e *Emulator) novaVersion(iface string) map[string]any {
	return map[string]any{
		"id":          "v2.1",
		"status":      "CURRENT",
		"version":     e.opts.ComputeMaxMicroversion,
		"min_version": minComputeMicroversion,
		"updated":     "2013-07-23T11:33:21Z",
		"links":       []any{map[string]any{"rel": "self", "href": e.endpoint(Compute, iface) + "/"}},
	}
}

// negotiate reads the microversion a request asks for and sets it on the
// response, as Nova does. A version Nova does not serve is 406.
func (e *Emulator) negotiate(c *call) (microversion, bool) {
	asked := c.r.Header.Get("X-OpenStack-Nova-API-Version")
	if v, ok := strings.CutPrefix(c.r.Header.Get("OpenStack-API-Version"), "compute "); ok {
		asked = v
	}
	minV, _ := parseMicroversion(minComputeMicroversion)
	maxV, _ := parseMicroversion(e.opts.ComputeMaxMicroversion)
	mv := minV
	switch asked {
	case "":
	case "latest":
		mv = maxV
	default:
		v, ok := parseMicroversion(asked)
		if !ok {
			c.fail(http.StatusBadRequest, fmt.Sprintf("API Version String %s is of invalid format. Must be of format MajorNum.MinorNum.", asked))
			return microversion{}, false
		}
		mv = v
	}
	if !mv.atLeast(minV.String()) || !maxV.atLeast(mv.String()) {
		c.fail(http.StatusNotAcceptable, fmt.Sprintf("Version %s is not supported by the API. Minimum is %s and maximum is %s.", mv, minV, maxV))
		return microversion{}, false
	}
	c.w.Header().Set("OpenStack-API-Version", "compute "+mv.String())
	c.w.Header().Set("X-OpenStack-Nova-API-Version", mv.String())
	c.w.Header().Set("Vary", "OpenStack-API-Version, X-OpenStack-Nova-API-Version")
	return mv, true
}

// listServers is GET /servers/detail. It sees the servers of the token's
// project, newest first, and pages them with limit and marker. The name
// filter is a regular expression searched for anywhere in the name, as
// Nova's is: "node-1" also matches "node-10" and "my-node-1".
func (e *Emulator) listServers(c *call) {
	mv, ok := e.negotiate(c)
	if !ok {
		return
	}
	q := c.r.URL.Query()
	limit := e.opts.ComputePageLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			c.fail(http.StatusBadRequest, "Invalid input for query parameters limit. Value: "+v+".")
			return
		}
		limit = min(n, limit)
	}
	var nameRE *regexp.Regexp
	if v, ok := q["name"]; ok {
		expr := v[0]
		if !e.opts.CaseSensitiveNames {
			expr = "(?i)" + expr
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			c.fail(http.StatusBadRequest, "Invalid input for query parameters name. Value: "+v[0]+". '"+v[0]+"' is not a 'regex'")
			return
		}
		nameRE = re
	}
	status := strings.ToUpper(q.Get("status"))

	e.mu.Lock()
	var list []*Server
	for _, s := range e.nova.servers {
		if s.ProjectID != c.token.projectID || s.Status == "DELETED" {
			continue
		}
		if nameRE != nil && !nameRE.MatchString(s.Name) {
			continue
		}
		if status != "" && s.Status != status {
			continue
		}
		list = append(list, s)
	}
	slices.SortFunc(list, func(a, b *Server) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	if marker := q.Get("marker"); marker != "" {
		i := slices.IndexFunc(list, func(s *Server) bool { return s.ID == marker })
		if i < 0 {
			e.mu.Unlock()
			c.fail(http.StatusBadRequest, "marker ["+marker+"] not found")
			return
		}
		list = list[i+1:]
	}
	if len(list) > limit {
		list = list[:limit]
	}
	views := make([]any, 0, len(list))
	for _, s := range list {
		views = append(views, e.serverView(s, mv, c.iface))
	}
	e.mu.Unlock()

	body := map[string]any{"servers": views}
	if limit > 0 && len(list) == limit {
		next := url.Values{}
		for k, v := range q {
			if k != "marker" {
				next[k] = v
			}
		}
		next.Set("limit", strconv.Itoa(limit))
		next.Set("marker", list[len(list)-1].ID)
		body["servers_links"] = []any{map[string]any{"rel": "next", "href": e.endpoint(Compute, c.iface) + "/servers/detail?" + next.Encode()}}
	}
	c.json(http.StatusOK, body)
}

// getServer is GET /servers/{id}: 404 for a server that does not exist or
// belongs to another project.
func (e *Emulator) getServer(c *call) {
	mv, ok := e.negotiate(c)
	if !ok {
		return
	}
	id := c.r.PathValue("id")
	e.mu.Lock()
	s := e.nova.servers[id]
	var view map[string]any
	if s != nil && s.ProjectID == c.token.projectID {
		view = e.serverView(s, mv, c.iface)
	}
	e.mu.Unlock()
	if view == nil {
		c.fail(http.StatusNotFound, "Instance "+id+" could not be found.")
		return
	}
	c.json(http.StatusOK, map[string]any{"server": view})
}

// getFlavor is GET /flavors/{id}.
func (e *Emulator) getFlavor(c *call) {
	if _, ok := e.negotiate(c); !ok {
		return
	}
	id := c.r.PathValue("id")
	e.mu.Lock()
	f := e.nova.flavors[id]
	e.mu.Unlock()
	if f == nil {
		c.fail(http.StatusNotFound, "Flavor "+id+" could not be found.")
		return
	}
	c.json(http.StatusOK, map[string]any{"flavor": map[string]any{
		"id": f.ID, "name": f.Name, "vcpus": f.VCPUs, "ram": f.RAM, "disk": f.Disk,
		"swap": "", "OS-FLV-EXT-DATA:ephemeral": 0, "OS-FLV-DISABLED:disabled": false,
		"rxtx_factor": 1.0, "os-flavor-access:is_public": true,
		"links": []any{map[string]any{"rel": "self", "href": e.endpoint(Compute, c.iface) + "/flavors/" + f.ID}},
	}})
}

// serverView is a server as Nova shows it at microversion mv. e.mu is held.
func (e *Emulator) serverView(s *Server, mv microversion, iface string) map[string]any {
	addresses := map[string]any{}
	for network, addrs := range s.Addresses {
		var list []any
		for _, a := range addrs {
			list = append(list, map[string]any{"addr": a.Addr, "version": a.Version, "OS-EXT-IPS:type": a.Type, "OS-EXT-IPS-MAC:mac_addr": a.MAC})
		}
		addresses[network] = list
	}
	metadata := map[string]string{}
	maps.Copy(metadata, s.Metadata)
	hostID := sha256.Sum224([]byte(s.ProjectID + "compute-1"))
	created := s.Created.Format(time.RFC3339)
	v := map[string]any{
		"id":                                   s.ID,
		"name":                                 s.Name,
		"status":                               s.Status,
		"tenant_id":                            s.ProjectID,
		"user_id":                              "emulator-user",
		"metadata":                             metadata,
		"hostId":                               hex.EncodeToString(hostID[:]),
		"image":                                "",
		"flavor":                               e.flavorView(s.Flavor, mv, iface),
		"created":                              created,
		"updated":                              created,
		"addresses":                            addresses,
		"accessIPv4":                           s.AccessIPv4,
		"accessIPv6":                           s.AccessIPv6,
		"links":                                []any{map[string]any{"rel": "self", "href": e.endpoint(Compute, iface) + "/servers/" + s.ID}},
		"key_name":                             nil,
		"config_drive":                         "",
		"progress":                             0,
		"OS-DCF:diskConfig":                    "MANUAL",
		"OS-EXT-AZ:availability_zone":          s.AvailabilityZone,
		"OS-EXT-STS:task_state":                nil,
		"OS-EXT-STS:vm_state":                  vmState(s.Status),
		"OS-EXT-STS:power_state":               powerState(s.Status),
		"OS-SRV-USG:launched_at":               s.Created.Format("2006-01-02T15:04:05.000000"),
		"OS-SRV-USG:terminated_at":             nil,
		"os-extended-volumes:volumes_attached": []any{},
		"security_groups":                      []any{map[string]any{"name": "default"}},
	}
	if mv.atLeast("2.9") {
		v["locked"] = false
	}
	if mv.atLeast("2.19") {
		v["description"] = nil
	}
	if mv.atLeast("2.26") {
		v["tags"] = []string{}
	}
	return v
}

// flavorView is a server's flavor: from 2.47 a copy of the flavor with
// its name in original_name, before it a reference by ID.
func (e *Emulator) flavorView(name string, mv microversion, iface string) map[string]any {
	f := e.flavorNamed(name)
	if mv.atLeast("2.47") {
		return map[string]any{"original_name": f.Name, "vcpus": f.VCPUs, "ram": f.RAM, "disk": f.Disk,
			"ephemeral": 0, "swap": 0, "extra_specs": map[string]string{}}
	}
	return map[string]any{"id": f.ID, "links": []any{map[string]any{"rel": "bookmark", "href": e.endpoint(Compute, iface) + "/flavors/" + f.ID}}}
}

func vmState(status string) string {
	switch status {
	case "ACTIVE":
		return "active"
	case "SHUTOFF":
		return "stopped"
	case "SOFT_DELETED":
		return "soft-delete"
	case "BUILD":
		return "building"
	default:
		return strings.ToLower(status)
	}
}

func powerState(status string) int {
	switch status {
	case "ACTIVE":
		return 1
	case "PAUSED":
		return 3
	case "SHUTOFF":
		return 4
	case "SUSPENDED":
		return 7
	default:
		return 0
	}
}

// novaFaultName is the key of Nova's error body for a status.
func novaFaultName(status int) string {
	names := map[int]string{
		400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound",
		405: "badMethod", 406: "notAcceptable", 409: "conflictingRequest", 413: "overLimit",
		415: "badMediaType", 429: "overLimit", 501: "notImplemented", 503: "serviceUnavailable",
	}
	if n, ok := names[status]; ok {
		return n
	}
	return "computeFault"
}

func newUUID() string {
	id := newID()
	return id[:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:]
}
