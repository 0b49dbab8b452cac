package cloud

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Result labels of the guard's metrics.
const (
	ResultSuccess   = "success"
	ResultError     = "error"
	ResultNotFound  = "not_found"
	ResultTimeout   = "timeout"
	ResultThrottled = "throttled"
	ResultSaturated = "saturated"
	ResultFenced    = "fenced"
	ResultDetached  = "detached"
)

var (
	// requestsTotal counts each call a controller makes through the guard,
	// by the outcome that controller got: the provider's result (directly or
	// taken later as a kept result), or saturated/fenced (refused before the
	// provider) or detached (released while the call goes on).
	requestsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "cloudprovider_api_requests_total",
		Help:           "Cloud provider calls made through the guard, by the outcome the caller got.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"provider", "method", "result"})

	// requestDuration observes how long the provider took for every call that
	// reached the provider, when it returns or reaches its deadline (detached
	// calls included); refused calls are not observed.
	requestDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Name:           "cloudprovider_api_request_duration_seconds",
		Help:           "Time the cloud provider took for a call, up to its deadline, by result.",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		StabilityLevel: metrics.ALPHA,
	}, []string{"provider", "method", "result"})

	inflightCalls = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name:           "cloudprovider_api_inflight_calls",
		Help:           "Cloud provider calls whose goroutine has not returned (attached, detached and abandoned).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"provider"})

	detachedCalls = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name:           "cloudprovider_api_detached_calls",
		Help:           "Cloud provider calls going on in the background after their caller was released, before their deadline.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"provider"})

	abandonedCalls = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name:           "cloudprovider_api_abandoned_calls",
		Help:           "Cloud provider calls past their deadline whose goroutine has not returned.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"provider"})
)

var registerMetrics sync.Once

// RegisterMetrics registers the guard's metrics with the component-base
// legacy registry. New calls it; it is safe to call more than once.
func RegisterMetrics() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(requestsTotal, requestDuration, inflightCalls, detachedCalls, abandonedCalls)
	})
}
