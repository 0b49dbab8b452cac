package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// kubeletPeriod is how often the simulated kubelets look at the cloud.
const kubeletPeriod = time.Second

// runKubelets stands in for the kubelets of the Nodes where kwok cannot,
// until ctx is done. A Node whose instance is stopped, or gone from the
// cloud, goes silent as its kubelet would: it leaves kwok's care, and its
// Ready condition becomes Unknown, as kube-controller-manager marks a Node
// whose kubelet stopped posting status. When its instance runs again, kwok
// takes it back and makes it Ready. Errors go to log.
func (p *playground) runKubelets(ctx context.Context, log io.Writer) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := p.syncKubelets(ctx); err != nil && ctx.Err() == nil {
			_, _ = fmt.Fprintf(log, "%s %v\n", time.Now().Format(time.RFC3339), err)
		}
	}, kubeletPeriod)
}

func (p *playground) syncKubelets(ctx context.Context) error {
	running, err := p.runningInstances(ctx)
	if err != nil {
		return err
	}
	nodes, err := p.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Spec.ProviderID == "" {
			continue // its instance is made when ccmkit first looks it up
		}
		managed := n.Annotations[kwokAnnotation] == "fake"
		switch up := running[n.Name]; {
		case !up && (managed || readyStatus(n) != v1.ConditionUnknown):
			if err := p.silence(ctx, n, managed); err != nil {
				return err
			}
		case up && !managed:
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"fake"}}}`, kwokAnnotation)
			if _, err := p.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("handing Node %s back to kwok: %w", n.Name, err)
			}
		}
	}
	return nil
}

// silence takes a Node from kwok and marks it as kube-controller-manager
// marks a Node whose kubelet stopped posting status.
func (p *playground) silence(ctx context.Context, n *v1.Node, managed bool) error {
	if managed {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, kwokAnnotation)
		if _, err := p.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("taking Node %s from kwok: %w", n.Name, err)
		}
	}
	now := metav1.Now()
	status, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []v1.NodeCondition{{
		Type: v1.NodeReady, Status: v1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}}})
	if err != nil {
		return err
	}
	if _, err := p.client.CoreV1().Nodes().PatchStatus(ctx, n.Name, status); err != nil {
		return fmt.Errorf("marking Node %s not ready: %w", n.Name, err)
	}
	return nil
}

// runningInstances asks the fake cloud's admin API which instances run.
func (p *playground) runningInstances(ctx context.Context) (map[string]bool, error) {
	url := fmt.Sprintf("http://127.0.0.1:%d/instances", p.opts.AdminPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("listing the fake cloud's instances: %w", err)
	}
	defer resp.Body.Close() //nolint:errcheck // read-only
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("listing the fake cloud's instances: %s", resp.Status)
	}
	var instances []struct {
		Name  string `json:"name"`
		State string `json:"state"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&instances); err != nil {
		return nil, fmt.Errorf("listing the fake cloud's instances: %w", err)
	}
	running := map[string]bool{}
	for _, in := range instances {
		running[in.Name] = in.State == "" || in.State == "running"
	}
	return running, nil
}

func readyStatus(n *v1.Node) v1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status
		}
	}
	return ""
}
