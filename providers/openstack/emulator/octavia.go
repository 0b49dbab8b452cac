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

// Provisioning statuses of Octavia.
const (
	StatusActive        = "ACTIVE"
	StatusError         = "ERROR"
	StatusPendingCreate = "PENDING_CREATE"
	StatusPendingUpdate = "PENDING_UPDATE"
	StatusPendingDelete = "PENDING_DELETE"
)

// Balancer is an Octavia load balancer. The control methods return it
// with its listeners and pools, each pool with its members and monitor.
type Balancer struct {
	ID                 string
	Name               string
	Description        string
	ProjectID          string
	VIPAddress         string
	VIPPortID          string
	VIPSubnetID        string
	VIPNetworkID       string
	Provider           string
	FlavorID           string
	AvailabilityZone   string
	ProvisioningStatus string
	OperatingStatus    string
	Tags               []string
	Listeners          []Listener
	Pools              []Pool
}

// Listener is a listener of a load balancer.
type Listener struct {
	ID                   string
	Name                 string
	Description          string
	LoadBalancerID       string
	Protocol             string
	ProtocolPort         int
	ConnectionLimit      int
	TimeoutClientData    int
	TimeoutMemberConnect int
	TimeoutMemberData    int
	TimeoutTCPInspect    int
	AllowedCIDRs         []string
	InsertHeaders        map[string]string
	DefaultPoolID        string
	Tags                 []string
	ProvisioningStatus   string
}

// Pool is a pool of a load balancer, with its members and its monitor.
type Pool struct {
	ID             string
	Name           string
	Description    string
	LoadBalancerID string
	// ListenerID is the listener whose default pool it is, if any.
	ListenerID  string
	Protocol    string
	LBAlgorithm string
	// SessionPersistence is the persistence type (SOURCE_IP, ...); empty
	// for none.
	SessionPersistence string
	Members            []Member
	HealthMonitor      *HealthMonitor
	Tags               []string
	ProvisioningStatus string
}

// Member is a member of a pool.
type Member struct {
	ID                 string
	Name               string
	Address            string
	ProtocolPort       int
	SubnetID           string
	Weight             int
	Backup             bool
	AdminStateUp       bool
	MonitorAddress     string
	MonitorPort        int
	Tags               []string
	ProvisioningStatus string
}

// HealthMonitor is the health monitor of a pool.
type HealthMonitor struct {
	ID                 string
	Name               string
	PoolID             string
	Type               string
	Delay              int
	Timeout            int
	MaxRetries         int
	MaxRetriesDown     int
	HTTPMethod         string
	URLPath            string
	ExpectedCodes      string
	Tags               []string
	ProvisioningStatus string
}

// What Octavia accepts.
var (
	listenerProtocols = []string{"HTTP", "HTTPS", "TCP", "TERMINATED_HTTPS", "UDP", "SCTP", "PROMETHEUS"}
	// poolProtocolsOf lists the pool protocols a listener protocol takes.
	poolProtocolsOf = map[string][]string{
		"TCP":              {"TCP", "HTTP", "HTTPS", "PROXY", "PROXYV2"},
		"HTTP":             {"HTTP", "PROXY", "PROXYV2"},
		"HTTPS":            {"HTTPS", "TCP", "PROXY", "PROXYV2"},
		"TERMINATED_HTTPS": {"HTTP", "PROXY", "PROXYV2"},
		"UDP":              {"UDP"},
		"SCTP":             {"SCTP"},
	}
	poolProtocols      = []string{"HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP", "UDP", "SCTP"}
	lbAlgorithms       = []string{"ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"}
	persistenceTypes   = []string{"SOURCE_IP", "HTTP_COOKIE", "APP_COOKIE"}
	monitorTypes       = []string{"HTTP", "HTTPS", "PING", "TCP", "TLS-HELLO", "UDP-CONNECT", "SCTP"}
	udpMonitorTypes    = []string{"UDP-CONNECT", "HTTP", "TCP", "SCTP"}
	octaviaProviders   = []string{"amphora", "octavia", "ovn"}
	maxListenerTimeout = 24 * 60 * 60 * 1000
)

// octaviaState is what Octavia knows.
type octaviaState struct {
	lbs       map[string]*lbRecord
	listeners map[string]*Listener
	pools     map[string]*Pool // each with its members and monitor
	monitors  map[string]*HealthMonitor
	created   map[string]time.Time
	// delay is how long a load balancer stays PENDING_* after a change.
	delay time.Duration
	// failures is how many provisioning runs to come end in ERROR.
	failures int
}

// lbRecord is a load balancer with its children's IDs and its pending
// transition.
type lbRecord struct {
	Balancer
	listenerIDs []string
	poolIDs     []string
	// timed is set while a transition runs: at due, a PENDING_DELETE load
	// balancer is gone and any other PENDING_* one is ACTIVE, or ERROR
	// when fail is set.
	timed bool
	due   time.Time
	fail  bool
}

func newOctaviaState(delay time.Duration) octaviaState {
	return octaviaState{
		lbs: map[string]*lbRecord{}, listeners: map[string]*Listener{}, pools: map[string]*Pool{},
		monitors: map[string]*HealthMonitor{}, created: map[string]time.Time{}, delay: delay,
	}
}

// lockState locks the emulator and first completes the Octavia
// transitions that are due, so that whoever reads sees them done.
func (e *Emulator) lockState() {
	e.mu.Lock()
	e.settleOctaviaLocked()
}

// SetOctaviaDelay sets how long a load balancer stays PENDING_* after a
// change; it applies to changes from now on.
func (e *Emulator) SetOctaviaDelay(d time.Duration) {
	e.lockState()
	defer e.mu.Unlock()
	e.octavia.delay = d
}

// FailProvisioning makes the next n creates or changes of load balancers
// end in ERROR instead of ACTIVE.
func (e *Emulator) FailProvisioning(n int) {
	e.lockState()
	defer e.mu.Unlock()
	e.octavia.failures = n
}

// SetProvisioningStatus sets a load balancer's provisioning status. It
// stays until a change or another call moves it: a test holds a load
// balancer in PENDING_UPDATE this way.
func (e *Emulator) SetProvisioningStatus(id, status string) error {
	e.lockState()
	defer e.mu.Unlock()
	lb := e.octavia.lbs[id]
	if lb == nil {
		return fmt.Errorf("no load balancer %s", id)
	}
	lb.ProvisioningStatus, lb.timed = status, false
	return nil
}

