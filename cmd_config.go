package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/slotpoller/slotpoller/config"
)

func cmdConfig(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "show" {
		return usageError{"say `config show`"}
	}
	fs, cfgPath := newFlags("config show", stdout)
	asJSON := fs.Bool("json", false, "print JSON: the config file and a settings array of key, value and source")
	overrides := addOverrideFlags(fs)
	envFile := addEnvFileFlag(fs)
	if err := fs.parse(args[1:]); err != nil {
		return err
	}
	cfg, src, err := loadConfigWith(*cfgPath, *envFile, overrides())
	if err != nil {
		return err
	}
	file := *cfgPath
	if file == "" {
		file = "config.yaml"
		if _, err := os.Stat(file); err != nil {
			file = ""
		}
	}
	settings := cfg.Settings(src)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			ConfigFile string           `json:"config_file"`
			Settings   []config.Setting `json:"settings"`
		}{file, settings})
	}
	if file == "" {
		fmt.Fprintln(stdout, "config file: none (no config.yaml in the working directory): defaults and environment")
	} else {
		fmt.Fprintln(stdout, "config file:", file)
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, s := range settings {
		value := fmt.Sprint(s.Value)
		if str, ok := s.Value.(string); ok && (str == "" || strings.ContainsAny(str, " \t\"#")) {
			value = strconv.Quote(str)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, value, s.Source)
	}
	return tw.Flush()
}
