package fake

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Instance states.
const (
	StateRunning    = "running"
	StateStopped    = "stopped"
	StateTerminated = "terminated"
)

// Hang modes of a Fault.
const (
	HangRespectContext = "respect-context"
	HangIgnoreContext  = "ignore-context"
)

// Config is the fake cloud's --cloud-config (YAML).
type Config struct {
	// Instances the cloud starts with.
	Instances []Instance `json:"instances,omitempty"`
	// AutoInstances creates an instance for an unknown node name on its
	// first lookup.
	AutoInstances AutoInstances `json:"autoInstances,omitempty"`
	// LoadBalancers configures the VIP pool.
	LoadBalancers LoadBalancerConfig `json:"loadBalancers,omitempty"`
	// Routes is the route table the cloud starts with.
	Routes []Route `json:"routes,omitempty"`
	// Faults the cloud starts with.
	Faults []Fault `json:"faults,omitempty"`
	// AdminAddress is the loopback host:port of the admin HTTP API; empty
	// for none.
	AdminAddress string `json:"adminAddress,omitempty"`
	// CallLog is a file that every call is appended to, as a JSON line
	// (a CallRecord) when it returns, so a test can read what a process
	// asked of the cloud after the process has gone; empty for none.
	CallLog string `json:"callLog,omitempty"`
}

