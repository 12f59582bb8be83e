package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// result is one run of one target in one cell.
type result struct {
	err      string    // first error line; "" when the run succeeded
	tps      float64   // without initial connection time
	p50, p99 float64   // ms
	failed   int64     // pgbench's failed transactions (serialization, deadlock)
	cpu100k  float64   // proxy CPU seconds per 100k queries; NaN for direct
	rssMiB   float64   // proxy RSS at the end of the run; NaN for direct
	pssMiB   float64   // proxy PSS at the end of the run; NaN for direct
	replica  float64   // share of transactions the replica served, 0..1; NaN if unknown
	servers  []float64 // each server's share of the transactions, primary first (progress lines only)
	// own, client: statements kineticd ran on its own (probes, position
	// reader, anything injected) and the rest, from pg_stat_statements on
	// every server during the measured run; NaN if unknown.
	own, client float64
	// busy, steal: the machine's CPUs busy and stolen by the hypervisor
	// during the measured run, 0..1; pgUS, proxyUS, restUS: CPU µs per
	// query of every PostgreSQL server, of the proxy, and of the rest
	// of the busy time (pgbench, interrupts, anything else). NaN if unknown.
	busy, steal           float64
	pgUS, proxyUS, restUS float64
	// pgCS, proxyCS: context switches per query of every PostgreSQL
	// server's processes and of the proxy's threads; proxySys: the
	// proxy's read and write calls per query; in the middle of the run
	// (steadyRates). NaN if unknown.
	pgCS, proxyCS, proxySys float64
}

// cell is one workload × mode × clients combination.
type cell struct {
	workload workload
	mode     string
	clients  int
}

func (c cell) String() string {
	return fmt.Sprintf("%s, -M %s, %d clients", c.workload.name, c.mode, c.clients)
}

// summary is the median over rounds of each metric of one target in one
// cell, or the failure of any round.
type summary struct {
	ok                      bool
	err                     string // first error of the first failed round
	failedOf                string // "k/n" rounds failed
	tps                     float64
	p50, p99                float64
	failed                  int64
	cpu100k                 float64
	rssMiB                  float64
	pssMiB                  float64
	replica                 float64
	own                     float64 // own / (own + client)
	busy, steal             float64
	pgUS, proxyUS, restUS   float64
	pgCS, proxyCS, proxySys float64
}

