"""Results JSON -> ``docs/benchmarks.md`` and PNG plots.

``write(outdir)`` reads every ``<name>-<where>[-quick].json`` in ``outdir``
(a full run's file wins over a quick one's), draws the plots into
``outdir/plots/`` and writes the markdown report: to ``docs/benchmarks.md``
when ``outdir`` is the repository's ``bench/results``, else to
``outdir/benchmarks.md`` (so a CI run with ``--out`` touches nothing in the
checkout).  ``render(results, plot_dir, link_prefix)`` is the pure part:
results in, markdown out (plots only if ``plot_dir`` is given).

Every sentence that compares numbers is computed from the results, so the
reading stays true when the numbers change; what is fixed text explains
method and mechanism.
"""

from __future__ import annotations

import os
from pathlib import Path

from .common import REPO, fmt_time, ratio
from .plots import plot_dialup, plot_fidelity, plot_packet, plot_setup, plot_stats
from .results import RESULTS_DIR, load_results
from .section_audience import section_audience
from .section_cells import section_cells
from .section_dialup import dialup_headline, section_dialup
from .section_hash import section_qdisc_hash
from .section_setup import packet_headline, section_packet, section_setup, setup_headline
from .section_shaped import section_shaped
from .section_trace import section_trace
from .sections import (fidelity_rows, latency_headline, section_cohorts, section_faults, section_fidelity, section_stats,
                       section_switch, stats_headline, where_of)

DOC = REPO / "docs" / "benchmarks.md"


# ---------------------------------------------------------------- headline


def summary(setup: list[dict], packet: dict | None, stats: list[dict], fid: list[dict],
            dialup: dict | None) -> list[str]:
    """One bullet per benchmark with its headline ratio, computed from the results.

    Each reads the fact its section's "What it found" line reads (``setup_headline``,
    ``packet_headline``, ``stats_headline``, ``fidelity_rows``, ``latency_headline``,
    ``dialup_headline``), so a figure is computed once."""
    out = []
    for doc in setup:
        for mode in doc.get("config", {}).get("modes", []):
            h = setup_headline(doc, mode)
            if h is None:
                continue
            n, by = h["flows"], h["by"]
            ours = by["ratelimit"]["seconds"]
            bits = [f"tc -batch {ratio(by['tc-batch']['seconds'], ours):.2f}x our time"] if "tc-batch" in by else []
            if "tc-per-rule" in by:
                bits.append(f"one tc per rule {ratio(by['tc-per-rule']['seconds'], ours):,.0f}x"
                            + (" (extrapolated)" if by["tc-per-rule"].get("extrapolated") else ""))
            if "tcconfig" in by:
                bits.append(f"tcconfig at least {ratio(by['tcconfig']['seconds'], ours):,.0f}x (extrapolated)")
            out.append(f"**Setup, {mode} mode, {n:,} flows** ({h['where']}): "
                       f"ours {fmt_time(ours)}; " + ", ".join(bits) + ".")
    p = packet and packet_headline(packet)
    if p:
        h, f = p["hashed"], p["flat"]
        out.append(f"**Per packet, {p['flows']:,} flows**: the hashed tree keeps {h['ratio_to_1flow']:.0%} of its "
                   f"one-flow forwarding rate, the flat list {f['ratio_to_1flow']:.1%} "
                   f"(the tree forwards {h['pps'] / f['pps']:,.0f}x as many packets/s for a packet "
                   f"that matches no flow).")
    for doc in stats:
        for mode in doc.get("config", {}).get("modes", []):
            h = stats_headline(doc, mode)
            if h:
                o, b, t = h["ours"], h["baseline"], h["tc"]
                out.append(f"**Statistics, {mode} mode, {h['flows']:,} links** ({h['where']}): `service.statistics` "
                           f"{fmt_time(o)}" + (f" ({b / o:.1f}x faster than the baseline's {fmt_time(b)})"
                                               if b else "") +
                           f", `{t['tool']}` {fmt_time(t['seconds'])} ({t['seconds'] / o:.2f}x ours).")
    for doc in fid:
        for r in fidelity_rows(doc):
            g, c = r["goodput_ratio"], r.get("carried_ratio") or {}
            sent = f"frames sent / link rate mean {c['mean']:.3f}, p5 {c['p5']:.3f}; " if c.get("n") else ""
            out.append(f"**Fidelity, {r['mode']} mode, {r['links']:,} modem-28k8 links, {r.get('client', '?')} "
                       f"clients** ({where_of(doc)}): {sent}goodput / "
                       f"the link model's capacity mean {g['mean']:.3f}, p5 {g['p5']:.3f}; retransmitted "
                       f"{100 * (r.get('retransmitted') or 0):.1f}% of segments.")
        lat = latency_headline(doc)
        if lat:
            probes = lat["probe_excess_ms"]
            beside = (f"; datagrams read at the kernel's receive timestamp: {probes[0]:+.1f} to "
                      f"{probes[1]:+.1f} ms over the configured round trip" if probes else "")
            out.append(f"**Latency classes**: fastest handshake / configured round trip {lat['ratio'][0]:.3f} to "
                       f"{lat['ratio'][1]:.3f}{beside}.")
    d = dialup and dialup_headline(dialup)
    if d:
        for generator in ("httperf", "wrk"):
            rs = [r for r in d["rows"] if r["generator"] == generator]
            if rs:
                out.append(f"**Dial-up table, {generator}** (steady-state window): " + ", ".join(
                    f"x={r['x']:,}: {r['completed_per_s']:.0f}/s ({100 * r['ratio_to_model']:.1f}% of the link "
                    f"model, {100 * r['ratio_to_theoretical']:.1f}% of 0.36 x)" for r in rs)
                    + f"; errors {sum(r.get('errors') or 0 for r in rs)}.")
                whole = [r for r in rs if r.get("totals") or r.get("whole_run_per_s") is not None]
                if whole and generator == "httperf":
                    out.append("**Dial-up table, httperf read as in 2000** (totals over whole sessions): " + ", ".join(
                        f"x={r['x']:,}: {r['totals']['completed_per_s']:.0f}/s "
                        f"({100 * r['totals']['ratio_to_model']:.1f}% of that run's model, "
                        f"{100 * r['totals']['completed_per_s'] / r['theoretical']:.1f}% of 0.36 x)" for r in whole) + ".")
                elif whole:
                    out.append("**Dial-up table, wrk over its whole run**: " + ", ".join(
                        f"x={r['x']:,}: {r['whole_run_per_s']:.0f}/s" for r in whole) + ".")
    return [f"- {b}" for b in out]


