package awstest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// testTimeout bounds every wait of these tests.
const testTimeout = 20 * time.Second

// newProxy is a started proxy in front of a backend that answers "ok".
func newProxy(t *testing.T) *Proxy {
	t.Helper()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(backend.Close)
	p, err := NewProxy(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// result is one answer of the proxy.
type result struct {
	status int
	body   string
	header http.Header
	err    error
}

// post sends an AWS query-protocol request of action, signed for service
// (only the credential scope matters to the proxy).
func post(ctx context.Context, p *Proxy, service, action string) result {
	form := url.Values{"Action": {action}, "Version": {"2016-11-15"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL(), strings.NewReader(form.Encode()))
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/"+service+"/aws4_request, SignedHeaders=host, Signature=0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close() //nolint:errcheck // read-only
	body, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, body: string(body), header: resp.Header, err: err}
}

// postAsync sends the request in the background.
func postAsync(ctx context.Context, p *Proxy, service, action string) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- post(ctx, p, service, action) }()
	return ch
}

func receive(t *testing.T, ch <-chan result, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		return result{}
	}
}

func waitHanging(t *testing.T, p *Proxy, action string, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
		return p.Hanging(action) == n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d held %q requests (now %d): %v", n, action, p.Hanging(action), err)
	}
}

func TestProxyForwards(t *testing.T) {
	p := newProxy(t)
	r := post(t.Context(), p, "ec2", "DescribeInstances")
	if r.err != nil || r.status != http.StatusOK || r.body != "ok" {
		t.Fatalf("forwarded request = %d %q, %v; want 200 ok", r.status, r.body, r.err)
	}
	reqs := p.Requests()
	if len(reqs) != 1 || reqs[0].Action != "DescribeInstances" || reqs[0].Service != "ec2" {
		t.Errorf("recorded %+v; want one ec2 DescribeInstances", reqs)
	}
	if p.Count("DescribeInstances") != 1 || p.Count(AnyAction) != 1 || p.Count("RunInstances") != 0 {
		t.Errorf("counts = %d, %d, %d; want 1, 1, 0", p.Count("DescribeInstances"), p.Count(AnyAction), p.Count("RunInstances"))
	}
}

func TestProxyThrottles(t *testing.T) {
	tests := []struct {
		name, service string
		status        int
		code          string
	}{
		{"ec2", "ec2", http.StatusServiceUnavailable, "<Code>RequestLimitExceeded</Code>"},
		{"elb", "elasticloadbalancing", http.StatusBadRequest, "<Code>Throttling</Code>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProxy(t)
			p.SetFault("DescribeX", Fault{Throttle: true, RetryAfter: 3 * time.Second})
			r := post(t.Context(), p, tt.service, "DescribeX")
			if r.err != nil || r.status != tt.status || !strings.Contains(r.body, tt.code) || r.header.Get("Retry-After") != "3" {
				t.Errorf("throttled answer = %d %q (Retry-After %q), %v; want %d with %s, Retry-After 3",
					r.status, r.body, r.header.Get("Retry-After"), r.err, tt.status, tt.code)
			}
			if r := post(t.Context(), p, tt.service, "Other"); r.status != http.StatusOK {
				t.Errorf("another action = %d; want it forwarded", r.status)
			}
			p.ClearFault("DescribeX")
			if r := post(t.Context(), p, tt.service, "DescribeX"); r.status != http.StatusOK {
				t.Errorf("after ClearFault = %d; want it forwarded", r.status)
			}
		})
	}
}

func TestProxyThrottlesEveryNth(t *testing.T) {
	p := newProxy(t)
	p.SetFault(AnyAction, Fault{Throttle: true, ThrottleEvery: 3})
	var got []int
	for range 7 {
		got = append(got, post(t.Context(), p, "ec2", "DescribeInstances").status)
	}
	ok, throttled := http.StatusOK, http.StatusServiceUnavailable
	if want := []int{ok, ok, throttled, ok, ok, throttled, ok}; !slices.Equal(got, want) {
		t.Errorf("statuses = %v; want every third request throttled: %v", got, want)
	}
	var marked []bool
	for _, r := range p.Requests() {
		marked = append(marked, r.Throttled)
	}
	if want := []bool{false, false, true, false, false, true, false}; !slices.Equal(marked, want) {
		t.Errorf("Requests().Throttled = %v; want %v", marked, want)
	}
	// Setting the fault again starts counting again.
	p.SetFault(AnyAction, Fault{Throttle: true, ThrottleEvery: 2})
	if a, b := post(t.Context(), p, "ec2", "X").status, post(t.Context(), p, "ec2", "X").status; a != ok || b != throttled {
		t.Errorf("after SetFault: %d, %d; want %d, %d", a, b, ok, throttled)
	}
}