// Instance is a virtual machine of the fake cloud.
type Instance struct {
	Name      string            `json:"name"`
	ID        string            `json:"id,omitempty"`
	Type      string            `json:"type,omitempty"`
	Zone      string            `json:"zone,omitempty"`
	Region    string            `json:"region,omitempty"`
	Addresses []v1.NodeAddress  `json:"addresses,omitempty"`
	State     string            `json:"state,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// AutoInstances describes the instances made up for unknown node names.
type AutoInstances struct {
	Enabled bool   `json:"enabled"`
	Type    string `json:"type,omitempty"`
	Region  string `json:"region,omitempty"`
	// Zones are assigned round-robin.
	Zones []string `json:"zones,omitempty"`
	// AddressCIDR is where InternalIPs come from; default 10.0.0.0/16.
	AddressCIDR string `json:"addressCIDR,omitempty"`
}

// LoadBalancerConfig configures load balancers.
type LoadBalancerConfig struct {
	// VIPCIDR is the pool of load-balancer IPs.
	VIPCIDR string `json:"vipCIDR,omitempty"`
}

// Route is an entry of the route table.
type Route struct {
	Name            string `json:"name,omitempty"`
	TargetNode      string `json:"targetNode"`
	DestinationCIDR string `json:"destinationCIDR"`
	Blackhole       bool   `json:"blackhole,omitempty"`
}

// Fault changes how matching calls behave. Effects apply in the order
// latency, hang, throttle, error.
type Fault struct {
	// ID is assigned when the fault is added.
	ID string `json:"id,omitempty"`
	// Method is a method name (e.g. EnsureLoadBalancer) or "*".
	Method string `json:"method"`
	// Object is a path.Match glob on the call's object ("" matches all):
	// the node name for instance calls and CreateRoute/DeleteRoute (the
	// route's target node), "namespace/name" for load-balancer calls, the
	// cluster name for ListRoutes.
	Object string `json:"object,omitempty"`
	// Latency delays the call (respecting its context).
	Latency Duration `json:"latency,omitempty"`
	// Hang blocks the call: "respect-context" until its context ends,
	// "ignore-context" until the fault is removed or the cloud is closed.
	Hang string `json:"hang,omitempty"`
	// Throttle fails the call with a cloud.ThrottledError.
	Throttle bool `json:"throttle,omitempty"`
	// Error fails the call with this message.
	Error string `json:"error,omitempty"`
	// ErrorRate is the probability (0..1) that Error applies; 0 means 1.
	ErrorRate float64 `json:"errorRate,omitempty"`
	// Count limits the fault to this many calls; 0 is unlimited.
	Count int `json:"count,omitempty"`
	// Hits is how many calls the fault has applied to.
	Hits int `json:"hits,omitempty"`
}

// Duration is a time.Duration written as "2s" in YAML and JSON.
type Duration struct{ time.Duration }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads "1.5s" or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("duration must be a string like \"2s\": %s", b)
		}
		d.Duration = time.Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// methods are the provider methods a fault can name.
var methods = []string{
	"InstanceExists", "InstanceShutdown", "InstanceMetadata",
	"GetLoadBalancer", "EnsureLoadBalancer", "UpdateLoadBalancer", "EnsureLoadBalancerDeleted",
	"ListRoutes", "CreateRoute", "DeleteRoute",
}

var addressTypes = []v1.NodeAddressType{v1.NodeHostName, v1.NodeInternalIP, v1.NodeExternalIP, v1.NodeInternalDNS, v1.NodeExternalDNS}

// ParseConfig reads and validates a config; a nil reader is the empty
// config. Unknown fields are errors; every problem is reported at once.
func ParseConfig(r io.Reader) (*Config, error) {
	cfg := &Config{}
	if r == nil {
		return cfg, nil
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading the fake cloud config: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		return nil, fmt.Errorf("fake cloud config: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("fake cloud config:\n%w", err)
	}
	return cfg, nil
}

func (c *Config) validate() error {
	var errs []error
	names, ids := map[string]bool{}, map[string]bool{}
	for i, in := range c.Instances {
		field := fmt.Sprintf("instances[%d]", i)
		errs = append(errs, within(field, validateInstance(in))...)
		if in.Name != "" && names[in.Name] {
			errs = append(errs, fmt.Errorf("%s.name: %q is not unique", field, in.Name))
		}
		if in.ID != "" && ids[in.ID] {
			errs = append(errs, fmt.Errorf("%s.id: %q is not unique", field, in.ID))
		}
		names[in.Name], ids[in.ID] = true, true
	}
	if c.AutoInstances.AddressCIDR != "" {
		if _, err := netip.ParsePrefix(c.AutoInstances.AddressCIDR); err != nil {
			errs = append(errs, fmt.Errorf("autoInstances.addressCIDR: %w", err))
		}
	}
	if c.LoadBalancers.VIPCIDR != "" {
		if _, err := netip.ParsePrefix(c.LoadBalancers.VIPCIDR); err != nil {
			errs = append(errs, fmt.Errorf("loadBalancers.vipCIDR: %w", err))
		}
	}
	for i, r := range c.Routes {
		if _, err := netip.ParsePrefix(r.DestinationCIDR); err != nil {
			errs = append(errs, fmt.Errorf("routes[%d].destinationCIDR: %w", i, err))
		}
	}
	for i, f := range c.Faults {
		errs = append(errs, within(fmt.Sprintf("faults[%d]", i), f.validate())...)
	}
	if c.AdminAddress != "" {
		if err := validateLoopback(c.AdminAddress); err != nil {
			errs = append(errs, fmt.Errorf("adminAddress: %w", err))
		}
	}
	return errors.Join(errs...)
}

func validateInstance(in Instance) error {
	var errs []error
	if in.Name == "" {
		errs = append(errs, errors.New("name: is required"))
	}
	switch in.State {
	case "", StateRunning, StateStopped, StateTerminated:
	default:
		errs = append(errs, fmt.Errorf("state: %q must be one of running, stopped, terminated", in.State))
	}
	for j, a := range in.Addresses {
		if !slices.Contains(addressTypes, a.Type) {
			errs = append(errs, fmt.Errorf("addresses[%d].type: %q must be one of %v", j, a.Type, addressTypes))
		}
		if a.Address == "" {
			errs = append(errs, fmt.Errorf("addresses[%d].address: is required", j))
		}
	}
	return errors.Join(errs...)
}

func (f Fault) validate() error {
	var errs []error
	if f.Method != "*" && !slices.Contains(methods, f.Method) {
		errs = append(errs, fmt.Errorf("method: %q is not \"*\" or one of %v", f.Method, methods))
	}
	if _, err := path.Match(f.Object, ""); err != nil {
		errs = append(errs, fmt.Errorf("object: bad glob %q: %w", f.Object, err))
	}
	switch f.Hang {
	case "", HangRespectContext, HangIgnoreContext:
	default:
		errs = append(errs, fmt.Errorf("hang: %q must be %q or %q", f.Hang, HangRespectContext, HangIgnoreContext))
	}
	if f.ErrorRate < 0 || f.ErrorRate > 1 {
		errs = append(errs, fmt.Errorf("errorRate: %v is not within 0..1", f.ErrorRate))
	}
	if f.Latency.Duration < 0 {
		errs = append(errs, fmt.Errorf("latency: %s is negative", f.Latency.Duration))
	}
	if f.Count < 0 {
		errs = append(errs, fmt.Errorf("count: %d is negative", f.Count))
	}
	return errors.Join(errs...)
}

// within prefixes each of the joined errors in err with "field.".
func within(field string, err error) []error {
	if err == nil {
		return nil
	}
	var out []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			out = append(out, fmt.Errorf("%s.%w", field, e))
		}
		return out
	}
	return []error{fmt.Errorf("%s.%w", field, err)}
}

// validateLoopback accepts host:port whose host is a loopback IP or localhost.
func validateLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address; the admin API listens only on loopback", addr)
	}
	return nil
}
