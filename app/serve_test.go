package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/cloud"
	"github.com/ccmkit/ccmkit/providers/fake"
)

func TestReadiness(t *testing.T) {
	state := &runState{}
	if err := state.informersSynced(nil); err != nil {
		t.Errorf("before leading: %v, want ready", err)
	}

	client := k8sfake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	listed := make(chan struct{})
	client.PrependReactor("list", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		<-listed
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	factory.Core().V1().Nodes().Informer()
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	state.setInformers(factory)
	if err := state.informersSynced(nil); err == nil || !strings.Contains(err.Error(), "Node") {
		t.Errorf("informer not synced: %v, want not ready naming Node", err)
	}
	close(listed)
	factory.WaitForCacheSync(stop)
	if err := state.informersSynced(nil); err != nil {
		t.Errorf("informers synced: %v, want ready", err)
	}

	if err := state.controllersRunning(nil); err != nil {
		t.Errorf("no failure: %v", err)
	}
	state.controllerFailed("service")
	if err := state.controllersRunning(nil); err == nil || !strings.Contains(err.Error(), "service") {
		t.Errorf("after a failure: %v, want not ready naming the controller", err)
	}
}

// TestReadinessReportsSaturation: /readyz fails while the guard refuses
// calls because hung ones fill its bound, and passes once they return.
func TestReadinessReportsSaturation(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fc, err := fake.New(&fake.Config{Instances: []fake.Instance{{Name: "n1"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	fault, err := fc.AddFault(fake.Fault{Method: "InstanceExists", Hang: fake.HangRespectContext})
	if err != nil {
		t.Fatal(err)
	}
	guard := cloud.New(fc, cloud.Options{CallTimeout: time.Minute, DetachAfter: 10 * time.Millisecond, MaxInflight: 1})
	t.Cleanup(guard.Close)
	state := &runState{}
	if err := state.cloudCalls(nil); err != nil {
		t.Errorf("before leading: %v, want ready", err)
	}
	state.setGuard(guard)
	if err := state.cloudCalls(nil); err != nil {
		t.Errorf("idle guard: %v, want ready", err)
	}
	instances, _ := guard.InstancesV2()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if _, err := instances.InstanceExists(ctx, node); !errors.Is(err, cloud.ErrInProgress) {
		t.Fatalf("hung call: %v, want in progress", err)
	}
	if err := state.cloudCalls(nil); !errors.Is(err, cloud.ErrSaturated) {
		t.Errorf("guard at its bound: %v, want not ready, saturated", err)
	}
	fc.RemoveFault(fault)
	guard.Close() // the hung call ends with its context
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return state.cloudCalls(nil) == nil, nil
	})
	if err != nil {
		t.Errorf("after the call returned: %v, want ready", state.cloudCalls(nil))
	}
}
