package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/cloud"
)

// ProviderName is the name the fake cloud registers under.
const ProviderName = "fake"

// providerIDPrefix starts every instance's providerID.
const providerIDPrefix = ProviderName + "://"

// maxCallRecords bounds the kept call records; counts stay exact.
const maxCallRecords = 10000

func init() {
	cloud.RegisterProvider(ProviderName, func(r io.Reader) (cloudprovider.Interface, error) {
		cfg, err := ParseConfig(r)
		if err != nil {
			return nil, err
		}
		return New(cfg)
	})
}

// LoadBalancer is a load balancer of the fake cloud.
type LoadBalancer struct {
	Name    string           `json:"name"`
	Service string           `json:"service"`
	VIP     string           `json:"vip"`
	Ports   []v1.ServicePort `json:"ports,omitempty"`
	Nodes   []string         `json:"nodes"`
}

// CallRecord is one provider call.
type CallRecord struct {
	Method string    `json:"method"`
	Object string    `json:"object"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Error  string    `json:"error,omitempty"`
}

// Cloud is the in-memory cloud. It is safe for concurrent use.
type Cloud struct {
	mu        sync.Mutex
	instances map[string]*Instance // by name
	auto      AutoInstances
	autoIPs   *pool
	autoSeq   int
	lbs       map[string]*LoadBalancer // by name
	members   []string                 // the last load balancer's node names
	vips      *pool
	routes    map[string]*Route // by destination CIDR
	faults    []*Fault
	faultSeq  int
	released  chan struct{} // closed and replaced when faults are removed
	rng       *rand.Rand

	calls     []CallRecord
	counts    map[string]int
	mutating  map[string]int // mutating calls in flight, by object
	overlaps  int
	closed    chan struct{}
	closeOnce sync.Once

	admin     *http.Server
	callLog   *os.File // guarded by mu
	adminAddr string
}

var (
	_ cloudprovider.Interface    = (*Cloud)(nil)
	_ cloudprovider.InstancesV2  = (*Cloud)(nil)
	_ cloudprovider.LoadBalancer = (*Cloud)(nil)
	_ cloudprovider.Routes       = (*Cloud)(nil)
)

// New builds a cloud from cfg and starts its admin API if cfg asks for it.
func New(cfg *Config) (*Cloud, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Cloud{
		instances: map[string]*Instance{},
		auto:      cfg.AutoInstances,
		lbs:       map[string]*LoadBalancer{},
		routes:    map[string]*Route{},
		released:  make(chan struct{}),
		rng:       rand.New(rand.NewPCG(1, 2)),
		counts:    map[string]int{},
		mutating:  map[string]int{},
		closed:    make(chan struct{}),
	}
	addressCIDR := cfg.AutoInstances.AddressCIDR
	if addressCIDR == "" {
		addressCIDR = "10.0.0.0/16"
	}
	c.autoIPs = newPool(netip.MustParsePrefix(addressCIDR))
	if cfg.LoadBalancers.VIPCIDR != "" {
		c.vips = newPool(netip.MustParsePrefix(cfg.LoadBalancers.VIPCIDR))
	}
	for _, in := range cfg.Instances {
		if err := c.AddInstance(in); err != nil {
			return nil, err
		}
	}
	for _, r := range cfg.Routes {
		r := r
		c.routes[r.DestinationCIDR] = &r
	}
	for _, f := range cfg.Faults {
		if _, err := c.AddFault(f); err != nil {
			return nil, err
		}
	}
	if cfg.CallLog != "" {
		f, err := os.OpenFile(cfg.CallLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("callLog: %w", err)
		}
		c.callLog = f
	}
	if cfg.AdminAddress != "" {
		if err := c.serveAdmin(cfg.AdminAddress); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Close stops the admin API and releases calls hung on faults.
func (c *Cloud) Close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		if c.admin != nil {
			_ = c.admin.Close()
		}
		if c.callLog != nil {
			c.mu.Lock()
			_ = c.callLog.Close()
			c.callLog = nil
			c.mu.Unlock()
		}
	})
}

// SetRandSeed makes ErrorRate faults repeatable.
func (c *Cloud) SetRandSeed(seed uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rng = rand.New(rand.NewPCG(seed, seed))
}

// Initialize does nothing.
func (c *Cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

// LoadBalancer returns the cloud itself.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c, true }

// Instances is not implemented: the fake cloud offers InstancesV2.
func (c *Cloud) Instances() (cloudprovider.Instances, bool) { return nil, false }

// InstancesV2 returns the cloud itself.
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c, true }

// Zones is not implemented: zones come with InstanceMetadata.
func (c *Cloud) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters is not implemented.
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// Routes returns the cloud itself.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) { return c, true }

// ProviderName returns "fake".
func (c *Cloud) ProviderName() string { return ProviderName }

// HasClusterID returns true.
func (c *Cloud) HasClusterID() bool { return true }

// --- calls, records and faults ---

// call records a call, applies the faults that match it and, if none
// fails it, runs fn. Mutating calls count overlaps on overlapKey.
func (c *Cloud) call(ctx context.Context, method, object, overlapKey string, fn func() error) error {
	start := time.Now()
	c.mu.Lock()
	c.counts[method]++
	if overlapKey != "" {
		if c.mutating[overlapKey] > 0 {
			c.overlaps++
		}
		c.mutating[overlapKey]++
	}
	c.mu.Unlock()

	err := c.applyFaults(ctx, method, object)
	if err == nil {
		err = fn()
	}

	c.mu.Lock()
	if overlapKey != "" {
		c.mutating[overlapKey]--
		if c.mutating[overlapKey] == 0 {
			delete(c.mutating, overlapKey)
		}
	}
	rec := CallRecord{Method: method, Object: object, Start: start, End: time.Now()}
	if err != nil {
		rec.Error = err.Error()
	}
	c.calls = append(c.calls, rec)
	if c.callLog != nil {
		line, _ := json.Marshal(rec)
		_, _ = c.callLog.Write(append(line, '\n'))
	}
	if len(c.calls) > maxCallRecords {
		c.calls = slices.Delete(c.calls, 0, len(c.calls)-maxCallRecords)
	}
	c.mu.Unlock()
	return err
}

// applyFaults applies, in order, each fault that matches the call.
func (c *Cloud) applyFaults(ctx context.Context, method, object string) error {
	c.mu.Lock()
	var matched []Fault
	for _, f := range c.faults {
		if (f.Method != "*" && f.Method != method) || (f.Count > 0 && f.Hits >= f.Count) {
			continue
		}
		if ok, _ := pathMatch(f.Object, object); !ok {
			continue
		}
		f.Hits++
		matched = append(matched, *f)
	}
	released := c.released
	c.mu.Unlock()

	for _, f := range matched {
		if f.Latency.Duration > 0 {
			t := time.NewTimer(f.Latency.Duration)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		switch f.Hang {
		case HangRespectContext:
			<-ctx.Done()
			return ctx.Err()
		case HangIgnoreContext:
			c.waitReleased(f.ID, released)
		}
		if f.Throttle {
			return &cloud.ThrottledError{Err: fmt.Errorf("fake cloud: %s %s: request limit exceeded", method, object)}
		}
		if f.Error != "" && (f.ErrorRate == 0 || c.roll() < f.ErrorRate) {
			return fmt.Errorf("fake cloud: %s %s: %s", method, object, f.Error)
		}
	}
	return nil
}

// waitReleased blocks until the fault id is removed or the cloud closed.
func (c *Cloud) waitReleased(id string, released chan struct{}) {
	for {
		select {
		case <-released:
		case <-c.closed:
			return
		}
		c.mu.Lock()
		present := slices.ContainsFunc(c.faults, func(f *Fault) bool { return f.ID == id })
		released = c.released
		c.mu.Unlock()
		if !present {
			return
		}
	}
}

func (c *Cloud) roll() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.Float64()
}

// AddFault validates and adds a fault and returns its id.
func (c *Cloud) AddFault(f Fault) (string, error) {
	if err := f.validate(); err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faultSeq++
	f.ID = strconv.Itoa(c.faultSeq)
	f.Hits = 0
	c.faults = append(c.faults, &f)
	return f.ID, nil
}

// RemoveFault removes a fault and releases the calls it holds; it reports
// whether the fault existed.
func (c *Cloud) RemoveFault(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.faults)
	c.faults = slices.DeleteFunc(c.faults, func(f *Fault) bool { return f.ID == id })
	c.releaseLocked()
	return len(c.faults) < n
}

// ClearFaults removes every fault and releases the calls they hold.
func (c *Cloud) ClearFaults() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = nil
	c.releaseLocked()
}

func (c *Cloud) releaseLocked() {
	close(c.released)
	c.released = make(chan struct{})
}

// Faults returns the faults with their hit counts.
func (c *Cloud) Faults() []Fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Fault, len(c.faults))
	for i, f := range c.faults {
		out[i] = *f
	}
	return out
}

// Calls returns the latest call records (at most 10,000).
func (c *Cloud) Calls() []CallRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// CallCount returns how many calls of method were made.
func (c *Cloud) CallCount(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[method]
}

// Overlaps returns how many mutating calls started while another mutating
// call on the same object (Service, or route destination) was in flight.
func (c *Cloud) Overlaps() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overlaps
}

// --- instances ---

// AddInstance adds an instance; a missing id is generated.
func (c *Cloud) AddInstance(in Instance) error {
	if err := validateInstance(in); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.instances[in.Name]; ok {
		return fmt.Errorf("instance %q already exists", in.Name)
	}
	if in.ID == "" {
		in.ID = c.newIDLocked()
	}
	for _, other := range c.instances {
		if other.ID == in.ID {
			return fmt.Errorf("instance id %q already exists", in.ID)
		}
	}
	if in.State == "" {
		in.State = StateRunning
	}
	in = copyInstance(in)
	c.instances[in.Name] = &in
	return nil
}

// DeleteInstance removes an instance; it reports whether it existed.
func (c *Cloud) DeleteInstance(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.instances[name]
	delete(c.instances, name)
	return ok
}

// SetInstanceState sets an instance's state.
func (c *Cloud) SetInstanceState(name, state string) error {
	if err := validateInstance(Instance{Name: name, State: state}); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.instances[name]
	if !ok {
		return fmt.Errorf("instance %q: %w", name, cloudprovider.InstanceNotFound)
	}
	in.State = state
	return nil
}

// ListInstances returns copies of the instances, sorted by name.
func (c *Cloud) ListInstances() []Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Instance, 0, len(c.instances))
	for _, in := range c.instances {
		out = append(out, copyInstance(*in))
	}
	slices.SortFunc(out, func(a, b Instance) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (c *Cloud) newIDLocked() string {
	c.autoSeq++
	return fmt.Sprintf("i-%08x", c.autoSeq)
}

// lookupLocked finds a Node's instance: by providerID when the Node has
// one, else by name, making one up when autoInstances is on.
func (c *Cloud) lookupLocked(node *v1.Node) (*Instance, error) {
	if pid := node.Spec.ProviderID; pid != "" {
		id, ok := strings.CutPrefix(pid, providerIDPrefix)
		if !ok {
			return nil, fmt.Errorf("providerID %q is not a fake cloud ID (%s<id>)", pid, providerIDPrefix)
		}
		for _, in := range c.instances {
			if in.ID == id {
				return in, nil
			}
		}
		return nil, nil
	}
	if in, ok := c.instances[node.Name]; ok {
		return in, nil
	}
	if !c.auto.Enabled {
		return nil, nil
	}
	ip, err := c.autoIPs.allocate(netip.Addr{})
	if err != nil {
		return nil, fmt.Errorf("auto instance for %q: %w", node.Name, err)
	}
	in := &Instance{
		Name:   node.Name,
		ID:     c.newIDLocked(),
		Type:   c.auto.Type,
		Region: c.auto.Region,
		State:  StateRunning,
		Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: ip.String()},
			{Type: v1.NodeHostName, Address: node.Name},
		},
	}
	if len(c.auto.Zones) > 0 {
		in.Zone = c.auto.Zones[(c.autoSeq-1)%len(c.auto.Zones)]
	}
	c.instances[in.Name] = in
	return in, nil
}

// InstanceExists is false for a missing or terminated instance.
func (c *Cloud) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	var exists bool
	err := c.call(ctx, "InstanceExists", node.Name, "", func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		in, err := c.lookupLocked(node)
		exists = in != nil && in.State != StateTerminated
		return err
	})
	return exists, err
}

// InstanceShutdown is true for a stopped instance.
func (c *Cloud) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	var stopped bool
	err := c.call(ctx, "InstanceShutdown", node.Name, "", func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		in, err := c.lookupLocked(node)
		stopped = in != nil && in.State == StateStopped
		return err
	})
	return stopped, err
}

// InstanceMetadata returns InstanceNotFound for a missing or terminated instance.
func (c *Cloud) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	var md *cloudprovider.InstanceMetadata
	err := c.call(ctx, "InstanceMetadata", node.Name, "", func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		in, err := c.lookupLocked(node)
		if err != nil {
			return err
		}
		if in == nil || in.State == StateTerminated {
			return fmt.Errorf("node %q: %w", node.Name, cloudprovider.InstanceNotFound)
		}
		cp := copyInstance(*in)
		md = &cloudprovider.InstanceMetadata{
			ProviderID:       providerIDPrefix + cp.ID,
			InstanceType:     cp.Type,
			NodeAddresses:    cp.Addresses,
			Zone:             cp.Zone,
			Region:           cp.Region,
			AdditionalLabels: cp.Labels,
		}
		return nil
	})
	return md, err
}

func copyInstance(in Instance) Instance {
	in.Addresses = slices.Clone(in.Addresses)
	if in.Labels != nil {
		labels := make(map[string]string, len(in.Labels))
		for k, v := range in.Labels {
			labels[k] = v
		}
		in.Labels = labels
	}
	return in
}

// --- load balancers ---

func serviceKey(svc *v1.Service) string { return svc.Namespace + "/" + svc.Name }

// GetLoadBalancerName returns cloudprovider.DefaultLoadBalancerName.
func (c *Cloud) GetLoadBalancerName(_ context.Context, _ string, svc *v1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// GetLoadBalancer returns the status of the Service's load balancer.
func (c *Cloud) GetLoadBalancer(ctx context.Context, _ string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	var status *v1.LoadBalancerStatus
	err := c.call(ctx, "GetLoadBalancer", serviceKey(svc), "", func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if lb, ok := c.lbs[cloudprovider.DefaultLoadBalancerName(svc)]; ok {
			status = lbStatus(lb)
		}
		return nil
	})
	return status, status != nil, err
}

// EnsureLoadBalancer creates or updates the Service's load balancer; its VIP
// is kept across updates.
func (c *Cloud) EnsureLoadBalancer(ctx context.Context, _ string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	var status *v1.LoadBalancerStatus
	key := serviceKey(svc)
	err := c.call(ctx, "EnsureLoadBalancer", key, "service/"+key, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		name := cloudprovider.DefaultLoadBalancerName(svc)
		lb, ok := c.lbs[name]
		if !ok {
			if c.vips == nil {
				return errors.New("fake cloud: no loadBalancers.vipCIDR configured")
			}
			var want netip.Addr
			if ip := svc.Spec.LoadBalancerIP; ip != "" {
				addr, err := netip.ParseAddr(ip)
				if err != nil {
					return fmt.Errorf("fake cloud: spec.loadBalancerIP %q: %w", ip, err)
				}
				want = addr
			}
			vip, err := c.vips.allocate(want)
			if err != nil {
				return fmt.Errorf("fake cloud: load balancer for %s: %w", key, err)
			}
			lb = &LoadBalancer{Name: name, Service: key, VIP: vip.String()}
			c.lbs[name] = lb
		}
		lb.Ports = slices.Clone(svc.Spec.Ports)
		lb.Nodes = c.memberList(nodes)
		status = lbStatus(lb)
		return nil
	})
	return status, err
}

// UpdateLoadBalancer changes the node set of an existing load balancer.
func (c *Cloud) UpdateLoadBalancer(ctx context.Context, _ string, svc *v1.Service, nodes []*v1.Node) error {
	key := serviceKey(svc)
	return c.call(ctx, "UpdateLoadBalancer", key, "service/"+key, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		lb, ok := c.lbs[cloudprovider.DefaultLoadBalancerName(svc)]
		if !ok {
			return fmt.Errorf("fake cloud: no load balancer for %s", key)
		}
		lb.Nodes = c.memberList(nodes)
		return nil
	})
}

// EnsureLoadBalancerDeleted deletes the load balancer and frees its VIP.
func (c *Cloud) EnsureLoadBalancerDeleted(ctx context.Context, _ string, svc *v1.Service) error {
	key := serviceKey(svc)
	return c.call(ctx, "EnsureLoadBalancerDeleted", key, "service/"+key, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		name := cloudprovider.DefaultLoadBalancerName(svc)
		if lb, ok := c.lbs[name]; ok {
			c.vips.release(netip.MustParseAddr(lb.VIP))
			delete(c.lbs, name)
		}
		return nil
	})
}

// ListLoadBalancers returns copies of the load balancers, sorted by Service.
func (c *Cloud) ListLoadBalancers() []LoadBalancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]LoadBalancer, 0, len(c.lbs))
	for _, lb := range c.lbs {
		cp := *lb
		cp.Ports, cp.Nodes = slices.Clone(lb.Ports), slices.Clone(lb.Nodes)
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b LoadBalancer) int { return strings.Compare(a.Service, b.Service) })
	return out
}

// AllocatedVIPs returns the VIPs in use, sorted; a VIP is freed only when
// its load balancer is deleted.
func (c *Cloud) AllocatedVIPs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.vips == nil {
		return []string{}
	}
	return c.vips.allocated()
}

func lbStatus(lb *LoadBalancer) *v1.LoadBalancerStatus {
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: lb.VIP}}}
}

// memberList returns the sorted names of nodes. Load balancers made from
// the same node set share one list (no one changes it), so that the fake's
// own state does not grow as load balancers x Nodes. Callers hold c.mu.
func (c *Cloud) memberList(nodes []*v1.Node) []string {
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	if slices.Equal(names, c.members) {
		return c.members
	}
	c.members = names
	return names
}

// --- routes ---

// ListRoutes lists the route table; a route whose target has no running
// instance is a blackhole.
func (c *Cloud) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	var out []*cloudprovider.Route
	err := c.call(ctx, "ListRoutes", clusterName, "", func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, r := range c.routes {
			in, ok := c.instances[r.TargetNode]
			out = append(out, &cloudprovider.Route{
				Name:            r.Name,
				TargetNode:      toNodeName(r.TargetNode),
				DestinationCIDR: r.DestinationCIDR,
				Blackhole:       r.Blackhole || !ok || in.State != StateRunning,
			})
		}
		slices.SortFunc(out, func(a, b *cloudprovider.Route) int { return strings.Compare(a.DestinationCIDR, b.DestinationCIDR) })
		return nil
	})
	return out, err
}

// CreateRoute adds a route named nameHint; the same route again is a no-op,
// the same destination for another node an error.
func (c *Cloud) CreateRoute(ctx context.Context, _ string, nameHint string, route *cloudprovider.Route) error {
	return c.call(ctx, "CreateRoute", string(route.TargetNode), "route/"+route.DestinationCIDR, func() error {
		if _, err := netip.ParsePrefix(route.DestinationCIDR); err != nil {
			return fmt.Errorf("fake cloud: route destination: %w", err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if r, ok := c.routes[route.DestinationCIDR]; ok {
			if r.TargetNode == string(route.TargetNode) {
				return nil
			}
			return fmt.Errorf("fake cloud: route %s already goes to %s", route.DestinationCIDR, r.TargetNode)
		}
		c.routes[route.DestinationCIDR] = &Route{Name: nameHint, TargetNode: string(route.TargetNode), DestinationCIDR: route.DestinationCIDR}
		return nil
	})
}

// DeleteRoute removes the route to route.DestinationCIDR, if any.
func (c *Cloud) DeleteRoute(ctx context.Context, _ string, route *cloudprovider.Route) error {
	return c.call(ctx, "DeleteRoute", string(route.TargetNode), "route/"+route.DestinationCIDR, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.routes, route.DestinationCIDR)
		return nil
	})
}

// ListRouteTable returns copies of the routes, sorted by destination.
func (c *Cloud) ListRouteTable() []Route {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Route, 0, len(c.routes))
	for _, r := range c.routes {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Route) int { return strings.Compare(a.DestinationCIDR, b.DestinationCIDR) })
	return out
}
