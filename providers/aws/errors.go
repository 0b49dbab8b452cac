package aws

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/cloud"
)

// throttleCodes are the API error codes of a throttled request. The SDK
// counts a few more codes as throttling (LimitExceededException,
// PriorRequestNotComplete, ...); those mean a quota or a conflict in the
// services this provider calls, and are left to the SDK.
var throttleCodes = map[string]bool{
	"RequestLimitExceeded":      true, // EC2
	"Throttling":                true, // ELB, ELBv2, STS
	"ThrottlingException":       true,
	"ThrottledException":        true,
	"RequestThrottled":          true,
	"RequestThrottledException": true,
	"TooManyRequestsException":  true,
	"EC2ThrottledException":     true,
	"SlowDown":                  true,
}

// Error codes the provider tells apart.
const (
	codeInstanceNotFound  = "InvalidInstanceID.NotFound"
	codeInstanceMalformed = "InvalidInstanceID.Malformed"
)

// errorCode is the API error code of err, "" when it has none.
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// isThrottle reports whether err is the cloud API throttling a request:
// a throttling error code, or HTTP 429.
func isThrottle(err error) bool {
	if throttleCodes[errorCode(err)] {
		return true
	}
	var re *smithyhttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusTooManyRequests
}

// retryAfter is the wait a throttled response asked for in its
// Retry-After header (in seconds), zero when it did not.
func retryAfter(err error) time.Duration {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.Response.Response == nil {
		return 0
	}
	s, convErr := strconv.Atoi(re.Response.Header.Get("Retry-After"))
	if convErr != nil || s <= 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}

// throttleErrors is a middleware, outermost in every client's stack, that
// turns a throttled request's error into a *cloud.ThrottledError, so that
// the guard backs all calls off. The SDK wraps what it returns in an
// *smithy.OperationError, which unwraps to it.
type throttleErrors struct{}

func (throttleErrors) ID() string { return "ccmkit.ThrottleErrors" }

func (throttleErrors) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	middleware.InitializeOutput, middleware.Metadata, error,
) {
	out, md, err := next.HandleInitialize(ctx, in)
	if err != nil && isThrottle(err) {
		err = &cloud.ThrottledError{RetryAfter: retryAfter(err), Err: err}
	}
	return out, md, err
}

// addThrottleErrors adds throttleErrors to a client's stack.
func addThrottleErrors(stack *middleware.Stack) error {
	return stack.Initialize.Add(throttleErrors{}, middleware.Before)
}

// throttleNotRetried keeps the SDK's retryer from retrying a throttled
// request: retrying would hide throttling from the guard, whose limiter
// slows every call down, not just the one.
func throttleNotRetried(err error) aws.Ternary {
	if isThrottle(err) {
		return aws.FalseTernary
	}
	return aws.UnknownTernary
}

// isNotFound reports whether err is cloudprovider.InstanceNotFound.
func isNotFound(err error) bool { return errors.Is(err, cloudprovider.InstanceNotFound) }
