//go:build !windows

package main

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// platformBadInputs are config paths that are not regular files: reading
// /dev/zero never ends, opening a FIFO blocks until a writer comes.
func platformBadInputs(t *testing.T, dir string) []badInput {
	fifo := filepath.Join(dir, "config.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	return []badInput{
		{name: "config /dev/zero", args: []string{"config", "show", "-config", "/dev/zero"}, code: 1,
			want: "config: /dev/zero is a device; the config file must be a regular YAML file"},
		{name: "config FIFO", args: []string{"config", "show", "-config", fifo}, code: 1,
			want: "config.fifo is a named pipe (FIFO); the config file must be a regular YAML file"},
	}
}
