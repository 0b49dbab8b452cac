package aws

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// httpTimeouts bound the phases of every request below the guard's
// per-call deadline: a connection that never completes, a TLS handshake
// that stalls or a server that takes a request and never answers fails
// the request on its own, even when a caller's context has no deadline.
type httpTimeouts struct {
	dial           time.Duration
	tlsHandshake   time.Duration
	responseHeader time.Duration
	idleConn       time.Duration
}

var defaultHTTPTimeouts = httpTimeouts{
	dial:           10 * time.Second,
	tlsHandshake:   10 * time.Second,
	responseHeader: 30 * time.Second,
	idleConn:       90 * time.Second,
}

// defaultIMDSTimeout bounds the region look-up in the instance metadata
// service; off EC2 nothing answers there.
const defaultIMDSTimeout = 5 * time.Second

// maxAttempts is how often the SDK tries a request that failed in a way
// worth retrying (a reset connection, a 5xx), throttling aside.
const maxAttempts = 3

// Headers sent with AssumeRole, for trust policies with aws:SourceAccount
// and aws:SourceArn conditions.
const (
	headerSourceAccount = "x-amz-source-account"
	headerSourceARN     = "x-amz-source-arn"
)

// clientOptions are the parts of the clients that are not in the config.
type clientOptions struct {
	timeouts    httpTimeouts
	imdsTimeout time.Duration
	// credentials replace the SDK's default chain when set.
	credentials aws.CredentialsProvider
	// apiOptions are added to every client's middleware stack.
	apiOptions []func(*middleware.Stack) error
}

func defaultClientOptions() clientOptions {
	return clientOptions{timeouts: defaultHTTPTimeouts, imdsTimeout: defaultIMDSTimeout}
}

// clients are the SDK clients of one region, sharing one HTTP client,
// one retryer configuration and one set of credentials.
type clients struct {
	region string
	ec2    *ec2.Client
	elb    *elb.Client
	elbv2  *elbv2.Client
}

// newHTTPClient returns the client every AWS request goes through. It is
// the SDK's buildable client, so that a CA bundle from the environment
// (AWS_CA_BUNDLE) or the shared config still applies.
func newHTTPClient(t httpTimeouts) *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) {
			d.Timeout = t.dial
			d.KeepAlive = 30 * time.Second
		}).
		WithTransportOptions(func(tr *http.Transport) {
			tr.TLSHandshakeTimeout = t.tlsHandshake
			tr.ResponseHeaderTimeout = t.responseHeader
			tr.IdleConnTimeout = t.idleConn
			tr.MaxIdleConnsPerHost = 32
		})
}

// newRetryer is the SDK's standard retryer, less two things that would
// hide throttling from the guard: throttled requests are not retried, and
// there is no client-side retry quota (the guard's limiter is the one
// limit).
func newRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = maxAttempts
		o.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(throttleNotRetried)}, o.Retryables...)
		o.RateLimiter = ratelimit.None
	})
}

// newClients builds the SDK clients: the region from the config, else from
// the instance metadata service; credentials from the SDK's default chain
// (environment, shared files, web identity, the instance's role), through
// AssumeRole when RoleARN is set; endpoints and signing from the
// ServiceOverride sections of the region. Only the region look-up may
// make a request.
func newClients(ctx context.Context, cfg *Config, opts clientOptions) (*clients, error) {
	httpClient := newHTTPClient(opts.timeouts)
	loadOpts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithHTTPClient(httpClient),
		awsconfig.WithRetryer(newRetryer),
	}
	if opts.credentials != nil {
		loadOpts = append(loadOpts, awsconfig.WithCredentialsProvider(opts.credentials))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS SDK's configuration: %w", err)
	}
	awsCfg.APIOptions = append(awsCfg.APIOptions, addThrottleErrors)
	awsCfg.APIOptions = append(awsCfg.APIOptions, opts.apiOptions...)

	region, err := resolveRegion(ctx, cfg, awsCfg, opts.imdsTimeout)
	if err != nil {
		return nil, err
	}
	awsCfg.Region = region

	if cfg.Global.RoleARN != "" {
		stsClient := sts.NewFromConfig(awsCfg, append(overrideOptions(cfg, serviceSTS, region, stsEndpoint),
			withSourceHeaders(cfg.Global.RoleARN, cfg.Global.SourceARN))...)
		awsCfg.Credentials = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(stsClient, cfg.Global.RoleARN))
	}

	return &clients{
		region: region,
		ec2:    ec2.NewFromConfig(awsCfg, overrideOptions(cfg, serviceEC2, region, ec2Endpoint)...),
		elb:    elb.NewFromConfig(awsCfg, overrideOptions(cfg, serviceELB, region, elbEndpoint)...),
		elbv2:  elbv2.NewFromConfig(awsCfg, overrideOptions(cfg, serviceELBv2, region, elbv2Endpoint)...),
	}, nil
}

