package aws

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"github.com/ccmkit/ccmkit/cloud"
)

// recorder is an HTTP server that records requests and answers each with
// its handler.
type recorder struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
}

func newRecorder(t *testing.T, handler http.HandlerFunc) *recorder {
	t.Helper()
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests = append(r.requests, req.Clone(context.Background()))
		r.mu.Unlock()
		handler(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.requests)
}

func (r *recorder) last() *http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.requests) == 0 {
		return nil
	}
	return r.requests[len(r.requests)-1]
}

// emptyDescribeInstances answers DescribeInstances with no instance.
func emptyDescribeInstances(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/xml")
	_, _ = io.WriteString(w, `<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r-1</requestId><reservationSet/></DescribeInstancesResponse>`)
}

// ec2Conf is a config whose EC2 is at url, with the lines of extra in the
// override section.
func ec2Conf(url string, extra ...string) string {
	return fmt.Sprintf("[Global]\nRegion = %s\n[ServiceOverride \"ec2\"]\nService = ec2\nRegion = %s\nURL = %s\nSigningRegion = %s\n%s\n",
		testRegion, testRegion, url, testRegion, strings.Join(extra, "\n"))
}

// testClients builds the clients of a config with static credentials.
func testClients(t *testing.T, conf string, change func(*clientOptions)) (*clients, error) {
	t.Helper()
	cfg, _, err := ParseConfig(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	opts := defaultClientOptions()
	opts.credentials = credentials.NewStaticCredentialsProvider(testAccessKey, "secret", "")
	if change != nil {
		change(&opts)
	}
	return newClients(t.Context(), cfg, opts)
}

func mustClients(t *testing.T, conf string, change func(*clientOptions)) *clients {
	t.Helper()
	c, err := testClients(t, conf, change)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServiceOverrides: with the overrides of the test cloud, EC2, ELB and
// ELBv2 requests go to the emulator, signed for their service.
func TestServiceOverrides(t *testing.T) {
	c := newTestCloud(t)
	p := newTestProvider(t, c.conf(), defaultBatchOptions)
	ctx := t.Context()
	if _, err := p.instances.InstanceExists(ctx, node("ip-10-0-0-1.ec2.internal", "")); err != nil {
		t.Errorf("EC2 through its override: %v", err)
	}
	if _, err := p.clients.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{}); err != nil {
		t.Errorf("ELB through its override: %v", err)
	}
	if _, err := p.clients.elbv2.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{}); err != nil {
		t.Errorf("ELBv2 through its override: %v", err)
	}
	var got []string
	for _, r := range c.proxy.recorded() {
		got = append(got, r.service+" "+r.action)
	}
	want := []string{"ec2 DescribeInstances", "elasticloadbalancing DescribeLoadBalancers", "elasticloadbalancing DescribeLoadBalancers"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("requests at the override's URL = %v, want %v", got, want)
	}
}

func TestServiceOverrideSigning(t *testing.T) {
	rec := newRecorder(t, emptyDescribeInstances)
	conf := fmt.Sprintf("[Global]\nRegion = %s\n[ServiceOverride \"ec2\"]\nService = EC2\nRegion = %s\nURL = %s/custom/path\nSigningRegion = eu-west-1\nSigningName = custom-ec2\n",
		testRegion, testRegion, rec.URL)
	c := mustClients(t, conf, nil)
	if _, err := c.ec2.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatal(err)
	}
	req := rec.last()
	if auth := req.Header.Get("Authorization"); !strings.Contains(auth, "/eu-west-1/custom-ec2/aws4_request") {
		t.Errorf("Authorization = %q; want the scope eu-west-1/custom-ec2", auth)
	}
	if req.URL.Path != "/custom/path" {
		t.Errorf("request path = %q, want the override URL's /custom/path", req.URL.Path)
	}
	if c.region != testRegion {
		t.Errorf("region = %q, want %q", c.region, testRegion)
	}
}

