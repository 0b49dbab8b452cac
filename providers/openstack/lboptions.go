package openstack

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
)

// The Service annotations the load balancer reads: those of
// openstack-cloud-controller-manager, so that a Service keeps its meaning
// when ccmkit takes over.
const (
	annotationPrefix = "loadbalancer.openstack.org/"

	// AnnotationInternal makes the load balancer internal: no floating IP,
	// the Service's address is the VIP. [LoadBalancer] internal-lb forces it.
	AnnotationInternal = "service.beta.kubernetes.io/openstack-internal-load-balancer"
	// AnnotationFloatingNetworkID is the network the floating IP is
	// allocated on.
	AnnotationFloatingNetworkID = annotationPrefix + "floating-network-id"
	// AnnotationFloatingSubnetID is the subnet of the floating network the
	// floating IP is allocated on.
	AnnotationFloatingSubnetID = annotationPrefix + "floating-subnet-id"
	// AnnotationSubnetID is the subnet of the VIP.
	AnnotationSubnetID = annotationPrefix + "subnet-id"
	// AnnotationMemberSubnetID is the subnet the members are reached on.
	AnnotationMemberSubnetID = annotationPrefix + "member-subnet-id"
	// AnnotationNetworkID is the network of the VIP.
	AnnotationNetworkID = annotationPrefix + "network-id"
	// AnnotationKeepFloatingIP keeps the floating IP when the load
	// balancer is deleted.
	AnnotationKeepFloatingIP = annotationPrefix + "keep-floatingip"
	// AnnotationLBMethod is the pools' algorithm: ROUND_ROBIN,
	// LEAST_CONNECTIONS, SOURCE_IP or SOURCE_IP_PORT.
	AnnotationLBMethod = annotationPrefix + "lb-method"
	// AnnotationConnectionLimit is each listener's connection limit; -1 is
	// unlimited.
	AnnotationConnectionLimit = annotationPrefix + "connection-limit"
	// AnnotationTimeoutClientData is the listeners' client inactivity
	// timeout in milliseconds.
	AnnotationTimeoutClientData = annotationPrefix + "timeout-client-data"
	// AnnotationTimeoutMemberConnect is the listeners' member connection
	// timeout in milliseconds.
	AnnotationTimeoutMemberConnect = annotationPrefix + "timeout-member-connect"
	// AnnotationTimeoutMemberData is the listeners' member inactivity
	// timeout in milliseconds.
	AnnotationTimeoutMemberData = annotationPrefix + "timeout-member-data"
	// AnnotationEnableHealthMonitor turns the pools' health monitors on or
	// off; default [LoadBalancer] create-monitor, and on for
	// externalTrafficPolicy: Local.
	AnnotationEnableHealthMonitor = annotationPrefix + "enable-health-monitor"
	// AnnotationHealthMonitorDelay is the monitors' delay in seconds.
	AnnotationHealthMonitorDelay = annotationPrefix + "health-monitor-delay"
	// AnnotationHealthMonitorTimeout is the monitors' timeout in seconds,
	// at most the delay.
	AnnotationHealthMonitorTimeout = annotationPrefix + "health-monitor-timeout"
	// AnnotationHealthMonitorMaxRetries is how many checks a member has to
	// pass to be up again, 1 to 10.
	AnnotationHealthMonitorMaxRetries = annotationPrefix + "health-monitor-max-retries"
	// AnnotationFlavorID is the Octavia flavor of the load balancer.
	AnnotationFlavorID = annotationPrefix + "flavor-id"
	// AnnotationAvailabilityZone is the Octavia availability zone of the
	// load balancer.
	AnnotationAvailabilityZone = annotationPrefix + "availability-zone"
	// AnnotationClass names a [LoadBalancerClass "name"] of the cloud
	// config, whose networks and subnets win over the annotations'.
	AnnotationClass = annotationPrefix + "class"
)

// Octavia's defaults and bounds of the listener and monitor attributes.
const (
	defaultConnectionLimit = -1
	maxTimeoutMillis       = 24 * 60 * 60 * 1000
	defaultMaxRetriesDown  = 3
	// Octavia's listener timeouts when none is given, in milliseconds.
	defaultTimeoutClientData    = 50000
	defaultTimeoutMemberConnect = 5000
	defaultTimeoutMemberData    = 50000
)

// setting is a network or subnet ID and where it comes from, so that an
// error about it names the annotation or the config key.
type setting struct {
	id     string
	source string
}

// listenerTimeouts are the timeouts of a listener, in milliseconds; nil is
// Octavia's default.
type listenerTimeouts struct {
	clientData, memberConnect, memberData *int
}

// monitorOptions are the health monitor settings of a Service.
type monitorOptions struct {
	enabled    bool
	delay      int // seconds
	timeout    int // seconds
	maxRetries int
}

