package aws

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/providers/aws/awstest"
)

// proxiedCloud is the provider with every request going through an
// awstest.Proxy in front of moto.
type proxiedCloud struct {
	*testCloud
	faults   *awstest.Proxy
	provider *Cloud
}

// newProxiedCloud starts an awstest.Proxy in front of moto and builds the
// provider on it; change, if set, changes the clients' options.
func newProxiedCloud(t *testing.T, change func(*clientOptions)) *proxiedCloud {
	t.Helper()
	c := newTestCloud(t)
	faults, err := awstest.NewProxy(c.moto.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := faults.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(faults.Close)
	cfg, _, err := ParseConfig(strings.NewReader(strings.ReplaceAll(c.conf(), c.proxy.URL, faults.URL())))
	if err != nil {
		t.Fatal(err)
	}
	opts := defaultClientOptions()
	opts.credentials = credentials.NewStaticCredentialsProvider(testAccessKey, "secret", "")
	if change != nil {
		change(&opts)
	}
	p, err := newCloud(t.Context(), cfg, opts, defaultBatchOptions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	return &proxiedCloud{testCloud: c, faults: faults, provider: p}
}

// callResult is what a call in the background returned, and when.
type callResult struct {
	err  error
	took time.Duration
}

// inBackground runs call and sends its result.
func inBackground(call func() error) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		start := time.Now()
		err := call()
		ch <- callResult{err: err, took: time.Since(start)}
	}()
	return ch
}

func TestFaultProxyThrottling(t *testing.T) {
	pc := newProxiedCloud(t, nil)
	pc.createClusterRouteTable(t)
	_, ctx := ktesting.NewTestContext(t)
	a := pc.runInstance(t, instanceSpec{tags: clusterTags()})
	instances, _ := pc.provider.InstancesV2()
	routes := providerRoutes(t, pc.provider)

	pc.faults.SetFault("DescribeInstances", awstest.Fault{Throttle: true, RetryAfter: 2 * time.Second})
	_, err := instances.InstanceMetadata(ctx, node(aws.ToString(a.PrivateDnsName), ""))
	var throttled *cloud.ThrottledError
	if !errors.As(err, &throttled) || throttled.RetryAfter != 2*time.Second || errorCode(err) != "RequestLimitExceeded" {
		t.Errorf("InstanceMetadata throttled by EC2 = %v; want a *cloud.ThrottledError with RetryAfter 2s and RequestLimitExceeded", err)
	}
	if n := pc.faults.Count("DescribeInstances"); n != 1 {
		t.Errorf("the SDK sent %d DescribeInstances requests; want 1: throttling is not retried", n)
	}

	pc.faults.SetFault("DescribeRouteTables", awstest.Fault{Throttle: true})
	if _, err := routes.ListRoutes(ctx, "kubernetes"); !errors.As(err, &throttled) {
		t.Errorf("ListRoutes throttled = %v; want a *cloud.ThrottledError", err)
	}
	if n := pc.faults.Count("DescribeRouteTables"); n != 1 {
		t.Errorf("the SDK sent %d DescribeRouteTables requests; want 1", n)
	}

	// ELB throttles with HTTP 400 Throttling.
	pc.faults.SetFault("DescribeLoadBalancers", awstest.Fault{Throttle: true})
	_, err = pc.provider.clients.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
	if !errors.As(err, &throttled) || errorCode(err) != "Throttling" {
		t.Errorf("DescribeLoadBalancers throttled = %v; want a *cloud.ThrottledError with Throttling", err)
	}
	if n := pc.faults.Count("DescribeLoadBalancers"); n != 1 {
		t.Errorf("the SDK sent %d DescribeLoadBalancers requests; want 1", n)
	}

	pc.faults.ClearFaults()
	if _, err := instances.InstanceMetadata(ctx, node(aws.ToString(a.PrivateDnsName), "")); err != nil {
		t.Errorf("InstanceMetadata once the throttling ends: %v", err)
	}
}

func TestFaultProxyLatency(t *testing.T) {
	pc := newProxiedCloud(t, nil)
	_, ctx := ktesting.NewTestContext(t)
	a := pc.runInstance(t, instanceSpec{tags: clusterTags()})
	instances, _ := pc.provider.InstancesV2()
	const latency = 300 * time.Millisecond
	pc.faults.SetFault(awstest.AnyAction, awstest.Fault{Latency: latency})
	start := time.Now()
	if exists, err := instances.InstanceExists(ctx, node(aws.ToString(a.PrivateDnsName), "")); err != nil || !exists {
		t.Fatalf("InstanceExists through a slow proxy = %v, %v; want true", exists, err)
	}
	if took := time.Since(start); took < latency {
		t.Errorf("InstanceExists took %s; want at least the proxy's latency %s", took, latency)
	}
}