func summarize(rs []result) summary {
	var s summary
	var bad int
	for _, r := range rs {
		if r.err != "" {
			if bad == 0 {
				s.err = r.err
			}
			bad++
		}
	}
	if bad > 0 || len(rs) == 0 {
		s.failedOf = fmt.Sprintf("%d/%d", bad, len(rs))
		return s
	}
	med := func(f func(result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	s.ok = true
	s.tps = med(func(r result) float64 { return r.tps })
	s.p50 = med(func(r result) float64 { return r.p50 })
	s.p99 = med(func(r result) float64 { return r.p99 })
	s.cpu100k = med(func(r result) float64 { return r.cpu100k })
	s.rssMiB = med(func(r result) float64 { return r.rssMiB })
	s.pssMiB = med(func(r result) float64 { return r.pssMiB })
	s.replica = med(func(r result) float64 { return r.replica })
	s.own = med(func(r result) float64 { return r.own / (r.own + r.client) })
	s.busy = med(func(r result) float64 { return r.busy })
	s.steal = med(func(r result) float64 { return r.steal })
	s.pgUS = med(func(r result) float64 { return r.pgUS })
	s.proxyUS = med(func(r result) float64 { return r.proxyUS })
	s.restUS = med(func(r result) float64 { return r.restUS })
	s.pgCS = med(func(r result) float64 { return r.pgCS })
	s.proxySys = med(func(r result) float64 { return r.proxySys })
	s.proxyCS = med(func(r result) float64 { return r.proxyCS })
	for _, r := range rs {
		s.failed += r.failed
	}
	return s
}

// median of xs (NaN when empty or any is NaN).
func median(xs []float64) float64 {
	if len(xs) == 0 || slices.ContainsFunc(xs, math.IsNaN) {
		return math.NaN()
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// writeCell renders one cell as a GitHub markdown section: a row per target,
// then kineticd's ratios against PgBouncer in the same pool mode and against
// direct.
func writeCell(w io.Writer, c cell, targets []target, sums map[string]summary) {
	fmt.Fprintf(w, "### %s · `-M %s` · %d clients\n\n", c.workload.desc, c.mode, c.clients)
	fmt.Fprintln(w, "| target | TPS | p50 ms | p99 ms | CPU s/100k q | RSS MiB | PSS MiB | replica | own stmts | failed tx |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, t := range targets {
		s := sums[t.name]
		if !s.ok {
			fmt.Fprintf(w, "| %s | **FAILED** (%s rounds) | | | | | | | | `%s` |\n", t.name, s.failedOf, mdCode(s.err))
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", t.name,
			num(s.tps, 0), num(s.p50, 3), num(s.p99, 3), num(s.cpu100k, 2), num(s.rssMiB, 1), num(s.pssMiB, 1), pct(s.replica), pct2(s.own), s.failed)
	}
	// Where the machine's CPU went: with every core busy, TPS follows
	// the CPU a query costs in all, not only in the proxy.
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | CPU busy | stolen | µs/query PostgreSQL | proxy | rest (pgbench, other) | all | context switches/query PostgreSQL | proxy | proxy read+write calls/query |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, t := range targets {
		s := sums[t.name]
		if !s.ok {
			continue
		}
		all := s.pgUS + s.restUS
		if !math.IsNaN(s.proxyUS) {
			all += s.proxyUS
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", t.name, pct(s.busy), pct(s.steal),
			num(s.pgUS, 1), num(s.proxyUS, 1), num(s.restUS, 1), num(all, 1),
			num(s.pgCS, 2), num(s.proxyCS, 2), num(s.proxySys, 2))
	}
	var rows []string
	for _, t := range targets {
		if t.kind == "direct" && t.spread {
			if b, ok := sums["direct"]; ok && sums[t.name].ok && b.ok {
				k := sums[t.name]
				rows = append(rows, fmt.Sprintf("| %s / direct | %s | %s | %s | | |", t.name,
					ratio(k.tps, b.tps), ratio(k.p50, b.p50), ratio(k.p99, b.p99)))
			}
			continue
		}
		if t.kind != "kineticd" {
			continue
		}
		k := sums[t.name]
		bases := []string{t.unrouted(), t.baseline(), "direct"}
		if t.routed {
			bases = append(bases, t.control())
		}
		for _, base := range bases {
			b, ok := sums[base]
			if !ok {
				continue // baseline not benchmarked
			}
			row := fmt.Sprintf("| %s / %s |", t.name, base)
			if !k.ok || !b.ok {
				rows = append(rows, row+" n/a (failed) | | | | |")
				continue
			}
			cpu, rss := "", ""
			if base != "direct" {
				cpu, rss = ratio(k.cpu100k, b.cpu100k), ratio(k.rssMiB, b.rssMiB)
			}
			rows = append(rows, fmt.Sprintf("%s %s | %s | %s | %s | %s |", row,
				ratio(k.tps, b.tps), ratio(k.p50, b.p50), ratio(k.p99, b.p99), cpu, rss))
		}
		// Routing's own cost: routed / unrouted with what the split alone
		// costs (its control / direct) taken out.
		split, splitOK := spreadCost(sums, t.control())
		if u, ok := sums[t.unrouted()]; ok && t.routed && splitOK && k.ok && u.ok && u.tps > 0 {
			rows = append(rows, fmt.Sprintf("| (%s / %s) ÷ (%s / direct) | %s | | | | |",
				t.name, t.unrouted(), t.control(), ratio(k.tps/u.tps, split)))
		}
	}
	if len(rows) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| ratio | TPS | p50 | p99 | CPU/100k q | RSS |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|")
		for _, r := range rows {
			fmt.Fprintln(w, r)
		}
	}
	fmt.Fprintln(w)
}

// spreadCost is control's TPS over direct's in one cell (control a
// direct spread target): what splitting the clients as a routed target
// does costs with no proxy at all.
func spreadCost(sums map[string]summary, control string) (float64, bool) {
	d, ok1 := sums["direct"]
	r, ok2 := sums[control]
	if !ok1 || !ok2 || !d.ok || !r.ok || d.tps == 0 {
		return 0, false
	}
	return r.tps / d.tps, true
}

// pct2 is a share as a percentage with two decimals, "" when unknown.
func pct2(x float64) string {
	if math.IsNaN(x) {
		return ""
	}
	return fmt.Sprintf("%.2f%%", 100*x)
}

func num(x float64, prec int) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}

func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// mdCode keeps an error line inside one table cell of inline code.
func mdCode(s string) string {
	s = strings.NewReplacer("|", "\\|", "`", "'").Replace(s)
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