// LoadBalancers returns every load balancer with its children, by name.
func (e *Emulator) LoadBalancers() []Balancer {
	e.lockState()
	defer e.mu.Unlock()
	out := make([]Balancer, 0, len(e.octavia.lbs))
	for _, lb := range e.octavia.lbs {
		out = append(out, e.snapshotLocked(lb))
	}
	slices.SortFunc(out, func(a, b Balancer) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// LoadBalancer returns a load balancer with its children.
func (e *Emulator) LoadBalancer(id string) (Balancer, bool) {
	e.lockState()
	defer e.mu.Unlock()
	lb := e.octavia.lbs[id]
	if lb == nil {
		return Balancer{}, false
	}
	return e.snapshotLocked(lb), true
}

// Listeners returns every listener Octavia holds, of any load balancer,
// by ID: a test sees one that outlived its load balancer.
func (e *Emulator) Listeners() []Listener {
	e.lockState()
	defer e.mu.Unlock()
	out := make([]Listener, 0, len(e.octavia.listeners))
	for _, id := range slices.Sorted(maps.Keys(e.octavia.listeners)) {
		l := *e.octavia.listeners[id]
		l.AllowedCIDRs = slices.Clone(l.AllowedCIDRs)
		l.InsertHeaders = maps.Clone(l.InsertHeaders)
		l.Tags = slices.Clone(l.Tags)
		out = append(out, l)
	}
	return out
}

// Pools returns every pool Octavia holds, with its members and health
// monitor, by ID.
func (e *Emulator) Pools() []Pool {
	e.lockState()
	defer e.mu.Unlock()
	out := make([]Pool, 0, len(e.octavia.pools))
	for _, id := range slices.Sorted(maps.Keys(e.octavia.pools)) {
		out = append(out, clonePool(e.octavia.pools[id]))
	}
	return out
}

// HealthMonitors returns every health monitor Octavia holds, by ID.
func (e *Emulator) HealthMonitors() []HealthMonitor {
	e.lockState()
	defer e.mu.Unlock()
	out := make([]HealthMonitor, 0, len(e.octavia.monitors))
	for _, id := range slices.Sorted(maps.Keys(e.octavia.monitors)) {
		m := *e.octavia.monitors[id]
		m.Tags = slices.Clone(m.Tags)
		out = append(out, m)
	}
	return out
}

func (e *Emulator) snapshotLocked(r *lbRecord) Balancer {
	lb := r.Balancer
	lb.Tags = slices.Clone(r.Tags)
	lb.Listeners, lb.Pools = nil, nil
	for _, id := range r.listenerIDs {
		l := *e.octavia.listeners[id]
		l.AllowedCIDRs = slices.Clone(l.AllowedCIDRs)
		l.InsertHeaders = maps.Clone(l.InsertHeaders)
		l.Tags = slices.Clone(l.Tags)
		lb.Listeners = append(lb.Listeners, l)
	}
	for _, id := range r.poolIDs {
		lb.Pools = append(lb.Pools, clonePool(e.octavia.pools[id]))
	}
	return lb
}

func clonePool(p *Pool) Pool {
	out := *p
	out.Tags = slices.Clone(p.Tags)
	out.Members = slices.Clone(p.Members)
	for i := range out.Members {
		out.Members[i].Tags = slices.Clone(out.Members[i].Tags)
	}
	if p.HealthMonitor != nil {
		m := *p.HealthMonitor
		m.Tags = slices.Clone(m.Tags)
		out.HealthMonitor = &m
	}
	return out
}

// settleOctaviaLocked completes the transitions that are due.
func (e *Emulator) settleOctaviaLocked() {
	now := e.opts.Now()
	for _, lb := range e.octavia.lbs {
		if !lb.timed || now.Before(lb.due) {
			continue
		}
		lb.timed = false
		if lb.ProvisioningStatus == StatusPendingDelete {
			e.removeLoadBalancerLocked(lb)
			continue
		}
		final := StatusActive
		lb.OperatingStatus = "ONLINE"
		if lb.fail {
			final, lb.OperatingStatus = StatusError, "ERROR"
		}
		lb.ProvisioningStatus = final
		e.settleChildrenLocked(lb, final)
	}
}

func pending(status string) bool { return strings.HasPrefix(status, "PENDING_") }

// settleChildrenLocked removes the children being deleted and gives the
// others the load balancer's final status.
func (e *Emulator) settleChildrenLocked(lb *lbRecord, final string) {
	for _, id := range slices.Clone(lb.poolIDs) {
		p := e.octavia.pools[id]
		if p.ProvisioningStatus == StatusPendingDelete {
			e.removePoolLocked(lb, p)
			continue
		}
		if pending(p.ProvisioningStatus) {
			p.ProvisioningStatus = final
		}
		if m := p.HealthMonitor; m != nil {
			if m.ProvisioningStatus == StatusPendingDelete {
				delete(e.octavia.monitors, m.ID)
				p.HealthMonitor = nil
			} else if pending(m.ProvisioningStatus) {
				m.ProvisioningStatus = final
			}
		}
		p.Members = slices.DeleteFunc(p.Members, func(m Member) bool { return m.ProvisioningStatus == StatusPendingDelete })
		for i := range p.Members {
			if pending(p.Members[i].ProvisioningStatus) {
				p.Members[i].ProvisioningStatus = final
			}
		}
	}
	for _, id := range slices.Clone(lb.listenerIDs) {
		l := e.octavia.listeners[id]
		if l.ProvisioningStatus == StatusPendingDelete {
			e.removeListenerLocked(lb, l)
			continue
		}
		if pending(l.ProvisioningStatus) {
			l.ProvisioningStatus = final
		}
	}
}

func (e *Emulator) removePoolLocked(lb *lbRecord, p *Pool) {
	if p.HealthMonitor != nil {
		delete(e.octavia.monitors, p.HealthMonitor.ID)
	}
	for _, l := range e.octavia.listeners {
		if l.DefaultPoolID == p.ID {
			l.DefaultPoolID = ""
		}
	}
	delete(e.octavia.pools, p.ID)
	delete(e.octavia.created, p.ID)
	lb.poolIDs = slices.DeleteFunc(lb.poolIDs, func(id string) bool { return id == p.ID })
}

func (e *Emulator) removeListenerLocked(lb *lbRecord, l *Listener) {
	for _, p := range e.octavia.pools {
		if p.ListenerID == l.ID {
			p.ListenerID = ""
		}
	}
	delete(e.octavia.listeners, l.ID)
	delete(e.octavia.created, l.ID)
	lb.listenerIDs = slices.DeleteFunc(lb.listenerIDs, func(id string) bool { return id == l.ID })
}

// removeLoadBalancerLocked ends a deletion: the load balancer, its
// children and its VIP port are gone.
func (e *Emulator) removeLoadBalancerLocked(lb *lbRecord) {
	for _, id := range slices.Clone(lb.poolIDs) {
		e.removePoolLocked(lb, e.octavia.pools[id])
	}
	for _, id := range slices.Clone(lb.listenerIDs) {
		e.removeListenerLocked(lb, e.octavia.listeners[id])
	}
	if p := e.neutron.ports[lb.VIPPortID]; p != nil && p.DeviceOwner == DeviceOwnerOctavia {
		e.deletePortLocked(p.ID)
	}
	delete(e.octavia.lbs, lb.ID)
	delete(e.octavia.created, lb.ID)
}

// startLocked starts a transition of a load balancer into status.
func (e *Emulator) startLocked(lb *lbRecord, status string) {
	lb.ProvisioningStatus = status
	lb.timed = true
	lb.due = e.opts.Now().Add(e.octavia.delay)
	lb.fail = false
	if status != StatusPendingDelete && e.octavia.failures > 0 {
		e.octavia.failures--
		lb.fail = true
	}
}

// apiError is a refused request: its status and message.
type apiError struct {
	status int
	msg    string
}

func (a *apiError) Error() string { return a.msg }

func badRequest400(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "Validation failure: " + fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) *apiError {
	return &apiError{http.StatusConflict, fmt.Sprintf(format, args...)}
}

func (c *call) refuse(err *apiError) { c.fail(err.status, err.msg) }

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
		// /v2.0 is an alias of /v2, as it is in Octavia.
		for _, v := range []string{"v2", "v2.0"} {
			for _, r := range []struct {
				method, path string
				h            func(*call)
			}{
				{http.MethodGet, "lbaas/loadbalancers", e.listLoadBalancers},
				{http.MethodPost, "lbaas/loadbalancers", e.createLoadBalancer},
				{http.MethodGet, "lbaas/loadbalancers/{id}", e.getLoadBalancer},
				{http.MethodPut, "lbaas/loadbalancers/{id}", e.updateLoadBalancer},
				{http.MethodDelete, "lbaas/loadbalancers/{id}", e.deleteLoadBalancer},
				{http.MethodGet, "lbaas/listeners", e.listListeners},
				{http.MethodPost, "lbaas/listeners", e.createListener},
				{http.MethodGet, "lbaas/listeners/{id}", e.getListener},
				{http.MethodPut, "lbaas/listeners/{id}", e.updateListener},
				{http.MethodDelete, "lbaas/listeners/{id}", e.deleteListener},
				{http.MethodGet, "lbaas/pools", e.listPools},
				{http.MethodPost, "lbaas/pools", e.createPool},
				{http.MethodGet, "lbaas/pools/{id}", e.getPool},
				{http.MethodPut, "lbaas/pools/{id}", e.updatePool},
				{http.MethodDelete, "lbaas/pools/{id}", e.deletePool},
				{http.MethodGet, "lbaas/pools/{id}/members", e.listMembers},
				{http.MethodPost, "lbaas/pools/{id}/members", e.createMember},
				{http.MethodPut, "lbaas/pools/{id}/members", e.batchUpdateMembers},
				{http.MethodGet, "lbaas/pools/{id}/members/{member}", e.getMember},
				{http.MethodPut, "lbaas/pools/{id}/members/{member}", e.updateMember},
				{http.MethodDelete, "lbaas/pools/{id}/members/{member}", e.deleteMember},
				{http.MethodGet, "lbaas/healthmonitors", e.listMonitors},
				{http.MethodPost, "lbaas/healthmonitors", e.createMonitor},
				{http.MethodGet, "lbaas/healthmonitors/{id}", e.getMonitor},
				{http.MethodPut, "lbaas/healthmonitors/{id}", e.updateMonitor},
				{http.MethodDelete, "lbaas/healthmonitors/{id}", e.deleteMonitor},
			} {
				e.route(mux, r.method, v+"/"+r.path, LoadBalancer, iface, true, r.h)
			}
		}
	}
}

// Request bodies. Optional attributes are pointers, or raw where an
// explicit null means something of its own.

type memberBody struct {
	Name           *string         `json:"name"`
	Address        string          `json:"address"`
	ProtocolPort   int             `json:"protocol_port"`
	SubnetID       json.RawMessage `json:"subnet_id"`
	Weight         *int            `json:"weight"`
	AdminStateUp   *bool           `json:"admin_state_up"`
	Backup         *bool           `json:"backup"`
	MonitorAddress json.RawMessage `json:"monitor_address"`
	MonitorPort    json.RawMessage `json:"monitor_port"`
	ProjectID      string          `json:"project_id"`
	Tags           *[]string       `json:"tags"`
}

type monitorBody struct {
	Name           *string   `json:"name"`
	PoolID         string    `json:"pool_id"`
	Type           string    `json:"type"`
	Delay          *int      `json:"delay"`
	Timeout        *int      `json:"timeout"`
	MaxRetries     *int      `json:"max_retries"`
	MaxRetriesDown *int      `json:"max_retries_down"`
	URLPath        *string   `json:"url_path"`
	HTTPMethod     *string   `json:"http_method"`
	HTTPVersion    *float64  `json:"http_version"`
	ExpectedCodes  *string   `json:"expected_codes"`
	DomainName     *string   `json:"domain_name"`
	AdminStateUp   *bool     `json:"admin_state_up"`
	ProjectID      string    `json:"project_id"`
	TenantID       string    `json:"tenant_id"`
	Tags           *[]string `json:"tags"`
}