// TestFaultProxyHungCallsAreBounded: a request that is never answered
// ends with its caller's context, or, when the context has no deadline,
// with the HTTP client's response-header timeout.
func TestFaultProxyHungCallsAreBounded(t *testing.T) {
	const bound = 15 * time.Second
	t.Run("context deadline", func(t *testing.T) {
		pc := newProxiedCloud(t, nil)
		pc.createClusterRouteTable(t)
		a := pc.runInstance(t, instanceSpec{tags: clusterTags()})
		instances, _ := pc.provider.InstancesV2()
		routes := providerRoutes(t, pc.provider)
		pc.faults.SetFault(awstest.AnyAction, awstest.Fault{Hang: true})
		_, ctx := ktesting.NewTestContext(t)

		calls := map[string]func(context.Context) error{
			"InstanceMetadata": func(ctx context.Context) error {
				_, err := instances.InstanceMetadata(ctx, node(aws.ToString(a.PrivateDnsName), ""))
				return err
			},
			"InstanceExists by providerID": func(ctx context.Context) error {
				_, err := instances.InstanceExists(ctx, node("n", providerID("us-east-1a", aws.ToString(a.InstanceId))))
				return err
			},
			"ListRoutes": func(ctx context.Context) error {
				_, err := routes.ListRoutes(ctx, "kubernetes")
				return err
			},
			"CreateRoute": func(ctx context.Context) error {
				return routes.CreateRoute(ctx, "kubernetes", "uid", podRoute(aws.ToString(a.PrivateDnsName), "10.244.1.0/24"))
			},
			"DeleteRoute": func(ctx context.Context) error {
				return routes.DeleteRoute(ctx, "kubernetes", podRoute(aws.ToString(a.PrivateDnsName), "10.244.1.0/24"))
			},
		}
		for name, call := range calls {
			t.Run(name, func(t *testing.T) {
				before := pc.faults.Count(awstest.AnyAction)
				callCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				var res callResult
				select {
				case res = <-inBackground(func() error { return call(callCtx) }):
				case <-time.After(bound):
					t.Fatalf("%s did not return within %s of its context's deadline", name, bound)
				}
				if !errors.Is(res.err, context.DeadlineExceeded) {
					t.Errorf("%s on a hung cloud = %v; want its context's deadline", name, res.err)
				}
				if pc.faults.Count(awstest.AnyAction) == before {
					t.Errorf("%s sent no request; the test proves nothing", name)
				}
			})
		}
		eventually(t, "the proxy to see every client go away", func() bool { return pc.faults.Hanging(awstest.AnyAction) == 0 })

		pc.faults.ClearFaults()
		if _, err := instances.InstanceMetadata(ctx, node(aws.ToString(a.PrivateDnsName), "")); err != nil {
			t.Errorf("InstanceMetadata once the cloud answers again: %v", err)
		}
	})

	t.Run("response-header timeout", func(t *testing.T) {
		const timeout = 200 * time.Millisecond
		pc := newProxiedCloud(t, func(o *clientOptions) { o.timeouts.responseHeader = timeout })
		pc.createClusterRouteTable(t)
		routes := providerRoutes(t, pc.provider)
		pc.faults.SetFault("DescribeRouteTables", awstest.Fault{Hang: true})
		// No deadline: only the HTTP client's timeout ends the call.
		logger, _ := ktesting.NewTestContext(t)
		ctx := klog.NewContext(context.Background(), logger)
		var res callResult
		select {
		case res = <-inBackground(func() error { _, err := routes.ListRoutes(ctx, "kubernetes"); return err }):
		case <-time.After(bound):
			t.Fatalf("ListRoutes on a hung cloud did not return within %s", bound)
		}
		if res.err == nil || !strings.Contains(res.err.Error(), "timeout awaiting response headers") {
			t.Errorf("ListRoutes on a hung cloud = %v; want the response-header timeout", res.err)
		}
		// The SDK tries a timed-out request again, within maxAttempts.
		if n := pc.faults.Count("DescribeRouteTables"); n < 1 || n > maxAttempts {
			t.Errorf("%d DescribeRouteTables requests; want 1 to %d", n, maxAttempts)
		}
		if res.took < timeout {
			t.Errorf("ListRoutes returned after %s, before the response-header timeout %s", res.took, timeout)
		}
	})
}
