package openstack

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Health monitor types and the check of externalTrafficPolicy: Local.
const (
	monitorTCP        = "TCP"
	monitorUDPConnect = "UDP-CONNECT"
	monitorHTTP       = "HTTP"
	healthCheckPath   = "/healthz"
	healthCheckCodes  = "200"
	healthCheckMethod = "GET"
	persistenceSource = "SOURCE_IP"
)

// listenerKey identifies a listener of a load balancer: one per Service
// port.
type listenerKey struct {
	protocol string
	port     int
}

func (k listenerKey) String() string { return fmt.Sprintf("%s/%d", k.protocol, k.port) }

// lbSpec is the load balancer a Service should have.
type lbSpec struct {
	name        string
	description string
	opts        *lbOptions
	listeners   []listenerSpec
}

// listenerSpec is a listener with its default pool.
type listenerSpec struct {
	key             listenerKey
	name            string
	connectionLimit int
	timeouts        listenerTimeouts
	allowedCIDRs    []string
	pool            poolSpec
}

// poolSpec is a pool with its members and monitor.
type poolSpec struct {
	name        string
	protocol    string
	method      string
	persistence string
	members     []memberSpec
	monitor     *monitorSpec
}

// memberSpec is a node in a pool.
type memberSpec struct {
	name        string
	address     string
	port        int
	monitorPort int
	subnetID    string
}

// monitorSpec is a pool's health monitor.
type monitorSpec struct {
	name       string
	kind       string
	delay      int
	timeout    int
	maxRetries int
	urlPath    string
	method     string
	codes      string
}

// childName names a listener, pool or monitor after the load balancer and
// its port, cutting the load balancer's name so that the port's part stays.
func childName(lbName string, key listenerKey, kind string) string {
	suffix := "_" + strings.ToLower(key.protocol) + "_" + strconv.Itoa(key.port)
	if kind != "" {
		suffix += "_" + kind
	}
	if len(lbName)+len(suffix) > maxNameLength {
		lbName = lbName[:maxNameLength-len(suffix)]
	}
	return lbName + suffix
}

// lbDescription says whose the load balancer is.
func lbDescription(clusterName string, svc *v1.Service) string {
	return cut(fmt.Sprintf("Kubernetes Service %s/%s of cluster %s, managed by ccmkit", svc.Namespace, svc.Name, clusterName), maxNameLength)
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// desiredLoadBalancer is the load balancer of a Service on nodes.
func desiredLoadBalancer(clusterName string, svc *v1.Service, nodes []*v1.Node, o *lbOptions) *lbSpec {
	spec := &lbSpec{name: loadBalancerName(clusterName, svc), description: lbDescription(clusterName, svc), opts: o}
	healthCheckPort := 0
	if o.monitor.enabled && svc.Spec.HealthCheckNodePort > 0 && svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
		healthCheckPort = int(svc.Spec.HealthCheckNodePort)
	}
	persistence := ""
	if svc.Spec.SessionAffinity == v1.ServiceAffinityClientIP {
		persistence = persistenceSource
	}
	for _, port := range svc.Spec.Ports {
		proto := string(protocolOf(port))
		key := listenerKey{protocol: proto, port: int(port.Port)}
		l := listenerSpec{
			key: key, name: childName(spec.name, key, ""), connectionLimit: o.connectionLimit,
			timeouts: o.timeouts, allowedCIDRs: o.sourceRanges,
			pool: poolSpec{name: childName(spec.name, key, "pool"), protocol: proto, method: o.method, persistence: persistence},
		}
		// A port without a node port (allocateLoadBalancerNodePorts:
		// false) has no members.
		if port.NodePort != 0 {
			l.pool.members = members(nodes, int(port.NodePort), healthCheckPort, o)
		}
		if o.monitor.enabled {
			m := &monitorSpec{name: childName(spec.name, key, "monitor"), kind: monitorTCP,
				delay: o.monitor.delay, timeout: o.monitor.timeout, maxRetries: o.monitor.maxRetries}
			if proto == string(v1.ProtocolUDP) {
				m.kind = monitorUDPConnect
			}
			if healthCheckPort > 0 {
				m.kind, m.urlPath, m.method, m.codes = monitorHTTP, healthCheckPath, healthCheckMethod, healthCheckCodes
			}
			l.pool.monitor = m
		}
		spec.listeners = append(spec.listeners, l)
	}
	return spec
}

