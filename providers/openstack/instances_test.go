package openstack

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/providers/openstack/emulator"
)

// instancesCloud is an emulator with the servers the instance tests look
// up, and the provider on it.
type instancesCloud struct {
	*testCloud
	instances cloudprovider.InstancesV2
	ids       map[string]string // server name (the first of a name) -> ID
	dups      []string          // the IDs of the two servers named dup-1
}

func newInstancesCloud(t *testing.T, opts emulator.Options, extraConf ...string) *instancesCloud {
	t.Helper()
	c := newTestCloud(t, opts)
	ic := &instancesCloud{testCloud: c, ids: map[string]string{}}
	if _, err := c.AddFlavor(emulator.Flavor{Name: "m1.large", VCPUs: 4, RAM: 8192, Disk: 80}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []emulator.Server{
		{Name: "node-1", Flavor: "m1.large", AvailabilityZone: "az 1 (west)",
			Addresses: map[string][]emulator.Address{
				"private": {{Addr: "10.0.0.5", MAC: "fa:16:3e:00:00:05"}, {Addr: "203.0.113.7", Type: "floating"}, {Addr: "fd00::5"}},
				"public":  {{Addr: "198.51.100.5"}},
			},
			AccessIPv4: "198.51.100.1"},
		{Name: "node-10"}, {Name: "my-node-1"}, {Name: "nodeX1"},
		{Name: "Worker-1"},
		{Name: "dup-1"}, {Name: "dup-1"},
		{Name: "off-1", Status: "SHUTOFF"},
		{Name: "soft-1", Status: "SOFT_DELETED"},
		{Name: "gone-1"},
	} {
		added := c.addServer(t, s)
		if s.Name == "dup-1" {
			ic.dups = append(ic.dups, added.ID)
		}
		if ic.ids[s.Name] == "" {
			ic.ids[s.Name] = added.ID
		}
	}
	if err := c.DeleteServer(ic.ids["gone-1"]); err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t, c.conf(extraConf...))
	ic.instances, _ = p.InstancesV2()
	return ic
}

func TestInstanceMetadata(t *testing.T) {
	c := newInstancesCloud(t, emulator.Options{}, "[Networking]", "public-network-name = public")
	id := c.ids["node-1"]
	want := &cloudprovider.InstanceMetadata{
		ProviderID:   "openstack:///" + id,
		InstanceType: "m1.large",
		Zone:         "az-1--west",
		Region:       "RegionOne",
		NodeAddresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "10.0.0.5"},
			{Type: v1.NodeExternalIP, Address: "203.0.113.7"},
			{Type: v1.NodeInternalIP, Address: "fd00::5"},
			{Type: v1.NodeExternalIP, Address: "198.51.100.5"},
			{Type: v1.NodeExternalIP, Address: "198.51.100.1"},
		},
	}
	for _, n := range []*v1.Node{
		node("node-1", ""),
		node("node-1", "openstack:///"+id),
		node("node-1", "openstack://RegionOne/"+id),
		node("renamed", "openstack:///"+id), // the providerID wins over the name
	} {
		got, err := c.instances.InstanceMetadata(t.Context(), n)
		if err != nil {
			t.Fatalf("node %s (%s): %v", n.Name, n.Spec.ProviderID, err)
		}
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("node %s (%s):\n got %+v\nwant %+v", n.Name, n.Spec.ProviderID, got, want)
		}
	}
	for _, r := range c.Requests(emulator.Compute) {
		if r.Microversion != novaMicroversion {
			t.Errorf("%s %s at microversion %q, want %s", r.Method, r.Path, r.Microversion, novaMicroversion)
		}
	}
}

// Nova's name filter is a regular expression that matches anywhere in the
// name; the provider anchors and quotes it and checks the names it gets.
func TestInstanceByExactName(t *testing.T) {
	c := newInstancesCloud(t, emulator.Options{})
	c.ResetRequests()
	md, err := c.instances.InstanceMetadata(t.Context(), node("node-1", ""))
	if err != nil || md.ProviderID != providerID(c.ids["node-1"]) {
		t.Fatalf("node-1 among node-10, my-node-1 and nodeX1: %+v, %v", md, err)
	}
	if r := c.Requests(emulator.Compute); len(r) != 1 || r[0].Query.Get("name") != "^node-1$" {
		t.Errorf("requests %+v, want one list with name=^node-1$", r)
	}
	// Unquoted, "node.1" would match nodeX1.
	if _, err := c.instances.InstanceMetadata(t.Context(), node("node.1", "")); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Errorf("node.1: %v, want InstanceNotFound", err)
	}
	if r := c.Requests(emulator.Compute); r[len(r)-1].Query.Get("name") != `^node\.1$` {
		t.Errorf("name filter %q, want the dot quoted", r[len(r)-1].Query.Get("name"))
	}
}

