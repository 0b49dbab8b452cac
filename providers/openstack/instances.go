package openstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
)

// Nova server states the provider tells apart.
const (
	statusShutoff     = "SHUTOFF"
	statusDeleted     = "DELETED"
	statusSoftDeleted = "SOFT_DELETED"
)

// instances implements InstancesV2 on Nova.
type instances struct {
	conn       *session
	region     string
	networking NetworkingConfig
}

var _ cloudprovider.InstancesV2 = (*instances)(nil)

// server is what the provider reads of a Nova server.
type server struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
	// Flavor is a copy of the server's flavor, with its name, from
	// microversion 2.47 on; the provider asks for 2.47, and a Nova older
	// than that refuses the request (406) rather than answer without it.
	Flavor struct {
		OriginalName string `json:"original_name"`
	} `json:"flavor"`
	AvailabilityZone string                     `json:"OS-EXT-AZ:availability_zone"`
	Addresses        map[string][]serverAddress `json:"addresses"`
	AccessIPv4       string                     `json:"accessIPv4"`
	AccessIPv6       string                     `json:"accessIPv6"`
}

func (s *server) gone() bool { return s.Status == statusDeleted || s.Status == statusSoftDeleted }

// find returns a Node's server: by providerID when the Node has one, else
// by name. None is cloudprovider.InstanceNotFound, so the lifecycle
// controller can delete the Node; several with the name is an error, as
// the Node cannot be told which one it is. A providerID of another region
// is an error, not InstanceNotFound: the server may well exist there.
func (i *instances) find(ctx context.Context, node *v1.Node) (*server, error) {
	c, err := i.conn.clients(ctx)
	if err != nil {
		return nil, err
	}
	if node.Spec.ProviderID != "" {
		id, region, err := serverIDFromProviderID(node.Spec.ProviderID)
		if err != nil {
			return nil, err
		}
		if region != "" && region != i.region {
			return nil, fmt.Errorf("node %s: providerID %s is in region %s, the provider serves region %s", node.Name, node.Spec.ProviderID, region, i.region)
		}
		// ExtractInto unwraps the response's "server" object.
		var got server
		err = servers.Get(ctx, c.compute, id).ExtractInto(&got)
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			return nil, fmt.Errorf("server %s of node %s: %w", id, node.Name, cloudprovider.InstanceNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("getting server %s of node %s: %w", id, node.Name, err)
		}
		return &got, nil
	}
	return i.findByName(ctx, c, node.Name)
}

// findByName returns the server whose name is the Node's. Nova's name
// filter is a regular expression that matches anywhere in the name, so the
// filter is anchored and quoted, and what Nova returns is checked again:
// only a name equal to the Node's counts. The check ignores case, as Nova
// on MySQL does and as the kubelet lowercases the host name it registers.
func (i *instances) findByName(ctx context.Context, c *clients, name string) (*server, error) {
	pages, err := servers.List(c.compute, servers.ListOpts{Name: "^" + regexp.QuoteMeta(name) + "$"}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing servers named %s: %w", name, err)
	}
	var list []server
	if err := servers.ExtractServersInto(pages, &list); err != nil {
		return nil, fmt.Errorf("reading servers named %s: %w", name, err)
	}
	var found []server
	for _, s := range list {
		if strings.EqualFold(s.Name, name) && !s.gone() {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no server named %s: %w", name, cloudprovider.InstanceNotFound)
	case 1:
		return &found[0], nil
	default:
		ids := make([]string, 0, len(found))
		for _, s := range found {
			ids = append(ids, s.ID)
		}
		return nil, fmt.Errorf("%d servers are named %s (%s); set the Node's providerID", len(found), name, strings.Join(ids, ", "))
	}
}

// InstanceExists is false when the server is gone or deleted.
func (i *instances) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	s, err := i.find(ctx, node)
	if errors.Is(err, cloudprovider.InstanceNotFound) {
		return false, nil
	}
	if err != nil {
		return false, i.conn.redact(err)
	}
	return !s.gone(), nil
}

// InstanceShutdown is true when the server is SHUTOFF.
func (i *instances) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	s, err := i.find(ctx, node)
	if err != nil {
		return false, i.conn.redact(err)
	}
	return s.Status == statusShutoff, nil
}

// InstanceMetadata returns the providerID, flavor name, availability zone,
// the configured region and the addresses of the Node's server.
func (i *instances) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	md, err := i.metadata(ctx, node)
	return md, i.conn.redact(err)
}

func (i *instances) metadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	s, err := i.find(ctx, node)
	if err != nil {
		return nil, err
	}
	if s.gone() {
		return nil, fmt.Errorf("server %s is %s: %w", s.ID, s.Status, cloudprovider.InstanceNotFound)
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID:   providerID(s.ID),
		InstanceType: labelValue(s.Flavor.OriginalName),
		Zone:         labelValue(s.AvailabilityZone),
		Region:       labelValue(i.region),
		NodeAddresses: nodeAddresses(serverAddresses{
			ByNetwork:  s.Addresses,
			AccessIPv4: s.AccessIPv4,
			AccessIPv6: s.AccessIPv6,
		}, i.networking),
	}, nil
}
