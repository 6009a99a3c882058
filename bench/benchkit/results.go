package benchkit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Which way a figure is better.
const (
	Higher = "higher"
	Lower  = "lower"
)

// Result is one figure, printed as one JSON line.
type Result struct {
	Side   string  `json:"side"`
	Table  string  `json:"table"`
	Row    string  `json:"row"`
	Value  float64 `json:"value"`
	Better string  `json:"better"`
}

// JSONLines writes each result as one line of JSON.
func JSONLines(w io.Writer) func(Result) {
	enc := json.NewEncoder(w)
	return func(r Result) { _ = enc.Encode(r) }
}

// ReadJSONLines reads what JSONLines wrote; other lines are passed to other.
func ReadJSONLines(r io.Reader, other func(string)) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var res Result
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil || res.Side == "" {
			other(sc.Text())
			continue
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

// Medians folds the results of several rounds into one result per side,
// table and row: the median of the round's values (the lower middle one
// for an even count), in the order each first appeared.
func Medians(results []Result) []Result {
	type key struct{ side, table, row string }
	var order []key
	vals := map[key][]float64{}
	first := map[key]Result{}
	for _, r := range results {
		k := key{r.Side, r.Table, r.Row}
		if _, ok := vals[k]; !ok {
			order = append(order, k)
			first[k] = r
		}
		vals[k] = append(vals[k], r.Value)
	}
	out := make([]Result, 0, len(order))
	for _, k := range order {
		v := vals[k]
		sort.Float64s(v)
		r := first[k]
		r.Value = v[(len(v)-1)/2]
		out = append(out, r)
	}
	return out
}

// Tables prints one markdown table per scenario, one column per side in
// the order given and, with two sides, the ratio in the better-is-higher
// orientation: side 2 ÷ side 1 where higher is better, side 1 ÷ side 2
// where lower is better, so that a ratio above 1 means side 2 did better.
func Tables(w io.Writer, sides []string, results []Result) {
	type key struct{ table, row string }
	var tables []string
	rows := map[string][]string{}
	val := map[key]map[string]Result{}
	for _, r := range results {
		k := key{r.Table, r.Row}
		if _, ok := rows[r.Table]; !ok {
			tables = append(tables, r.Table)
		}
		if val[k] == nil {
			val[k] = map[string]Result{}
			rows[r.Table] = append(rows[r.Table], r.Row)
		}
		val[k][r.Side] = r
	}
	for _, t := range tables {
		fmt.Fprintf(w, "### %s\n\n| | %s |", t, strings.Join(sides, " | "))
		if len(sides) == 2 {
			fmt.Fprint(w, " ratio |")
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(sides)+btoi(len(sides) == 2)))
		for _, row := range rows[t] {
			v := val[key{t, row}]
			fmt.Fprintf(w, "| %s |", row)
			for _, s := range sides {
				if r, ok := v[s]; ok {
					fmt.Fprintf(w, " %s |", num(r.Value))
				} else {
					fmt.Fprint(w, " — |")
				}
			}
			if len(sides) == 2 {
				fmt.Fprintf(w, " %s |", ratio(v[sides[0]], v[sides[1]]))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}
}

func ratio(a, b Result) string {
	if a.Side == "" || b.Side == "" {
		return "—"
	}
	x, y := b.Value, a.Value
	if b.Better == Lower {
		x, y = a.Value, b.Value
	}
	if y == 0 {
		if x == 0 {
			return "="
		}
		return "∞"
	}
	return fmt.Sprintf("%.2f×", x/y)
}

func num(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 0.1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