// The kubelet registers a lowercased host name; Nova on MySQL matches
// names ignoring case, and so does the provider's check.
func TestInstanceNameCase(t *testing.T) {
	c := newInstancesCloud(t, emulator.Options{})
	md, err := c.instances.InstanceMetadata(t.Context(), node("worker-1", ""))
	if err != nil || md.ProviderID != providerID(c.ids["Worker-1"]) {
		t.Errorf("worker-1 for the server Worker-1: %+v, %v", md, err)
	}
	sensitive := newInstancesCloud(t, emulator.Options{CaseSensitiveNames: true})
	if _, err := sensitive.instances.InstanceMetadata(t.Context(), node("worker-1", "")); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Errorf("with a case-sensitive Nova: %v, want InstanceNotFound", err)
	}
}

func TestInstanceStates(t *testing.T) {
	// One server to a page, so that the two dup-1 come in two pages.
	c := newInstancesCloud(t, emulator.Options{ComputePageLimit: 1})
	type result struct {
		exists, shutdown bool
		// errors: "" none, "not found" InstanceNotFound, else a substring
		// of an error that is not InstanceNotFound.
		existsErr, shutdownErr, metadataErr string
	}
	several := "2 servers are named dup-1 (" + c.dups[1] + ", " + c.dups[0] + ")"
	otherRegion := "is in region RegionTwo, the provider serves region RegionOne"
	tests := []struct {
		name string
		node *v1.Node
		want result
	}{
		{"running, by name", node("node-1", ""), result{exists: true}},
		{"running, by providerID", node("node-1", providerID(c.ids["node-1"])), result{exists: true}},
		{"shut off", node("off-1", ""), result{exists: true, shutdown: true}},
		{"shut off, by providerID", node("off-1", providerID(c.ids["off-1"])), result{exists: true, shutdown: true}},
		{"soft-deleted", node("soft-1", ""),
			result{shutdownErr: "not found", metadataErr: "not found"}},
		{"soft-deleted, by providerID", node("soft-1", providerID(c.ids["soft-1"])),
			result{metadataErr: "not found"}},
		{"no server of the name", node("nobody", ""),
			result{shutdownErr: "not found", metadataErr: "not found"}},
		{"deleted, by providerID", node("gone-1", providerID(c.ids["gone-1"])),
			result{shutdownErr: "not found", metadataErr: "not found"}},
		{"several servers of the name", node("dup-1", ""),
			result{existsErr: several, shutdownErr: several, metadataErr: several}},
		{"providerID of another region", node("node-1", "openstack://RegionTwo/"+c.ids["node-1"]),
			result{existsErr: otherRegion, shutdownErr: otherRegion, metadataErr: otherRegion}},
		{"providerID of another provider", node("node-1", "aws:///i-1"),
			result{existsErr: "not an OpenStack one", shutdownErr: "not an OpenStack one", metadataErr: "not an OpenStack one"}},
	}
	check := func(t *testing.T, what string, err error, want string) {
		t.Helper()
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", what, err)
		case want == "not found" && !errors.Is(err, cloudprovider.InstanceNotFound):
			t.Errorf("%s: %v, want InstanceNotFound", what, err)
		case want != "" && want != "not found" && (err == nil || errors.Is(err, cloudprovider.InstanceNotFound) || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error with %q that is not InstanceNotFound", what, err, want)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exists, err := c.instances.InstanceExists(t.Context(), tt.node)
			check(t, "InstanceExists", err, tt.want.existsErr)
			if exists != tt.want.exists {
				t.Errorf("InstanceExists = %v, want %v", exists, tt.want.exists)
			}
			shutdown, err := c.instances.InstanceShutdown(t.Context(), tt.node)
			check(t, "InstanceShutdown", err, tt.want.shutdownErr)
			if shutdown != tt.want.shutdown {
				t.Errorf("InstanceShutdown = %v, want %v", shutdown, tt.want.shutdown)
			}
			_, err = c.instances.InstanceMetadata(t.Context(), tt.node)
			check(t, "InstanceMetadata", err, tt.want.metadataErr)
		})
	}
}

// A failing Nova is an error, never "the instance is gone": the lifecycle
// controller deletes the Node of a gone instance.
func TestNovaFailureIsNotInstanceNotFound(t *testing.T) {
	c := newInstancesCloud(t, emulator.Options{})
	for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusConflict} {
		fault := c.AddFault(emulator.Fault{Service: emulator.Compute, Status: status})
		for _, n := range []*v1.Node{node("node-1", ""), node("node-1", providerID(c.ids["node-1"]))} {
			exists, err := c.instances.InstanceExists(t.Context(), n)
			if err == nil || errors.Is(err, cloudprovider.InstanceNotFound) {
				t.Errorf("Nova %d, node %q: %v, %v; want an error", status, n.Spec.ProviderID, exists, err)
			}
		}
		c.RemoveFault(fault)
	}
}

// The provider asks Nova for microversion 2.47; a Nova without it refuses,
// and the error says so.
func TestNovaWithoutMicroversion247(t *testing.T) {
	c := newInstancesCloud(t, emulator.Options{ComputeMaxMicroversion: "2.46"})
	_, err := c.instances.InstanceMetadata(t.Context(), node("node-1", ""))
	if err == nil || errors.Is(err, cloudprovider.InstanceNotFound) || !strings.Contains(err.Error(), "Version 2.47 is not supported") {
		t.Errorf("with Nova at 2.46: %v", err)
	}
}
