package jobspec

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestValidateEndpointRefusesEveryDotSegmentSpelling(t *testing.T) {
	for _, ep := range []string{
		"/jobs/x/..;/y", "/jobs/x/.;/y", "/jobs/x/..;jsessionid=1/y", "/jobs/..;", "/jobs/x/%2e%2e;/y",
		"/jobs/x/.%2e;x/y", "/jobs/x/%2e%2e%3b/y", "/jobs/x/.../y", "/jobs/x/.. /y", "/jobs/x/..%20/y",
		"/jobs/x/%252e%252e;/y",
	} {
		require.ErrorContains(t, ValidateEndpoint(ep), "dot segments are not allowed", ep)
	}
	for _, ep := range []string{"/jobs/x;v=1/y", "/jobs/.well-known/y", "/jobs/a..b", "/jobs/x.y;z"} {
		require.NoError(t, ValidateEndpoint(ep), ep)
	}
}

func TestValidateNameRefusesHeaderUnsafeNames(t *testing.T) {
	for name, want := range map[string]string{
		"":                        "task name is empty",
		"a\nb":                    `task name "a\nb" has a control character at byte 1`,
		"a\rb":                    "control character",
		"a\tb":                    "control character",
		"a\x7fb":                  "control character",
		"caf\u00e9":               `non-ASCII character 'é'`,
		"a\xffb":                  "not valid UTF-8",
		" lead":                   "leading or trailing space",
		"trail ":                  "leading or trailing space",
		string(make([]byte, 201)): "201 bytes long",
	} {
		require.ErrorContains(t, ValidateName("task", name), want, "%q", name)
	}
	require.NoError(t, ValidateName("task", "nightly report (EU)"))
}

func TestValidateNewJobBounds(t *testing.T) {
	far := time.Now().Add(400 * 24 * time.Hour)
	for _, tc := range []struct {
		attempts       int
		timeout, delay time.Duration
		runAt          *time.Time
		want           string
	}{
		{0, 0, 0, nil, "max attempts 0 must be between 1 and 1000"},
		{1001, 0, 0, nil, "max attempts 1001 must be between 1 and 1000"},
		{1, time.Nanosecond, 0, nil, "timeout 1ns is below 1ms"},
		{1, -time.Second, 0, nil, "timeout -1s must not be negative"},
		{1, 25 * time.Hour, 0, nil, "timeout 25h0m0s is above 24h0m0s"},
		{1, 0, 2000000 * time.Hour, nil, "more than 366 days ahead"},
		{1, 0, 0, &far, "more than 366 days ahead"},
	} {
		require.ErrorContains(t, validateNewJob(tc.attempts, tc.timeout, tc.delay, tc.runAt), tc.want)
	}
	require.NoError(t, validateNewJob(1000, 24*time.Hour, 365*24*time.Hour, nil))
}