// members are the nodes' addresses of the Service's family, by node name.
// A node without one is left out.
func members(nodes []*v1.Node, nodePort, monitorPort int, o *lbOptions) []memberSpec {
	var out []memberSpec
	for _, n := range nodes {
		addr := nodeAddress(n, o.ipFamily)
		if addr == "" {
			continue
		}
		out = append(out, memberSpec{name: n.Name, address: addr, port: nodePort, monitorPort: monitorPort, subnetID: o.memberSubnet.id})
	}
	slices.SortFunc(out, func(a, b memberSpec) int { return strings.Compare(a.name, b.name) })
	return out
}

// nodeAddress is a node's first InternalIP of the family.
func nodeAddress(n *v1.Node, family v1.IPFamily) string {
	for _, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		if ip.Is6() == (family == v1.IPv6Protocol) {
			return ip.String()
		}
	}
	return ""
}

// Requests of the spec.

func (l *listenerSpec) createOpts(tags []string) listeners.CreateOpts {
	opts := listeners.CreateOpts{
		Name: l.name, Protocol: listeners.Protocol(l.key.protocol), ProtocolPort: l.key.port,
		ConnLimit: ptr.To(l.connectionLimit), AllowedCIDRs: l.allowedCIDRs, Tags: tags,
		TimeoutClientData: l.timeouts.clientData, TimeoutMemberConnect: l.timeouts.memberConnect,
		TimeoutMemberData: l.timeouts.memberData,
	}
	pool := l.pool.createOpts(tags)
	opts.DefaultPool = &pool
	return opts
}

func (p *poolSpec) createOpts(tags []string) pools.CreateOpts {
	opts := pools.CreateOpts{Name: p.name, Protocol: pools.Protocol(p.protocol), LBMethod: pools.LBMethod(p.method), Tags: tags}
	if p.persistence != "" {
		opts.Persistence = &pools.SessionPersistence{Type: p.persistence}
	}
	for _, m := range p.members {
		opts.Members = append(opts.Members, pools.CreateMemberOpts{
			Name: m.name, Address: m.address, ProtocolPort: m.port, SubnetID: m.subnetID,
			MonitorPort: nonZero(m.monitorPort),
		})
	}
	if p.monitor != nil {
		opts.Monitor = p.monitor.createOpts("")
	}
	return opts
}

func (m *monitorSpec) createOpts(poolID string) monitors.CreateOpts {
	return monitors.CreateOpts{
		PoolID: poolID, Name: m.name, Type: m.kind, Delay: m.delay, Timeout: m.timeout,
		MaxRetries: m.maxRetries, MaxRetriesDown: defaultMaxRetriesDown,
		URLPath: m.urlPath, HTTPMethod: m.method, ExpectedCodes: m.codes,
	}
}

func (p *poolSpec) batchOpts() []pools.BatchUpdateMemberOpts {
	out := make([]pools.BatchUpdateMemberOpts, 0, len(p.members))
	for _, m := range p.members {
		o := pools.BatchUpdateMemberOpts{Address: m.address, ProtocolPort: m.port, Name: ptr.To(m.name), MonitorPort: nonZero(m.monitorPort)}
		if m.subnetID != "" {
			o.SubnetID = ptr.To(m.subnetID)
		}
		out = append(out, o)
	}
	return out
}

func nonZero(v int) *int {
	if v == 0 {
		return nil
	}
	return &v
}

// Comparison of the spec with what Octavia has.

// memberSet is a pool's members as comparable strings. A member whose
// subnet the spec leaves to Octavia matches whatever subnet it has.
func memberSet(specs []memberSpec, have []pools.Member) (want, got []string) {
	for _, m := range specs {
		want = append(want, fmt.Sprintf("%s|%s|%d|%d|%s", m.name, m.address, m.port, m.monitorPort, m.subnetID))
	}
	anySubnet := slices.ContainsFunc(specs, func(m memberSpec) bool { return m.subnetID == "" }) || len(specs) == 0
	for _, m := range have {
		subnet := m.SubnetID
		if anySubnet {
			subnet = ""
		}
		got = append(got, fmt.Sprintf("%s|%s|%d|%d|%s", m.Name, m.Address, m.ProtocolPort, m.MonitorPort, subnet))
	}
	slices.Sort(want)
	slices.Sort(got)
	return want, got
}