type persistenceBody struct {
	Type       string `json:"type"`
	CookieName string `json:"cookie_name,omitempty"`
}

type poolBody struct {
	Name               *string         `json:"name"`
	Description        *string         `json:"description"`
	Protocol           string          `json:"protocol"`
	LBAlgorithm        *string         `json:"lb_algorithm"`
	ListenerID         string          `json:"listener_id"`
	LoadBalancerID     string          `json:"loadbalancer_id"`
	SessionPersistence json.RawMessage `json:"session_persistence"`
	AdminStateUp       *bool           `json:"admin_state_up"`
	Members            []memberBody    `json:"members"`
	HealthMonitor      *monitorBody    `json:"healthmonitor"`
	ProjectID          string          `json:"project_id"`
	Tags               *[]string       `json:"tags"`
}

type listenerBody struct {
	Name                 *string            `json:"name"`
	Description          *string            `json:"description"`
	LoadBalancerID       string             `json:"loadbalancer_id"`
	Protocol             string             `json:"protocol"`
	ProtocolPort         int                `json:"protocol_port"`
	ConnectionLimit      *int               `json:"connection_limit"`
	DefaultPoolID        json.RawMessage    `json:"default_pool_id"`
	DefaultPool          *poolBody          `json:"default_pool"`
	TimeoutClientData    *int               `json:"timeout_client_data"`
	TimeoutMemberConnect *int               `json:"timeout_member_connect"`
	TimeoutMemberData    *int               `json:"timeout_member_data"`
	TimeoutTCPInspect    *int               `json:"timeout_tcp_inspect"`
	AllowedCIDRs         json.RawMessage    `json:"allowed_cidrs"`
	InsertHeaders        *map[string]string `json:"insert_headers"`
	AdminStateUp         *bool              `json:"admin_state_up"`
	ProjectID            string             `json:"project_id"`
	Tags                 *[]string          `json:"tags"`
}

type loadBalancerBody struct {
	Name             *string        `json:"name"`
	Description      *string        `json:"description"`
	VIPPortID        string         `json:"vip_port_id"`
	VIPSubnetID      string         `json:"vip_subnet_id"`
	VIPNetworkID     string         `json:"vip_network_id"`
	VIPAddress       string         `json:"vip_address"`
	VIPQosPolicyID   *string        `json:"vip_qos_policy_id"`
	ProjectID        string         `json:"project_id"`
	AdminStateUp     *bool          `json:"admin_state_up"`
	FlavorID         string         `json:"flavor_id"`
	AvailabilityZone string         `json:"availability_zone"`
	Provider         string         `json:"provider"`
	Listeners        []listenerBody `json:"listeners"`
	Pools            []poolBody     `json:"pools"`
	Tags             *[]string      `json:"tags"`
}

func nameOf(p *string) (string, *apiError) {
	if p == nil {
		return "", nil
	}
	if len(*p) > 255 {
		return "", badRequest400("name is longer than 255 characters")
	}
	return *p, nil
}

func tagsOf(p *[]string) []string {
	if p == nil {
		return nil
	}
	return slices.Clone(*p)
}

// Builders check a body and make what it describes, without storing it.

func (e *Emulator) buildMember(b *memberBody) (Member, *apiError) {
	m := Member{ID: newUUID(), Address: b.Address, ProtocolPort: b.ProtocolPort, Weight: 1, AdminStateUp: true, Tags: tagsOf(b.Tags)}
	var err *apiError
	if m.Name, err = nameOf(b.Name); err != nil {
		return m, err
	}
	if _, perr := netip.ParseAddr(b.Address); perr != nil {
		return m, badRequest400("address %q is not an IP address", b.Address)
	}
	if b.ProtocolPort < 1 || b.ProtocolPort > 65535 {
		return m, badRequest400("protocol_port %d is not a port number", b.ProtocolPort)
	}
	if b.Weight != nil {
		if *b.Weight < 0 || *b.Weight > 256 {
			return m, badRequest400("weight %d is not in 0..256", *b.Weight)
		}
		m.Weight = *b.Weight
	}
	if b.AdminStateUp != nil {
		m.AdminStateUp = *b.AdminStateUp
	}
	if b.Backup != nil {
		m.Backup = *b.Backup
	}
	if len(b.SubnetID) > 0 && !isJSONNull(b.SubnetID) {
		if json.Unmarshal(b.SubnetID, &m.SubnetID) != nil || e.neutron.subnets[m.SubnetID] == nil {
			return m, badRequest400("subnet %s not found", string(b.SubnetID))
		}
	}
	if len(b.MonitorAddress) > 0 && !isJSONNull(b.MonitorAddress) {
		if json.Unmarshal(b.MonitorAddress, &m.MonitorAddress) != nil {
			return m, badRequest400("monitor_address is not a string")
		}
		if _, perr := netip.ParseAddr(m.MonitorAddress); perr != nil {
			return m, badRequest400("monitor_address %q is not an IP address", m.MonitorAddress)
		}
	}
	if len(b.MonitorPort) > 0 && !isJSONNull(b.MonitorPort) {
		if json.Unmarshal(b.MonitorPort, &m.MonitorPort) != nil || m.MonitorPort < 1 || m.MonitorPort > 65535 {
			return m, badRequest400("monitor_port %s is not a port number", string(b.MonitorPort))
		}
	}
	return m, nil
}

func buildMonitor(b *monitorBody, pool *Pool) (*HealthMonitor, *apiError) {
	m := &HealthMonitor{ID: newUUID(), PoolID: pool.ID, Type: b.Type, MaxRetriesDown: 3, Tags: tagsOf(b.Tags)}
	var err *apiError
	if m.Name, err = nameOf(b.Name); err != nil {
		return nil, err
	}
	if !slices.Contains(monitorTypes, b.Type) {
		return nil, badRequest400("type %q is not one of %s", b.Type, strings.Join(monitorTypes, ", "))
	}
	if pool.Protocol == "UDP" && !slices.Contains(udpMonitorTypes, b.Type) {
		return nil, badRequest400("a %s health monitor cannot monitor a UDP pool", b.Type)
	}
	if pool.Protocol != "UDP" && b.Type == "UDP-CONNECT" {
		return nil, badRequest400("a UDP-CONNECT health monitor monitors UDP pools only")
	}
	if b.Delay == nil || b.Timeout == nil || b.MaxRetries == nil {
		return nil, badRequest400("delay, timeout and max_retries are mandatory")
	}
	m.Delay, m.Timeout, m.MaxRetries = *b.Delay, *b.Timeout, *b.MaxRetries
	if b.MaxRetriesDown != nil {
		m.MaxRetriesDown = *b.MaxRetriesDown
	}
	if b.Type == "HTTP" || b.Type == "HTTPS" {
		m.HTTPMethod, m.URLPath, m.ExpectedCodes = "GET", "/", "200"
	}
	applyMonitorBody(m, b)
	return m, checkMonitor(m)
}

func applyMonitorBody(m *HealthMonitor, b *monitorBody) {
	if b.Delay != nil {
		m.Delay = *b.Delay
	}
	if b.Timeout != nil {
		m.Timeout = *b.Timeout
	}
	if b.MaxRetries != nil {
		m.MaxRetries = *b.MaxRetries
	}
	if b.MaxRetriesDown != nil {
		m.MaxRetriesDown = *b.MaxRetriesDown
	}
	if b.URLPath != nil {
		m.URLPath = *b.URLPath
	}
	if b.HTTPMethod != nil {
		m.HTTPMethod = *b.HTTPMethod
	}
	if b.ExpectedCodes != nil {
		m.ExpectedCodes = *b.ExpectedCodes
	}
	if b.Tags != nil {
		m.Tags = slices.Clone(*b.Tags)
	}
}

func checkMonitor(m *HealthMonitor) *apiError {
	switch {
	case m.Delay < 1:
		return badRequest400("delay %d must be at least 1", m.Delay)
	case m.Timeout < 1 || m.Timeout > m.Delay:
		return badRequest400("timeout %d must be at least 1 and at most the delay (%d)", m.Timeout, m.Delay)
	case m.MaxRetries < 1 || m.MaxRetries > 10:
		return badRequest400("max_retries %d is not in 1..10", m.MaxRetries)
	case m.MaxRetriesDown < 1 || m.MaxRetriesDown > 10:
		return badRequest400("max_retries_down %d is not in 1..10", m.MaxRetriesDown)
	case m.Type != "HTTP" && m.Type != "HTTPS" && (m.URLPath != "" || m.HTTPMethod != "" || m.ExpectedCodes != ""):
		return badRequest400("url_path, http_method and expected_codes apply to HTTP and HTTPS monitors only")
	case (m.Type == "HTTP" || m.Type == "HTTPS") && !strings.HasPrefix(m.URLPath, "/"):
		return badRequest400("url_path %q must start with /", m.URLPath)
	}
	return nil
}

// builtPool is a pool made from a body, with its monitor.
type builtPool struct {
	pool    *Pool
	monitor *HealthMonitor
}

