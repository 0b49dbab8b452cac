package openstack

import (
	"context"
	"fmt"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// fipDescription is the description of the floating IPs ccmkit allocates
// for a Service. It is their mark of ownership: only a floating IP with
// exactly this description is ever deleted, so one the user allocated and
// named in spec.loadBalancerIP stays theirs.
func fipDescription(clusterName string, svc *v1.Service) string {
	return cut(fmt.Sprintf("ccmkit: floating IP of Kubernetes Service %s/%s of cluster %s", svc.Namespace, svc.Name, clusterName), maxNameLength)
}

func listFloatingIPs(ctx context.Context, nc *gophercloud.ServiceClient, opts floatingips.ListOpts) ([]floatingips.FloatingIP, error) {
	pages, err := floatingips.List(nc, opts).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing floating IPs: %w", err)
	}
	list, err := floatingips.ExtractFloatingIPs(pages)
	if err != nil {
		return nil, fmt.Errorf("listing floating IPs: %w", err)
	}
	return list, nil
}

// floatingIPsOf are the floating IPs associated with a port.
func floatingIPsOf(ctx context.Context, nc *gophercloud.ServiceClient, portID string) ([]floatingips.FloatingIP, error) {
	if portID == "" {
		return nil, nil
	}
	return listFloatingIPs(ctx, nc, floatingips.ListOpts{PortID: portID})
}

// ensureAddress gives the load balancer the address the Service asks for
// and returns it: the VIP for an internal (or IPv6) load balancer, whose
// floating IP, if any, is released; else its floating IP, which is the
// one already on the VIP port, the spec.loadBalancerIP one (adopted), one
// ccmkit allocated for the Service before (a load balancer made again
// keeps its address) or a new one.
func (l *loadBalancers) ensureAddress(ctx context.Context, nc *gophercloud.ServiceClient, lb *loadbalancers.LoadBalancer, spec *lbSpec, owned string) (string, error) {
	o := spec.opts
	logger := klog.FromContext(ctx)
	onPort, err := floatingIPsOf(ctx, nc, lb.VipPortID)
	if err != nil {
		return "", err
	}
	if o.internal || isIPv6(lb.VipAddress) {
		for i := range onPort {
			if err := l.releaseFloatingIP(ctx, nc, &onPort[i], owned, o.keepFloatingIP); err != nil {
				return "", err
			}
		}
		return lb.VipAddress, nil
	}
	for _, f := range onPort {
		if o.loadBalancerIP == "" || f.FloatingIP == o.loadBalancerIP {
			return f.FloatingIP, nil
		}
	}
	// spec.loadBalancerIP names another address than the port has.
	for i := range onPort {
		if err := l.releaseFloatingIP(ctx, nc, &onPort[i], owned, o.keepFloatingIP); err != nil {
			return "", err
		}
	}

	if o.loadBalancerIP != "" {
		found, err := listFloatingIPs(ctx, nc, floatingips.ListOpts{FloatingIP: o.loadBalancerIP})
		if err != nil {
			return "", err
		}
		if len(found) > 0 {
			f := found[0]
			if f.PortID != "" && f.PortID != lb.VipPortID {
				return "", fmt.Errorf("spec.loadBalancerIP: floating IP %s is in use by port %s", f.FloatingIP, f.PortID)
			}
			logger.V(2).Info("Adopting floating IP", "floatingIP", f.FloatingIP, "port", lb.VipPortID)
			return l.associate(ctx, nc, &f, lb.VipPortID)
		}
	} else {
		mine, err := listFloatingIPs(ctx, nc, floatingips.ListOpts{Description: owned})
		if err != nil {
			return "", err
		}
		for i := range mine {
			if mine[i].Description == owned && mine[i].PortID == "" {
				logger.V(2).Info("Reusing floating IP", "floatingIP", mine[i].FloatingIP, "port", lb.VipPortID)
				return l.associate(ctx, nc, &mine[i], lb.VipPortID)
			}
		}
	}

	network, err := l.floatingNetwork(ctx, nc, o)
	if err != nil {
		return "", err
	}
	if network == "" {
		logger.Info("No floating network: the Service gets the VIP; set [LoadBalancer] floating-network-id or the annotation " + AnnotationFloatingNetworkID)
		return lb.VipAddress, nil
	}
	f, err := floatingips.Create(ctx, nc, floatingips.CreateOpts{
		FloatingNetworkID: network, SubnetID: o.floatingSubnet.id, FloatingIP: o.loadBalancerIP,
		PortID: lb.VipPortID, Description: owned,
	}).Extract()
	if err != nil {
		return "", l.requestError("allocating a floating IP on network "+network, err)
	}
	logger.V(2).Info("Allocated floating IP", "floatingIP", f.FloatingIP, "network", network, "port", lb.VipPortID)
	return f.FloatingIP, nil
}

