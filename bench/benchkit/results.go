package benchkit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
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
	// Round is the round of a run of several (bench compare -rounds), from
	// 1; zero when the run has one.
	Round int `json:"round,omitempty"`
	// Min and Max are the least and the greatest value over the rounds
	// that Medians folded into Value; both zero otherwise.
	Min, Max float64 `json:"-"`
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
// for an even count), with their least and greatest, in the order each
// first appeared.
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
		r.Value, r.Min, r.Max = v[(len(v)-1)/2], v[0], v[len(v)-1]
		out = append(out, r)
	}
	return out
}

// Interval is the range a ratio of medians falls in (see RatioIntervals).
type Interval struct{ Lo, Hi float64 }

// RatioIntervals says how far the ratio of two sides' medians can be
// trusted over rounds run alternately: for each table and row that both
// measured in the same (≥ 3) rounds, the central level (0.9: the 5th to
// the 95th percentile) of the ratio, in Tables' orientation, over draws
// resamplings of those rounds with replacement, each round's two values
// kept together (a paired bootstrap: the machine's drift over a run moves
// both). Each row draws from a generator of its own, seeded by seed and
// the row's name, so the result is repeatable. A row whose ratio is undefined in some
// draw (a zero to divide by) gets no interval.
func RatioIntervals(results []Result, a, b string, level float64, draws int, seed uint64) map[[2]string]Interval {
	type key = [2]string
	vals := map[string]map[key]map[int]float64{a: {}, b: {}}
	better := map[key]string{}
	for _, r := range results {
		m, ok := vals[r.Side]
		if !ok {
			continue
		}
		k := key{r.Table, r.Row}
		if m[k] == nil {
			m[k] = map[int]float64{}
		}
		m[k][r.Round] = r.Value
		better[k] = r.Better
	}
	keys := make([]key, 0, len(vals[a]))
	for k := range vals[a] {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	out := map[[2]string]Interval{}
rows:
	for _, k := range keys {
		var rounds []int
		for round := range vals[a][k] {
			if _, ok := vals[b][k][round]; ok {
				rounds = append(rounds, round)
			}
		}
		sort.Ints(rounds)
		var av, bv []float64
		for _, round := range rounds {
			av, bv = append(av, vals[a][k][round]), append(bv, vals[b][k][round])
		}
		n := len(av)
		if n < 3 {
			continue
		}
		// A generator of the row's own: its interval does not depend on
		// which other rows the run measured.
		h := fnv.New64a()
		h.Write([]byte(k[0] + "\x00" + k[1]))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		ratios := make([]float64, 0, draws)
		ra, rb := make([]float64, n), make([]float64, n)
		for range draws {
			for i := range n {
				j := rng.IntN(n)
				ra[i], rb[i] = av[j], bv[j]
			}
			x, ok := oriented(better[k], median(ra), median(rb))
			if !ok {
				continue rows
			}
			ratios = append(ratios, x)
		}
		sort.Float64s(ratios)
		tail := (1 - level) / 2
		out[k] = Interval{Lo: quantile(ratios, tail), Hi: quantile(ratios, 1-tail)}
	}
	return out
}

// median sorts v and returns its middle value (the lower one for an even
// count), as Medians does.
func median(v []float64) float64 {
	sort.Float64s(v)
	return v[(len(v)-1)/2]
}

func quantile(sorted []float64, q float64) float64 {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// oriented is side b against side a in the better-is-higher orientation;
// false when it is undefined (a zero to divide by).
func oriented(better string, a, b float64) (float64, bool) {
	x, y := b, a
	if better == Lower {
		x, y = a, b
	}
	if y == 0 {
		return 0, false
	}
	return x / y, true
}

// Tables prints one markdown table per scenario, one column per side in
// the order given and, with two sides, the ratio in the better-is-higher
// orientation: side 2 ÷ side 1 where higher is better, side 1 ÷ side 2
// where lower is better, so that a ratio above 1 means side 2 did better.
// A value folded from rounds that differ (Medians) shows their range after
// it. With intervals (RatioIntervals) for two sides, a last column gives
// each ratio's interval.
func Tables(w io.Writer, sides []string, results []Result, intervals map[[2]string]Interval) {
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
		withIntervals := len(sides) == 2 && len(intervals) > 0
		if len(sides) == 2 {
			fmt.Fprint(w, " ratio |")
		}
		if withIntervals {
			fmt.Fprint(w, " ratio, 90% interval |")
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(sides)+btoi(len(sides) == 2)+btoi(withIntervals)))
		for _, row := range rows[t] {
			v := val[key{t, row}]
			fmt.Fprintf(w, "| %s |", row)
			for _, s := range sides {
				if r, ok := v[s]; ok && r.Max > r.Min {
					fmt.Fprintf(w, " %s (%s–%s) |", Num(r.Value), Num(r.Min), Num(r.Max))
				} else if ok {
					fmt.Fprintf(w, " %s |", Num(r.Value))
				} else {
					fmt.Fprint(w, " — |")
				}
			}
			if len(sides) == 2 {
				fmt.Fprintf(w, " %s |", ratio(v[sides[0]], v[sides[1]]))
			}
			if withIntervals {
				if iv, ok := intervals[[2]string{t, row}]; ok {
					fmt.Fprintf(w, " %.2f–%.2f× |", iv.Lo, iv.Hi)
				} else {
					fmt.Fprint(w, " — |")
				}
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

// Num writes a figure as the tables do: three significant digits or so.
func Num(v float64) string {
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
