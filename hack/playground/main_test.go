package main

import (
	"testing"

	"github.com/ccmkit/ccmkit/app"
)

func TestCCMDefaults(t *testing.T) {
	o := app.NewOptions()
	if o.NodeMonitorPeriod != ccmNodeMonitorPeriod {
		t.Errorf("--node-monitor-period defaults to %s, the guide says %s", o.NodeMonitorPeriod, ccmNodeMonitorPeriod)
	}
	if o.NodeDeletionGracePeriod != ccmNodeDeletionGracePeriod {
		t.Errorf("--node-deletion-grace-period defaults to %s, the guide says %s", o.NodeDeletionGracePeriod, ccmNodeDeletionGracePeriod)
	}
}

func TestCCMFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "5s"},
		{[]string{"--v=4"}, "5s"},
		{[]string{"--node-monitor-period=1s"}, "1s"},
		{[]string{"--node-monitor-period", "2s", "--v=4"}, "2s"},
		{[]string{"--node-monitor-period=1s", "--node-monitor-period=3s"}, "3s"},
		{[]string{"--node-monitor-period"}, "5s"},
	} {
		if got := (options{CCMArgs: tc.args}).ccmFlag("node-monitor-period", ccmNodeMonitorPeriod); got != tc.want {
			t.Errorf("ccmFlag with %q = %q, want %q", tc.args, got, tc.want)
		}
	}
}
