package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

// The strategies' own stats and builds, printed from their descriptions
// (GET /v1/info's strategy_details): no strategy is named here.

// strategyDetails is the description of strategy kind; nil when the
// daemon does not describe it.
func (a *App) strategyDetails(kind string) *client.StrategyDetails {
	if a.details == nil {
		a.details = map[string]*client.StrategyDetails{}
		if info, err := a.C.Info(a.Ctx); err == nil {
			for i := range info.StrategyDetails {
				d := &info.StrategyDetails[i]
				a.details[d.Kind] = d
			}
		}
	}
	return a.details[kind]
}

// WriteStrategyStats adds the part of st of the strategy that ran to thaw
// invoke's table, one row a field, labelled and formatted as the
// strategy describes it.
func (a *App) WriteStrategyStats(w io.Writer, st *client.StrategyStats) {
	vals := st.PartValues()
	if len(vals) == 0 {
		return
	}
	var ms []client.Measure
	if d := a.strategyDetails(st.Kind); d != nil {
		ms = d.Stats
	}
	writeMeasures(w, st.Kind, vals, ms)
}

// writeMeasures writes vals (a strategy's stats or build) as rows: in the
// order of their descriptions ms, then any field ms does not describe.
func writeMeasures(w io.Writer, kind string, vals map[string]any, ms []client.Measure) {
	described := map[string]bool{}
	for _, m := range ms {
		if v, ok := vals[m.Name]; ok {
			described[m.Name] = true
			output.Row(w, kind+" "+strings.ReplaceAll(m.Name, "_", " "), fmtMeasure(v, m.Unit), m.Description)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(vals)) {
		if !described[name] {
			output.Row(w, kind+" "+strings.ReplaceAll(name, "_", " "), fmtMeasure(vals[name], ""))
		}
	}
}

// fmtMeasure formats a value of a strategy's stats in its unit.
func fmtMeasure(v any, unit string) string {
	n, isNum := v.(float64)
	switch {
	case isNum && unit == "ms":
		return output.FmtMS(n)
	case isNum && unit == "bytes":
		return output.FmtBytes(int64(n))
	case isNum && (unit == "pages" || unit == "count"):
		return fmt.Sprintf("%.0f %s", n, strings.TrimSuffix(unit, "count"))
	case isNum:
		return fmt.Sprintf("%g", n)
	}
	switch v := v.(type) {
	case bool:
		return map[bool]string{true: "yes", false: "no"}[v]
	case string:
		return v
	}
	return fmt.Sprintf("%v", v)
}

// flatScalars is vals with its nested objects' fields brought up, named
// "object_field", and without lists (a build's details stay in the JSON
// output).
func flatScalars(vals map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range vals {
		switch v := v.(type) {
		case map[string]any:
			for k2, v2 := range flatScalars(v) {
				out[k+"_"+k2] = v2
			}
		case []any:
		default:
			out[k] = v
		}
	}
	return out
}
