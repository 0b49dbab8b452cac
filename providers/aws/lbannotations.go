package aws

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	cloudprovider "k8s.io/cloud-provider"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
)

// The Service annotations the load balancers read: those of
// aws-cloud-controller-manager, so that a Service keeps its meaning when
// ccmkit takes over.
const (
	annotationPrefix = "service.beta.kubernetes.io/aws-load-balancer-"

	// AnnotationType is the kind of load balancer: none for a Classic
	// ELB, "nlb" for a Network Load Balancer; "nlb-ip" and "external"
	// belong to another controller (the AWS Load Balancer Controller).
	AnnotationType = annotationPrefix + "type"
	// AnnotationInternal makes the load balancer internal: "true" (or
	// the legacy "0.0.0.0/0"); "false" is internet-facing.
	AnnotationInternal = annotationPrefix + "internal"
	// AnnotationSubnets lists the load balancer's subnets, by ID or Name
	// tag, comma-separated; without it they are found by their tags.
	AnnotationSubnets = annotationPrefix + "subnets"
	// AnnotationAdditionalTags are more tags for every resource of the
	// load balancer: k1=v1,k2=v2.
	AnnotationAdditionalTags = annotationPrefix + "additional-resource-tags"
	// AnnotationHealthCheckProtocol is the health check's protocol: TCP,
	// HTTP or HTTPS (and SSL on a Classic ELB).
	AnnotationHealthCheckProtocol = annotationPrefix + "healthcheck-protocol"
	// AnnotationHealthCheckPort is the port checked: "traffic-port" (the
	// NodePort traffic goes to) or a port number.
	AnnotationHealthCheckPort = annotationPrefix + "healthcheck-port"
	// AnnotationHealthCheckPath is the path of an HTTP or HTTPS check.
	AnnotationHealthCheckPath = annotationPrefix + "healthcheck-path"
	// AnnotationHealthCheckInterval is the seconds between checks.
	AnnotationHealthCheckInterval = annotationPrefix + "healthcheck-interval"
	// AnnotationHealthCheckTimeout is the seconds a check may take.
	AnnotationHealthCheckTimeout = annotationPrefix + "healthcheck-timeout"
	// AnnotationHealthyThreshold is how many checks in a row a target
	// passes to be healthy.
	AnnotationHealthyThreshold = annotationPrefix + "healthcheck-healthy-threshold"
	// AnnotationUnhealthyThreshold is how many checks in a row a target
	// fails to be unhealthy.
	AnnotationUnhealthyThreshold = annotationPrefix + "healthcheck-unhealthy-threshold"
	// AnnotationSSLCert is the ARN of the certificate of the TLS (NLB) or
	// SSL/HTTPS (Classic ELB) listeners.
	AnnotationSSLCert = annotationPrefix + "ssl-cert"
	// AnnotationSSLPorts lists the ports, by number or name, that use the
	// certificate: default "*", every port.
	AnnotationSSLPorts = annotationPrefix + "ssl-ports"
	// AnnotationBackendProtocol is the protocol spoken to the nodes: tcp
	// (default), ssl, and on a Classic ELB http or https.
	AnnotationBackendProtocol = annotationPrefix + "backend-protocol"
	// AnnotationCrossZone turns cross-zone load balancing on or off.
	AnnotationCrossZone = annotationPrefix + "cross-zone-load-balancing-enabled"
	// AnnotationTargetNodeLabels makes only the nodes with all these
	// labels targets: k1=v1,k2=v2.
	AnnotationTargetNodeLabels = annotationPrefix + "target-node-labels"
)

// Values of AnnotationType.
const (
	typeNLB      = "nlb"
	typeNLBIP    = "nlb-ip"
	typeExternal = "external"
)

// lbKind is the kind of a load balancer.
type lbKind string

const (
	kindClassic lbKind = "Classic ELB"
	kindNetwork lbKind = "Network Load Balancer"
)

