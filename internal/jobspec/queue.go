package jobspec

import (
	"fmt"
	"strings"
)

// MaxQueueNameLength is the longest queue name: the jobs table's queue
// column holds 100 characters.
const MaxQueueNameLength = 100

// ValidateQueueName checks a queue's name: the rules of a schedule's or a
// task's name (ValidateName: printable ASCII, no leading or trailing
// space), at most MaxQueueNameLength characters, and no "/", so that a
// name is one segment of the API's /api/v1/queues/{name}/pause.
func ValidateQueueName(name string) error {
	if err := ValidateName("queue", name); err != nil {
		return err
	}
	if len(name) > MaxQueueNameLength {
		return fmt.Errorf("queue name is %d characters long; at most %d are allowed", len(name), MaxQueueNameLength)
	}
	if strings.ContainsAny(name, "/?#%") {
		return fmt.Errorf("queue name %q has a /, ?, # or %%; a queue name is one segment of an API path (/api/v1/queues/NAME)", name)
	}
	return nil
}

// ValidateRoutePrefix checks the endpoint prefix of a queue route: a path
// starting with /, of printable ASCII without spaces (compared exactly,
// character by character, by every database), at most 400 characters.
func ValidateRoutePrefix(prefix string) error {
	switch {
	case !strings.HasPrefix(prefix, "/"):
		return fmt.Errorf("endpoint prefix %q must start with /", prefix)
	case len(prefix) > 400:
		return fmt.Errorf("endpoint prefix is %d characters long; at most 400 are allowed", len(prefix))
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("endpoint prefix %q has a space, a control or a non-ASCII character at byte %d; a prefix is printable ASCII (percent-encode the rest)", prefix, i)
		}
	}
	return nil
}
