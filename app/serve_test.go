package app

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

func TestReadiness(t *testing.T) {
	state := &runState{}
	if err := state.informersSynced(nil); err != nil {
		t.Errorf("before leading: %v, want ready", err)
	}

	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
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
