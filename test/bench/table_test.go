//go:build bench

package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// result is what one run measured.
type result struct {
	scenario, impl, settings, comparison string
	// total Nodes, of which hung have a hanging InstanceMetadata.
	total, hung int
	// initialised Nodes at the end of the run, hungInitialised of them hung ones.
	initialised, hungInitialised int
	// converged is when every Node but the hung ones was initialised (0: never).
	converged time.Duration
	// limit is how long the run could last.
	limit time.Duration
	// metadataCalls and calls (all methods) the cloud got.
	metadataCalls, calls int
}

// summary is the run's one-line progress report.
func (r result) summary() string {
	return fmt.Sprintf("%s, %s Nodes initialised, %d cloud calls", convergedIn(r.converged), r.initialisedCount(), r.calls)
}

func (r result) initialisedCount() string {
	s := fmt.Sprintf("%d/%d", r.initialised, r.total)
	if r.hung > 0 {
		s += fmt.Sprintf(" (hung %d/%d)", r.hungInitialised, r.hung)
	}
	return s
}

func convergedIn(d time.Duration) string {
	if d == 0 {
		return "did not converge"
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// printTable prints one row per run; each upstream row has its time and
// calls relative to ccmkit's run of the same scenario.
func printTable(w io.Writer, results []result, nodes int, qps float64, hungWindow time.Duration) error {
	baseline := map[string]result{}
	for _, r := range results {
		if r.comparison == "baseline" {
			baseline[r.scenario] = r
		}
	}
	rows := [][]string{{"scenario", "implementation", "settings", "compared", "converged in", "initialised", "InstanceMetadata", "all calls", "time ratio", "calls ratio"}}
	for _, r := range results {
		timeRatio, callsRatio := "-", "-"
		if base, ok := baseline[r.scenario]; ok && r.comparison != "baseline" {
			timeRatio = ratio(r, base)
			if base.calls > 0 {
				callsRatio = fmt.Sprintf("%.2fx", float64(r.calls)/float64(base.calls))
			}
		}
		rows = append(rows, []string{r.scenario, r.impl, r.settings, r.comparison, convergedIn(r.converged), r.initialisedCount(),
			strconv.Itoa(r.metadataCalls), strconv.Itoa(r.calls), timeRatio, callsRatio})
	}
	if err := writeRows(w, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, `
%d Nodes, registered tainted before the controller starts; InstanceMetadata takes 50ms; client QPS %g for both.
N1: converged = every taint gone. N2: 1%% of the Nodes' InstanceMetadata hangs (respecting the context) and
the run lasts %s; converged = every other Node initialised. Ratios: upstream / ccmkit (">": upstream did not
converge, lower bound from the run's length).
`, nodes, qps, hungWindow)
	if err != nil {
		return fmt.Errorf("printing the table: %w", err)
	}
	return nil
}

// ratio is r's time to converge over the baseline's.
func ratio(r, base result) string {
	switch {
	case base.converged == 0:
		return "-"
	case r.converged == 0:
		// The run lasted its limit; the ratio is at least that over the baseline.
		return fmt.Sprintf(">%.1fx", r.limit.Seconds()/base.converged.Seconds())
	default:
		return fmt.Sprintf("%.1fx", r.converged.Seconds()/base.converged.Seconds())
	}
}

// writeRows prints rows as aligned columns.
func writeRows(w io.Writer, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		if _, err := fmt.Fprintln(tw, strings.Join(row, "\t")); err != nil {
			return fmt.Errorf("printing the table: %w", err)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("printing the table: %w", err)
	}
	return nil
}