// resolveRegion is [Global] Region, else the region of Zone, else the
// instance metadata service's (IMDSv2 only, within timeout).
func resolveRegion(ctx context.Context, cfg *Config, awsCfg aws.Config, timeout time.Duration) (string, error) {
	g := cfg.Global
	if g.Region != "" {
		return g.Region, nil
	}
	if g.Zone != "" {
		if r, ok := regionOfZone(g.Zone); ok {
			return r, nil
		}
	}
	client := imds.NewFromConfig(awsCfg, func(o *imds.Options) {
		o.EnableFallback = aws.FalseTernary
		o.Retryer = retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = 2 })
		if ov, ok := cfg.override(serviceIMDS, ""); ok {
			o.Endpoint = ov.URL
		}
	})
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := client.GetRegion(ctx, &imds.GetRegionInput{})
	if err == nil && out.Region == "" {
		err = errors.New("it returned an empty region")
	}
	if err != nil {
		return "", fmt.Errorf("aws cloud config: [Global] sets neither Region nor Zone, and the region could not be read "+
			"from the instance metadata service (IMDSv2) within %s; off EC2, set Region: %w", timeout, err)
	}
	return out.Region, nil
}

// Endpoint setters of the clients' options.
func ec2Endpoint(o *ec2.Options, o2 ServiceOverride) {
	o.BaseEndpoint = aws.String(o2.URL)
	ec2.WithSigV4SigningRegion(o2.SigningRegion)(o)
	if o2.SigningName != "" {
		ec2.WithSigV4SigningName(o2.SigningName)(o)
	}
}

func elbEndpoint(o *elb.Options, o2 ServiceOverride) {
	o.BaseEndpoint = aws.String(o2.URL)
	elb.WithSigV4SigningRegion(o2.SigningRegion)(o)
	if o2.SigningName != "" {
		elb.WithSigV4SigningName(o2.SigningName)(o)
	}
}

func elbv2Endpoint(o *elbv2.Options, o2 ServiceOverride) {
	o.BaseEndpoint = aws.String(o2.URL)
	elbv2.WithSigV4SigningRegion(o2.SigningRegion)(o)
	if o2.SigningName != "" {
		elbv2.WithSigV4SigningName(o2.SigningName)(o)
	}
}

func stsEndpoint(o *sts.Options, o2 ServiceOverride) {
	o.BaseEndpoint = aws.String(o2.URL)
	sts.WithSigV4SigningRegion(o2.SigningRegion)(o)
	if o2.SigningName != "" {
		sts.WithSigV4SigningName(o2.SigningName)(o)
	}
}

// overrideOptions are a client's options for the ServiceOverride of its
// service in region: none when there is no such override.
func overrideOptions[O any](cfg *Config, service, region string, set func(*O, ServiceOverride)) []func(*O) {
	ov, ok := cfg.override(service, region)
	if !ok {
		return nil
	}
	return []func(*O){func(o *O) { set(o, ov) }}
}

// withSourceHeaders adds the source account (the role's) and, when set,
// the source ARN to every STS request.
func withSourceHeaders(roleARN, sourceARN string) func(*sts.Options) {
	headers := map[string]string{}
	if a, err := arn.Parse(roleARN); err == nil && a.AccountID != "" {
		headers[headerSourceAccount] = a.AccountID
	}
	if sourceARN != "" {
		headers[headerSourceARN] = sourceARN
	}
	return func(o *sts.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Build.Add(middleware.BuildMiddlewareFunc("ccmkit.SourceHeaders",
				func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
					if req, ok := in.Request.(*smithyhttp.Request); ok {
						for k, v := range headers {
							req.Header.Set(k, v)
						}
					}
					return next.HandleBuild(ctx, in)
				}), middleware.After)
		})
	}
}
