package openstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/cloud"
)

// Octavia's provisioning statuses the provider tells apart.
const (
	provisioningActive        = "ACTIVE"
	provisioningError         = "ERROR"
	provisioningDeleted       = "DELETED"
	provisioningPendingDelete = "PENDING_DELETE"
)

// errProvisioningFailed is the error of a wait that saw the load balancer
// go into ERROR.
var errProvisioningFailed = errors.New("the load balancer went into provisioning status ERROR")

// errLoadBalancerGone is the error of a wait for ACTIVE that found the
// load balancer deleted.
var errLoadBalancerGone = errors.New("the load balancer is gone")

func isNotFound(err error) bool { return gophercloud.ResponseCodeIs(err, http.StatusNotFound) }

// requestError turns a failed request into what the caller should do: a
// 409 (Octavia refuses to change a load balancer that is not ACTIVE) asks
// for a retry after busyRetryAfter, a 429 is a throttle the guard backs
// off from; anything else is an error.
func (l *loadBalancers) requestError(what string, err error) error {
	return requestError(what, err, l.busyRetryAfter)
}

// requestError turns a failed OpenStack request into what the caller
// should do: a 409 asks for a retry after conflictAfter, a 429 is a
// throttle the guard backs off from (for the response's Retry-After, when
// it has one); anything else is an error.
func requestError(what string, err error, conflictAfter time.Duration) error {
	switch {
	case gophercloud.ResponseCodeIs(err, http.StatusConflict):
		return api.NewRetryError(fmt.Sprintf("%s: the cloud refused it for now (409): %v", what, err), conflictAfter)
	case gophercloud.ResponseCodeIs(err, http.StatusTooManyRequests):
		var after time.Duration
		var code gophercloud.ErrUnexpectedResponseCode
		if errors.As(err, &code) {
			if s, perr := strconv.Atoi(code.ResponseHeader.Get("Retry-After")); perr == nil && s > 0 {
				after = time.Duration(s) * time.Second
			}
		}
		return &cloud.ThrottledError{RetryAfter: after, Err: fmt.Errorf("%s: %w", what, err)}
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
}

// busy is the retry-after error for a load balancer Octavia is working
// on: the provider changes a load balancer only when it is ACTIVE.
func (l *loadBalancers) busy(lb *loadbalancers.LoadBalancer) error {
	return api.NewRetryError(fmt.Sprintf("load balancer %s (%s) is %s; it is changed once it is ACTIVE",
		lb.Name, lb.ID, lb.ProvisioningStatus), l.busyRetryAfter)
}

// findLoadBalancer returns the load balancer of a name, nil when there is
// none. One on its way out (PENDING_DELETE, DELETED) does not count.
func findLoadBalancer(ctx context.Context, oc *gophercloud.ServiceClient, name string) (*loadbalancers.LoadBalancer, error) {
	pages, err := loadbalancers.List(oc, loadbalancers.ListOpts{Name: name}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing load balancers named %s: %w", name, err)
	}
	all, err := loadbalancers.ExtractLoadBalancers(pages)
	if err != nil {
		return nil, fmt.Errorf("listing load balancers named %s: %w", name, err)
	}
	var found []loadbalancers.LoadBalancer
	for _, lb := range all {
		// Octavia's name filter is exact; the check guards against one
		// that is not.
		if lb.Name == name && lb.ProvisioningStatus != provisioningPendingDelete && lb.ProvisioningStatus != provisioningDeleted {
			found = append(found, lb)
		}
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return &found[0], nil
	default:
		return nil, fmt.Errorf("%d load balancers are named %s; delete all but one", len(found), name)
	}
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// poll reads a load balancer, with back-off, until done says so or ctx
// ends. The first read comes after pollInitial: a change Octavia has just
// accepted is not done yet.
func (l *loadBalancers) poll(ctx context.Context, oc *gophercloud.ServiceClient, id, waitingFor string,
	done func(lb *loadbalancers.LoadBalancer, err error) (bool, error)) error {
	delay := l.pollInitial
	status := "unknown"
	for {
		if err := sleep(ctx, delay); err != nil {
			return fmt.Errorf("waiting for load balancer %s to %s (it is %s): %w", id, waitingFor, status, err)
		}
		lb, err := loadbalancers.Get(ctx, oc, id).Extract()
		if ok, err := done(lb, err); ok || err != nil {
			return err
		}
		if lb != nil {
			status = lb.ProvisioningStatus
		}
		delay = min(2*delay, l.pollMax)
	}
}

// waitActive waits until a load balancer is ACTIVE and returns it. ERROR
// is errProvisioningFailed.
func (l *loadBalancers) waitActive(ctx context.Context, oc *gophercloud.ServiceClient, id string) (*loadbalancers.LoadBalancer, error) {
	var active *loadbalancers.LoadBalancer
	err := l.poll(ctx, oc, id, "become ACTIVE", func(lb *loadbalancers.LoadBalancer, err error) (bool, error) {
		switch {
		case isNotFound(err):
			return false, fmt.Errorf("load balancer %s: %w", id, errLoadBalancerGone)
		case err != nil:
			return false, fmt.Errorf("reading load balancer %s: %w", id, err)
		case lb.ProvisioningStatus == provisioningActive:
			active = lb
			return true, nil
		case lb.ProvisioningStatus == provisioningError:
			return false, fmt.Errorf("load balancer %s (%s): %w", lb.Name, id, errProvisioningFailed)
		case lb.ProvisioningStatus == provisioningDeleted:
			return false, fmt.Errorf("load balancer %s: %w", id, errLoadBalancerGone)
		}
		return false, nil
	})
	return active, err
}

// waitGone waits until a load balancer is deleted.
func (l *loadBalancers) waitGone(ctx context.Context, oc *gophercloud.ServiceClient, id string) error {
	return l.poll(ctx, oc, id, "be deleted", func(lb *loadbalancers.LoadBalancer, err error) (bool, error) {
		switch {
		case isNotFound(err):
			return true, nil
		case err != nil:
			return false, fmt.Errorf("reading load balancer %s: %w", id, err)
		case lb.ProvisioningStatus == provisioningDeleted:
			return true, nil
		}
		return false, nil
	})
}

// change makes one change to a load balancer and waits until Octavia has
// made it. Each change leaves the load balancer PENDING_UPDATE, and
// Octavia refuses the next one until it is ACTIVE again.
func (l *loadBalancers) change(ctx context.Context, oc *gophercloud.ServiceClient, lbID, what string, request func() error) error {
	klog.FromContext(ctx).V(2).Info("Changing load balancer", "change", what)
	if err := request(); err != nil {
		return l.requestError(what, err)
	}
	if _, err := l.waitActive(ctx, oc, lbID); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// tolerateNotFound is nil for a 404: what was to be deleted is gone.
func tolerateNotFound(err error) error {
	if isNotFound(err) {
		return nil
	}
	return err
}

// lbChildren are a load balancer's listeners, pools, members and monitors
// as Octavia has them.
type lbChildren struct {
	listeners map[listenerKey]*listeners.Listener
	pools     map[string]*pools.Pool
	members   map[string][]pools.Member    // by pool ID
	monitors  map[string]*monitors.Monitor // by pool ID
}

// readChildren reads a load balancer's children.
func readChildren(ctx context.Context, oc *gophercloud.ServiceClient, lbID string) (*lbChildren, error) {
	c := &lbChildren{listeners: map[listenerKey]*listeners.Listener{}, pools: map[string]*pools.Pool{},
		members: map[string][]pools.Member{}, monitors: map[string]*monitors.Monitor{}}
	lpages, err := listeners.List(oc, listeners.ListOpts{LoadbalancerID: lbID}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the listeners of load balancer %s: %w", lbID, err)
	}
	ls, err := listeners.ExtractListeners(lpages)
	if err != nil {
		return nil, fmt.Errorf("listing the listeners of load balancer %s: %w", lbID, err)
	}
	for i := range ls {
		c.listeners[listenerKey{protocol: ls[i].Protocol, port: ls[i].ProtocolPort}] = &ls[i]
	}
	ppages, err := pools.List(oc, pools.ListOpts{LoadbalancerID: lbID}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the pools of load balancer %s: %w", lbID, err)
	}
	ps, err := pools.ExtractPools(ppages)
	if err != nil {
		return nil, fmt.Errorf("listing the pools of load balancer %s: %w", lbID, err)
	}
	for i := range ps {
		p := &ps[i]
		c.pools[p.ID] = p
		mpages, err := pools.ListMembers(oc, p.ID, nil).AllPages(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing the members of pool %s: %w", p.ID, err)
		}
		if c.members[p.ID], err = pools.ExtractMembers(mpages); err != nil {
			return nil, fmt.Errorf("listing the members of pool %s: %w", p.ID, err)
		}
		if p.MonitorID != "" {
			m, err := monitors.Get(ctx, oc, p.MonitorID).Extract()
			if err != nil && !isNotFound(err) {
				return nil, fmt.Errorf("reading health monitor %s of pool %s: %w", p.MonitorID, p.ID, err)
			}
			if m != nil {
				c.monitors[p.ID] = m
			}
		}
	}
	return c, nil
}

// poolOf is a listener's default pool, if it has one.
func (c *lbChildren) poolOf(l *listeners.Listener) *pools.Pool {
	if l.DefaultPoolID == "" {
		return nil
	}
	return c.pools[l.DefaultPoolID]
}
