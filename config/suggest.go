package config

import (
	"fmt"
	"reflect"
	"strings"
)

// Did you mean: an unknown key or environment variable is answered with
// the nearest known one.

// suggestEnv says which setting an unknown SLOTPOLLER_ variable may have
// meant: the closest variable name, else the setting with the same key in
// another section (SLOTPOLLER_DB_DSN: SLOTPOLLER_DATABASE_DSN), else how
// the names are made.
func suggestEnv(name string, ct reflect.Type) string {
	var vars []string
	for i := 0; i < ct.NumField(); i++ {
		if st := ct.Field(i).Type; st.Kind() == reflect.Struct {
			section := yamlTag(ct.Field(i))
			for _, k := range yamlKeys(st) {
				vars = append(vars, envName(section, k))
			}
		}
	}
	if hint := suggest(name, vars, ""); hint != "" {
		return hint
	}
	var same []string
	for _, v := range vars {
		key := v[strings.IndexByte(v[len(envPrefix):], '_')+len(envPrefix)+1:]
		if strings.HasSuffix(name, "_"+key) {
			same = append(same, v)
		}
	}
	if len(same) == 1 {
		return fmt.Sprintf(" (did you mean %q?)", same[0])
	}
	sections := make([]string, 0, ct.NumField())
	for i := 0; i < ct.NumField(); i++ {
		if ct.Field(i).Type.Kind() == reflect.Struct {
			sections = append(sections, strings.ToUpper(yamlTag(ct.Field(i))))
		}
	}
	return fmt.Sprintf(" (settings are %s<SECTION>_<KEY> with SECTION one of %s; %sTEST_*, %sCHAOS_* and %sE2E_* belong to the test suites and are ignored)",
		envPrefix, strings.Join(sections, ", "), envPrefix, envPrefix, envPrefix)
}

// suggest returns ` (did you mean "<prefix><candidate>"?)` for the candidate
// closest to word, or "" when none is close.
func suggest(word string, candidates []string, prefix string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		d := editDistance(strings.ToLower(word), strings.ToLower(c))
		if d <= 2 && d*2 < len(c) && (bestDist < 0 || d < bestDist) {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", prefix+best)
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of neighbours each cost 1.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