// Health-check protocols, ports and defaults: aws-cloud-controller-manager's.
const (
	protoTCP   = "TCP"
	protoSSL   = "SSL"
	protoHTTP  = "HTTP"
	protoHTTPS = "HTTPS"

	trafficPort = "traffic-port"

	defaultHealthCheckPath = "/"

	defaultNLBInterval  = 30
	defaultNLBTimeout   = 10
	defaultNLBThreshold = 3
	// A Local Service is checked on kube-proxy's health port, faster.
	defaultNLBLocalInterval  = 10
	defaultNLBLocalTimeout   = 10
	defaultNLBLocalThreshold = 2

	defaultCLBInterval           = 10
	defaultCLBTimeout            = 5
	defaultCLBHealthyThreshold   = 2
	defaultCLBUnhealthyThreshold = 6
)

// Backend protocols of AnnotationBackendProtocol.
const (
	backendTCP   = "tcp"
	backendSSL   = "ssl"
	backendHTTP  = "http"
	backendHTTPS = "https"
)

// healthCheck is a load balancer's health check of its targets.
type healthCheck struct {
	protocol string
	// port is trafficPort or a port number.
	port string
	// path is used by HTTP and HTTPS checks only.
	path               string
	interval, timeout  int32
	healthy, unhealthy int32
}

// lbOptions are what a Service asks of its load balancer, read from its
// spec and annotations before any request, so that a bad value changes
// nothing in the cloud.
type lbOptions struct {
	kind     lbKind
	internal bool
	// subnets are the annotation's subnets, IDs or Name tags; none means
	// discovery by tags.
	subnets   []string
	extraTags map[string]string
	health    healthCheck
	sslCert   string
	// sslPorts are the ports that use the certificate, by number or name;
	// nil is every port.
	sslPorts []string
	backend  string
	// crossZone is nil when the annotation is not set: the load
	// balancer's own setting is kept.
	crossZone *bool
	// nodeLabels select the target nodes; nil is every node.
	nodeLabels map[string]string
	// sourceRanges are the CIDRs that may connect (Classic ELB's security
	// group).
	sourceRanges []string
	ports        []v1.ServicePort
}

// usesCert reports whether a port's listener terminates TLS.
func (o *lbOptions) usesCert(p v1.ServicePort) bool {
	if o.sslCert == "" {
		return false
	}
	return o.sslPorts == nil || slices.Contains(o.sslPorts, strconv.Itoa(int(p.Port))) || (p.Name != "" && slices.Contains(o.sslPorts, p.Name))
}

// serviceKind reads AnnotationType alone: whether the Service's load
// balancer is this provider's, and of which kind. nlb-ip and external are
// cloudprovider.ImplementedElsewhere.
func serviceKind(svc *v1.Service) (lbKind, error) {
	v, ok := svc.Annotations[AnnotationType]
	if !ok {
		return kindClassic, nil
	}
	switch strings.TrimSpace(v) {
	case "":
		return kindClassic, nil
	case typeNLB:
		return kindNetwork, nil
	case typeNLBIP, typeExternal:
		return "", cloudprovider.ImplementedElsewhere
	}
	return "", fmt.Errorf("annotation %s: %q is not nlb, nlb-ip or external (or unset, for a Classic ELB)", AnnotationType, v)
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

func (r *annotationReader) boolean(key string) *bool {
	v, ok := r.lookup(key)
	if !ok {
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(key, v, "a boolean (true or false)")
		return nil
	}
	return &b
}

func (r *annotationReader) integer(key string, def, lo, hi int32) (int32, bool) {
	v, ok := r.lookup(key)
	if !ok {
		return def, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || int32(n) < lo || int32(n) > hi {
		r.fail(key, v, fmt.Sprintf("an integer from %d to %d", lo, hi))
		return def, false
	}
	return int32(n), true
}

// oneOf reads a value that must be one of allowed, compared without case;
// it returns the allowed spelling.
func (r *annotationReader) oneOf(key, def string, allowed ...string) string {
	v, ok := r.lookup(key)
	if !ok {
		return def
	}
	for _, a := range allowed {
		if strings.EqualFold(v, a) {
			return a
		}
	}
	r.fail(key, v, "one of "+strings.Join(allowed, ", "))
	return def
}

// pairs reads k1=v1,k2=v2. A key without "=" has an empty value when
// bareKeys allows it.
func (r *annotationReader) pairs(key string, bareKeys bool, check func(k, v string) error) map[string]string {
	v, ok := r.lookup(key)
	if !ok || v == "" {
		return nil
	}
	out := map[string]string{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		k, val, found := strings.Cut(item, "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		switch {
		case k == "":
			r.errs = append(r.errs, fmt.Errorf("annotation %s: %q has an empty key (write k1=v1,k2=v2)", key, item))
			continue
		case !found && !bareKeys:
			r.errs = append(r.errs, fmt.Errorf("annotation %s: %q is not key=value", key, item))
			continue
		}
		if err := check(k, val); err != nil {
			r.errs = append(r.errs, fmt.Errorf("annotation %s: %w", key, err))
			continue
		}
		out[k] = val
	}
	return out
}

// list reads a comma-separated list without empty items.
func (r *annotationReader) list(key string) []string {
	v, ok := r.lookup(key)
	if !ok {
		return nil
	}
	var out []string
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			r.fail(key, v, "a comma-separated list without empty items")
			return nil
		}
		out = append(out, item)
	}
	return out
}