func (l *loadBalancers) associate(ctx context.Context, nc *gophercloud.ServiceClient, f *floatingips.FloatingIP, portID string) (string, error) {
	if f.PortID == portID {
		return f.FloatingIP, nil
	}
	updated, err := floatingips.Update(ctx, nc, f.ID, floatingips.UpdateOpts{PortID: ptr.To(portID)}).Extract()
	if err != nil {
		return "", l.requestError("associating floating IP "+f.FloatingIP+" with port "+portID, err)
	}
	return updated.FloatingIP, nil
}

// releaseFloatingIP takes a floating IP off the load balancer: ccmkit's
// own is deleted unless keep is set; any other is only disassociated.
func (l *loadBalancers) releaseFloatingIP(ctx context.Context, nc *gophercloud.ServiceClient, f *floatingips.FloatingIP, owned string, keep bool) error {
	logger := klog.FromContext(ctx)
	if f.Description == owned && !keep {
		logger.V(2).Info("Deleting floating IP", "floatingIP", f.FloatingIP)
		if err := tolerateNotFound(floatingips.Delete(ctx, nc, f.ID).ExtractErr()); err != nil {
			return l.requestError("deleting floating IP "+f.FloatingIP, err)
		}
		return nil
	}
	logger.V(2).Info("Disassociating floating IP", "floatingIP", f.FloatingIP, "port", f.PortID)
	_, err := floatingips.Update(ctx, nc, f.ID, floatingips.UpdateOpts{PortID: ptr.To("")}).Extract()
	if err := tolerateNotFound(err); err != nil {
		return l.requestError("disassociating floating IP "+f.FloatingIP, err)
	}
	return nil
}

// releaseFloatingIPs deletes the floating IPs ccmkit allocated for a
// Service, wherever they are.
func (l *loadBalancers) releaseFloatingIPs(ctx context.Context, nc *gophercloud.ServiceClient, owned string) error {
	mine, err := listFloatingIPs(ctx, nc, floatingips.ListOpts{Description: owned})
	if err != nil {
		return err
	}
	for i := range mine {
		if mine[i].Description != owned {
			continue
		}
		if err := l.releaseFloatingIP(ctx, nc, &mine[i], owned, false); err != nil {
			return err
		}
	}
	return nil
}

// floatingNetwork is the network floating IPs come from: the one the
// Service or the config names, else the project's one external network.
// Empty when there is none.
func (l *loadBalancers) floatingNetwork(ctx context.Context, nc *gophercloud.ServiceClient, o *lbOptions) (string, error) {
	if o.floatingNetwork.id != "" {
		return o.floatingNetwork.id, nil
	}
	pages, err := networks.List(nc, external.ListOptsExt{ListOptsBuilder: networks.ListOpts{}, External: ptr.To(true)}).AllPages(ctx)
	if err != nil {
		return "", fmt.Errorf("listing external networks: %w", err)
	}
	list, err := networks.ExtractNetworks(pages)
	if err != nil {
		return "", fmt.Errorf("listing external networks: %w", err)
	}
	switch len(list) {
	case 0:
		return "", nil
	case 1:
		return list[0].ID, nil
	default:
		return "", fmt.Errorf("%d external networks: set [LoadBalancer] floating-network-id or the annotation %s to pick one", len(list), AnnotationFloatingNetworkID)
	}
}
