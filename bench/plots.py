"""The report's PNG plots (matplotlib, headless), one function per benchmark."""

from __future__ import annotations

from pathlib import Path


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, plot_dir: Path, name: str) -> str:
    plot_dir.mkdir(parents=True, exist_ok=True)
    path = plot_dir / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path.name


TOOL_LABEL = {"ratelimit": "ratelimit (executor)", "tc-batch": "tc -batch", "tc-per-rule": "one tc per rule",
              "tcconfig": "tcconfig (lower bound)"}


def plot_setup(docs: list[dict], plot_dir: Path) -> str | None:
    panels = [(d, mode) for d in docs for mode in d.get("config", {}).get("modes", [])]
    if not panels:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, (doc, mode) in zip(axes[0], panels):
        for tool in TOOL_LABEL:
            rows = sorted((r for r in doc["rows"] if r["mode"] == mode and r["tool"] == tool),
                          key=lambda r: r["flows"])
            if not rows:
                continue
            xs = [r["flows"] for r in rows]
            ys = [r["seconds"] for r in rows]
            line, = ax.plot(xs, ys, marker="o", label=TOOL_LABEL[tool])
            ext = [(x, y) for x, y, r in zip(xs, ys, rows) if r.get("extrapolated")]
            if ext:
                ax.plot(*zip(*ext), marker="o", linestyle="none", markerfacecolor="white",
                        color=line.get_color())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("flows installed")
        ax.set_ylabel("seconds to install")
        ax.set_title(f"{mode} mode ({'VM, emulated' if doc.get('where') == 'vm' else 'host'})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Setup time (open markers: extrapolated)")
    return _save(fig, plot_dir, "setup")


def plot_packet(doc: dict, plot_dir: Path) -> str | None:
    rows = [r for r in doc.get("rows", []) if r["layout"] != "none"]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for layout in ("hashed", "flat", "shaped"):
        for target, style in (("hit", "-"), ("miss", "--")):
            rs = sorted((r for r in rows if r["layout"] == layout and r["target"] == target), key=lambda r: r["flows"])
            if rs:
                ax.plot([r["flows"] for r in rs], [r["pps"] / 1000 for r in rs], style, marker="o",
                        label=f"{layout}, {target}")
    bare = [r["pps"] for r in doc["rows"] if r["layout"] == "none"]
    if bare:
        ax.axhline(max(bare) / 1000, color="grey", linestyle=":", label="no qdisc")
    ax.set_xscale("log")
    ax.set_xlabel("flows installed")
    ax.set_ylabel("thousand packets/s forwarded")
    ax.set_ylim(bottom=0)
    ax.set_title("Per-packet cost: 64-byte UDP through the router")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, plot_dir, "packet")


def plot_stats(docs: list[dict], plot_dir: Path) -> str | None:
    panels = [(d, m) for d in docs for m in d.get("config", {}).get("modes", [])]
    if not panels:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, (doc, mode) in zip(axes[0], panels):
        timed = [r for r in doc["rows"] if r["mode"] == mode and r.get("seconds") is not None]
        for tool in sorted({r["tool"] for r in timed}):
            rs = sorted((r for r in timed if r["tool"] == tool), key=lambda r: r["flows"])
            ax.plot([r["flows"] for r in rs], [r["seconds"] for r in rs], marker="o", label=tool)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("links installed")
        ax.set_ylabel("seconds to read all counters")
        ax.set_title(f"{mode} mode ({'VM, emulated' if doc.get('where') == 'vm' else 'host'})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, plot_dir, "stats")


def plot_fidelity(docs: list[dict], plot_dir: Path) -> str | None:
    groups = [(f"{r['mode']} {r['links']:,}", r["ratios"]) for d in docs for r in d.get("rows", []) if r.get("ratios")]
    if not groups:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.boxplot([g for _, g in groups], whis=(5, 95), showfliers=False)
    ax.set_xticks(range(1, len(groups) + 1), [n for n, _ in groups])
    ax.axhline(1.0, color="green", linestyle="--", label="the link model's capacity")
    ax.axhline(0.95, color="grey", linestyle=":", label="95%")
    ax.set_ylabel("goodput / model capacity, per link")
    ax.set_xlabel("mode and concurrent links (box: p25-p75, whiskers p5-p95)")
    ax.set_title("Link fidelity: modem-28k8 links")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, plot_dir, "fidelity")


def plot_dialup(doc: dict, plot_dir: Path) -> str | None:
    from .dialup import PUBLISHED, table_rows, theoretical
    rows = table_rows(doc)
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    xs = sorted({r["x"] for r in rows} | set(PUBLISHED))
    ax.plot(xs, [theoretical(x) for x in xs], ":", color="grey", label="theory 0.36 x")
    model = sorted({(r["x"], r["model_ceiling"]) for r in rows})
    ax.plot([x for x, _ in model], [c for _, c in model], "--", color="black", alpha=0.6, label="link model ceiling")
    for generator in ("httperf", "wrk"):
        rs = sorted((r for r in rows if r["generator"] == generator), key=lambda r: r["x"])
        if rs:
            ax.plot([r["x"] for r in rs], [r["completed_per_s"] for r in rs], marker="o", label=f"{generator}, measured")
    px = sorted(PUBLISHED)
    ax.plot(px, [PUBLISHED[x] for x in px], "s--", alpha=0.6, label="2000: event-driven server")
    ax.set_xlabel("simultaneous users (28.8k modems)")
    ax.set_ylabel("replies / s")
    ax.set_title("Dial-up table")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, plot_dir, "dialup")


# ---------------------------------------------------------------- sections