// checkTag is a tag of additional-resource-tags: within AWS's limits, and
// not one of the tags that mark the load balancer's owner.
func checkTag(k, v string) error {
	switch {
	case len(k) > 128 || len(v) > 256:
		return fmt.Errorf("tag %q: keys have at most 128 characters, values 256", k)
	case strings.HasPrefix(strings.ToLower(k), "aws:"):
		return fmt.Errorf("tag %q: the aws: prefix is AWS's own", k)
	case k == tagServiceName || k == tagClusterLegacy || strings.HasPrefix(k, tagClusterPrefix):
		return fmt.Errorf("tag %q marks the load balancer's owner and is set by the provider", k)
	}
	return nil
}

// checkLabel is a label of target-node-labels.
func checkLabel(k, v string) error {
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		return fmt.Errorf("label %s value %q: %s", k, v, strings.Join(errs, "; "))
	}
	return nil
}

// parseLBOptions reads what a Service asks of its load balancer of kind.
// The error names every bad annotation.
func parseLBOptions(svc *v1.Service, kind lbKind) (*lbOptions, error) {
	r := &annotationReader{svc: svc}
	o := &lbOptions{kind: kind, ports: svc.Spec.Ports}

	if v, ok := r.lookup(AnnotationInternal); ok {
		switch b, err := strconv.ParseBool(v); {
		case err == nil:
			o.internal = b
		case v == "0.0.0.0/0":
			// The value of the first releases, still read as true.
			o.internal = true
		default:
			r.fail(AnnotationInternal, v, "a boolean (true or false)")
		}
	}
	o.subnets = r.list(AnnotationSubnets)
	o.extraTags = r.pairs(AnnotationAdditionalTags, true, checkTag)
	o.nodeLabels = r.pairs(AnnotationTargetNodeLabels, false, checkLabel)
	o.crossZone = r.boolean(AnnotationCrossZone)

	if v, ok := r.lookup(AnnotationSSLCert); ok {
		if v == "" {
			r.fail(AnnotationSSLCert, v, "a certificate ARN")
		}
		o.sslCert = v
	}
	if ports := r.list(AnnotationSSLPorts); ports != nil && !slices.Contains(ports, "*") {
		o.sslPorts = ports
		for _, sp := range ports {
			if !slices.ContainsFunc(svc.Spec.Ports, func(p v1.ServicePort) bool { return strconv.Itoa(int(p.Port)) == sp || p.Name == sp }) {
				r.errs = append(r.errs, fmt.Errorf("annotation %s: %q is not a port of the Service (by number or name)", AnnotationSSLPorts, sp))
			}
		}
	}

	if kind == kindNetwork {
		o.backend = r.oneOf(AnnotationBackendProtocol, backendTCP, backendTCP, backendSSL)
	} else {
		o.backend = r.oneOf(AnnotationBackendProtocol, backendTCP, backendTCP, backendSSL, backendHTTP, backendHTTPS)
	}
	o.health = readHealthCheck(r, svc, kind)

	set, err := servicehelpers.GetLoadBalancerSourceRanges(svc)
	if err != nil {
		r.errs = append(r.errs, err)
	} else {
		o.sourceRanges = set.StringSlice()
		slices.Sort(o.sourceRanges)
	}
	checkLBPorts(r, svc, o)
	if len(r.errs) > 0 {
		return nil, fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, errors.Join(r.errs...))
	}
	return o, nil
}