func TestProxyLatency(t *testing.T) {
	p := newProxy(t)
	const latency = 200 * time.Millisecond
	p.SetFault(AnyAction, Fault{Latency: latency})
	start := time.Now()
	if r := post(t.Context(), p, "ec2", "DescribeInstances"); r.status != http.StatusOK {
		t.Fatalf("delayed request = %d, %v", r.status, r.err)
	}
	if took := time.Since(start); took < latency {
		t.Errorf("request took %s; want at least the latency %s", took, latency)
	}
	// An action's own fault wins over AnyAction's.
	p.SetFault("Fast", Fault{})
	ctx, cancel := context.WithTimeout(t.Context(), latency/2)
	defer cancel()
	if r := post(ctx, p, "ec2", "Fast"); r.err != nil || r.status != http.StatusOK {
		t.Errorf("action without latency = %d, %v; want an answer within %s", r.status, r.err, latency/2)
	}
}

func TestProxyHang(t *testing.T) {
	t.Run("until cleared", func(t *testing.T) {
		p := newProxy(t)
		p.SetFault("DescribeInstances", Fault{Hang: true})
		ch := postAsync(t.Context(), p, "ec2", "DescribeInstances")
		waitHanging(t, p, "DescribeInstances", 1)
		select {
		case r := <-ch:
			t.Fatalf("held request answered: %+v", r)
		default:
		}
		if r := post(t.Context(), p, "ec2", "RunInstances"); r.status != http.StatusOK {
			t.Errorf("another action = %d, %v; want it forwarded", r.status, r.err)
		}
		p.ClearFaults()
		if r := receive(t, ch, "the released request"); r.err != nil || r.status != http.StatusOK {
			t.Errorf("released request = %d, %v; want forwarded", r.status, r.err)
		}
		waitHanging(t, p, AnyAction, 0)
	})
	t.Run("changed to throttle", func(t *testing.T) {
		p := newProxy(t)
		p.SetFault(AnyAction, Fault{Hang: true})
		ch := postAsync(t.Context(), p, "ec2", "DescribeInstances")
		waitHanging(t, p, "DescribeInstances", 1)
		p.SetFault(AnyAction, Fault{Throttle: true})
		if r := receive(t, ch, "the released request"); r.status != http.StatusServiceUnavailable {
			t.Errorf("released request = %d, %v; want the new fault's 503", r.status, r.err)
		}
	})
	t.Run("until the client leaves", func(t *testing.T) {
		p := newProxy(t)
		p.SetFault(AnyAction, Fault{Hang: true})
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		r := receive(t, postAsync(ctx, p, "ec2", "DescribeInstances"), "the request to end with its context")
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("held request = %+v; want its context's deadline", r)
		}
		waitHanging(t, p, AnyAction, 0)
	})
	t.Run("until closed", func(t *testing.T) {
		p := newProxy(t)
		p.SetFault(AnyAction, Fault{Hang: true})
		ch := postAsync(t.Context(), p, "ec2", "DescribeInstances")
		waitHanging(t, p, "DescribeInstances", 1)
		closed := make(chan struct{})
		go func() {
			p.Close()
			close(closed)
		}()
		if r := receive(t, ch, "the request to end when the proxy closes"); r.err == nil {
			t.Errorf("held request answered %d after Close; want no answer", r.status)
		}
		select {
		case <-closed:
		case <-time.After(testTimeout):
			t.Fatal("Close did not return")
		}
	})
}

func TestNewProxyRejectsBadTarget(t *testing.T) {
	if _, err := NewProxy("not a url"); err == nil {
		t.Error("NewProxy(not a url) succeeded")
	}
}
