package app

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"

	"github.com/ccmkit/ccmkit/leaderelection"
)

// TestWritesNeedTheLease: once the Lease is not held, a write is refused
// before it is sent; reads still go out.
func TestWritesNeedTheLease(t *testing.T) {
	var reads, writes atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			reads.Add(1)
		} else {
			writes.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1"}}`))
	}))
	defer server.Close()
	var held atomic.Bool
	held.Store(true)
	check := func() error {
		if held.Load() {
			return nil
		}
		return leaderelection.ErrNotHeld
	}
	client, err := kubernetes.NewForConfig(fenceWrites(&restclient.Config{Host: server.URL}, check))
	if err != nil {
		t.Fatal(err)
	}
	nodes := client.CoreV1().Nodes()
	ctx := t.Context()
	if _, err := nodes.Patch(ctx, "n1", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("write while holding the Lease: %v", err)
	}
	held.Store(false)
	if _, err := nodes.Patch(ctx, "n1", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{}); !errors.Is(err, leaderelection.ErrNotHeld) {
		t.Fatalf("write without the Lease: %v, want ErrNotHeld", err)
	}
	if err := nodes.Delete(ctx, "n1", metav1.DeleteOptions{}); !errors.Is(err, leaderelection.ErrNotHeld) {
		t.Fatalf("delete without the Lease: %v, want ErrNotHeld", err)
	}
	if _, err := nodes.Get(ctx, "n1", metav1.GetOptions{}); err != nil {
		t.Fatalf("read without the Lease: %v", err)
	}
	if w, r := writes.Load(), reads.Load(); w != 1 || r != 1 {
		t.Errorf("server got %d writes and %d reads, want 1 and 1", w, r)
	}
}