// readHealthCheck is the health check: aws-cloud-controller-manager's
// default for the kind (HTTP on kube-proxy's health port for
// externalTrafficPolicy: Local, else TCP on the traffic port) with the
// annotations' changes.
func readHealthCheck(r *annotationReader, svc *v1.Service, kind lbKind) healthCheck {
	var h healthCheck
	var protocols []string
	var maxTimeout int32
	if kind == kindNetwork {
		h = healthCheck{protocol: protoTCP, port: trafficPort, path: defaultHealthCheckPath,
			interval: defaultNLBInterval, timeout: defaultNLBTimeout, healthy: defaultNLBThreshold, unhealthy: defaultNLBThreshold}
		protocols = []string{protoTCP, protoHTTP, protoHTTPS}
		maxTimeout = 120
	} else {
		h = healthCheck{protocol: protoTCP, port: trafficPort, path: defaultHealthCheckPath,
			interval: defaultCLBInterval, timeout: defaultCLBTimeout, healthy: defaultCLBHealthyThreshold, unhealthy: defaultCLBUnhealthyThreshold}
		protocols = []string{protoTCP, protoHTTP, protoHTTPS, protoSSL}
		maxTimeout = 60
	}
	if path, port := servicehelpers.GetServiceHealthCheckPathPort(svc); path != "" {
		h.protocol, h.port, h.path = protoHTTP, strconv.Itoa(int(port)), path
		if kind == kindNetwork {
			h.interval, h.timeout, h.healthy, h.unhealthy = defaultNLBLocalInterval, defaultNLBLocalTimeout, defaultNLBLocalThreshold, defaultNLBLocalThreshold
		}
	}
	if kind != kindNetwork && h.protocol == protoTCP {
		// A backend that speaks SSL or HTTPS is checked over SSL, as
		// aws-cloud-controller-manager checks it.
		if b := strings.ToLower(svc.Annotations[AnnotationBackendProtocol]); b == backendSSL || b == backendHTTPS {
			h.protocol = protoSSL
		}
	}
	h.protocol = r.oneOf(AnnotationHealthCheckProtocol, h.protocol, protocols...)
	if v, ok := r.lookup(AnnotationHealthCheckPort); ok {
		if n, err := strconv.Atoi(v); v == trafficPort || (err == nil && n >= 1 && n <= 65535) {
			h.port = v
		} else {
			r.fail(AnnotationHealthCheckPort, v, "traffic-port or a port (1-65535)")
		}
	}
	if v, ok := r.lookup(AnnotationHealthCheckPath); ok {
		if strings.HasPrefix(v, "/") && len(v) <= 1024 {
			h.path = v
		} else {
			r.fail(AnnotationHealthCheckPath, v, "a path starting with /")
		}
	}
	var intervalSet, timeoutSet bool
	h.interval, intervalSet = r.integer(AnnotationHealthCheckInterval, h.interval, 5, 300)
	h.timeout, timeoutSet = r.integer(AnnotationHealthCheckTimeout, h.timeout, 2, maxTimeout)
	h.healthy, _ = r.integer(AnnotationHealthyThreshold, h.healthy, 2, 10)
	h.unhealthy, _ = r.integer(AnnotationUnhealthyThreshold, h.unhealthy, 2, 10)
	// ELB wants the timeout below the interval; ELBv2 allows them equal.
	tooLong := h.timeout >= h.interval
	if kind == kindNetwork {
		tooLong = h.timeout > h.interval
	}
	if tooLong && (intervalSet || timeoutSet) {
		r.errs = append(r.errs, fmt.Errorf("annotations %s (%d) and %s (%d): the timeout must be shorter than the interval",
			AnnotationHealthCheckTimeout, h.timeout, AnnotationHealthCheckInterval, h.interval))
	}
	return h
}