// lbOptions are what a Service's annotations, its class and the cloud
// config ask of its load balancer. They are read before any request, so a
// bad annotation changes nothing in the cloud.
type lbOptions struct {
	internal         bool
	floatingNetwork  setting
	floatingSubnet   setting
	vipSubnet        setting
	vipNetwork       setting
	memberSubnet     setting
	keepFloatingIP   bool
	method           string
	connectionLimit  int
	timeouts         listenerTimeouts
	monitor          monitorOptions
	flavorID         string
	availabilityZone string
	provider         string
	// ipFamily is the Service's first IP family: of the VIP and members.
	ipFamily v1.IPFamily
	// sourceRanges are the CIDRs allowed to connect; nil allows all.
	sourceRanges []string
	// loadBalancerIP is spec.loadBalancerIP: the floating IP to adopt, or
	// the VIP of an internal load balancer.
	loadBalancerIP string
}

// annotationReader reads annotations and collects one error per bad one.
type annotationReader struct {
	svc  *v1.Service
	errs []error
}

func (r *annotationReader) lookup(key string) (string, bool) {
	v, ok := r.svc.Annotations[key]
	return strings.TrimSpace(v), ok
}

func (r *annotationReader) fail(key, value, want string) {
	r.errs = append(r.errs, fmt.Errorf("annotation %s: %q is not %s", key, value, want))
}

func (r *annotationReader) boolean(key string, def bool) (value, set bool) {
	v, ok := r.lookup(key)
	if !ok {
		return def, false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(key, v, "a boolean (true or false)")
		return def, false
	}
	return b, true
}

func (r *annotationReader) integer(key string, def, lo, hi int) (value int, set bool) {
	v, ok := r.lookup(key)
	if !ok {
		return def, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.fail(key, v, fmt.Sprintf("an integer from %d to %d", lo, hi))
		return def, false
	}
	return n, true
}

func (r *annotationReader) optionalInt(key string, lo, hi int) *int {
	if n, set := r.integer(key, 0, lo, hi); set {
		return &n
	}
	return nil
}

// id reads an ID annotation: the first non-empty of class, annotation and
// config, with its source.
func (r *annotationReader) id(class setting, key string, config setting) setting {
	if class.id != "" {
		return class
	}
	if v, ok := r.lookup(key); ok && v != "" {
		return setting{id: v, source: "annotation " + key}
	}
	return config
}

// seconds is a config duration in whole seconds, rounded up.
func seconds(d time.Duration) int { return int(math.Ceil(d.Seconds())) }