func TestAssumeRole(t *testing.T) {
	c := newTestCloud(t)
	const (
		role   = "arn:aws:iam::123456789012:role/ccm"
		source = "arn:aws:eks:us-east-1:123456789012:cluster/prod"
	)
	p := newTestProvider(t, c.conf("RoleARN = "+role, "SourceARN = "+source), defaultBatchOptions)
	if _, err := p.instances.InstanceExists(t.Context(), node("ip-10-0-0-1.ec2.internal", "")); err != nil {
		t.Fatal(err)
	}
	var assume, describe *request
	for _, r := range c.proxy.recorded() {
		switch r.action {
		case "AssumeRole":
			assume = &r
		case "DescribeInstances":
			describe = &r
		}
	}
	if assume == nil || describe == nil {
		t.Fatalf("requests = %+v; want AssumeRole and DescribeInstances", c.proxy.recorded())
	}
	if assume.service != "sts" || !strings.Contains(assume.header.Get("Authorization"), "Credential="+testAccessKey+"/") {
		t.Errorf("AssumeRole went to %q signed %q; want sts with the base credentials", assume.service, assume.header.Get("Authorization"))
	}
	if got := assume.header.Get(headerSourceAccount); got != "123456789012" {
		t.Errorf("AssumeRole %s = %q, want the role's account", headerSourceAccount, got)
	}
	if got := assume.header.Get(headerSourceARN); got != source {
		t.Errorf("AssumeRole %s = %q, want %q", headerSourceARN, got, source)
	}
	if auth := describe.header.Get("Authorization"); strings.Contains(auth, testAccessKey) || !strings.Contains(auth, "Credential=") {
		t.Errorf("DescribeInstances signed %q; want the assumed role's credentials", auth)
	}
}

func TestDefaultCredentialChain(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	rec := newRecorder(t, emptyDescribeInstances)
	c := mustClients(t, ec2Conf(rec.URL), func(o *clientOptions) { o.credentials = nil })
	if _, err := c.ec2.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatal(err)
	}
	if auth := rec.last().Header.Get("Authorization"); !strings.Contains(auth, "Credential=AKIDFROMENV/") {
		t.Errorf("Authorization = %q; want the key from the environment", auth)
	}
}

func TestThrottlingIsTyped(t *testing.T) {
	for _, tt := range []struct {
		name      string
		status    int
		header    map[string]string
		body      string
		throttled bool
		// requests is how many the SDK sends: throttling is not retried,
		// a server error is.
		requests   int
		retryAfter time.Duration
	}{
		{
			name: "EC2 RequestLimitExceeded", status: 503, throttled: true, requests: 1,
			body: `<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>r</RequestID></Response>`,
		},
		{
			name: "Throttling", status: 400, throttled: true, requests: 1,
			body: `<Response><Errors><Error><Code>Throttling</Code><Message>Rate exceeded</Message></Error></Errors><RequestID>r</RequestID></Response>`,
		},
		{
			name: "ThrottlingException", status: 400, throttled: true, requests: 1,
			body: `<Response><Errors><Error><Code>ThrottlingException</Code><Message>Rate exceeded</Message></Error></Errors><RequestID>r</RequestID></Response>`,
		},
		{
			name: "HTTP 429 with Retry-After", status: 429, throttled: true, requests: 1, retryAfter: 7 * time.Second,
			header: map[string]string{"Retry-After": "7"},
			body:   `<Response><Errors><Error><Code>TooManyRequests</Code><Message>slow down</Message></Error></Errors><RequestID>r</RequestID></Response>`,
		},
		{
			name: "server error", status: 500, throttled: false, requests: maxAttempts,
			body: `<Response><Errors><Error><Code>InternalError</Code><Message>oops</Message></Error></Errors><RequestID>r</RequestID></Response>`,
		},
		{
			name: "UnauthorizedOperation", status: 403, throttled: false, requests: 1,
			body: `<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>no</Message></Error></Errors><RequestID>r</RequestID></Response>`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "text/xml")
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			c := mustClients(t, ec2Conf(rec.URL), nil)
			_, err := c.ec2.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{})
			if err == nil {
				t.Fatal("DescribeInstances succeeded")
			}
			var throttled *cloud.ThrottledError
			if errors.As(err, &throttled) != tt.throttled {
				t.Errorf("error %v: a *cloud.ThrottledError = %v, want %v", err, !tt.throttled, tt.throttled)
			}
			if tt.throttled {
				if throttled.RetryAfter != tt.retryAfter {
					t.Errorf("RetryAfter = %s, want %s", throttled.RetryAfter, tt.retryAfter)
				}
				if _, ok := cloud.RetryAfter(err); !ok {
					t.Errorf("cloud.RetryAfter(%v) does not see the throttling", err)
				}
			}
			if n := rec.count(); n != tt.requests {
				t.Errorf("the SDK sent %d requests, want %d", n, tt.requests)
			}
		})
	}
}