# ---------------------------------------------------------------- the report


def render(results: dict, plot_dir: Path | None = None, link_prefix: str = "") -> str:
    """Markdown for ``results`` (``load_results`` output); plots into ``plot_dir``."""
    def docs(name):
        return [results[(name, w)] for w in ("host", "vm") if (name, w) in results]

    failed: list[str] = []

    def img(fn, *a):
        if plot_dir is None:
            return None
        try:
            name = fn(*a, plot_dir)
        except Exception as e:  # noqa: BLE001 - a plot must not cost the report (no matplotlib, say)
            failed.append(f"{fn.__name__}: {type(e).__name__}: {e}")
            return None
        return f"{link_prefix}{name}" if name else None

    setup, stats, fid = docs("setup"), docs("stats"), docs("fidelity")
    packet = results.get(("packet", "host"))
    dialup = results.get(("dialup", "host"))
    any_doc = next(iter(results.values()), None)
    quick = any(d.get("quick") for d in results.values())
    lines = ["# Benchmarks", "",
             "Generated by `python -m bench report` from `bench/results/*.json`; do not edit by hand "
             "(re-run the benchmarks instead).", ""]
    if any_doc:
        lines += ["Measured with:", "", "```",
                  "pip install -e '.[bench]'    # matplotlib, for the plots",
                  "python -m bench all          # every part (long; the VM parts boot one VM)",
                  "python -m bench all --quick  # small sizes, what CI runs",
                  "python -m bench setup|packet|stats|fidelity|dialup|audience|faults|switch|cohorts|shaped-load"
                  "|trace|qdisc-hash|cells [--quick] [--no-vm]", "```", "",
                  "Commands of this report's runs: " + "; ".join(sorted({f"`{d.get('command')}`"
                                                                          for d in results.values()})) + ".", ""]
    if quick:
        lines += ["**Some results below come from a --quick run (small sizes); see each section's line.**", ""]
    lines += ["Speed is reported as ratios of tools measured side by side in the same run; the machine is a "
              "shared 2-CPU VM where other work runs too (load averages are given), so single figures "
              "are noisy and the ratios are what to read.  VM figures come from software emulation (about "
              "10x slower than the host) and are only comparable with each other.", ""]
    head = summary(setup, packet, stats, fid, dialup)
    if head:
        lines += ["## Headline numbers", ""] + head + [""]
    lines += section_setup(setup, img(plot_setup, setup) if setup else None)
    lines += section_packet(packet, img(plot_packet, packet) if packet else None)
    lines += section_stats(stats, img(plot_stats, stats) if stats else None)
    lines += section_fidelity(fid, img(plot_fidelity, fid) if fid else None)
    v03 = results.get(("dialup-v03", "vm")) or results.get(("dialup-v03", "host"))
    lines += section_dialup(dialup, img(plot_dialup, dialup) if dialup else None, v03,
                            results.get(("transient", "vm")), results.get(("dialup-wide", "host")))
    lines += section_faults(results.get(("faults", "host")))
    lines += section_switch(results.get(("switch", "host")))
    lines += section_audience(results.get(("audience", "host")))
    lines += section_cohorts(results.get(("cohorts", "host")))
    lines += section_shaped(results.get(("shaped-load", "host")))
    lines += section_trace(results.get(("trace", "host")))
    lines += section_qdisc_hash(results.get(("qdisc-hash", "host")))
    lines += section_cells(results.get(("cells", "host")))
    if failed:
        lines += ["Plots not drawn (pip install matplotlib): " + "; ".join(failed), ""]
    return "\n".join(lines).rstrip() + "\n"


def write(outdir: Path | str = RESULTS_DIR, *, quick: bool | None = None, doc_path: Path | None = None) -> Path:
    outdir = Path(outdir)
    results = load_results(outdir, quick=quick)
    plot_dir = outdir / "plots"
    if doc_path is None:
        doc_path = DOC if outdir.resolve() == RESULTS_DIR.resolve() else outdir / "benchmarks.md"
    prefix = os.path.relpath(plot_dir, doc_path.parent) + "/"
    text = render(results, plot_dir, prefix)
    doc_path.parent.mkdir(parents=True, exist_ok=True)
    doc_path.write_text(text)
    return doc_path