// checkLBPorts: a Classic ELB forwards TCP; a Network Load Balancer TCP
// and UDP, TLS only over TCP. Targets are instances on the NodePort, so
// each port needs one. Each port number is one listener: on a Network
// Load Balancer a port number may be listed twice, over TCP and over UDP,
// for one TCP_UDP listener.
func checkLBPorts(r *annotationReader, svc *v1.Service, o *lbOptions) {
	if len(svc.Spec.Ports) == 0 {
		r.errs = append(r.errs, errors.New("the Service has no ports"))
		return
	}
	seen := map[int32][]v1.ServicePort{}
	for _, p := range svc.Spec.Ports {
		proto := protocolOf(p)
		switch {
		case proto == v1.ProtocolUDP && o.kind == kindClassic:
			r.errs = append(r.errs, fmt.Errorf("port %d: a Classic ELB does not forward UDP (annotate %s: nlb)", p.Port, AnnotationType))
		case proto != v1.ProtocolTCP && proto != v1.ProtocolUDP:
			r.errs = append(r.errs, fmt.Errorf("port %d: protocol %s is not supported (TCP and, on a Network Load Balancer, UDP are)", p.Port, proto))
		case proto == v1.ProtocolUDP && o.usesCert(p):
			r.errs = append(r.errs, fmt.Errorf("port %d: UDP cannot use the certificate of %s (see %s)", p.Port, AnnotationSSLCert, AnnotationSSLPorts))
		case proto == v1.ProtocolUDP && o.backend == backendSSL:
			r.errs = append(r.errs, fmt.Errorf("port %d: UDP cannot be forwarded as %s %s", p.Port, AnnotationBackendProtocol, o.backend))
		case p.NodePort == 0:
			r.errs = append(r.errs, fmt.Errorf("port %d has no NodePort (allocateLoadBalancerNodePorts is false): the load balancer sends to NodePorts", p.Port))
		case len(seen[p.Port]) > 0:
			if err := checkTCPUDPPair(o, append(seen[p.Port], p)); err != nil {
				r.errs = append(r.errs, err)
			}
		}
		seen[p.Port] = append(seen[p.Port], p)
	}
	for _, c := range o.sourceRanges {
		if _, err := netip.ParsePrefix(c); err != nil {
			r.errs = append(r.errs, fmt.Errorf("loadBalancerSourceRanges: %q is not a CIDR", c))
		}
	}
}

// checkTCPUDPPair checks the Service ports of one port number: on a
// Network Load Balancer, one over TCP and one over UDP with the same
// NodePort and without the certificate are one TCP_UDP listener; anything
// else is an error.
func checkTCPUDPPair(o *lbOptions, ports []v1.ServicePort) error {
	a, b := ports[0], ports[len(ports)-1]
	if o.kind != kindNetwork || len(ports) != 2 || protocolOf(a) == protocolOf(b) {
		return fmt.Errorf("port %d is listed twice: each port number is one listener (on a Network Load Balancer, once over TCP and once over UDP)", a.Port)
	}
	if a.NodePort != b.NodePort {
		return fmt.Errorf("port %d over TCP and UDP is one TCP_UDP listener and needs one NodePort, not %d and %d", a.Port, a.NodePort, b.NodePort)
	}
	if o.usesCert(a) || o.usesCert(b) {
		return fmt.Errorf("port %d over TCP and UDP is one TCP_UDP listener, which cannot use the certificate of %s (see %s)", a.Port, AnnotationSSLCert, AnnotationSSLPorts)
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
