package aws

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2/ktesting"
)

// lbService is a LoadBalancer Service with the annotations and ports
// (port 80 on NodePort 30080 when none are given).
func lbService(annotations map[string]string, ports ...v1.ServicePort) *v1.Service {
	if len(ports) == 0 {
		ports = []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080}}
	}
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID("0b5e2a84-5a4c-4b51-9d7e-2f1a3c4d5e6f"), Annotations: annotations},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: ports},
	}
}

func TestServiceKind(t *testing.T) {
	tests := []struct {
		value   *string
		want    lbKind
		wantErr error
		errHas  string
	}{
		{value: nil, want: kindClassic},
		{value: ptrTo(""), want: kindClassic},
		{value: ptrTo("nlb"), want: kindNetwork},
		{value: ptrTo("nlb-ip"), wantErr: cloudprovider.ImplementedElsewhere},
		{value: ptrTo("external"), wantErr: cloudprovider.ImplementedElsewhere},
		{value: ptrTo("alb"), errHas: AnnotationType},
	}
	for _, tt := range tests {
		name := "unset"
		ann := map[string]string{}
		if tt.value != nil {
			name = *tt.value
			ann[AnnotationType] = *tt.value
		}
		t.Run(name, func(t *testing.T) {
			got, err := serviceKind(lbService(ann))
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("serviceKind = %v, %v; want %v", got, err, tt.wantErr)
				}
			case tt.errHas != "":
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Errorf("serviceKind = %v, %v; want an error naming %s", got, err, tt.errHas)
				}
			case err != nil || got != tt.want:
				t.Errorf("serviceKind = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestParseLBOptionsErrors: each bad value is an error naming its
// annotation (or field).
func TestParseLBOptionsErrors(t *testing.T) {
	tests := []struct {
		name        string
		kind        lbKind
		annotations map[string]string
		ports       []v1.ServicePort
		ranges      []string
		want        []string
	}{
		{name: "internal", annotations: map[string]string{AnnotationInternal: "maybe"}, want: []string{AnnotationInternal}},
		{name: "cross-zone", annotations: map[string]string{AnnotationCrossZone: "yes please"}, want: []string{AnnotationCrossZone}},
		{name: "empty subnet", annotations: map[string]string{AnnotationSubnets: "subnet-1,,subnet-2"}, want: []string{AnnotationSubnets}},
		{name: "tag without key", annotations: map[string]string{AnnotationAdditionalTags: "=v"}, want: []string{AnnotationAdditionalTags}},
		{name: "reserved tag", annotations: map[string]string{AnnotationAdditionalTags: "kubernetes.io/cluster/other=owned"}, want: []string{AnnotationAdditionalTags}},
		{name: "aws tag", annotations: map[string]string{AnnotationAdditionalTags: "aws:x=1"}, want: []string{AnnotationAdditionalTags}},
		{name: "label without value", annotations: map[string]string{AnnotationTargetNodeLabels: "role"}, want: []string{AnnotationTargetNodeLabels}},
		{name: "bad label", annotations: map[string]string{AnnotationTargetNodeLabels: "role=a b"}, want: []string{AnnotationTargetNodeLabels}},
		{name: "health protocol", annotations: map[string]string{AnnotationHealthCheckProtocol: "ICMP"}, want: []string{AnnotationHealthCheckProtocol}},
		{name: "ssl health check on nlb", kind: kindNetwork, annotations: map[string]string{AnnotationHealthCheckProtocol: "SSL"}, want: []string{AnnotationHealthCheckProtocol}},
		{name: "health port", annotations: map[string]string{AnnotationHealthCheckPort: "70000"}, want: []string{AnnotationHealthCheckPort}},
		{name: "health path", annotations: map[string]string{AnnotationHealthCheckPath: "healthz"}, want: []string{AnnotationHealthCheckPath}},
		{name: "interval", annotations: map[string]string{AnnotationHealthCheckInterval: "1"}, want: []string{AnnotationHealthCheckInterval}},
		{name: "timeout", annotations: map[string]string{AnnotationHealthCheckTimeout: "ten"}, want: []string{AnnotationHealthCheckTimeout}},
		{name: "timeout not below interval", annotations: map[string]string{AnnotationHealthCheckInterval: "10", AnnotationHealthCheckTimeout: "10"},
			want: []string{AnnotationHealthCheckTimeout, AnnotationHealthCheckInterval}},
		{name: "healthy threshold", annotations: map[string]string{AnnotationHealthyThreshold: "11"}, want: []string{AnnotationHealthyThreshold}},
		{name: "unhealthy threshold", annotations: map[string]string{AnnotationUnhealthyThreshold: "1"}, want: []string{AnnotationUnhealthyThreshold}},
		{name: "empty cert", annotations: map[string]string{AnnotationSSLCert: ""}, want: []string{AnnotationSSLCert}},
		{name: "ssl port not of the service", annotations: map[string]string{AnnotationSSLCert: "arn:aws:acm:us-east-1:1:certificate/x", AnnotationSSLPorts: "443"},
			want: []string{AnnotationSSLPorts}},
		{name: "http backend on nlb", kind: kindNetwork, annotations: map[string]string{AnnotationBackendProtocol: "http"}, want: []string{AnnotationBackendProtocol}},
		{name: "backend", annotations: map[string]string{AnnotationBackendProtocol: "grpc"}, want: []string{AnnotationBackendProtocol}},
		{name: "udp on classic", ports: []v1.ServicePort{{Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP}}, want: []string{AnnotationType}},
		{name: "sctp", kind: kindNetwork, ports: []v1.ServicePort{{Port: 53, NodePort: 30053, Protocol: v1.ProtocolSCTP}}, want: []string{"SCTP"}},
		{name: "udp with certificate", kind: kindNetwork, annotations: map[string]string{AnnotationSSLCert: "arn:aws:acm:us-east-1:1:certificate/x"},
			ports: []v1.ServicePort{{Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP}}, want: []string{AnnotationSSLCert}},
		{name: "no node port", ports: []v1.ServicePort{{Port: 80}}, want: []string{"NodePort"}},
		{name: "tcp and udp with two node ports", kind: kindNetwork, ports: []v1.ServicePort{{Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP}, {Port: 53, NodePort: 30054}},
			want: []string{"TCP_UDP", "one NodePort"}},
		{name: "tcp port twice", kind: kindNetwork, ports: []v1.ServicePort{{Port: 53, NodePort: 30053}, {Port: 53, NodePort: 30053, Protocol: v1.ProtocolTCP}},
			want: []string{"listed twice"}},
		{name: "port three times", kind: kindNetwork, ports: []v1.ServicePort{
			{Port: 53, NodePort: 30053}, {Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP}, {Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP},
		}, want: []string{"listed twice"}},
		{name: "tcp and udp on classic", ports: []v1.ServicePort{{Port: 53, NodePort: 30053}, {Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP}},
			want: []string{AnnotationType}},
		{name: "tcp and udp with the certificate", kind: kindNetwork,
			annotations: map[string]string{AnnotationSSLCert: "arn:aws:acm:us-east-1:1:certificate/x", AnnotationSSLPorts: "dns-tcp"},
			ports:       []v1.ServicePort{{Name: "dns-tcp", Port: 53, NodePort: 30053}, {Name: "dns-udp", Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP}},
			want:        []string{"TCP_UDP", AnnotationSSLCert}},
		{name: "source range", ranges: []string{"10.0.0.0/33"}, want: []string{"10.0.0.0/33"}},
		{name: "several at once", annotations: map[string]string{AnnotationInternal: "x", AnnotationHealthCheckPort: "y", AnnotationCrossZone: "z"},
			want: []string{AnnotationInternal, AnnotationHealthCheckPort, AnnotationCrossZone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind := tt.kind
			if kind == "" {
				kind = kindClassic
			}
			svc := lbService(tt.annotations, tt.ports...)
			svc.Spec.LoadBalancerSourceRanges = tt.ranges
			o, err := parseLBOptions(svc, kind)
			if err == nil {
				t.Fatalf("parseLBOptions = %+v; want an error", o)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

func TestParseLBOptions(t *testing.T) {
	cert := "arn:aws:acm:us-east-1:123456789012:certificate/abc"
	svc := lbService(map[string]string{
		AnnotationInternal:            "true",
		AnnotationSubnets:             "subnet-a, lb-b",
		AnnotationAdditionalTags:      "team=shop, cost-centre=42, bare",
		AnnotationTargetNodeLabels:    "node-role/lb=true",
		AnnotationCrossZone:           "false",
		AnnotationSSLCert:             cert,
		AnnotationSSLPorts:            "https",
		AnnotationHealthCheckProtocol: "http",
		AnnotationHealthCheckPath:     "/ready",
		AnnotationHealthCheckPort:     "8080",
		AnnotationHealthCheckInterval: "20",
		AnnotationHealthCheckTimeout:  "4",
	}, v1.ServicePort{Name: "http", Port: 80, NodePort: 30080}, v1.ServicePort{Name: "https", Port: 443, NodePort: 30443})
	o, err := parseLBOptions(svc, kindClassic)
	if err != nil {
		t.Fatal(err)
	}
	if !o.internal || o.scheme() != "internal" || len(o.subnets) != 2 || o.subnets[1] != "lb-b" {
		t.Errorf("internal %v, subnets %v", o.internal, o.subnets)
	}
	if o.extraTags["team"] != "shop" || o.extraTags["cost-centre"] != "42" || o.extraTags["bare"] != "" || len(o.extraTags) != 3 {
		t.Errorf("extra tags = %v", o.extraTags)
	}
	if o.nodeLabels["node-role/lb"] != "true" || o.crossZone == nil || *o.crossZone {
		t.Errorf("node labels %v, cross-zone %v", o.nodeLabels, o.crossZone)
	}
	if o.usesCert(svc.Spec.Ports[0]) || !o.usesCert(svc.Spec.Ports[1]) {
		t.Error("only the https port should use the certificate")
	}
	want := healthCheck{protocol: protoHTTP, port: "8080", path: "/ready", interval: 20, timeout: 4, healthy: 2, unhealthy: 6}
	if o.health != want {
		t.Errorf("health check = %+v; want %+v", o.health, want)
	}
	if len(o.sourceRanges) != 1 || o.sourceRanges[0] != "0.0.0.0/0" {
		t.Errorf("source ranges = %v; want 0.0.0.0/0", o.sourceRanges)
	}
	listeners := clbListeners(o)
	if *listeners[0].Protocol != "tcp" || *listeners[1].Protocol != "ssl" || *listeners[1].InstanceProtocol != "tcp" || *listeners[1].SSLCertificateId != cert {
		t.Errorf("listeners = %+v", listeners)
	}
	if hc := clbHealthCheck(o); *hc.Target != "HTTP:8080/ready" {
		t.Errorf("health check target = %s", *hc.Target)
	}
}

// TestHealthCheckDefaults: aws-cloud-controller-manager's defaults, and
// kube-proxy's health port for externalTrafficPolicy: Local.
func TestHealthCheckDefaults(t *testing.T) {
	local := lbService(nil)
	local.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	local.Spec.HealthCheckNodePort = 32000
	tests := []struct {
		name string
		svc  *v1.Service
		kind lbKind
		want healthCheck
	}{
		{"nlb", lbService(nil), kindNetwork, healthCheck{protoTCP, trafficPort, "/", 30, 10, 3, 3}},
		{"nlb local", local, kindNetwork, healthCheck{protoHTTP, "32000", "/healthz", 10, 10, 2, 2}},
		{"classic", lbService(nil), kindClassic, healthCheck{protoTCP, trafficPort, "/", 10, 5, 2, 6}},
		{"classic local", local, kindClassic, healthCheck{protoHTTP, "32000", "/healthz", 10, 5, 2, 6}},
		{"classic ssl backend", lbService(map[string]string{AnnotationBackendProtocol: "ssl"}), kindClassic, healthCheck{protoSSL, trafficPort, "/", 10, 5, 2, 6}},
		{"classic https backend", lbService(map[string]string{AnnotationBackendProtocol: "HTTPS"}), kindClassic, healthCheck{protoSSL, trafficPort, "/", 10, 5, 2, 6}},
		{"classic https backend, protocol annotated", lbService(map[string]string{AnnotationBackendProtocol: "https", AnnotationHealthCheckProtocol: "TCP"}), kindClassic,
			healthCheck{protoTCP, trafficPort, "/", 10, 5, 2, 6}},
		{"classic https backend, local", withAnnotations(local, map[string]string{AnnotationBackendProtocol: "https"}), kindClassic,
			healthCheck{protoHTTP, "32000", "/healthz", 10, 5, 2, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseLBOptions(tt.svc, tt.kind)
			if err != nil {
				t.Fatal(err)
			}
			if o.health != tt.want {
				t.Errorf("health check = %+v; want %+v", o.health, tt.want)
			}
		})
	}
	o, _ := parseLBOptions(lbService(nil), kindClassic)
	if hc := clbHealthCheck(o); *hc.Target != "TCP:30080" {
		t.Errorf("classic default target = %s; want TCP:30080", *hc.Target)
	}
	o, _ = parseLBOptions(lbService(map[string]string{AnnotationBackendProtocol: "ssl"}), kindClassic)
	if hc := clbHealthCheck(o); *hc.Target != "SSL:30080" {
		t.Errorf("classic target of an SSL backend = %s; want SSL:30080", *hc.Target)
	}
}

func TestNames(t *testing.T) {
	svc := lbService(nil)
	if got := loadBalancerName(svc); got != "a0b5e2a845a4c4b519d7e2f1a3c4d5e6" {
		t.Errorf("load balancer name = %s", got)
	}
	long := lbService(nil, v1.ServicePort{Port: 80, NodePort: 30080}, v1.ServicePort{Port: 443, NodePort: 30443})
	long.Namespace, long.Name = "a-very-long.namespace", "and_a-very-long-name"
	o, err := parseLBOptions(long, kindNetwork)
	if err != nil {
		t.Fatal(err)
	}
	ports := nlbPorts("cluster", long, o)
	a, b := ports[0].targetGroup, ports[1].targetGroup
	if a == b || len(a) > maxLBNameLength || len(b) > maxLBNameLength || !strings.HasPrefix(a, "k8s-averylon-andavery-") {
		t.Errorf("target group names %s, %s: want distinct, at most 32 characters, k8s-<ns>-<name>-<hash>", a, b)
	}
	if other := nlbPorts("other-cluster", long, o); other[0].targetGroup == a {
		t.Error("the target group name does not depend on the cluster")
	}
	o.health.interval = 10
	if again := nlbPorts("cluster", long, o); again[0].targetGroup == a {
		t.Error("the target group name does not change with the health check")
	}
}

// TestNLBPortsTCPUDP: a port number over TCP and UDP is one TCP_UDP
// listener and target group, whichever is listed first; its target group
// is not that of the TCP port alone.
func TestNLBPortsTCPUDP(t *testing.T) {
	dnsTCP := v1.ServicePort{Name: "dns-tcp", Protocol: v1.ProtocolTCP, Port: 53, NodePort: 30053}
	dnsUDP := v1.ServicePort{Name: "dns-udp", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 30053}
	http := v1.ServicePort{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080}
	type want struct {
		port  int32
		proto elbv2types.ProtocolEnum
	}
	tests := []struct {
		name  string
		ports []v1.ServicePort
		want  []want
	}{
		{name: "tcp alone", ports: []v1.ServicePort{dnsTCP, http}, want: []want{{53, elbv2types.ProtocolEnumTcp}, {80, elbv2types.ProtocolEnumTcp}}},
		{name: "tcp then udp", ports: []v1.ServicePort{dnsTCP, http, dnsUDP}, want: []want{{53, elbv2types.ProtocolEnumTcpUdp}, {80, elbv2types.ProtocolEnumTcp}}},
		{name: "udp then tcp", ports: []v1.ServicePort{dnsUDP, dnsTCP}, want: []want{{53, elbv2types.ProtocolEnumTcpUdp}}},
	}
	names := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := lbService(map[string]string{AnnotationType: typeNLB}, tt.ports...)
			o, err := parseLBOptions(svc, kindNetwork)
			if err != nil {
				t.Fatalf("parseLBOptions: %v", err)
			}
			ports := nlbPorts("cluster", svc, o)
			var got []want
			for _, p := range ports {
				got = append(got, want{p.port.Port, p.listenerProto})
				if p.targetProto != p.listenerProto || p.port.NodePort != 30000+p.port.Port {
					t.Errorf("port %d: target %s on %d; want %s on %d", p.port.Port, p.targetProto, p.port.NodePort, p.listenerProto, 30000+p.port.Port)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("listeners = %v; want %v", got, tt.want)
			}
			names[tt.name] = ports[0].targetGroup
		})
	}
	if names["tcp then udp"] != names["udp then tcp"] || names["tcp then udp"] == names["tcp alone"] {
		t.Errorf("target groups of port 53: %v; want TCP_UDP's the same whatever the order, and not TCP's", names)
	}
}

func TestRetryWhileInUse(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	inUse := errors.New("in use")
	calls := 0
	err := retryWhileInUse(ctx, time.Millisecond, time.Minute, func(err error) bool { return errors.Is(err, inUse) }, func(context.Context) error {
		calls++
		if calls < 3 {
			return inUse
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("retry = %v after %d calls; want success after 3", err, calls)
	}

	other := errors.New("denied")
	calls = 0
	err = retryWhileInUse(ctx, time.Millisecond, time.Minute, func(err error) bool { return errors.Is(err, inUse) }, func(context.Context) error {
		calls++
		return other
	})
	if !errors.Is(err, other) || calls != 1 {
		t.Errorf("retry = %v after %d calls; want the other error at once", err, calls)
	}

	err = retryWhileInUse(ctx, time.Millisecond, 20*time.Millisecond, func(err error) bool { return errors.Is(err, inUse) }, func(context.Context) error { return inUse })
	if err == nil || !errors.Is(err, inUse) {
		t.Errorf("retry past its timeout = %v; want an error that wraps the last one", err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	calls = 0
	err = retryWhileInUse(cancelled, time.Millisecond, time.Minute, func(err error) bool { return errors.Is(err, inUse) }, func(context.Context) error {
		calls++
		return inUse
	})
	if err == nil || calls > 1 {
		t.Errorf("retry with a cancelled context = %v after %d calls; want an error at once", err, calls)
	}
}

// withAnnotations is a copy of svc with more annotations.
func withAnnotations(svc *v1.Service, annotations map[string]string) *v1.Service {
	out := svc.DeepCopy()
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	maps.Copy(out.Annotations, annotations)
	return out
}