// parseLBOptions reads what a Service asks of its load balancer. The
// error names every bad annotation.
func parseLBOptions(cfg *LoadBalancerConfig, svc *v1.Service) (*lbOptions, error) {
	r := &annotationReader{svc: svc}
	o := &lbOptions{provider: cfg.LBProvider, ipFamily: v1.IPv4Protocol, loadBalancerIP: strings.TrimSpace(svc.Spec.LoadBalancerIP)}
	if len(svc.Spec.IPFamilies) > 0 {
		o.ipFamily = svc.Spec.IPFamilies[0]
	}

	var class LoadBalancerClass
	if name, ok := r.lookup(AnnotationClass); ok {
		c := cfg.Classes[name]
		if c == nil {
			r.errs = append(r.errs, fmt.Errorf("annotation %s: no [LoadBalancerClass %q] in the cloud config", AnnotationClass, name))
		} else {
			class = *c
		}
	}
	classSetting := func(id, key string) setting {
		if id == "" {
			return setting{}
		}
		return setting{id: id, source: fmt.Sprintf("[LoadBalancerClass %q] %s", svc.Annotations[AnnotationClass], key)}
	}
	configSetting := func(id, key string) setting {
		if id == "" {
			return setting{}
		}
		return setting{id: id, source: "[LoadBalancer] " + key}
	}
	o.floatingNetwork = r.id(classSetting(class.FloatingNetworkID, "floating-network-id"), AnnotationFloatingNetworkID,
		configSetting(cfg.FloatingNetworkID, "floating-network-id"))
	o.floatingSubnet = r.id(classSetting(class.FloatingSubnetID, "floating-subnet-id"), AnnotationFloatingSubnetID,
		configSetting(cfg.FloatingSubnetID, "floating-subnet-id"))
	o.vipSubnet = r.id(classSetting(class.SubnetID, "subnet-id"), AnnotationSubnetID, configSetting(cfg.SubnetID, "subnet-id"))
	o.vipNetwork = r.id(classSetting(class.NetworkID, "network-id"), AnnotationNetworkID, configSetting(cfg.NetworkID, "network-id"))
	o.memberSubnet = r.id(classSetting(class.MemberSubnetID, "member-subnet-id"), AnnotationMemberSubnetID,
		configSetting(cfg.MemberSubnetID, "member-subnet-id"))

	internal, _ := r.boolean(AnnotationInternal, false)
	o.internal = internal || cfg.InternalLB
	o.keepFloatingIP, _ = r.boolean(AnnotationKeepFloatingIP, false)

	o.method = cfg.LBMethod
	if v, ok := r.lookup(AnnotationLBMethod); ok {
		if m := strings.ToUpper(v); slices.Contains(lbMethods, m) {
			o.method = m
		} else {
			r.fail(AnnotationLBMethod, v, "one of "+strings.Join(lbMethods, ", "))
		}
	}
	o.connectionLimit, _ = r.integer(AnnotationConnectionLimit, defaultConnectionLimit, -1, math.MaxInt32)
	o.timeouts = listenerTimeouts{
		clientData:    r.optionalInt(AnnotationTimeoutClientData, 0, maxTimeoutMillis),
		memberConnect: r.optionalInt(AnnotationTimeoutMemberConnect, 0, maxTimeoutMillis),
		memberData:    r.optionalInt(AnnotationTimeoutMemberData, 0, maxTimeoutMillis),
	}

	// externalTrafficPolicy: Local sends traffic only to nodes with an
	// endpoint; without a monitor the others would get it too.
	local := servicehelpers.NeedsHealthCheck(svc) && svc.Spec.HealthCheckNodePort > 0
	m := &o.monitor
	m.enabled, _ = r.boolean(AnnotationEnableHealthMonitor, cfg.CreateMonitor || local)
	var delaySet, timeoutSet bool
	m.delay, delaySet = r.integer(AnnotationHealthMonitorDelay, seconds(cfg.MonitorDelay), 1, math.MaxInt32)
	m.timeout, timeoutSet = r.integer(AnnotationHealthMonitorTimeout, seconds(cfg.MonitorTimeout), 1, math.MaxInt32)
	m.maxRetries, _ = r.integer(AnnotationHealthMonitorMaxRetries, int(cfg.MonitorMaxRetries), 1, 10)
	if m.timeout > m.delay && (delaySet || timeoutSet) {
		r.errs = append(r.errs, fmt.Errorf("annotations %s (%d) and %s (%d): the timeout must not exceed the delay",
			AnnotationHealthMonitorTimeout, m.timeout, AnnotationHealthMonitorDelay, m.delay))
	}

	o.flavorID = cfg.FlavorID
	if v, ok := r.lookup(AnnotationFlavorID); ok && v != "" {
		o.flavorID = v
	}
	o.availabilityZone = cfg.AvailabilityZone
	if v, ok := r.lookup(AnnotationAvailabilityZone); ok && v != "" {
		o.availabilityZone = v
	}

	ranges, err := sourceRanges(svc, o.ipFamily)
	if err != nil {
		r.errs = append(r.errs, err)
	}
	o.sourceRanges = ranges
	if o.loadBalancerIP != "" {
		if _, err := netip.ParseAddr(o.loadBalancerIP); err != nil {
			r.errs = append(r.errs, fmt.Errorf("spec.loadBalancerIP: %q is not an IP address", o.loadBalancerIP))
		}
	}
	if err := checkPorts(svc); err != nil {
		r.errs = append(r.errs, err)
	}
	if len(r.errs) > 0 {
		return nil, fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, errors.Join(r.errs...))
	}
	return o, nil
}

// sourceRanges are the CIDRs of the Service's family that may connect:
// nil when all may. Ranges of the other family do not apply to the VIP;
// when no range is left of a list that did not allow all, it is an error,
// as an empty allowed_cidrs would open the load balancer to everyone.
func sourceRanges(svc *v1.Service, family v1.IPFamily) ([]string, error) {
	set, err := servicehelpers.GetLoadBalancerSourceRanges(svc)
	if err != nil {
		return nil, err
	}
	all := set.StringSlice()
	if servicehelpers.IsAllowAll(set) || slices.Contains(all, "::/0") {
		return nil, nil
	}
	var out []string
	for _, c := range all {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue
		}
		if p.Addr().Is6() == (family == v1.IPv6Protocol) {
			out = append(out, p.Masked().String())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("loadBalancerSourceRanges %v: none is of the Service's family %s", all, family)
	}
	slices.Sort(out)
	return out, nil
}

// checkPorts: Octavia listens on TCP and UDP ports for a Service.
func checkPorts(svc *v1.Service) error {
	if len(svc.Spec.Ports) == 0 {
		return errors.New("the Service has no ports")
	}
	for _, p := range svc.Spec.Ports {
		if proto := protocolOf(p); proto != v1.ProtocolTCP && proto != v1.ProtocolUDP {
			return fmt.Errorf("port %d: protocol %s is not supported (TCP and UDP are)", p.Port, proto)
		}
	}
	return nil
}

// protocolOf is a port's protocol; the API server defaults it to TCP.
func protocolOf(p v1.ServicePort) v1.Protocol {
	if p.Protocol == "" {
		return v1.ProtocolTCP
	}
	return p.Protocol
}
