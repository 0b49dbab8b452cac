package fake

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// errPoolExhausted is returned when a pool has no free address.
var errPoolExhausted = errors.New("address pool exhausted")

// pool hands out the host addresses of a prefix (not its first address,
// nor the last one of an IPv4 prefix).
type pool struct {
	prefix netip.Prefix
	used   map[netip.Addr]bool
	next   netip.Addr
}

func newPool(p netip.Prefix) *pool {
	p = p.Masked()
	return &pool{prefix: p, used: map[netip.Addr]bool{}, next: p.Addr().Next()}
}

func (p *pool) usable(a netip.Addr) bool {
	if !a.IsValid() || !p.prefix.Contains(a) || a == p.prefix.Addr() {
		return false
	}
	if a.Is4() && !p.prefix.Contains(a.Next()) { // broadcast
		return false
	}
	return true
}

// allocate returns want when it is free and in the pool, or the next free
// address when want is the zero Addr.
func (p *pool) allocate(want netip.Addr) (netip.Addr, error) {
	if want.IsValid() {
		if !p.usable(want) {
			return netip.Addr{}, fmt.Errorf("%s is not in the pool %s", want, p.prefix)
		}
		if p.used[want] {
			return netip.Addr{}, fmt.Errorf("%s is already in use", want)
		}
		p.used[want] = true
		return want, nil
	}
	// One pass over the pool from the cursor, wrapping once.
	for a, wrapped := p.next, false; ; a = a.Next() {
		if !p.usable(a) {
			if wrapped {
				return netip.Addr{}, fmt.Errorf("%s: %w", p.prefix, errPoolExhausted)
			}
			wrapped, a = true, p.prefix.Addr()
			continue
		}
		if !p.used[a] {
			p.used[a] = true
			p.next = a.Next()
			return a, nil
		}
	}
}

func (p *pool) release(a netip.Addr) { delete(p.used, a) }

// allocated returns the addresses in use, sorted.
func (p *pool) allocated() []string {
	addrs := make([]netip.Addr, 0, len(p.used))
	for a := range p.used {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out
}

// pathMatch matches object against a glob; "" matches everything.
func pathMatch(glob, object string) (bool, error) {
	if glob == "" {
		return true, nil
	}
	return path.Match(glob, object)
}

func toNodeName(s string) types.NodeName { return types.NodeName(s) }
