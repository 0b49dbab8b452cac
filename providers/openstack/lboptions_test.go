package openstack

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// TestLBOptions: what a class sets wins over the annotations, which win
// over [LoadBalancer]; defaults come from the config.
func TestLBOptions(t *testing.T) {
	cfg := defaultConfig().LoadBalancer
	cfg.FloatingNetworkID, cfg.SubnetID, cfg.MemberSubnetID = "cfg-fip-net", "cfg-subnet", "cfg-member-subnet"
	cfg.MonitorDelay, cfg.MonitorTimeout = 1500*time.Millisecond, time.Second
	cfg.Classes = map[string]*LoadBalancerClass{"dmz": {FloatingNetworkID: "class-fip-net"}}
	local := func(svc *v1.Service) *v1.Service {
		svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		svc.Spec.HealthCheckNodePort = 32000
		return svc
	}
	tests := []struct {
		name  string
		svc   *v1.Service
		check func(o *lbOptions) bool
	}{
		{"config", service("s"), func(o *lbOptions) bool {
			return o.floatingNetwork == setting{"cfg-fip-net", "[LoadBalancer] floating-network-id"} && o.vipSubnet.id == "cfg-subnet" &&
				o.memberSubnet.id == "cfg-member-subnet" && o.method == "ROUND_ROBIN" && o.connectionLimit == -1 &&
				!o.monitor.enabled && o.monitor.delay == 2 && o.monitor.timeout == 1 && o.monitor.maxRetries == 1 &&
				o.timeouts.clientData == nil && o.sourceRanges == nil && o.ipFamily == v1.IPv4Protocol
		}},
		{"annotation over config", service("s", AnnotationFloatingNetworkID, "ann-net", AnnotationSubnetID, "ann-subnet"), func(o *lbOptions) bool {
			return o.floatingNetwork == setting{"ann-net", "annotation " + AnnotationFloatingNetworkID} && o.vipSubnet.id == "ann-subnet"
		}},
		{"class over annotation", service("s", AnnotationClass, "dmz", AnnotationFloatingNetworkID, "ann-net"), func(o *lbOptions) bool {
			return o.floatingNetwork.id == "class-fip-net" && strings.Contains(o.floatingNetwork.source, `LoadBalancerClass "dmz"`) && o.vipSubnet.id == "cfg-subnet"
		}},
		{"Local turns the monitor on", local(service("s")), func(o *lbOptions) bool { return o.monitor.enabled }},
		{"unless it is turned off", local(service("s", AnnotationEnableHealthMonitor, "false")), func(o *lbOptions) bool { return !o.monitor.enabled }},
		{"listener settings", service("s", AnnotationLBMethod, "source_ip_port", AnnotationConnectionLimit, "5", AnnotationTimeoutMemberConnect, "0"), func(o *lbOptions) bool {
			return o.method == "SOURCE_IP_PORT" && o.connectionLimit == 5 && o.timeouts.memberConnect != nil && *o.timeouts.memberConnect == 0
		}},
		{"allow-all ranges are none", service("s", v1.AnnotationLoadBalancerSourceRangesKey, "0.0.0.0/0"), func(o *lbOptions) bool { return o.sourceRanges == nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseLBOptions(&cfg, tt.svc)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(o) {
				t.Errorf("options = %+v", o)
			}
		})
	}
}

// TestLBOptionsNameEveryBadAnnotation: one error names each bad one.
func TestLBOptionsNameEveryBadAnnotation(t *testing.T) {
	cfg := defaultConfig().LoadBalancer
	svc := service("s", AnnotationLBMethod, "fastest", AnnotationConnectionLimit, "many", AnnotationInternal, "perhaps")
	_, err := parseLBOptions(&cfg, svc)
	for _, key := range []string{AnnotationLBMethod, AnnotationConnectionLimit, AnnotationInternal} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("error %v does not name %s", err, key)
		}
	}
}