func (e *Emulator) buildPool(lb *lbRecord, b *poolBody, listener *Listener) (*builtPool, *apiError) {
	p := &Pool{ID: newUUID(), LoadBalancerID: lb.ID, Protocol: b.Protocol, Tags: tagsOf(b.Tags)}
	var err *apiError
	if p.Name, err = nameOf(b.Name); err != nil {
		return nil, err
	}
	if b.Description != nil {
		p.Description = *b.Description
	}
	if !slices.Contains(poolProtocols, b.Protocol) {
		return nil, badRequest400("pool protocol %q is not one of %s", b.Protocol, strings.Join(poolProtocols, ", "))
	}
	if b.LBAlgorithm == nil || !slices.Contains(lbAlgorithms, *b.LBAlgorithm) {
		return nil, badRequest400("lb_algorithm must be one of %s", strings.Join(lbAlgorithms, ", "))
	}
	p.LBAlgorithm = *b.LBAlgorithm
	if listener != nil {
		if !slices.Contains(poolProtocolsOf[listener.Protocol], p.Protocol) {
			return nil, badRequest400("the pool protocol '%s' is invalid while the listener protocol is '%s'", p.Protocol, listener.Protocol)
		}
		p.ListenerID = listener.ID
	}
	if sp, err := persistenceOf(b.SessionPersistence); err != nil {
		return nil, err
	} else if sp != nil {
		p.SessionPersistence = *sp
	}
	for i := range b.Members {
		m, err := e.buildMember(&b.Members[i])
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(p.Members, func(o Member) bool { return o.Address == m.Address && o.ProtocolPort == m.ProtocolPort }) {
			return nil, conflict("Another member on this pool is already using ip %s on protocol_port %d", m.Address, m.ProtocolPort)
		}
		p.Members = append(p.Members, m)
	}
	out := &builtPool{pool: p}
	if b.HealthMonitor != nil {
		m, err := buildMonitor(b.HealthMonitor, p)
		if err != nil {
			return nil, err
		}
		out.monitor = m
	}
	return out, nil
}

// persistenceOf reads session_persistence: nil when absent, "" for null.
func persistenceOf(raw json.RawMessage) (*string, *apiError) {
	if raw == nil {
		return nil, nil
	}
	none := ""
	if isJSONNull(raw) {
		return &none, nil
	}
	var sp persistenceBody
	if err := json.Unmarshal(raw, &sp); err != nil || !slices.Contains(persistenceTypes, sp.Type) {
		return nil, badRequest400("session_persistence type must be one of %s", strings.Join(persistenceTypes, ", "))
	}
	return &sp.Type, nil
}

// protocolFamily groups the listener protocols that cannot share a port.
func protocolFamily(protocol string) string {
	switch protocol {
	case "UDP", "SCTP":
		return protocol
	default:
		return "TCP"
	}
}

func cidrsOf(raw json.RawMessage) ([]string, *apiError) {
	if isJSONNull(raw) {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest400("allowed_cidrs must be a list of CIDRs")
	}
	for _, c := range list {
		if _, err := netip.ParsePrefix(c); err != nil {
			return nil, badRequest400("allowed_cidrs: %q is not a CIDR", c)
		}
	}
	if len(list) == 0 {
		// None allows all, as null does; Octavia shows it as null.
		return nil, nil
	}
	return list, nil
}

func checkTimeout(name string, v *int) *apiError {
	if v != nil && (*v < 0 || *v > maxListenerTimeout) {
		return badRequest400("%s %d is not in 0..%d", name, *v, maxListenerTimeout)
	}
	return nil
}

// buildListener makes a listener and its default pool; siblings are the
// other listeners the load balancer will have.
func (e *Emulator) buildListener(lb *lbRecord, b *listenerBody, siblings []*Listener) (*Listener, *builtPool, *apiError) {
	l := &Listener{ID: newUUID(), LoadBalancerID: lb.ID, Protocol: b.Protocol, ProtocolPort: b.ProtocolPort,
		ConnectionLimit: -1, TimeoutClientData: 50000, TimeoutMemberConnect: 5000, TimeoutMemberData: 50000,
		Tags: tagsOf(b.Tags)}
	var err *apiError
	if l.Name, err = nameOf(b.Name); err != nil {
		return nil, nil, err
	}
	if b.Description != nil {
		l.Description = *b.Description
	}
	if !slices.Contains(listenerProtocols, b.Protocol) {
		return nil, nil, badRequest400("listener protocol %q is not one of %s", b.Protocol, strings.Join(listenerProtocols, ", "))
	}
	if b.ProtocolPort < 1 || b.ProtocolPort > 65535 {
		return nil, nil, badRequest400("protocol_port %d is not a port number", b.ProtocolPort)
	}
	for _, s := range siblings {
		if s.ProtocolPort == l.ProtocolPort && protocolFamily(s.Protocol) == protocolFamily(l.Protocol) {
			return nil, nil, conflict("Another Listener on this Load Balancer is already using protocol %s and protocol_port %d", l.Protocol, l.ProtocolPort)
		}
	}
	if apiErr := applyListenerBody(l, b); apiErr != nil {
		return nil, nil, apiErr
	}
	if len(b.DefaultPoolID) > 0 && !isJSONNull(b.DefaultPoolID) {
		return nil, nil, badRequest400("default_pool_id is not supported by the emulator; give default_pool")
	}
	var bp *builtPool
	if b.DefaultPool != nil {
		if bp, err = e.buildPool(lb, b.DefaultPool, l); err != nil {
			return nil, nil, err
		}
		l.DefaultPoolID = bp.pool.ID
	}
	return l, bp, nil
}

// applyListenerBody applies the attributes a create and an update share.
func applyListenerBody(l *Listener, b *listenerBody) *apiError {
	if b.ConnectionLimit != nil {
		if *b.ConnectionLimit < -1 {
			return badRequest400("connection_limit %d is less than -1", *b.ConnectionLimit)
		}
		l.ConnectionLimit = *b.ConnectionLimit
	}
	for _, t := range []struct {
		name string
		v    *int
		dst  *int
	}{
		{"timeout_client_data", b.TimeoutClientData, &l.TimeoutClientData},
		{"timeout_member_connect", b.TimeoutMemberConnect, &l.TimeoutMemberConnect},
		{"timeout_member_data", b.TimeoutMemberData, &l.TimeoutMemberData},
		{"timeout_tcp_inspect", b.TimeoutTCPInspect, &l.TimeoutTCPInspect},
	} {
		if err := checkTimeout(t.name, t.v); err != nil {
			return err
		}
		if t.v != nil {
			*t.dst = *t.v
		}
	}
	if b.AllowedCIDRs != nil {
		cidrs, err := cidrsOf(b.AllowedCIDRs)
		if err != nil {
			return err
		}
		l.AllowedCIDRs = cidrs
	}
	if b.InsertHeaders != nil {
		l.InsertHeaders = maps.Clone(*b.InsertHeaders)
	}
	if b.Tags != nil {
		l.Tags = slices.Clone(*b.Tags)
	}
	return nil
}

// Committing stores what a builder made, in the given status.

func (e *Emulator) commitPoolLocked(lb *lbRecord, bp *builtPool, status string) {
	p := bp.pool
	p.ProvisioningStatus = status
	for i := range p.Members {
		p.Members[i].ProvisioningStatus = status
	}
	if bp.monitor != nil {
		bp.monitor.ProvisioningStatus = status
		p.HealthMonitor = bp.monitor
		e.octavia.monitors[bp.monitor.ID] = bp.monitor
		e.octavia.created[bp.monitor.ID] = e.opts.Now()
	}
	e.octavia.pools[p.ID] = p
	e.octavia.created[p.ID] = e.opts.Now()
	lb.poolIDs = append(lb.poolIDs, p.ID)
}

func (e *Emulator) commitListenerLocked(lb *lbRecord, l *Listener, bp *builtPool, status string) {
	l.ProvisioningStatus = status
	e.octavia.listeners[l.ID] = l
	e.octavia.created[l.ID] = e.opts.Now()
	lb.listenerIDs = append(lb.listenerIDs, l.ID)
	if bp != nil {
		e.commitPoolLocked(lb, bp, status)
	}
}

// Views, as Octavia shows its resources. e.mu is held.

func octaviaTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") }

func idList(ids []string) []any {
	out := make([]any, 0, len(ids))
	for _, id := range ids {
		out = append(out, map[string]any{"id": id})
	}
	return out
}

func operating(status string) string {
	switch status {
	case StatusActive:
		return "ONLINE"
	case StatusError:
		return "ERROR"
	default:
		return "OFFLINE"
	}
}

