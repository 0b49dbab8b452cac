package awstest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	StopMoto()
	os.Exit(code)
}

// ec2Query sends an EC2 request to moto, which does not check signatures,
// and returns the body of its answer.
func ec2Query(ctx context.Context, t *testing.T, endpoint string, form url.Values) string {
	t.Helper()
	form.Set("Version", "2016-11-15")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() //nolint:errcheck // read-only
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s = %d %q, %v", form.Get("Action"), resp.StatusCode, body, err)
	}
	return string(body)
}

func TestStartMotoSharesOneServer(t *testing.T) {
	ctx := t.Context()
	a := StartMoto(t)
	const cidr = "10.99.0.0/16"
	describe := url.Values{"Action": {"DescribeVpcs"}}
	ec2Query(ctx, t, a.URL, url.Values{"Action": {"CreateVpc"}, "CidrBlock": {cidr}})
	if body := ec2Query(ctx, t, a.URL, describe); !strings.Contains(body, cidr) {
		t.Fatalf("DescribeVpcs lacks the VPC just created:\n%s", body)
	}
	b := StartMoto(t)
	if b != a {
		t.Errorf("a second StartMoto started another server (%s, then %s)", a.URL, b.URL)
	}
	if body := ec2Query(ctx, t, b.URL, describe); strings.Contains(body, cidr) {
		t.Errorf("StartMoto did not reset moto: DescribeVpcs lists the VPC of before:\n%s", body)
	}
}

// endingTB records how a test ended: Fatal and Skip end the goroutine,
// as in a test.
type endingTB struct {
	testing.TB
	failed, skipped string
}

func (tb *endingTB) Helper() {}

func (tb *endingTB) Fatal(args ...any) {
	tb.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

func (tb *endingTB) Fatalf(format string, args ...any) {
	tb.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (tb *endingTB) Skipf(format string, args ...any) {
	tb.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestStartMotoWithoutInstall: without moto_server under the root, a test
// fails (skips under -short) with a message that names `make moto`.
func TestStartMotoWithoutInstall(t *testing.T) {
	tb := &endingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		startMoto(tb, t.TempDir())
		t.Error("startMoto without moto_server returned")
	}()
	<-done
	want, got, other := "fail", tb.failed, tb.skipped
	if testing.Short() {
		want, got, other = "skip", tb.skipped, tb.failed
	}
	if !strings.Contains(got, "make moto") || !strings.Contains(got, MotoVenv) || other != "" {
		t.Errorf("failed with %q, skipped with %q; want to %s, naming `make moto` and %s", tb.failed, tb.skipped, want, MotoVenv)
	}
}