// TestResponseHeaderTimeout: a server that takes a request and never
// answers fails the call even when the caller's context has no deadline.
func TestResponseHeaderTimeout(t *testing.T) {
	stop := make(chan struct{})
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	})
	defer close(stop)
	c := mustClients(t, ec2Conf(rec.URL), func(o *clientOptions) { o.timeouts.responseHeader = 100 * time.Millisecond })
	done := make(chan error, 1)
	go func() {
		_, err := c.ec2.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{})
		done <- err
	}()
	err := receive(t, done, "the call to fail on the response-header timeout")
	if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Errorf("DescribeInstances on a silent server = %v; want a response-header timeout", err)
	}
}

// imdsServer serves the IMDSv2 token and the identity document of an
// instance in region; it refuses requests without a token.
func imdsServer(t *testing.T, region string) *recorder {
	return newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
			_, _ = io.WriteString(w, "token-1")
		case r.URL.Path == "/latest/dynamic/instance-identity/document" && r.Header.Get("X-Aws-Ec2-Metadata-Token") == "token-1":
			_, _ = fmt.Fprintf(w, `{"region": %q, "availabilityZone": "%sa", "instanceId": "i-0123456789abcdef0"}`, region, region)
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
}

func imdsConf(url string, global ...string) string {
	return fmt.Sprintf("[Global]\n%s\n[ServiceOverride \"imds\"]\nService = ec2imds\nRegion = any\nURL = %s\nSigningRegion = any\n", strings.Join(global, "\n"), url)
}

func TestRegion(t *testing.T) {
	imds := imdsServer(t, "eu-west-3")
	for _, tt := range []struct {
		name   string
		global []string
		want   string
		asked  bool
	}{
		{"from Region", []string{"Region = ap-south-1"}, "ap-south-1", false},
		{"from Zone", []string{"Zone = ca-central-1b"}, "ca-central-1", false},
		{"from the instance metadata service", nil, "eu-west-3", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := imds.count()
			c := mustClients(t, imdsConf(imds.URL, tt.global...), nil)
			if c.region != tt.want {
				t.Errorf("region = %q, want %q", c.region, tt.want)
			}
			if asked := imds.count() > before; asked != tt.asked {
				t.Errorf("asked the instance metadata service: %v, want %v", asked, tt.asked)
			}
		})
	}
}

func TestRegionOffEC2(t *testing.T) {
	silent := newRecorder(t, func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	_ = l.Close()
	for name, url := range map[string]string{"silent": silent.URL, "connection refused": refused} {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := testClients(t, imdsConf(url), func(o *clientOptions) { o.imdsTimeout = 300 * time.Millisecond })
				done <- err
			}()
			err := receive(t, done, "the region look-up to give up")
			if err == nil || !strings.Contains(err.Error(), "neither Region nor Zone") || !strings.Contains(err.Error(), "set Region") {
				t.Errorf("newClients off EC2 = %v; want an error that says to set Region", err)
			}
		})
	}
}

func TestOverrideOfOtherRegionIgnored(t *testing.T) {
	cfg, _, err := ParseConfig(strings.NewReader(ec2Conf("https://ec2.example")))
	if err != nil {
		t.Fatal(err)
	}
	if opts := overrideOptions(cfg, serviceEC2, "eu-west-1", ec2Endpoint); opts != nil {
		t.Error("an override of us-east-1 applies in eu-west-1")
	}
	if opts := overrideOptions(cfg, serviceEC2, testRegion, ec2Endpoint); len(opts) != 1 {
		t.Error("the override of us-east-1 does not apply there")
	}
	var o ec2.Options
	for _, f := range overrideOptions(cfg, serviceEC2, testRegion, ec2Endpoint) {
		f(&o)
	}
	if aws.ToString(o.BaseEndpoint) != "https://ec2.example" {
		t.Errorf("BaseEndpoint = %q", aws.ToString(o.BaseEndpoint))
	}
}
