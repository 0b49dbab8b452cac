// Package fake is an in-memory cloud for e2e tests, benchmarks and the local
// playground, registered as the provider "fake". It has instances, load
// balancers with VIPs from a pool, a route table, and faults that make calls
// slow, fail, get throttled or hang. It records every call and counts
// overlapping mutating calls on the same object.
//
// Its --cloud-config is YAML (see Config):
//
//	instances:
//	- name: node-1
//	  id: i-1
//	  type: m1.small
//	  zone: zone-a
//	  region: region-1
//	  addresses: [{type: InternalIP, address: 10.0.0.11}]
//	  state: running            # running | stopped | terminated
//	  labels: {example.com/rack: r1}
//	autoInstances: {enabled: true, type: fake.medium, region: region-1, zones: [zone-a, zone-b]}
//	loadBalancers: {vipCIDR: 192.0.2.0/24}
//	routes: [{name: r1, targetNode: node-1, destinationCIDR: 10.244.1.0/24}]
//	faults: [{method: EnsureLoadBalancer, object: "default/*", latency: 2s, count: 3}]
//	adminAddress: 127.0.0.1:8081  # loopback only
//	callLog: /tmp/fake-calls.jsonl  # every call as a JSON line, when it returns
//
// The admin API (JSON over HTTP, loopback only):
//
//	curl localhost:8081/instances
//	curl -X POST localhost:8081/instances -d '{"name":"node-9","zone":"zone-a"}'
//	curl -X DELETE localhost:8081/instances/node-9
//	curl -X POST localhost:8081/instances/node-1/stop     # and /start
//	curl localhost:8081/loadbalancers
//	curl localhost:8081/vips                              # allocated VIPs
//	curl localhost:8081/routes
//	curl localhost:8081/calls                             # records and overlap count
//	curl localhost:8081/faults
//	curl -X POST localhost:8081/faults -d '{"method":"InstanceMetadata","object":"node-*","latency":"3s"}'
//	curl -X POST localhost:8081/faults -d '{"method":"EnsureLoadBalancer","hang":"ignore-context"}'
//	curl -X DELETE localhost:8081/faults/1                # or /faults for all
package fake