// listenerUpdate is the update that brings a listener in line with the
// spec; nil when it is.
func (l *listenerSpec) update(cur *listeners.Listener, tags []string) *listeners.UpdateOpts {
	var opts listeners.UpdateOpts
	changed := false
	if cur.Name != l.name {
		opts.Name, changed = ptr.To(l.name), true
	}
	if cur.ConnLimit != l.connectionLimit {
		opts.ConnLimit, changed = ptr.To(l.connectionLimit), true
	}
	for _, t := range []struct {
		want *int
		def  int
		cur  int
		dst  **int
	}{
		{l.timeouts.clientData, defaultTimeoutClientData, cur.TimeoutClientData, &opts.TimeoutClientData},
		{l.timeouts.memberConnect, defaultTimeoutMemberConnect, cur.TimeoutMemberConnect, &opts.TimeoutMemberConnect},
		{l.timeouts.memberData, defaultTimeoutMemberData, cur.TimeoutMemberData, &opts.TimeoutMemberData},
	} {
		want := t.def
		if t.want != nil {
			want = *t.want
		}
		if t.cur != want {
			*t.dst, changed = ptr.To(want), true
		}
	}
	if !equalCIDRs(cur.AllowedCIDRs, l.allowedCIDRs) {
		opts.AllowedCIDRs, changed = ptr.To(append([]string{}, l.allowedCIDRs...)), true
	}
	if !slices.Equal(sortedCopy(cur.Tags), sortedCopy(tags)) {
		opts.Tags, changed = ptr.To(tags), true
	}
	if !changed {
		return nil
	}
	return &opts
}

func equalCIDRs(a, b []string) bool {
	norm := func(list []string) []string {
		var out []string
		for _, c := range list {
			if p, err := netip.ParsePrefix(c); err == nil {
				out = append(out, p.Masked().String())
			} else {
				out = append(out, c)
			}
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(norm(a), norm(b))
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// poolUpdate is the update that brings a pool in line; nil when it is.
func (p *poolSpec) update(cur *pools.Pool, tags []string) *pools.UpdateOpts {
	var opts pools.UpdateOpts
	changed := false
	if cur.Name != p.name {
		opts.Name, changed = ptr.To(p.name), true
	}
	if cur.LBMethod != p.method {
		opts.LBMethod, changed = pools.LBMethod(p.method), true
	}
	if cur.Persistence.Type != p.persistence {
		changed = true
		if p.persistence == "" {
			opts.Persistence = &pools.SessionPersistence{}
		} else {
			opts.Persistence = &pools.SessionPersistence{Type: p.persistence}
		}
	}
	if !slices.Equal(sortedCopy(cur.Tags), sortedCopy(tags)) {
		opts.Tags, changed = ptr.To(tags), true
	}
	if !changed {
		return nil
	}
	return &opts
}

// monitorUpdate is the update that brings a monitor in line; nil when it
// is. A monitor of another type has to be replaced: Octavia does not
// change a monitor's type.
func (m *monitorSpec) update(cur *monitors.Monitor) (opts *monitors.UpdateOpts, replace bool) {
	if cur.Type != m.kind {
		return nil, true
	}
	var o monitors.UpdateOpts
	changed := false
	if cur.Name != m.name {
		o.Name, changed = ptr.To(m.name), true
	}
	if cur.Delay != m.delay || cur.Timeout != m.timeout || cur.MaxRetries != m.maxRetries {
		o.Delay, o.Timeout, o.MaxRetries, changed = m.delay, m.timeout, m.maxRetries, true
	}
	if m.kind == monitorHTTP && (cur.URLPath != m.urlPath || cur.HTTPMethod != m.method || cur.ExpectedCodes != m.codes) {
		o.URLPath, o.HTTPMethod, o.ExpectedCodes, changed = m.urlPath, m.method, m.codes, true
	}
	if !changed {
		return nil, false
	}
	return &o, false
}
