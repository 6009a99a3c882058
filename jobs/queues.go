package jobs

import "github.com/slotpoller/slotpoller/internal/jobspec"

// Queue names and route prefixes are checked in jobspec, shared with the
// client; these are the same, for the node's config, API and CLI.

// MaxQueueNameLength is the longest queue name (jobspec.MaxQueueNameLength).
const MaxQueueNameLength = jobspec.MaxQueueNameLength

// ValidateQueueName checks a queue's name; see jobspec.ValidateQueueName.
func ValidateQueueName(name string) error { return jobspec.ValidateQueueName(name) }

// ValidateRoutePrefix checks the endpoint prefix of a queue route; see
// jobspec.ValidateRoutePrefix.
func ValidateRoutePrefix(prefix string) error { return jobspec.ValidateRoutePrefix(prefix) }
