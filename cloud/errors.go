package cloud

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/cloud-provider/api"
)

// ErrSaturated is returned, without calling the provider, when the guard
// already has as many calls in the provider as it allows (in flight overall,
// abandoned, or for this method). It is a retry-after error.
var ErrSaturated = errors.New("cloud saturated")

// ErrFenced is returned, without calling the provider, when another mutating
// call for the same object is still in flight, detached or abandoned.
var ErrFenced = errors.New("another mutating cloud call for this object is in flight")

// ErrInProgress is returned when the caller was released after the detach
// window while its call goes on in the background. The object is re-enqueued
// through the guard's callback when the call returns.
var ErrInProgress = errors.New("cloud call in progress")

// ErrNotSupported is wrapped by a controller's constructor when the
// provider lacks the interface the controller needs (LoadBalancer, Routes).
// The controller is then skipped, not failed.
var ErrNotSupported = errors.New("not supported by the cloud provider")

// ErrTimeout is returned when a call did not return before its deadline.
var ErrTimeout = errors.New("cloud call deadline exceeded")

// ThrottledError is the typed error a provider returns when the cloud API
// throttled a request (HTTP 429, RequestLimitExceeded, ...). The guard backs
// its whole limiter off for RetryAfter (or its own back-off when zero).
type ThrottledError struct {
	// RetryAfter is how long the cloud asked to wait; zero if it did not say.
	RetryAfter time.Duration
	// Err is the provider's underlying error.
	Err error
}

func (e *ThrottledError) Error() string {
	if e.Err == nil {
		return "cloud API throttled the request"
	}
	return fmt.Sprintf("cloud API throttled the request: %v", e.Err)
}

func (e *ThrottledError) Unwrap() error { return e.Err }

// RetryAfterError carries how long a caller should wait before it tries
// again. ErrSaturated, ErrFenced, ErrInProgress and throttling come wrapped
// in it; controllers requeue with AddAfter(RetryAfter).
type RetryAfterError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.RetryAfter)
}

func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter reports whether err asks the caller to wait before retrying,
// and for how long. It understands the guard's RetryAfterError,
// ThrottledError and the cloud-provider api.RetryError.
func RetryAfter(err error) (time.Duration, bool) {
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return ra.RetryAfter, true
	}
	var te *ThrottledError
	if errors.As(err, &te) {
		return te.RetryAfter, true
	}
	var re *api.RetryError
	if errors.As(err, &re) {
		return re.RetryAfter(), true
	}
	return 0, false
}
