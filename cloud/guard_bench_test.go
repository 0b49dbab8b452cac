package cloud

import (
	"context"
	"testing"
	"time"
)

// BenchmarkGuardOverhead compares a direct provider call with the same call
// through the guard (goroutine, deadline, bookkeeping, metrics); the ratio is
// reported as guard/direct.
func BenchmarkGuardOverhead(b *testing.B) {
	ctx := context.Background()
	stub := &stubCloud{name: "bench", calls: map[string]int{}}
	n := node("n1")
	var direct time.Duration
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if _, err := stub.InstanceMetadata(ctx, n); err != nil {
				b.Fatal(err)
			}
		}
		direct = b.Elapsed() / time.Duration(b.N)
	})
	b.Run("guarded", func(b *testing.B) {
		g := New(stub, Options{})
		defer g.Close()
		inst, _ := g.InstancesV2()
		for b.Loop() {
			if _, err := inst.InstanceMetadata(ctx, n); err != nil {
				b.Fatal(err)
			}
		}
		perCall := b.Elapsed() / time.Duration(b.N)
		if direct > 0 {
			b.ReportMetric(float64(perCall)/float64(direct), "x-direct")
		}
	})
}

// BenchmarkGuardParallelObjects measures guarded calls for many objects at
// once, as bounded workers make them.
func BenchmarkGuardParallelObjects(b *testing.B) {
	ctx := context.Background()
	stub := &stubCloud{name: "bench-parallel", calls: map[string]int{}}
	g := New(stub, Options{})
	defer g.Close()
	lb, _ := g.LoadBalancer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			svc := service("svc-" + string(rune('a'+i%26)))
			if _, _, err := lb.GetLoadBalancer(ctx, "c", svc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
