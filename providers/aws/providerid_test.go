package aws

import "testing"

func TestInstanceIDFromProviderID(t *testing.T) {
	for _, tt := range []struct {
		providerID, want string
	}{
		{"aws:///us-east-1a/i-0123456789abcdef0", "i-0123456789abcdef0"},
		{"aws:////i-0123456789abcdef0", "i-0123456789abcdef0"},
		{"aws:///i-12345678", "i-12345678"},
		{"i-0123456789abcdef0", "i-0123456789abcdef0"},
		{"aws://us-east-1a/i-0123456789abcdef0", ""},
		{"aws:///us-east-1a/extra/i-0123456789abcdef0", ""},
		{"aws:///us-east-1a/fargate-10.0.0.1", ""},
		{"aws:///us-east-1a/", ""},
		{"openstack:///i-0123456789abcdef0", ""},
		{"node-1", ""},
		{"", ""},
	} {
		got, err := instanceIDFromProviderID(tt.providerID)
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("instanceIDFromProviderID(%q) = %q, %v; want %q", tt.providerID, got, err, tt.want)
		}
	}
	if got := providerID("us-east-1a", "i-1"); got != "aws:///us-east-1a/i-1" {
		t.Errorf("providerID = %s", got)
	}
}
