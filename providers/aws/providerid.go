package aws

import (
	"fmt"
	"regexp"
	"strings"
)

// providerIDPrefix starts every providerID of this provider.
const providerIDPrefix = ProviderName + "://"

// instanceIDPattern is an EC2 instance ID: i- and 8 or 17 hexadecimal
// digits today; any letters and digits are taken, as the format may grow.
var instanceIDPattern = regexp.MustCompile(`^i-[0-9a-zA-Z]+$`)

// providerID is a Node's providerID for an instance: aws:///<zone>/<id>.
func providerID(zone, instanceID string) string {
	return providerIDPrefix + "/" + zone + "/" + instanceID
}

// instanceIDFromProviderID reads the instance ID of a providerID:
// aws:///<zone>/<id>, aws:////<id> (no zone) or a bare instance ID. The
// zone, if any, is not checked: the instance ID alone names the instance.
func instanceIDFromProviderID(pid string) (string, error) {
	id := pid
	if rest, ok := strings.CutPrefix(pid, providerIDPrefix); ok {
		parts := strings.Split(strings.Trim(rest, "/"), "/")
		if !strings.HasPrefix(rest, "/") || len(parts) > 2 {
			return "", fmt.Errorf("providerID %q is not aws:///<zone>/<instance-id>", pid)
		}
		id = parts[len(parts)-1]
	} else if strings.Contains(pid, "://") {
		return "", fmt.Errorf("providerID %q is not of the %s provider", pid, ProviderName)
	}
	if !instanceIDPattern.MatchString(id) {
		return "", fmt.Errorf("providerID %q does not name an EC2 instance (i-...)", pid)
	}
	return id, nil
}
