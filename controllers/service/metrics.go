package service

import (
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Operations and results of loadBalancerSyncs.
const (
	opEnsure = "ensure"
	opUpdate = "update"
	opDelete = "delete"

	resultSuccess = "success"
	resultError   = "error"
	// resultWaiting: a call for the Service is still in the cloud (detached
	// or fencing); the sync is retried when it returns.
	resultWaiting = "waiting"
)

var (
	loadBalancerSyncs = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "service_load_balancer_syncs_total",
		Help:           "Load-balancer syncs of the service controller by operation (ensure, update, delete) and result (success, error, waiting).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation", "result"})
	hostSetRecomputes = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "service_host_set_recomputes_total",
		Help:           "Recomputations of the eligible node set after Node changes, at most one per --node-sync-coalesce-period.",
		StabilityLevel: metrics.ALPHA,
	})
	hostSetEnqueued = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "service_host_set_enqueued_total",
		Help:           "Services enqueued because their load balancer's host set changed.",
		StabilityLevel: metrics.ALPHA,
	})
)

func init() {
	legacyregistry.MustRegister(loadBalancerSyncs, hostSetRecomputes, hostSetEnqueued)
	for _, op := range []string{opEnsure, opUpdate, opDelete} {
		for _, r := range []string{resultSuccess, resultError, resultWaiting} {
			loadBalancerSyncs.WithLabelValues(op, r)
		}
	}
}
