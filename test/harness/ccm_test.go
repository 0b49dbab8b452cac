package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeCCMEnv makes the test binary act as a stand-in cloud-controller-manager,
// so the subprocess handling is tested without building the real one.
const fakeCCMEnv = "HARNESS_FAKE_CCM"

// fakeToken is the only bearer token that the fake CCM's /metrics accepts.
const fakeToken = "let-me-in"

func TestMain(m *testing.M) {
	if os.Getenv(fakeCCMEnv) == "1" {
		os.Exit(runFakeCCM(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// runFakeCCM prints its flags, then serves /healthz and /metrics over TLS on
// --secure-port until SIGTERM (exit 0). --exit-code=N exits at once with N;
// --ignore-sigterm makes only SIGKILL end it.
func runFakeCCM(args []string) int {
	fmt.Println("flags:", strings.Join(args, " "))
	if code, ok := flagValue(args, "exit-code"); ok {
		fmt.Fprintln(os.Stderr, "error: bad flag")
		n, _ := strconv.Atoi(code)
		return n
	}
	sigterm := make(chan os.Signal, 1)
	signal.Notify(sigterm, syscall.SIGTERM)

	port, _ := flagValue(args, "secure-port")
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, "ok") })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+fakeToken {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		_, _ = fmt.Fprint(w, "fake_metric 1\n")
	})
	srv := httptest.NewUnstartedServer(mux)
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.StartTLS()
	fmt.Fprintln(os.Stderr, "serving on", l.Addr())

	if _, ok := flagValue(args, "ignore-sigterm"); ok {
		for range sigterm {
			fmt.Println("ignoring SIGTERM")
		}
	}
	<-sigterm
	fmt.Println("shutting down")
	return 0
}

func TestStartCCMServesAndStopsOnSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := startCCM(t, os.Args[0], CCMOptions{
		Kubeconfig: "/tmp/admin.kubeconfig",
		Args:       []string{"--v=2"},
		Env:        []string{fakeCCMEnv + "=1"},
	}, stopGracePeriod)

	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{
		"--kubeconfig=/tmp/admin.kubeconfig",
		"--authentication-kubeconfig=/tmp/admin.kubeconfig",
		"--authorization-kubeconfig=/tmp/admin.kubeconfig",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.Port()),
		"--cert-dir=",
		"--v=2",
	} {
		if !strings.Contains(c.Log(), flag) {
			t.Errorf("flags %q lack %s", c.Log(), flag)
		}
	}

	for _, tt := range []struct {
		name, token string
		wantStatus  int
		wantBody    string
	}{
		{name: "no token", wantStatus: http.StatusForbidden, wantBody: "forbidden"},
		{name: "token", token: fakeToken, wantStatus: http.StatusOK, wantBody: "fake_metric 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body, err := c.Get(ctx, "/metrics", tt.token)
			if err != nil {
				t.Fatal(err)
			}
			if status != tt.wantStatus || !strings.Contains(body, tt.wantBody) {
				t.Errorf("GET /metrics = %d %q, want %d %q", status, body, tt.wantStatus, tt.wantBody)
			}
		})
	}

	if c.PID() <= 0 {
		t.Errorf("PID() = %d", c.PID())
	}
	c.Signal(syscall.SIGTERM)
	code, err := c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
	if !strings.Contains(c.Log(), "shutting down") {
		t.Errorf("log lacks the shutdown line:\n%s", c.Log())
	}
	// Signalling an exited process is no error.
	c.Signal(syscall.SIGTERM)
}

func TestStartCCMKillsAfterGracePeriod(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := startCCM(t, os.Args[0], CCMOptions{
		Args: []string{"--ignore-sigterm"},
		Env:  []string{fakeCCMEnv + "=1"},
	}, 200*time.Millisecond)
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	c.stop(200 * time.Millisecond)
	code, err := c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code != -1 {
		t.Errorf("exit code after SIGKILL = %d, want -1", code)
	}
	if !strings.Contains(c.Log(), "ignoring SIGTERM") {
		t.Errorf("SIGTERM was not sent first:\n%s", c.Log())
	}
}

func TestWaitHealthyFailsWhenTheCCMExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := startCCM(t, os.Args[0], CCMOptions{
		Args: []string{"--exit-code=3"},
		Env:  []string{fakeCCMEnv + "=1"},
	}, stopGracePeriod)
	err := c.WaitHealthy(ctx)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("WaitHealthy() = %v, want an error naming exit status 3", err)
	}
	if code, err := c.Wait(ctx); err != nil || code != 3 {
		t.Errorf("Wait() = %d, %v, want 3, nil", code, err)
	}
}

func TestWaitTimesOut(t *testing.T) {
	c := startCCM(t, os.Args[0], CCMOptions{Env: []string{fakeCCMEnv + "=1"}}, stopGracePeriod)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(ctx); err == nil {
		t.Error("Wait() on a running process returned no error")
	}
}

func TestRunCCM(t *testing.T) {
	t.Setenv(fakeCCMEnv, "1")
	code, out := runCCM(t, t.Context(), os.Args[0], "--exit-code=2")
	if code != 2 {
		t.Errorf("exit code = %d, want 2", code)
	}
	if !strings.Contains(out, "bad flag") || !strings.Contains(out, "flags: --exit-code=2\n") {
		t.Errorf("output %q lacks stderr or has harness flags", out)
	}
}

func TestHarnessArgs(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		kubeconfig string
		want       []string
	}{
		{
			name:       "all added",
			args:       []string{"--v=4"},
			kubeconfig: "kc",
			want: []string{
				"--secure-port=1234", "--bind-address=127.0.0.1", "--cert-dir=/certs",
				"--kubeconfig=kc", "--authentication-kubeconfig=kc", "--authorization-kubeconfig=kc", "--v=4",
			},
		},
		{
			name: "no kubeconfig",
			want: []string{"--secure-port=1234", "--bind-address=127.0.0.1", "--cert-dir=/certs"},
		},
		{
			name:       "caller's flags win in every spelling",
			args:       []string{"--secure-port", "0", "-bind-address=0.0.0.0", "--kubeconfig=mine", "--cert-dir=/mine"},
			kubeconfig: "kc",
			want: []string{
				"--authentication-kubeconfig=kc", "--authorization-kubeconfig=kc",
				"--secure-port", "0", "-bind-address=0.0.0.0", "--kubeconfig=mine", "--cert-dir=/mine",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := harnessArgs(tt.args, tt.kubeconfig, 1234, "/certs")
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("harnessArgs() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFlagValue(t *testing.T) {
	tests := []struct {
		args      []string
		wantValue string
		wantFound bool
	}{
		{args: []string{"--secure-port=10258"}, wantValue: "10258", wantFound: true},
		{args: []string{"-secure-port", "1"}, wantValue: "1", wantFound: true},
		{args: []string{"--secure-port=1", "--secure-port=2"}, wantValue: "2", wantFound: true},
		{args: []string{"--secure-port-extra=1", "secure-port=1"}},
		{args: []string{"--", "--secure-port=1"}},
	}
	for _, tt := range tests {
		value, found := flagValue(tt.args, "secure-port")
		if value != tt.wantValue || found != tt.wantFound {
			t.Errorf("flagValue(%q) = %q, %v, want %q, %v", tt.args, value, found, tt.wantValue, tt.wantFound)
		}
	}
}
