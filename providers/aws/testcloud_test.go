package aws

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ccmkit/ccmkit/providers/aws/awstest"
)

// TestMain stops the package's moto server (awstest.StartMoto) once the
// tests have run.
func TestMain(m *testing.M) {
	code := m.Run()
	awstest.StopMoto()
	os.Exit(code)
}

const (
	testRegion    = "us-east-1"
	testCluster   = "test-cluster"
	testAccessKey = "AKIDCCMKITTEST"
	// testAMI is any image ID: moto runs instances of images it does not know.
	testAMI = "ami-12345678"
)

// testCloud is moto behind a fault proxy, and a raw EC2 client of moto to
// arrange the cloud with.
type testCloud struct {
	moto  *awstest.Moto
	proxy *faultProxy
	ec2   *ec2.Client
}

func newTestCloud(t *testing.T) *testCloud {
	t.Helper()
	m := awstest.StartMoto(t)
	p := newFaultProxy(t, m.URL)
	raw := ec2.New(ec2.Options{
		Region:       testRegion,
		BaseEndpoint: aws.String(m.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDARRANGE", "secret", ""),
	})
	return &testCloud{moto: m, proxy: p, ec2: raw}
}

// conf is a cloud config whose EC2, ELB, ELBv2 and STS go through the
// proxy, with the lines of extra added to [Global].
func (c *testCloud) conf(extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[Global]\nRegion = %s\nKubernetesClusterID = %s\n%s\n", testRegion, testCluster, strings.Join(extra, "\n"))
	for _, service := range []string{"ec2", "elasticloadbalancing", "elasticloadbalancingv2", "sts"} {
		fmt.Fprintf(&b, "[ServiceOverride %q]\nService = %s\nRegion = %s\nURL = %s\nSigningRegion = %s\n", service, service, testRegion, c.proxy.URL, testRegion)
	}
	return b.String()
}

// newTestProvider builds the provider from a config, with static
// credentials.
func newTestProvider(t *testing.T, conf string, batch batchOptions) *Cloud {
	t.Helper()
	cfg, _, err := ParseConfig(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	opts := defaultClientOptions()
	opts.credentials = credentials.NewStaticCredentialsProvider(testAccessKey, "secret", "")
	p, err := newCloud(t.Context(), cfg, opts, batch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	return p
}

// instanceSpec is what runInstance runs.
type instanceSpec struct {
	instanceType ec2types.InstanceType
	subnetID     string
	tags         map[string]string
}

// clusterTags are the tags of the test cluster's instances.
func clusterTags() map[string]string {
	return map[string]string{tagClusterPrefix + testCluster: "owned"}
}

// runInstance runs an instance in moto and returns it as moto describes it.
func (c *testCloud) runInstance(t *testing.T, spec instanceSpec) ec2types.Instance {
	t.Helper()
	if spec.instanceType == "" {
		spec.instanceType = ec2types.InstanceTypeM5Large
	}
	in := &ec2.RunInstancesInput{ImageId: aws.String(testAMI), MinCount: aws.Int32(1), MaxCount: aws.Int32(1), InstanceType: spec.instanceType}
	if spec.subnetID != "" {
		in.SubnetId = aws.String(spec.subnetID)
	}
	if len(spec.tags) > 0 {
		ts := ec2types.TagSpecification{ResourceType: ec2types.ResourceTypeInstance}
		for k, v := range spec.tags {
			ts.Tags = append(ts.Tags, ec2types.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
		in.TagSpecifications = []ec2types.TagSpecification{ts}
	}
	out, err := c.ec2.RunInstances(t.Context(), in)
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	return c.describe(t, aws.ToString(out.Instances[0].InstanceId))
}

// describe is the instance as moto describes it now.
func (c *testCloud) describe(t *testing.T, id string) ec2types.Instance {
	t.Helper()
	out, err := c.ec2.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
		t.Fatalf("DescribeInstances(%s) = %+v, %v", id, out, err)
	}
	return out.Reservations[0].Instances[0]
}

func (c *testCloud) stopInstance(t *testing.T, id string) {
	t.Helper()
	if _, err := c.ec2.StopInstances(t.Context(), &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
}

func (c *testCloud) terminateInstance(t *testing.T, id string) {
	t.Helper()
	if _, err := c.ec2.TerminateInstances(t.Context(), &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
}

func node(name, providerID string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
}

// request is one request the proxy forwarded or answered.
type request struct {
	// service is the signing name in the request's credential scope.
	service string
	action  string
	header  http.Header
}

// faultProxy sits between the provider and moto. It records every
// request, and can answer an action with a throttling error or hold it
// until released or its client goes away.
type faultProxy struct {
	*httptest.Server

	mu       sync.Mutex
	requests []request
	throttle map[string]bool
	hold     map[string]chan struct{}
	// held gets the action of each request the proxy starts holding;
	// abandoned that of each held request whose client went away.
	held, abandoned chan string
}

// credentialScope finds the service in an AWS4 Authorization header.
var credentialScope = regexp.MustCompile(`Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request`)

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{
		throttle:  map[string]bool{},
		hold:      map[string]chan struct{}{},
		held:      make(chan string, 100),
		abandoned: make(chan string, 100),
	}
	forward := httputil.NewSingleHostReverseProxy(u)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		req := request{action: form.Get("Action"), header: r.Header.Clone()}
		if m := credentialScope.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
			req.service = m[1]
		}
		p.mu.Lock()
		p.requests = append(p.requests, req)
		throttle, hold := p.throttle[req.action], p.hold[req.action]
		p.mu.Unlock()
		if hold != nil {
			p.held <- req.action
			select {
			case <-hold:
			case <-r.Context().Done():
				p.abandoned <- req.action
				return
			}
		}
		if throttle {
			writeThrottle(w, req.service)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// writeThrottle answers as a throttled service does: EC2 with
// RequestLimitExceeded, the others with Throttling.
func writeThrottle(w http.ResponseWriter, service string) {
	w.Header().Set("Content-Type", "text/xml")
	if service == "ec2" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>r-1</RequestID></Response>`)
		return
	}
	w.WriteHeader(http.StatusBadRequest)
	_, _ = io.WriteString(w, `<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>r-1</RequestId></ErrorResponse>`)
}

// setThrottle makes the proxy answer action with a throttling error, or
// stop doing so.
func (p *faultProxy) setThrottle(action string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.throttle[action] = on
}

// holdAction holds every request of action until the returned release is
// called (at the latest when the test ends).
func (p *faultProxy) holdAction(t *testing.T, action string) (release func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.hold[action] = ch
	p.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			p.mu.Lock()
			delete(p.hold, action)
			p.mu.Unlock()
			close(ch)
		})
	}
	t.Cleanup(release)
	return release
}

// count is how many requests of action the proxy has seen.
func (p *faultProxy) count(action string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.requests {
		if r.action == action {
			n++
		}
	}
	return n
}

// recorded is every request so far.
func (p *faultProxy) recorded() []request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]request(nil), p.requests...)
}

// receive waits for a value on ch, failing the test after a deadline.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// eventually polls cond until it holds, failing the test at the deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