func nullable[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// loadBalancerView is a load balancer; full shows its children whole, as
// the answer to a fully populated create does.
func (e *Emulator) loadBalancerView(lb *lbRecord, full bool) map[string]any {
	created := octaviaTime(e.octavia.created[lb.ID])
	v := map[string]any{
		"id": lb.ID, "name": lb.Name, "description": lb.Description, "project_id": lb.ProjectID,
		"provisioning_status": lb.ProvisioningStatus, "operating_status": operating(lb.ProvisioningStatus),
		"admin_state_up": true, "vip_address": lb.VIPAddress, "vip_port_id": lb.VIPPortID,
		"vip_subnet_id": lb.VIPSubnetID, "vip_network_id": lb.VIPNetworkID, "vip_qos_policy_id": nil,
		"provider": lb.Provider, "flavor_id": nullable(lb.FlavorID), "availability_zone": nullable(lb.AvailabilityZone),
		"tags": cloneTags(lb.Tags), "additional_vips": []any{}, "created_at": created, "updated_at": created,
		"listeners": idList(lb.listenerIDs), "pools": idList(lb.poolIDs),
	}
	if full {
		var ls, ps []any
		for _, id := range lb.listenerIDs {
			ls = append(ls, e.listenerView(e.octavia.listeners[id]))
		}
		for _, id := range lb.poolIDs {
			ps = append(ps, e.poolView(e.octavia.pools[id], true))
		}
		v["listeners"], v["pools"] = append([]any{}, ls...), append([]any{}, ps...)
	}
	return v
}

func (e *Emulator) listenerView(l *Listener) map[string]any {
	created := octaviaTime(e.octavia.created[l.ID])
	var pools []string
	for _, id := range e.octavia.lbs[l.LoadBalancerID].poolIDs {
		if e.octavia.pools[id].ListenerID == l.ID {
			pools = append(pools, id)
		}
	}
	cidrs := any(nil)
	if l.AllowedCIDRs != nil {
		cidrs = slices.Clone(l.AllowedCIDRs)
	}
	headers := maps.Clone(l.InsertHeaders)
	if headers == nil {
		headers = map[string]string{}
	}
	v := map[string]any{
		"id": l.ID, "name": l.Name, "description": l.Description, "project_id": e.octavia.lbs[l.LoadBalancerID].ProjectID,
		"protocol": l.Protocol, "protocol_port": l.ProtocolPort, "connection_limit": l.ConnectionLimit,
		"default_pool_id": nullable(l.DefaultPoolID), "loadbalancers": idList([]string{l.LoadBalancerID}),
		"pools": idList(pools), "l7policies": []any{}, "admin_state_up": true,
		"provisioning_status": l.ProvisioningStatus, "operating_status": operating(l.ProvisioningStatus),
		"timeout_client_data": l.TimeoutClientData, "timeout_member_connect": l.TimeoutMemberConnect,
		"timeout_member_data": l.TimeoutMemberData, "timeout_tcp_inspect": l.TimeoutTCPInspect,
		"allowed_cidrs": cidrs, "insert_headers": headers, "tags": cloneTags(l.Tags),
		"default_tls_container_ref": nil, "sni_container_refs": []string{}, "created_at": created, "updated_at": created,
	}
	return v
}

func (e *Emulator) poolView(p *Pool, full bool) map[string]any {
	created := octaviaTime(e.octavia.created[p.ID])
	var listeners []string
	if p.ListenerID != "" {
		listeners = []string{p.ListenerID}
	}
	memberIDs := make([]string, 0, len(p.Members))
	for _, m := range p.Members {
		memberIDs = append(memberIDs, m.ID)
	}
	persistence := any(nil)
	if p.SessionPersistence != "" {
		persistence = map[string]any{"type": p.SessionPersistence, "cookie_name": nil}
	}
	monitorID := ""
	if p.HealthMonitor != nil {
		monitorID = p.HealthMonitor.ID
	}
	v := map[string]any{
		"id": p.ID, "name": p.Name, "description": p.Description, "project_id": e.octavia.lbs[p.LoadBalancerID].ProjectID,
		"protocol": p.Protocol, "lb_algorithm": p.LBAlgorithm, "session_persistence": persistence,
		"loadbalancers": idList([]string{p.LoadBalancerID}), "listeners": idList(listeners),
		"members": idList(memberIDs), "healthmonitor_id": nullable(monitorID), "admin_state_up": true,
		"provisioning_status": p.ProvisioningStatus, "operating_status": operating(p.ProvisioningStatus),
		"tags": cloneTags(p.Tags), "tls_enabled": false, "created_at": created, "updated_at": created,
	}
	if full {
		members := make([]any, 0, len(p.Members))
		for i := range p.Members {
			members = append(members, e.memberView(p, &p.Members[i]))
		}
		v["members"] = members
		if p.HealthMonitor != nil {
			v["healthmonitor"] = e.monitorView(p.HealthMonitor)
		}
	}
	return v
}

func (e *Emulator) memberView(p *Pool, m *Member) map[string]any {
	created := octaviaTime(e.octavia.created[p.ID])
	return map[string]any{
		"id": m.ID, "name": m.Name, "address": m.Address, "protocol_port": m.ProtocolPort,
		"subnet_id": nullable(m.SubnetID), "weight": m.Weight, "backup": m.Backup, "admin_state_up": m.AdminStateUp,
		"monitor_address": nullable(m.MonitorAddress), "monitor_port": nullable(m.MonitorPort),
		"project_id": e.octavia.lbs[p.LoadBalancerID].ProjectID, "pool_id": p.ID,
		"provisioning_status": m.ProvisioningStatus, "operating_status": operating(m.ProvisioningStatus),
		"tags": cloneTags(m.Tags), "created_at": created, "updated_at": created,
	}
}

func (e *Emulator) monitorView(m *HealthMonitor) map[string]any {
	created := octaviaTime(e.octavia.created[m.ID])
	p := e.octavia.pools[m.PoolID]
	return map[string]any{
		"id": m.ID, "name": m.Name, "type": m.Type, "delay": m.Delay, "timeout": m.Timeout,
		"max_retries": m.MaxRetries, "max_retries_down": m.MaxRetriesDown,
		"http_method": nullable(m.HTTPMethod), "url_path": nullable(m.URLPath), "expected_codes": nullable(m.ExpectedCodes),
		"http_version": nil, "domain_name": nil, "admin_state_up": true,
		"project_id": e.octavia.lbs[p.LoadBalancerID].ProjectID, "pools": idList([]string{m.PoolID}),
		"provisioning_status": m.ProvisioningStatus, "operating_status": operating(m.ProvisioningStatus),
		"tags": cloneTags(m.Tags), "created_at": created, "updated_at": created,
	}
}

// Lookups that answer 404 themselves. e.mu is held.

func (e *Emulator) lbOf(c *call, id string) *lbRecord {
	lb := e.octavia.lbs[id]
	if lb == nil || lb.ProjectID != c.token.projectID {
		c.fail(http.StatusNotFound, "Load Balancer "+id+" not found.")
		return nil
	}
	return lb
}

func (e *Emulator) listenerOf(c *call) (*Listener, *lbRecord) {
	id := c.r.PathValue("id")
	l := e.octavia.listeners[id]
	if l == nil || e.octavia.lbs[l.LoadBalancerID].ProjectID != c.token.projectID {
		c.fail(http.StatusNotFound, "Listener "+id+" not found.")
		return nil, nil
	}
	return l, e.octavia.lbs[l.LoadBalancerID]
}

func (e *Emulator) poolOf(c *call, id string) (*Pool, *lbRecord) {
	p := e.octavia.pools[id]
	if p == nil || e.octavia.lbs[p.LoadBalancerID].ProjectID != c.token.projectID {
		c.fail(http.StatusNotFound, "Pool "+id+" not found.")
		return nil, nil
	}
	return p, e.octavia.lbs[p.LoadBalancerID]
}

func (e *Emulator) monitorOf(c *call) (*HealthMonitor, *Pool, *lbRecord) {
	id := c.r.PathValue("id")
	m := e.octavia.monitors[id]
	if m == nil {
		c.fail(http.StatusNotFound, "Health Monitor "+id+" not found.")
		return nil, nil, nil
	}
	p := e.octavia.pools[m.PoolID]
	lb := e.octavia.lbs[p.LoadBalancerID]
	if lb.ProjectID != c.token.projectID {
		c.fail(http.StatusNotFound, "Health Monitor "+id+" not found.")
		return nil, nil, nil
	}
	return m, p, lb
}

// mutable answers 409 unless the load balancer may change now: it is
// ACTIVE (or, for its own deletion, ERROR).
func (e *Emulator) mutable(c *call, lb *lbRecord, deleting bool) bool {
	if lb.ProvisioningStatus == StatusActive || (deleting && lb.ProvisioningStatus == StatusError) {
		return true
	}
	c.fail(http.StatusConflict, fmt.Sprintf("Load balancer %s is %s and cannot be changed until it is ACTIVE.", lb.ID, lb.ProvisioningStatus))
	return false
}

// listLoadBalancers is GET /v2/lbaas/loadbalancers.
func (e *Emulator) listLoadBalancers(c *call) {
	e.lockState()
	var views []map[string]any
	for _, lb := range e.octavia.lbs {
		if lb.ProjectID == c.token.projectID {
			views = append(views, e.loadBalancerView(lb, false))
		}
	}
	e.mu.Unlock()
	sortViews(views)
	if list, ok := c.filterViews(views, nil); ok {
		c.json(http.StatusOK, map[string]any{"loadbalancers": list, "loadbalancers_links": []any{}})
	}
}

// getLoadBalancer is GET /v2/lbaas/loadbalancers/{id}.
func (e *Emulator) getLoadBalancer(c *call) {
	e.lockState()
	defer e.mu.Unlock()
	if lb := e.lbOf(c, c.r.PathValue("id")); lb != nil {
		c.json(http.StatusOK, map[string]any{"loadbalancer": e.loadBalancerView(lb, false)})
	}
}

// createLoadBalancer is POST /v2/lbaas/loadbalancers, with its listeners,
// their default pools, members and monitors when the body has them (a
// fully populated load balancer). Octavia makes the VIP port at once.
func (e *Emulator) createLoadBalancer(c *call) {
	var body struct {
		LoadBalancer loadBalancerBody `json:"loadbalancer"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.LoadBalancer
	e.lockState()
	defer e.mu.Unlock()
	lb := &lbRecord{Balancer: Balancer{ID: newUUID(), ProjectID: c.token.projectID, Provider: "amphora",
		FlavorID: b.FlavorID, AvailabilityZone: b.AvailabilityZone, Tags: tagsOf(b.Tags)}}
	var apiErr *apiError
	if lb.Name, apiErr = nameOf(b.Name); apiErr != nil {
		c.refuse(apiErr)
		return
	}
	if b.Description != nil {
		lb.Description = *b.Description
	}
	if b.Provider != "" {
		if !slices.Contains(octaviaProviders, b.Provider) {
			c.refuse(badRequest400("provider '%s' is not enabled", b.Provider))
			return
		}
		lb.Provider = b.Provider
	}
	vip, apiErr := e.vipPortFor(c, lb, &b)
	if apiErr != nil {
		c.refuse(apiErr)
		return
	}
	type builtListener struct {
		l  *Listener
		bp *builtPool
	}
	var listeners []builtListener
	var siblings []*Listener
	for i := range b.Listeners {
		l, bp, err := e.buildListener(lb, &b.Listeners[i], siblings)
		if err != nil {
			c.refuse(err)
			return
		}
		siblings = append(siblings, l)
		listeners = append(listeners, builtListener{l, bp})
	}
	var pools []*builtPool
	for i := range b.Pools {
		bp, err := e.buildPool(lb, &b.Pools[i], nil)
		if err != nil {
			c.refuse(err)
			return
		}
		pools = append(pools, bp)
	}
	port, err := e.addPortLocked(vip)
	if err != nil {
		status := http.StatusBadRequest
		if strings.Contains(err.Error(), errAddressInUse.Error()) {
			status = http.StatusConflict
		}
		c.fail(status, "Validation failure: "+err.Error())
		return
	}
	lb.VIPPortID, lb.VIPAddress = port.ID, port.FixedIPs[0].IPAddress
	lb.VIPSubnetID, lb.VIPNetworkID = port.FixedIPs[0].SubnetID, port.NetworkID
	e.octavia.lbs[lb.ID] = lb
	e.octavia.created[lb.ID] = e.opts.Now()
	for _, bl := range listeners {
		e.commitListenerLocked(lb, bl.l, bl.bp, StatusPendingCreate)
	}
	for _, bp := range pools {
		e.commitPoolLocked(lb, bp, StatusPendingCreate)
	}
	e.startLocked(lb, StatusPendingCreate)
	c.json(http.StatusCreated, map[string]any{"loadbalancer": e.loadBalancerView(lb, true)})
}

// vipPortFor is the VIP port a load balancer asks for: on the subnet, or
// on the network (its first subnet of the address's version), or an
// existing port. Octavia owns the port it makes.
func (e *Emulator) vipPortFor(c *call, lb *lbRecord, b *loadBalancerBody) (Port, *apiError) {
	if b.VIPPortID != "" {
		return Port{}, badRequest400("vip_port_id is not supported by the emulator")
	}
	port := Port{Name: "octavia-lb-" + lb.ID, ProjectID: c.token.projectID, DeviceID: "lb-" + lb.ID, DeviceOwner: DeviceOwnerOctavia}
	fixed := FixedIP{SubnetID: b.VIPSubnetID, IPAddress: b.VIPAddress}
	switch {
	case b.VIPSubnetID != "":
		s := e.neutron.subnets[b.VIPSubnetID]
		if s == nil || !networkVisible(e.neutron.networks[s.NetworkID], c.token.projectID) {
			return port, badRequest400("subnet %s not found", b.VIPSubnetID)
		}
		if b.VIPNetworkID != "" && b.VIPNetworkID != s.NetworkID {
			return port, badRequest400("subnet %s is not in network %s", s.ID, b.VIPNetworkID)
		}
		port.NetworkID = s.NetworkID
	case b.VIPNetworkID != "":
		n := e.neutron.networks[b.VIPNetworkID]
		if n == nil || !networkVisible(n, c.token.projectID) {
			return port, badRequest400("network %s not found", b.VIPNetworkID)
		}
		port.NetworkID = n.ID
		if b.VIPAddress == "" {
			for _, id := range n.Subnets {
				if e.neutron.subnets[id].IPVersion == 4 {
					fixed.SubnetID = id
					break
				}
			}
			if fixed.SubnetID == "" && len(n.Subnets) > 0 {
				fixed.SubnetID = n.Subnets[0]
			}
		}
	default:
		return port, badRequest400("VIP must contain one of: vip_port_id, vip_network_id, vip_subnet_id")
	}
	port.FixedIPs = []FixedIP{fixed}
	return port, nil
}

// updateLoadBalancer is PUT /v2/lbaas/loadbalancers/{id}.
func (e *Emulator) updateLoadBalancer(c *call) {
	var body struct {
		LoadBalancer loadBalancerBody `json:"loadbalancer"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.LoadBalancer
	if b.VIPPortID != "" || b.VIPSubnetID != "" || b.VIPNetworkID != "" || b.VIPAddress != "" ||
		b.Provider != "" || b.FlavorID != "" || b.AvailabilityZone != "" || b.Listeners != nil || b.Pools != nil {
		c.refuse(badRequest400("only name, description, admin_state_up, vip_qos_policy_id and tags can be updated"))
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	lb := e.lbOf(c, c.r.PathValue("id"))
	if lb == nil || !e.mutable(c, lb, false) {
		return
	}
	name, apiErr := nameOf(b.Name)
	if apiErr != nil {
		c.refuse(apiErr)
		return
	}
	if b.Name != nil {
		lb.Name = name
	}
	if b.Description != nil {
		lb.Description = *b.Description
	}
	if b.Tags != nil {
		lb.Tags = slices.Clone(*b.Tags)
	}
	e.startLocked(lb, StatusPendingUpdate)
	c.json(http.StatusOK, map[string]any{"loadbalancer": e.loadBalancerView(lb, false)})
}

// deleteLoadBalancer is DELETE /v2/lbaas/loadbalancers/{id}; with
// cascade=true it takes the children along, else it has to have none.
func (e *Emulator) deleteLoadBalancer(c *call) {
	cascade := strings.EqualFold(c.r.URL.Query().Get("cascade"), "true")
	e.lockState()
	defer e.mu.Unlock()
	lb := e.lbOf(c, c.r.PathValue("id"))
	if lb == nil || !e.mutable(c, lb, true) {
		return
	}
	if !cascade && (len(lb.listenerIDs) > 0 || len(lb.poolIDs) > 0) {
		c.refuse(badRequest400("cannot delete load balancer %s: it has listeners or pools", lb.ID))
		return
	}
	e.startLocked(lb, StatusPendingDelete)
	for _, id := range lb.listenerIDs {
		e.octavia.listeners[id].ProvisioningStatus = StatusPendingDelete
	}
	for _, id := range lb.poolIDs {
		e.markPoolDeletedLocked(e.octavia.pools[id])
	}
	c.w.WriteHeader(http.StatusNoContent)
}

func (e *Emulator) markPoolDeletedLocked(p *Pool) {
	p.ProvisioningStatus = StatusPendingDelete
	for i := range p.Members {
		p.Members[i].ProvisioningStatus = StatusPendingDelete
	}
	if p.HealthMonitor != nil {
		p.HealthMonitor.ProvisioningStatus = StatusPendingDelete
	}
}

// loadBalancerFilter is the loadbalancer_id filter of listeners and pools.
func loadBalancerFilter(view map[string]any, values []string) bool {
	lbs, _ := view["loadbalancers"].([]any)
	return slices.ContainsFunc(lbs, func(lb any) bool { return slices.Contains(values, lb.(map[string]any)["id"].(string)) })
}

// listListeners is GET /v2/lbaas/listeners.
func (e *Emulator) listListeners(c *call) {
	e.lockState()
	var views []map[string]any
	for _, l := range e.octavia.listeners {
		if e.octavia.lbs[l.LoadBalancerID].ProjectID == c.token.projectID {
			views = append(views, e.listenerView(l))
		}
	}
	e.mu.Unlock()
	sortViews(views)
	if list, ok := c.filterViews(views, map[string]filter{"loadbalancer_id": loadBalancerFilter}); ok {
		c.json(http.StatusOK, map[string]any{"listeners": list, "listeners_links": []any{}})
	}
}

// getListener is GET /v2/lbaas/listeners/{id}.
func (e *Emulator) getListener(c *call) {
	e.lockState()
	defer e.mu.Unlock()
	if l, _ := e.listenerOf(c); l != nil {
		c.json(http.StatusOK, map[string]any{"listener": e.listenerView(l)})
	}
}

func (e *Emulator) liveListenersLocked(lb *lbRecord) []*Listener {
	var out []*Listener
	for _, id := range lb.listenerIDs {
		if l := e.octavia.listeners[id]; l.ProvisioningStatus != StatusPendingDelete {
			out = append(out, l)
		}
	}
	return out
}

// createListener is POST /v2/lbaas/listeners, with its default pool when
// the body has one.
func (e *Emulator) createListener(c *call) {
	var body struct {
		Listener listenerBody `json:"listener"`
	}
	if !c.decode(&body) {
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	lb := e.lbOf(c, body.Listener.LoadBalancerID)
	if lb == nil || !e.mutable(c, lb, false) {
		return
	}
	l, bp, err := e.buildListener(lb, &body.Listener, e.liveListenersLocked(lb))
	if err != nil {
		c.refuse(err)
		return
	}
	e.commitListenerLocked(lb, l, bp, StatusPendingCreate)
	e.startLocked(lb, StatusPendingUpdate)
	c.json(http.StatusCreated, map[string]any{"listener": e.listenerView(l)})
}

// updateListener is PUT /v2/lbaas/listeners/{id}.
func (e *Emulator) updateListener(c *call) {
	var body struct {
		Listener listenerBody `json:"listener"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.Listener
	if b.Protocol != "" || b.ProtocolPort != 0 || b.LoadBalancerID != "" || b.DefaultPool != nil {
		c.refuse(badRequest400("protocol, protocol_port, loadbalancer_id and default_pool cannot be updated"))
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	l, lb := e.listenerOf(c)
	if l == nil || !e.mutable(c, lb, false) {
		return
	}
	changed := *l
	name, apiErr := nameOf(b.Name)
	if apiErr != nil {
		c.refuse(apiErr)
		return
	}
	if b.Name != nil {
		changed.Name = name
	}
	if b.Description != nil {
		changed.Description = *b.Description
	}
	if apiErr := applyListenerBody(&changed, &b); apiErr != nil {
		c.refuse(apiErr)
		return
	}
	if b.DefaultPoolID != nil {
		var id string
		if !isJSONNull(b.DefaultPoolID) {
			_ = json.Unmarshal(b.DefaultPoolID, &id)
		}
		if id != "" {
			p := e.octavia.pools[id]
			if p == nil || p.LoadBalancerID != lb.ID {
				c.refuse(badRequest400("pool %s is not a pool of load balancer %s", id, lb.ID))
				return
			}
			p.ListenerID = l.ID
		}
		changed.DefaultPoolID = id
	}
	*l = changed
	l.ProvisioningStatus = StatusPendingUpdate
	e.startLocked(lb, StatusPendingUpdate)
	c.json(http.StatusOK, map[string]any{"listener": e.listenerView(l)})
}

// deleteListener is DELETE /v2/lbaas/listeners/{id}; its default pool stays.
func (e *Emulator) deleteListener(c *call) {
	e.lockState()
	defer e.mu.Unlock()
	l, lb := e.listenerOf(c)
	if l == nil || !e.mutable(c, lb, false) {
		return
	}
	l.ProvisioningStatus = StatusPendingDelete
	e.startLocked(lb, StatusPendingUpdate)
	c.w.WriteHeader(http.StatusNoContent)
}

// listPools is GET /v2/lbaas/pools.
func (e *Emulator) listPools(c *call) {
	e.lockState()
	var views []map[string]any
	for _, p := range e.octavia.pools {
		if e.octavia.lbs[p.LoadBalancerID].ProjectID == c.token.projectID {
			views = append(views, e.poolView(p, false))
		}
	}
	e.mu.Unlock()
	sortViews(views)
	special := map[string]filter{
		"loadbalancer_id": loadBalancerFilter,
		"listener_id": func(view map[string]any, values []string) bool {
			ls, _ := view["listeners"].([]any)
			return slices.ContainsFunc(ls, func(l any) bool { return slices.Contains(values, l.(map[string]any)["id"].(string)) })
		},
	}
	if list, ok := c.filterViews(views, special); ok {
		c.json(http.StatusOK, map[string]any{"pools": list, "pools_links": []any{}})
	}
}

// getPool is GET /v2/lbaas/pools/{id}.
func (e *Emulator) getPool(c *call) {
	e.lockState()
	defer e.mu.Unlock()
	if p, _ := e.poolOf(c, c.r.PathValue("id")); p != nil {
		c.json(http.StatusOK, map[string]any{"pool": e.poolView(p, false)})
	}
}

// createPool is POST /v2/lbaas/pools, on a listener (as its default pool)
// or on a load balancer, with members and a monitor when the body has them.
func (e *Emulator) createPool(c *call) {
	var body struct {
		Pool poolBody `json:"pool"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.Pool
	e.lockState()
	defer e.mu.Unlock()
	var lb *lbRecord
	var listener *Listener
	switch {
	case b.ListenerID != "":
		l := e.octavia.listeners[b.ListenerID]
		if l == nil || e.octavia.lbs[l.LoadBalancerID].ProjectID != c.token.projectID {
			c.fail(http.StatusNotFound, "Listener "+b.ListenerID+" not found.")
			return
		}
		if l.DefaultPoolID != "" {
			c.refuse(conflict("Listener %s already has a default pool", l.ID))
			return
		}
		listener, lb = l, e.octavia.lbs[l.LoadBalancerID]
	case b.LoadBalancerID != "":
		if lb = e.lbOf(c, b.LoadBalancerID); lb == nil {
			return
		}
	default:
		c.refuse(badRequest400("a pool needs a listener_id or a loadbalancer_id"))
		return
	}
	if !e.mutable(c, lb, false) {
		return
	}
	bp, err := e.buildPool(lb, &b, listener)
	if err != nil {
		c.refuse(err)
		return
	}
	e.commitPoolLocked(lb, bp, StatusPendingCreate)
	if listener != nil {
		listener.DefaultPoolID = bp.pool.ID
	}
	e.startLocked(lb, StatusPendingUpdate)
	c.json(http.StatusCreated, map[string]any{"pool": e.poolView(bp.pool, false)})
}

// updatePool is PUT /v2/lbaas/pools/{id}.
func (e *Emulator) updatePool(c *call) {
	var body struct {
		Pool poolBody `json:"pool"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.Pool
	if b.Protocol != "" || b.ListenerID != "" || b.LoadBalancerID != "" || b.Members != nil || b.HealthMonitor != nil {
		c.refuse(badRequest400("protocol, listener_id, loadbalancer_id, members and healthmonitor cannot be updated"))
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	p, lb := e.poolOf(c, c.r.PathValue("id"))
	if p == nil || !e.mutable(c, lb, false) {
		return
	}
	name, apiErr := nameOf(b.Name)
	if apiErr != nil {
		c.refuse(apiErr)
		return
	}
	if b.LBAlgorithm != nil && !slices.Contains(lbAlgorithms, *b.LBAlgorithm) {
		c.refuse(badRequest400("lb_algorithm must be one of %s", strings.Join(lbAlgorithms, ", ")))
		return
	}
	sp, apiErr := persistenceOf(b.SessionPersistence)
	if apiErr != nil {
		c.refuse(apiErr)
		return
	}
	if b.Name != nil {
		p.Name = name
	}
	if b.Description != nil {
		p.Description = *b.Description
	}
	if b.LBAlgorithm != nil {
		p.LBAlgorithm = *b.LBAlgorithm
	}
	if sp != nil {
		p.SessionPersistence = *sp
	}
	if b.Tags != nil {
		p.Tags = slices.Clone(*b.Tags)
	}
	p.ProvisioningStatus = StatusPendingUpdate
	e.startLocked(lb, StatusPendingUpdate)
	c.json(http.StatusOK, map[string]any{"pool": e.poolView(p, false)})
}

// deletePool is DELETE /v2/lbaas/pools/{id}; its members and monitor go
// with it.
func (e *Emulator) deletePool(c *call) {
	e.lockState()
	defer e.mu.Unlock()
	p, lb := e.poolOf(c, c.r.PathValue("id"))
	if p == nil || !e.mutable(c, lb, false) {
		return
	}
	e.markPoolDeletedLocked(p)
	e.startLocked(lb, StatusPendingUpdate)
	c.w.WriteHeader(http.StatusNoContent)
}

// listMembers is GET /v2/lbaas/pools/{id}/members.
func (e *Emulator) listMembers(c *call) {
	e.lockState()
	p, _ := e.poolOf(c, c.r.PathValue("id"))
	if p == nil {
		e.mu.Unlock()
		return
	}
	views := make([]map[string]any, 0, len(p.Members))
	for i := range p.Members {
		views = append(views, e.memberView(p, &p.Members[i]))
	}
	e.mu.Unlock()
	sortViews(views)
	if list, ok := c.filterViews(views, nil); ok {
		c.json(http.StatusOK, map[string]any{"members": list, "members_links": []any{}})
	}
}

func memberIndex(c *call, p *Pool) int {
	id := c.r.PathValue("member")
	i := slices.IndexFunc(p.Members, func(m Member) bool { return m.ID == id })
	if i < 0 {
		c.fail(http.StatusNotFound, "Member "+id+" not found.")
	}
	return i
}

// getMember is GET /v2/lbaas/pools/{id}/members/{member}.
func (e *Emulator) getMember(c *call) {
	e.lockState()
	defer e.mu.Unlock()
	p, _ := e.poolOf(c, c.r.PathValue("id"))
	if p == nil {
		return
	}
	if i := memberIndex(c, p); i >= 0 {
		c.json(http.StatusOK, map[string]any{"member": e.memberView(p, &p.Members[i])})
	}
}

// createMember is POST /v2/lbaas/pools/{id}/members.
func (e *Emulator) createMember(c *call) {
	var body struct {
		Member memberBody `json:"member"`
	}
	if !c.decode(&body) {
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	p, lb := e.poolOf(c, c.r.PathValue("id"))
	if p == nil || !e.mutable(c, lb, false) {
		return
	}
	m, err := e.buildMember(&body.Member)
	if err != nil {
		c.refuse(err)
		return
	}
	if slices.ContainsFunc(p.Members, func(o Member) bool {
		return o.Address == m.Address && o.ProtocolPort == m.ProtocolPort && o.ProvisioningStatus != StatusPendingDelete
	}) {
		c.refuse(conflict("Another member on this pool is already using ip %s on protocol_port %d", m.Address, m.ProtocolPort))
		return
	}
	m.ProvisioningStatus = StatusPendingCreate
	p.Members = append(p.Members, m)
	e.startLocked(lb, StatusPendingUpdate)
	c.json(http.StatusCreated, map[string]any{"member": e.memberView(p, &p.Members[len(p.Members)-1])})
}

// batchUpdateMembers is PUT /v2/lbaas/pools/{id}/members: the pool's
// members become those of the request, matched by address and port:
// missing ones are deleted, new ones created, the others updated.
func (e *Emulator) batchUpdateMembers(c *call) {
	var body struct {
		Members []memberBody `json:"members"`
	}
	if !c.decode(&body) {
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	p, lb := e.poolOf(c, c.r.PathValue("id"))
	if p == nil || !e.mutable(c, lb, false) {
		return
	}
	type key struct {
		addr string
		port int
	}
	var next []Member
	seen := map[key]bool{}
	for i := range body.Members {
		m, err := e.buildMember(&body.Members[i])
		if err != nil {
			c.refuse(err)
			return
		}
		k := key{m.Address, m.ProtocolPort}
		if seen[k] {
			c.refuse(badRequest400("member %s:%d appears twice", m.Address, m.ProtocolPort))
			return
		}
		seen[k] = true
		if i := slices.IndexFunc(p.Members, func(o Member) bool { return key{o.Address, o.ProtocolPort} == k }); i >= 0 {
			m.ID = p.Members[i].ID
			m.ProvisioningStatus = StatusPendingUpdate
		} else {
			m.ProvisioningStatus = StatusPendingCreate
		}
		next = append(next, m)
	}
	for _, o := range p.Members {
		if !seen[key{o.Address, o.ProtocolPort}] {
			o.ProvisioningStatus = StatusPendingDelete
			next = append(next, o)
		}
	}
	p.Members = next
	e.startLocked(lb, StatusPendingUpdate)
	c.w.WriteHeader(http.StatusAccepted)
}

// updateMember is PUT /v2/lbaas/pools/{id}/members/{member}.
func (e *Emulator) updateMember(c *call) {
	var body struct {
		Member memberBody `json:"member"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.Member
	if b.Address != "" || b.ProtocolPort != 0 || b.SubnetID != nil {
		c.refuse(badRequest400("address, protocol_port and subnet_id cannot be updated"))
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	p, lb := e.poolOf(c, c.r.PathValue("id"))
	if p == nil || !e.mutable(c, lb, false) {
		return
	}
	i := memberIndex(c, p)
	if i < 0 {
		return
	}
	cur := p.Members[i]
	b.Address, b.ProtocolPort = cur.Address, cur.ProtocolPort
	if b.Name == nil {
		b.Name = &cur.Name
	}
	if b.Weight == nil {
		b.Weight = &cur.Weight
	}
	if b.AdminStateUp == nil {
		b.AdminStateUp = &cur.AdminStateUp
	}
	if b.Backup == nil {
		b.Backup = &cur.Backup
	}
	if b.Tags == nil {
		b.Tags = &cur.Tags
	}
	m, err := e.buildMember(&b)
	if err != nil {
		c.refuse(err)
		return
	}
	if b.MonitorAddress == nil {
		m.MonitorAddress = cur.MonitorAddress
	}
	if b.MonitorPort == nil {
		m.MonitorPort = cur.MonitorPort
	}
	m.ID, m.SubnetID, m.ProvisioningStatus = cur.ID, cur.SubnetID, StatusPendingUpdate
	p.Members[i] = m
	e.startLocked(lb, StatusPendingUpdate)
	c.json(http.StatusOK, map[string]any{"member": e.memberView(p, &p.Members[i])})
}

// deleteMember is DELETE /v2/lbaas/pools/{id}/members/{member}.
func (e *Emulator) deleteMember(c *call) {
	e.lockState()
	defer e.mu.Unlock()
	p, lb := e.poolOf(c, c.r.PathValue("id"))
	if p == nil || !e.mutable(c, lb, false) {
		return
	}
	i := memberIndex(c, p)
	if i < 0 {
		return
	}
	p.Members[i].ProvisioningStatus = StatusPendingDelete
	e.startLocked(lb, StatusPendingUpdate)
	c.w.WriteHeader(http.StatusNoContent)
}

// listMonitors is GET /v2/lbaas/healthmonitors.
func (e *Emulator) listMonitors(c *call) {
	e.lockState()
	var views []map[string]any
	for _, m := range e.octavia.monitors {
		if e.octavia.lbs[e.octavia.pools[m.PoolID].LoadBalancerID].ProjectID == c.token.projectID {
			views = append(views, e.monitorView(m))
		}
	}
	e.mu.Unlock()
	sortViews(views)
	special := map[string]filter{"pool_id": func(view map[string]any, values []string) bool {
		ps, _ := view["pools"].([]any)
		return slices.ContainsFunc(ps, func(p any) bool { return slices.Contains(values, p.(map[string]any)["id"].(string)) })
	}}
	if list, ok := c.filterViews(views, special); ok {
		c.json(http.StatusOK, map[string]any{"healthmonitors": list, "healthmonitors_links": []any{}})
	}
}

// getMonitor is GET /v2/lbaas/healthmonitors/{id}.
func (e *Emulator) getMonitor(c *call) {
	e.lockState()
	defer e.mu.Unlock()
	if m, _, _ := e.monitorOf(c); m != nil {
		c.json(http.StatusOK, map[string]any{"healthmonitor": e.monitorView(m)})
	}
}

// createMonitor is POST /v2/lbaas/healthmonitors: a pool has one at most.
func (e *Emulator) createMonitor(c *call) {
	var body struct {
		HealthMonitor monitorBody `json:"healthmonitor"`
	}
	if !c.decode(&body) {
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	p, lb := e.poolOf(c, body.HealthMonitor.PoolID)
	if p == nil || !e.mutable(c, lb, false) {
		return
	}
	if p.HealthMonitor != nil {
		c.refuse(conflict("This pool already has a health monitor"))
		return
	}
	m, err := buildMonitor(&body.HealthMonitor, p)
	if err != nil {
		c.refuse(err)
		return
	}
	m.ProvisioningStatus = StatusPendingCreate
	p.HealthMonitor = m
	e.octavia.monitors[m.ID] = m
	e.octavia.created[m.ID] = e.opts.Now()
	e.startLocked(lb, StatusPendingUpdate)
	c.json(http.StatusCreated, map[string]any{"healthmonitor": e.monitorView(m)})
}

// updateMonitor is PUT /v2/lbaas/healthmonitors/{id}.
func (e *Emulator) updateMonitor(c *call) {
	var body struct {
		HealthMonitor monitorBody `json:"healthmonitor"`
	}
	if !c.decode(&body) {
		return
	}
	b := body.HealthMonitor
	if b.Type != "" || b.PoolID != "" {
		c.refuse(badRequest400("type and pool_id cannot be updated"))
		return
	}
	e.lockState()
	defer e.mu.Unlock()
	m, _, lb := e.monitorOf(c)
	if m == nil || !e.mutable(c, lb, false) {
		return
	}
	changed := *m
	name, apiErr := nameOf(b.Name)
	if apiErr != nil {
		c.refuse(apiErr)
		return
	}
	if b.Name != nil {
		changed.Name = name
	}
	applyMonitorBody(&changed, &b)
	if err := checkMonitor(&changed); err != nil {
		c.refuse(err)
		return
	}
	*m = changed
	m.ProvisioningStatus = StatusPendingUpdate
	e.startLocked(lb, StatusPendingUpdate)
	c.json(http.StatusOK, map[string]any{"healthmonitor": e.monitorView(m)})
}

// deleteMonitor is DELETE /v2/lbaas/healthmonitors/{id}.
func (e *Emulator) deleteMonitor(c *call) {
	e.lockState()
	defer e.mu.Unlock()
	m, _, lb := e.monitorOf(c)
	if m == nil || !e.mutable(c, lb, false) {
		return
	}
	m.ProvisioningStatus = StatusPendingDelete
	e.startLocked(lb, StatusPendingUpdate)
	c.w.WriteHeader(http.StatusNoContent)
}
