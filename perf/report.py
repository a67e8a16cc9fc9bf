"""Render ``report.md`` and PNG charts from a run's ``results.json``.

    python -m perf.report perf/results/2026-11-29-group-count-sweep-sssd

The shape follows the storage projects' benchmark notes (docs/CONTRIBUTING.md, Style,
"Benchmark reports people can read"): Summary, Findings (what happened, how to
reproduce), Next actions, then the figures, the environment and the exact commands.
Every number in the text is computed here from ``results.json``; a hand-written
``notes.md`` next to it, if any, is included under "Analysis".
"""

from __future__ import annotations

import itertools
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf.results import STEPS, Results, Sample, ScenarioInfo, Stats, StepRun
from perf.steps import BREAKDOWN, BREAKDOWN_LABELS, breakdown

TARGET_LABELS = {"cached": "cached", "sssd": "SSSD 2.8", "nslcd": "nslcd"}
COLORS = {"cached": "#1f77b4", "sssd": "#d62728", "nslcd": "#2ca02c"}
BREAKDOWN_COLORS = {
    "ldap_wait": "#4c72b0",
    "ber_decode": "#8172b2",
    "entry_txn": "#c44e52",
    "ts_write": "#dd8452",
    "backend_cpu": "#55a868",
    "responder_cpu": "#64b5cd",
    "client_cpu": "#937860",
    "other": "#bbbbbb",
}
# Short step names for chart axes.
SHORT = {
    "id_cold": "cold id",
    "id_warm_socket": "warm id\nsocket",
    "id_warm_mc": "warm id\nmemcache",
    "invalidate": "cache -E",
    "id_after_inval": "id\nafter -E",
    "id_after_inval_1changed": "id after -E\n1 changed",
    "initgr_cold": "cold\ninitgroups",
    "group_cold": "cold\ngroup",
    "group_warm_socket": "warm group\nsocket",
    "group_warm_mc": "warm group\nmemcache",
}
# A sample during which other processes used this many cores on average is flagged.
NOISY_CORES = 0.5
# Exponent of t ∝ n^b up to which growth counts as "linear or better" (measurement
# noise on 5 points makes 1.0 exactly meaningless).
LINEAR_MAX_EXPONENT = 1.1


# -- formatting --------------------------------------------------------------------------------


def fmt_s(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "–"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 100:
        return f"{seconds:.3g} s"
    return f"{seconds:.0f} s"


def fmt_stats(st: Stats | None) -> str:
    if st is None:
        return "–"
    if st.n == 1:
        return fmt_s(st.median)
    return f"{fmt_s(st.median)} ({fmt_s(st.min)}–{fmt_s(st.max)})"


def fmt_ratio(a: float | None, b: float | None) -> str:
    """b / a as "×12" (how many times b exceeds a)."""
    if not a or b is None:
        return "–"
    r = b / a
    if r >= 10:
        return f"×{r:.0f}"
    return f"×{r:.2g}"


def fmt_int(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:,.0f}"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def label(step: str, info: ScenarioInfo | None, inval: str = "cache -E") -> str:
    user = info.big_user if info else "bigroupuser"
    group = info.large_group if info else "large01"
    return STEPS[step].format(user=user, group=group, inval=inval)


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# -- data access ----------------------------------------------------------------------------------


def median_sample(run: StepRun) -> Sample | None:
    """The run whose wall time is the median (the lower middle one for an even count)."""
    pool = run.good or run.samples
    if not pool:
        return None
    ordered = sorted(pool, key=lambda s: s.wall)
    return ordered[(len(ordered) - 1) // 2]


def med(run: StepRun | None, attr: str | Callable[[Sample], float] = "wall") -> float | None:
    if run is None or not run.good:
        return None
    if callable(attr):
        vals = sorted(attr(s) for s in run.good)
        return Stats.of(vals).median
    st = run.stats(attr)
    return st.median if st else None


def sweep_keys(results: Results, kind: str) -> list[tuple[int, str]]:
    """(x, scenario key) of a sweep, bigroupuser included at its own x, sorted by x."""
    out: dict[int, str] = {}
    big = results.scenarios.get("bigroupuser")
    for key, info in results.scenarios.items():
        if kind == "groups" and (key.startswith("g") or key == "bigroupuser"):
            if big and key != "bigroupuser" and info.large_size != big.large_size:
                continue
            out[info.user_groups] = key
        if kind == "large" and (key.startswith("l") or key == "bigroupuser"):
            if big and key != "bigroupuser" and info.user_groups != big.user_groups:
                continue
            out[info.large_size] = key
    return sorted(out.items())


@dataclass(frozen=True)
class Fit:
    exponent: float  # b of t = a * n^b (least squares on logs)
    per_doubling: float  # 2^b
    slope_ms_per_1000: float  # k of t = c + k * n, in ms per 1,000
    intercept_ms: float
    r2_linear: float
    steps: list[float]  # measured ratio between consecutive points, per doubling of n
    xs: tuple[float, ...] = ()  # the points used

    def verdict(self) -> str:
        if self.exponent <= LINEAR_MAX_EXPONENT:
            return "linear or better"
        if self.exponent <= 1.3:
            return "slightly worse than linear"
        return "worse than linear"


def fit(xs: Sequence[float], ys: Sequence[float]) -> Fit | None:
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if x > 0 and y and y > 0]
    if len(pts) < 2:
        return None
    lx = [math.log(x) for x, _ in pts]
    ly = [math.log(y) for _, y in pts]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    b = sum((a - mx) * (c - my) for a, c in zip(lx, ly, strict=True)) / sxx if sxx else 0.0
    xs2 = [x for x, _ in pts]
    ys2 = [y for _, y in pts]
    mx2, my2 = sum(xs2) / len(xs2), sum(ys2) / len(ys2)
    sxx2 = sum((x - mx2) ** 2 for x in xs2)
    k = sum((x - mx2) * (y - my2) for x, y in pts) / sxx2 if sxx2 else 0.0
    c = my2 - k * mx2
    ss_tot = sum((y - my2) ** 2 for y in ys2)
    ss_res = sum((y - (c + k * x)) ** 2 for x, y in pts)
    r2 = 1 - ss_res / ss_tot if ss_tot else 1.0
    steps = []
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        steps.append((y1 / y0) ** (math.log(2) / math.log(x1 / x0)))
    return Fit(b, 2**b, k * 1000 * 1000, c * 1000, r2, steps, tuple(xs2))


def growth_sentence(name: str, what: str, f: Fit | None, unit: str = "groups") -> str:
    if f is None:
        return f"{name}, {what}: not enough sweep points."
    steps = ", ".join(f"×{s:.2f}" for s in f.steps)
    return (
        f"**{name}, {what}** (n = {', '.join(f'{x:,.0f}' for x in f.xs)}):"
        f" t ∝ n^{f.exponent:.2f}, i.e. ×{f.per_doubling:.2f} per doubling"
        f" of the {unit} ({f.verdict()}); linear fit {f.slope_ms_per_1000:,.1f} ms per 1,000"
        f" {unit} {'+' if f.intercept_ms >= 0 else '−'} {abs(f.intercept_ms):,.0f} ms"
        f" (R² {f.r2_linear:.3f}); measured per doubling,"
        f" point to point: {steps}."
    )


# -- charts -------------------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


PROCESS_COLORS = ["#c44e52", "#dd8452", "#55a868", "#8172b2", "#937860"]


def process_breakdown(sample: Sample) -> list[tuple[str, float]]:
    """A daemon without counters: its wall time split into slapd's own time (Σ etime),
    the CPU of each daemon process and of the client, and the rest (waiting, IPC). The
    processes work one after another on a request, so their times add up; on 2 cores
    they may overlap a little, and "rest" is then clamped at 0."""
    parts = [("slapd (Σ etime)", sample.slapd_etime)]
    parts += [(f"{name} CPU", cpu) for name, cpu in sample.daemon_cpu.items() if cpu > 0]
    parts.append(("client CPU", sample.client_cpu))
    parts.append(("rest (waiting, IPC)", max(0.0, sample.wall - sum(v for _, v in parts))))
    return parts


def chart_breakdown(results: Results, out: Path) -> str | None:
    """Stacked bars: where the (median) time of each step goes. cached from its counters
    (id_perf categories); the others from slapd's etime and per-process CPU."""
    scen = "bigroupuser"
    cached_steps = [
        (step, median_sample(r))
        for step in STEPS
        if (r := results.step("cached", scen, step)) is not None and r.samples
    ]
    others = [t for t in results.targets() if t != "cached"]
    if not cached_steps:
        return None
    plt = _plt()
    ncols = max(1, len(others))
    fig = plt.figure(figsize=(max(13, 6.5 * ncols), 10 if others else 5.2))
    grid = fig.add_gridspec(2 if others else 1, ncols)

    ax = fig.add_subplot(grid[0, :])
    bottoms = [0.0] * len(cached_steps)
    for cat in BREAKDOWN:
        vals = []
        for _, sample in cached_steps:
            b = breakdown(sample) if sample else None
            vals.append((b or {}).get(cat, 0.0) * 1000)
        ax.bar(
            range(len(vals)),
            vals,
            bottom=bottoms,
            color=BREAKDOWN_COLORS[cat],
            label=BREAKDOWN_LABELS[cat],
        )
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    ax.set_xticks(range(len(cached_steps)))
    ax.set_xticklabels([SHORT[s] for s, _ in cached_steps], fontsize=8)
    ax.set_ylabel("ms (median run)")
    ax.set_title("cached, bigroupuser: id_perf breakdown from its counters (ms)", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")

    for i, target in enumerate(others):
        ax = fig.add_subplot(grid[1, i])
        rows = [
            (step, sample)
            for step in STEPS
            if (r := results.step(target, scen, step)) is not None
            and (sample := median_sample(r)) is not None
        ]
        names: list[str] = []
        for _, sample in rows:
            names += [n for n, _ in process_breakdown(sample) if n not in names]
        names.sort(key=lambda n: (n != "slapd (Σ etime)", n.startswith("rest"), n == "client CPU"))
        bottoms = [0.0] * len(rows)
        for j, name in enumerate(names):
            vals = [dict(process_breakdown(sample)).get(name, 0.0) for _, sample in rows]
            if name.startswith("slapd"):
                color = BREAKDOWN_COLORS["ldap_wait"]
            elif name.startswith("rest"):
                color = BREAKDOWN_COLORS["other"]
            else:
                color = PROCESS_COLORS[j % len(PROCESS_COLORS)]
            ax.bar(range(len(rows)), vals, bottom=bottoms, color=color, label=name)
            bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([SHORT[s] for s, _ in rows], fontsize=7)
        ax.set_ylabel("s (median run)")
        ax.set_title(
            f"{TARGET_LABELS.get(target, target)}, bigroupuser: slapd time and CPU per process"
            " (s; no counters)",
            fontsize=9,
        )
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path = out / "breakdown.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


SERIES_STYLE = {
    "id_cold": ("-", "o", "cold id"),
    "id_warm_socket": ("--", "s", "warm id, socket"),
    "id_warm_mc": (":", "^", "warm id, memory cache"),
    "group_cold": ("-", "o", "cold getent group"),
    "group_warm_socket": ("--", "s", "warm getent group, socket"),
    "group_warm_mc": (":", "^", "warm getent group, memory cache"),
}


def chart_scaling(
    results: Results, out: Path, kind: str, steps: Sequence[str], name: str, xlabel: str
) -> str | None:
    keys = sweep_keys(results, kind)
    if len(keys) < 2:
        return None
    plt = _plt()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5.2))
    for target in results.targets():
        for step in steps:
            xs, ys, lo, hi = [], [], [], []
            for x, key in keys:
                r = results.step(target, key, step)
                st = r.stats() if r else None
                if st:
                    xs.append(x)
                    ys.append(st.median)
                    lo.append(st.median - st.min)
                    hi.append(st.max - st.median)
            if not xs:
                continue
            ls, marker, what = SERIES_STYLE[step]
            ax.errorbar(
                xs,
                ys,
                yerr=[lo, hi],
                color=COLORS.get(target),
                linestyle=ls,
                marker=marker,
                capsize=3,
                label=f"{TARGET_LABELS.get(target, target)}: {what}",
            )
        # searches of the cold step
        xs, ys = [], []
        for x, key in keys:
            r = results.step(target, key, steps[0])
            v = med(r, "searches_slapd")
            if v:
                xs.append(x)
                ys.append(v)
        if xs:
            ax2.plot(
                xs,
                ys,
                color=COLORS.get(target),
                marker="o",
                label=f"{TARGET_LABELS.get(target, target)}",
            )
    # A guide of slope 1 (t ∝ n) through cached's cold step at the middle point.
    mid_x, mid_key = keys[len(keys) // 2]
    mid_y = med(results.step("cached", mid_key, steps[0]))
    if mid_y:
        xs_all = [x for x, _ in keys]
        ax.plot(
            xs_all,
            [mid_y * x / mid_x for x in xs_all],
            color="#999999",
            linewidth=0.8,
            linestyle=(0, (1, 3)),
            label="guide: ∝ n (linear)",
        )
    from matplotlib.ticker import FuncFormatter

    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel(xlabel)
        a.grid(True, which="both", alpha=0.3)
        a.set_xticks([x for x, _ in keys])
        a.set_xticklabels([f"{x:,}" for x, _ in keys])
    ax.set_ylabel("seconds (median, bars: min–max), log scale")
    ax.set_title("time (log–log: a slope of 1 is linear)", fontsize=10)
    ax.legend(fontsize=7)
    ax2.yaxis.set_major_formatter(
        FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    )
    lo, hi = ax2.get_ylim()
    # Within one decade matplotlib labels only minor ticks: keep them, in plain numbers.
    minor = (lambda v, _pos: f"{v:,.0f}") if hi / max(lo, 1e-9) < 10 else (lambda v, _pos: "")
    ax2.yaxis.set_minor_formatter(FuncFormatter(minor))
    ax2.set_ylabel("LDAP searches (slapd log, pages once), log scale")
    ax2.set_title(f"LDAP searches of the cold step ({SERIES_STYLE[steps[0]][2]})", fontsize=10)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    path = out / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


# -- the report ------------------------------------------------------------------------------------


def _noisy(run: StepRun | None) -> int:
    if run is None:
        return 0
    return sum(1 for s in run.samples if s.other_load > NOISY_CORES)


def side_by_side(results: Results, scen: str, steps: Sequence[str]) -> str:
    targets = results.targets()
    others = [t for t in targets if t != "cached"]
    info = results.scenarios.get(scen)
    header = ["step"]
    for t in targets:
        header.append(f"{TARGET_LABELS.get(t, t)} median (min–max)")
    header += [f"{TARGET_LABELS.get(t, t)} ÷ cached" for t in others]
    header += ["LDAP searches " + " / ".join(TARGET_LABELS.get(t, t) for t in targets)]
    header += ["n " + " / ".join(TARGET_LABELS.get(t, t) for t in targets)]
    rows = []
    for step in steps:
        runs = {t: results.step(t, scen, step) for t in targets}
        if all(r is None for r in runs.values()):
            continue
        row = [label(step, info, "cache -E / sss_cache -E")]
        for t in targets:
            r = runs[t]
            cell = r.na if r is not None and r.na else fmt_stats(r.stats() if r else None)
            if r is not None and r.wrong:
                cell += f" **({r.wrong} of {len(r.samples)} answers wrong)**"
            row.append(cell)
        base = med(runs["cached"]) if "cached" in runs else None
        for t in others:
            row.append(fmt_ratio(base, med(runs[t])))
        searches = []
        for t in targets:
            r = runs[t]
            v = med(r, "searches_slapd")
            d = med(r, lambda s: float(s.searches_daemon or 0)) if t == "cached" else None
            if v is None:
                searches.append("–")
            elif d is not None and d != v:
                searches.append(f"{v:,.0f} (counter {d:,.0f})")
            else:
                searches.append(f"{v:,.0f}")
        row.append(" / ".join(searches))
        row.append(" / ".join(str(len(r.samples)) if r else "0" for r in runs.values()))
        rows.append(row)
    return md_table(header, rows)


def cost_table(results: Results, scen: str, steps: Sequence[str]) -> str:
    header = [
        "step",
        "daemon",
        "wall",
        "daemon CPU (per process)",
        "slapd CPU",
        "client CPU",
        "Σ slapd etime",
        "entries returned",
        "other load (cores)",
    ]
    rows = []
    info = results.scenarios.get(scen)
    for step in steps:
        for t in results.targets():
            r = results.step(t, scen, step)
            if r is None or not r.samples:
                continue
            s = median_sample(r)
            assert s is not None
            per = ", ".join(
                f"{k.replace('cached ', '')} {fmt_s(v)}"
                for k, v in s.daemon_cpu.items()
                if v >= 0.005
            )
            rows.append(
                [
                    label(step, info, "cache -E / sss_cache -E"),
                    TARGET_LABELS.get(t, t),
                    fmt_s(s.wall),
                    f"{fmt_s(s.daemon_cpu_total)}" + (f" ({per})" if per else ""),
                    fmt_s(s.slapd_cpu),
                    fmt_s(s.client_cpu),
                    fmt_s(s.slapd_etime),
                    fmt_int(s.entries),
                    f"{s.other_load:.2f}",
                ]
            )
    return md_table(header, rows, "llrlrrrrr")


def breakdown_table(results: Results, scen: str) -> str:
    header = [
        "step (median run)",
        "wall",
        *[BREAKDOWN_LABELS[c] for c in BREAKDOWN],
        "searches / entries",
        "bytes from LDAP",
        "groups validated / fetched whole",
        "entry txns / records / bytes",
        "ts writes / records",
    ]
    rows = []
    info = results.scenarios.get(scen)
    for step in STEPS:
        r = results.step("cached", scen, step)
        s = median_sample(r) if r else None
        if s is None or s.counters is None:
            continue
        b = breakdown(s) or {}
        c = s.counters

        def g(name: str, i: int, c: dict[str, list[float]] = c) -> float:
            return float(c.get(name, [0, 0.0, 0])[i])

        rows.append(
            [
                label(step, info),
                fmt_s(s.wall),
                *[fmt_s(b.get(k, 0.0)) for k in BREAKDOWN],
                f"{g('ldap.search', 0):,.0f} / {g('ldap.search', 2):,.0f}",
                fmt_bytes(g("ldap.bytes", 2)),
                f"{g('be.validate', 2):,.0f} / {g('be.validate.fetched', 2):,.0f}",
                f"{g('cache.entry.txn', 0):,.0f} / {g('cache.entry.records', 2):,.0f} /"
                f" {fmt_bytes(g('cache.entry.bytes', 2))}",
                f"{g('cache.ts.write', 0):,.0f} / {g('cache.ts.records', 2):,.0f}",
            ]
        )
    return md_table(header, rows)


def shapes_section(results: Results, scen: str, steps: Sequence[str]) -> str:
    parts = []
    info = results.scenarios.get(scen)
    for step in steps:
        for t in results.targets():
            r = results.step(t, scen, step)
            s = median_sample(r) if r else None
            if s is None or not s.search_shapes:
                continue
            lines = [
                f"- **{TARGET_LABELS.get(t, t)}, {label(step, info)}** "
                f"({s.searches_slapd:,} searches):"
            ]
            lines += [f"  - {n:,} × `{shape}`" for shape, n in s.search_shapes.items()]
            parts.append("\n".join(lines))
    return "\n".join(parts)


def sweep_table(results: Results, kind: str, step: str) -> str:
    """One step of a sweep: each daemon's time, the ratios to cached, and the searches."""
    keys = sweep_keys(results, kind)
    targets = results.targets()
    others = [t for t in targets if t != "cached"]
    xname = "groups per user (gids)" if kind == "groups" else "members of large01"
    header = [xname, *(TARGET_LABELS.get(t, t) for t in targets)]
    header += [f"{TARGET_LABELS.get(t, t)} ÷ cached" for t in others]
    header.append("LDAP searches " + " / ".join(TARGET_LABELS.get(t, t) for t in targets))
    rows = []
    for x, key in keys:
        info = results.scenarios[key]
        first = f"{x:,}" + (f" ({info.expected_gids:,})" if kind == "groups" else "")
        if key == "bigroupuser":
            first += " = bigroupuser"
        row = [first]
        for t in targets:
            r = results.step(t, key, step)
            cell = fmt_stats(r.stats() if r else None)
            if r is not None and r.wrong:
                cell += f" ✗{r.wrong}/{len(r.samples)}"
            row.append(cell)
        for t in others:
            row.append(
                fmt_ratio(med(results.step("cached", key, step)), med(results.step(t, key, step)))
            )
        row.append(
            " / ".join(fmt_int(med(results.step(t, key, step), "searches_slapd")) for t in targets)
        )
        rows.append(row)
    return md_table(header, rows)


def growth(results: Results, kind: str, step: str, target: str) -> Fit | None:
    xs, ys = [], []
    for x, key in sweep_keys(results, kind):
        v = med(results.step(target, key, step))
        if v is not None:
            xs.append(float(x))
            ys.append(v)
    return fit(xs, ys)


def store_table(results: Results) -> str:
    rows = []
    for target, per in results.stores.items():
        for when, files in per.items():
            if not when.startswith("bigroupuser"):
                continue
            db = {k: v for k, v in files.items() if k.startswith("db/") and not k.endswith("-lock")}
            mc = {k: v for k, v in files.items() if k.startswith("mc/")}
            rss = results.meta.get("peak_rss_kib", {}).get(target, {}).get(when, {})
            rows.append(
                [
                    TARGET_LABELS.get(target, target),
                    when.split(": ", 1)[1],
                    ", ".join(f"{k[3:]} {fmt_bytes(v[1])}" for k, v in db.items()),
                    fmt_bytes(sum(v[1] for v in db.values())),
                    ", ".join(f"{k[3:]} {fmt_bytes(v[0])}" for k, v in mc.items()) or "none",
                    ", ".join(
                        f"{k.replace('cached ', '')} {v / 1024:.0f} MiB" for k, v in rss.items()
                    ),
                ]
            )
    return md_table(
        [
            "daemon",
            "cache state",
            "store files (allocated)",
            "store total",
            "memory-cache files",
            "peak RSS",
        ],
        rows,
        "llllll",
    )


def _probes(results: Results) -> dict[str, list[float]]:
    """Each target's speed probes (Sample.probe), over all its steps; runs made before
    the probe existed have none."""
    out: dict[str, list[float]] = {}
    for run in results.steps:
        got = [s.probe for s in run.samples if s.probe > 0]
        if got:
            out.setdefault(run.target, []).extend(got)
    return out


def _step_med(results: Results, target: str, step: str, scen: str = "bigroupuser") -> float | None:
    return med(results.step(target, scen, step))


def summary(results: Results) -> list[str]:
    out = []
    targets = results.targets()
    has_sssd = "sssd" in targets
    for step in (
        "id_cold",
        "id_warm_socket",
        "id_warm_mc",
        "invalidate",
        "id_after_inval",
        "id_after_inval_1changed",
        "initgr_cold",
        "group_cold",
        "group_warm_socket",
    ):
        c = results.step("cached", "bigroupuser", step)
        if c is None:
            continue
        if c.na:
            out.append(f"{label(step, results.scenarios.get('bigroupuser'))}: cached {c.na}.")
            continue
        line = f"{label(step, results.scenarios.get('bigroupuser'))}: cached **{fmt_s(med(c))}**"
        sc = med(c, "searches_slapd")
        if has_sssd:
            s = results.step("sssd", "bigroupuser", step)
            if s is not None and s.samples:
                line += f", SSSD **{fmt_s(med(s))}** (SSSD ÷ cached {fmt_ratio(med(c), med(s))})"
                ss = med(s, "searches_slapd")
                if sc is not None and ss is not None and (sc or ss):
                    line += f"; LDAP searches {sc:,.0f} vs {ss:,.0f}"
        elif sc:
            line += f"; {sc:,.0f} LDAP searches"
        out.append(line + ".")
    conf = results.configs.get("sssd", "")
    if "client_idle_timeout" in conf:
        out.append(
            "SSSD ran with `timeout = 60` and `[nss] client_idle_timeout = 300`: with its defaults"
            " it answers `id` for a user in 4,000 groups with the primary group only (its"
            " watchdog kills sssd_be; see the analysis under Findings)."
        )
    for target in targets:
        for step in ("id_cold", "id_warm_socket"):
            f = growth(results, "groups", step, target)
            if f is not None:
                out.append(
                    f"{TARGET_LABELS.get(target, target)}, {SERIES_STYLE[step][2]} against groups"
                    f" per user: ×{f.per_doubling:.2f} per doubling (n^{f.exponent:.2f}),"
                    f" {f.verdict()}."
                )
    return out


def findings(results: Results) -> list[str]:
    """Facts the figures show, each with how to see it again."""
    out = []
    scen = "bigroupuser"
    info = results.scenarios.get(scen)
    by_case: dict[tuple[str, str], list[StepRun]] = {}
    for r in results.steps:
        if r.wrong:
            by_case.setdefault((r.target, r.scenario), []).append(r)
    for (target, scenario), runs in by_case.items():
        notes = sorted({s.note for r in runs for s in r.samples if not s.ok})
        steps = ", ".join(
            f"{SHORT[r.step].replace(chr(10), ' ')} ({r.wrong}/{len(r.samples)})" for r in runs
        )
        out.append(
            f"**Wrong answers, {TARGET_LABELS.get(target, target)} on {scenario}**: {steps}."
            f" What the checks saw: {'; '.join(notes)[:500]}. These samples are left out of"
            " every median (a fast wrong answer is not a time) and marked ✗ in the tables."
        )
    c_cold = results.step("cached", scen, "id_cold")
    c_after = results.step("cached", scen, "id_after_inval")
    if c_after is not None and c_after.samples:
        s = median_sample(c_after)
        assert s is not None and s.counters is not None
        txn = s.counters.get("cache.entry.txn", [0, 0, 0])[0]
        ts = s.counters.get("cache.ts.write", [0, 0, 0])[0]
        out.append(
            f"**cached, `id` after `cache -E` with the server unchanged**: {fmt_s(s.wall)},"
            f" {s.searches_slapd:,} searches, {txn:.0f} entry-store transactions and {ts:.0f}"
            " timestamp writes: the refresh finds every entry unchanged and writes only"
            " timestamps (invariant 2)."
            + (f" Cold it took {fmt_s(med(c_cold))}." if c_cold else "")
        )
    c_one = results.step("cached", scen, "id_after_inval_1changed")
    one = median_sample(c_one) if c_one is not None and c_one.samples else None
    if c_one is not None and one is not None and one.counters is not None:
        fetched = [int(s.counters.get("be.validate.fetched", [0, 0, 0])[2])
                   for s in c_one.good if s.counters is not None]  # fmt: skip
        out.append(
            f"**cached, `id` after `cache -E` with one group changed on the server**:"
            f" {fmt_s(one.wall)}, {one.searches_slapd:,} searches,"
            f" {fmt_bytes(one.counters.get('ldap.bytes', [0, 0, 0])[2])} from LDAP;"
            f" groups fetched whole per run: {', '.join(map(str, fetched)) or '–'}"
            " (counter `be.validate.fetched`: the changed group, the others validated by"
            " their stamps)."
        )
    c_med = median_sample(c_cold) if c_cold is not None else None
    if c_med is not None and c_med.counters is not None:
        b = breakdown(c_med) or {}
        out.append(
            f"**cached, cold `id`, where the LDAP time goes**: {fmt_s(b.get('ldap_wait', 0.0))}"
            f" waiting for LDAP plus {fmt_s(b.get('ber_decode', 0.0))} of BER decoding, while"
            f" slapd's own time for those {c_med.searches_slapd} searches was"
            f" {fmt_s(c_med.slapd_etime)} (Σ etime) and its CPU {fmt_s(c_med.slapd_cpu)}."
            " See the breakdown table."
        )
    n_cold = results.step("nslcd", scen, "id_cold")
    s_cold = results.step("sssd", scen, "id_cold")
    n_med = median_sample(n_cold) if n_cold is not None else None
    s_med = median_sample(s_cold) if s_cold is not None else None
    if n_med is not None and s_med is not None:
        out.append(
            f"**LDAP is not SSSD's bottleneck**: nslcd, which has no cache and asks the server"
            f" for everything, made {n_med.searches_slapd:,} searches for `id` in"
            f" {fmt_s(n_med.wall)} (slapd Σ etime {fmt_s(n_med.slapd_etime)}); SSSD made"
            f" {s_med.searches_slapd:,} in {fmt_s(s_med.wall)}, of which slapd's part was"
            f" {fmt_s(s_med.slapd_etime)} and SSSD's own processes used"
            f" {fmt_s(s_med.daemon_cpu_total)} of CPU."
        )

    s_warm = results.step("sssd", scen, "id_warm_socket")
    if s_cold is not None and s_cold.samples and info is not None:
        s = median_sample(s_cold)
        assert s is not None
        per_group = s.searches_slapd / max(1, info.expected_gids)
        out.append(
            f"**SSSD, cold `id {info.big_user}`**: {s.searches_slapd:,} searches for"
            f" {info.expected_gids:,} gids ({per_group:.1f} per group) and"
            f" {fmt_s(s.daemon_cpu.get('sssd_be', 0.0))} of sssd_be CPU in"
            f" {fmt_s(s.wall)} wall; slapd itself spent {fmt_s(s.slapd_etime)} (Σ etime)."
            " The search shapes below show where the per-group searches come from."
            " Reproduce: `python -m perf.run --with-sssd --no-sweep --sssd-reps 1 --reps 1`."
        )
    if s_warm is not None and s_warm.samples:
        s = median_sample(s_warm)
        assert s is not None
        nss = s.daemon_cpu.get("sssd_nss", 0.0)
        out.append(
            f"**SSSD, warm `id` over the socket**: {fmt_s(s.wall)} with no LDAP search at all;"
            f" sssd_nss used {fmt_s(nss)} of CPU, the client {fmt_s(s.client_cpu)}: the cost is"
            " the responder answering ~one getgrgid per group from its ldb cache."
        )
    mc_c = results.step("cached", scen, "id_warm_mc")
    mc_s = results.step("sssd", scen, "id_warm_mc")
    if mc_c is not None and mc_s is not None and mc_c.samples and mc_s.samples:
        out.append(
            f"**Memory cache**: warm `id` with the memory cache allowed takes"
            f" {fmt_s(med(mc_c))} (cached) and {fmt_s(med(mc_s))} (SSSD); the socket-only"
            f" figures ({fmt_s(_step_med(results, 'cached', 'id_warm_socket'))} and"
            f" {fmt_s(_step_med(results, 'sssd', 'id_warm_socket'))}) show what the memory"
            " cache saves."
        )
    noisy = [(r, _noisy(r)) for r in results.steps]
    noisy = [(r, n) for r, n in noisy if n]
    if noisy:
        total = sum(n for _, n in noisy)
        worst = ", ".join(f"{r.target} {r.scenario} {r.step} ({n})" for r, n in noisy[:6])
        out.append(
            f"**Shared machine**: {total} samples ran while other processes used more than"
            f' {NOISY_CORES} cores on average (column "other load"): {worst}'
            f"{', …' if len(noisy) > 6 else ''}. Their medians are less reliable than the rest."
        )
    for note in results.notes:
        out.append(f"**Run note**: {note}")
    return out


def next_actions(results: Results) -> list[str]:
    out = []
    for r in results.steps:
        if r.na and r.target == "cached" and r.scenario == "bigroupuser":
            out.append(
                f"cached: {label(r.step, results.scenarios.get(r.scenario))} was {r.na};"
                " rerun `python -m perf.run` once it lands."
            )
    f = growth(results, "groups", "id_warm_socket", "cached")
    if f is not None and f.exponent > LINEAR_MAX_EXPONENT:
        out.append(
            "cached: warm `id` grows faster than linearly with the groups per user:"
            " profile the responder's getgrgid path."
        )
    f = growth(results, "groups", "id_cold", "cached")
    if f is not None and f.exponent > LINEAR_MAX_EXPONENT:
        out.append(
            "cached: cold `id` grows faster than linearly: look at the per-level"
            " searches and the store transaction (breakdown table)."
        )
    if any(not r.ok for r in results.steps if r.samples):
        out.append(
            "Investigate the wrong answers listed under Findings before trusting"
            " the affected figures."
        )
    return out


def write_report(out: Path, results: Results) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    charts = {
        "breakdown": chart_breakdown(results, out),
        "scaling_id": chart_scaling(
            results,
            out,
            "groups",
            ("id_cold", "id_warm_socket", "id_warm_mc"),
            "scaling-id.png",
            "direct groups per user",
        ),
        "scaling_group": chart_scaling(
            results,
            out,
            "large",
            ("group_cold", "group_warm_socket", "group_warm_mc"),
            "scaling-group.png",
            "members of the large group",
        ),
    }
    m = results.meta
    targets = results.targets()
    has_sssd = "sssd" in targets
    title_vs = " vs ".join(TARGET_LABELS.get(t, t) for t in targets)
    info = results.scenarios.get("bigroupuser")
    L: list[str] = []
    L.append(
        f"# {title_vs}: a user in thousands of groups — {m.get('date', '')[:10]}, "
        f"{m.get('host', '')}"
    )
    L.append("")
    L.append(
        f"Generated by `{' '.join(m.get('argv', []))}` in {m.get('duration_s', 0) / 60:.0f} min"
        f" on {m.get('cores')} cores ({m.get('cpu')}). Every step runs a real command through"
        " glibc and Debian's `libnss_sss.so.2` in a private mount namespace; times are the"
        " command's own wall time, medians of the repetitions with (min–max)."
        + ("" if has_sssd else " SSSD was not compared in this run (`--with-sssd`).")
    )
    probes = _probes(results)
    if probes:
        L.append("")
        L.append(
            "Host speed probe (the same pure-Python work timed before each step, best of"
            " 3, `perf/steps.py` `speed_probe`; this machine's other tenants move its"
            " speed by half between minutes): "
            + "; ".join(
                f"{TARGET_LABELS.get(t, t)}'s steps {fmt_s(statistics.median(v))}"
                f" ({fmt_s(min(v))}–{fmt_s(max(v))})"
                for t, v in probes.items()
            )
            + ". A run compares with another only next to its probe."
        )
    if info:
        L.append("")
        L.append(
            f"**bigroupuser**: {info.users:,} users, {info.groups:,} groups; `{info.big_user}` is"
            f" a direct member of {info.user_groups:,} groups, {info.expected_gids:,} gids at"
            f" nesting level {m.get('level')}; `{info.large_group}` has"
            f" {info.expected_members:,} members (LDIF {fmt_bytes(info.ldif_bytes)})."
        )
    L += ["", "## Summary", ""]
    L += [f"- {s}" for s in summary(results)]
    L += ["", "## Findings", ""]
    L += [f"- {s}" for s in findings(results)] or ["- (none computed)"]
    notes = out / "notes.md"
    if notes.exists():
        L += ["", "### Analysis (hand-written: notes.md)", "", notes.read_text().strip()]
    L += ["", "## Next actions", ""]
    computed = [f"- {s}" for s in next_actions(results)]
    written = out / "next-actions.md"
    if written.exists():
        L += [written.read_text().strip()]
        if computed:
            L += ["", "Computed from this run's figures:", ""]
    L += computed or ([] if written.exists() else ["- (none computed)"])
    L += ["", "## Side by side: bigroupuser", ""]
    if has_sssd:
        L.append(
            "Ratios are SSSD's median divided by cached's: ×10 means SSSD took ten times"
            " as long. LDAP searches are counted in slapd's stats log (all pages of a paged"
            " search once); for cached, the daemon's own `ldap.search` counter is shown"
            " where it differs."
        )
    else:
        L.append(
            "LDAP searches are counted in slapd's stats log (all pages of a paged search"
            " once); cached's own `ldap.search` counter is shown where it differs."
        )
    L += ["", side_by_side(results, "bigroupuser", list(STEPS)), ""]
    L += ["### CPU and server cost (median run)", ""]
    L.append(
        "CPU from `/proc/<pid>/stat` (resolution 10 ms) of each daemon process, of slapd,"
        ' and of the client command (`wait4`). "Other load" is the CPU the rest of the'
        " host used during the step, in cores: this machine is shared with other test"
        f" runs, and values above {NOISY_CORES} mean the figure is disturbed."
    )
    L += ["", cost_table(results, "bigroupuser", list(STEPS)), ""]
    if charts["breakdown"]:
        L += ["### Where the time goes", "", f"![breakdown]({charts['breakdown']})", ""]
        L.append(
            "cached's bars come from its counters (reference §5.4): LDAP wait without"
            " BER decoding, BER decoding, outermost entry-store transactions (commit"
            " included), timestamp-store writes; then from /proc: the backend's CPU"
            " beyond those (its Python: the walk, validation, filters), the responder's"
            " CPU, the client's CPU, and what remains of the wall time (waiting, IPC)."
            " /proc's CPU has a 10 ms resolution, and the receive loop's framing counts"
            " in both LDAP wait and backend CPU. SSSD has no such counters without"
            " SystemTap, so its bars split the wall time into slapd's own time (Σ etime),"
            " each process's CPU and the rest."
        )
        L += ["", breakdown_table(results, "bigroupuser"), ""]
    shapes = shapes_section(
        results,
        "bigroupuser",
        ["id_cold", "id_after_inval", "id_after_inval_1changed", "initgr_cold", "group_cold"],
    )
    if shapes:
        L += [
            "### What the searches were (cold steps, slapd's log, values blanked)",
            "",
            shapes,
            "",
        ]
    L += ["### Store sizes and memory", "", store_table(results), ""]
    L.append(
        "Store files are the daemon's cache directory (LMDB for cached, ldb/tdb for SSSD;"
        " allocated size); the memory-cache files have a fixed size set by"
        " `memcache_size_*`. Peak RSS is `VmHWM` of each process at that moment."
    )
    # sweeps
    L += ["", "## Sweep: groups per user", ""]
    gid_keys = sweep_keys(results, "groups")
    if len(gid_keys) >= 2:
        L.append(
            "Large groups of 5,000 members throughout; the big user's direct groups vary"
            " (gids at nesting level 2 in parentheses)."
        )
        for step in ("id_cold", "id_warm_socket", "id_warm_mc"):
            L += ["", f"**{label(step, info)}**", "", sweep_table(results, "groups", step)]
        L.append("")
        if charts["scaling_id"]:
            L += [f"![scaling of id]({charts['scaling_id']})", ""]
        L += ["**Growth** (least squares over the sweep points; n = direct groups per user):", ""]
        for t in targets:
            for step in ("id_cold", "id_warm_socket", "id_warm_mc"):
                f = growth(results, "groups", step, t)
                if f is not None:
                    L.append(
                        "- " + growth_sentence(TARGET_LABELS.get(t, t), SERIES_STYLE[step][2], f)
                    )
        L.append("")
    else:
        L += ["(not run: `--no-sweep`)", ""]
    L += ["## Sweep: size of the large groups", ""]
    lg_keys = sweep_keys(results, "large")
    if len(lg_keys) >= 2:
        L.append(
            "2,000 direct groups per user throughout; `large01` has the given number of"
            " member users."
        )
        for step in ("group_cold", "group_warm_socket", "group_warm_mc"):
            L += ["", f"**{label(step, info)}**", "", sweep_table(results, "large", step)]
        L.append("")
        if charts["scaling_group"]:
            L += [f"![scaling of getent group]({charts['scaling_group']})", ""]
        for t in targets:
            for step in ("group_cold", "group_warm_socket"):
                f = growth(results, "large", step, t)
                if f is not None:
                    L.append(
                        "- "
                        + growth_sentence(
                            TARGET_LABELS.get(t, t), SERIES_STYLE[step][2], f, unit="members"
                        )
                    )
        L.append("")
    else:
        L += ["(not run: `--no-sweep`)", ""]
    L += environment_section(results)
    path = out / "report.md"
    path.write_text("\n".join(L).rstrip() + "\n")
    return path


def environment_section(results: Results) -> list[str]:
    m = results.meta
    L = ["## Environment", ""]
    pkgs = m.get("python_packages", {})
    rows = [
        ["date", str(m.get("date"))],
        [
            "host",
            f"{m.get('host')}: {m.get('cores')} cores, {m.get('cpu')}, {m.get('memory_gib')} GiB",
        ],
        ["OS / kernel", f"{m.get('os')} / {m.get('kernel')}"],
        ["filesystem of the work directory", f"`{m.get('filesystem')}`"],
        [
            "cached",
            f"commit {m.get('cached_commit')}"
            + (" + uncommitted changes (working tree)" if m.get("cached_tree_dirty") else ""),
        ],
        ["Python / ldap3 / lmdb", f"{m.get('python')} / {pkgs.get('ldap3')} / {pkgs.get('lmdb')}"],
        ["slapd", str(m.get("slapd"))],
        ["libnss-sss (client)", str(m.get("libnss_sss"))],
    ]
    if m.get("sssd"):
        rows.append(["SSSD", f"{m.get('sssd_version', '')} (Debian {m.get('sssd')})"])
    if m.get("nslcd") and "nslcd" in m.get("targets", []):
        rows.append(["nslcd", str(m.get("nslcd"))])
    rows.append(
        [
            "load average at start / end",
            f"{_load(m.get('loadavg_start'))} / {_load(m.get('loadavg_end'))}",
        ]
    )
    L += [md_table(["", ""], rows, "ll"), ""]
    if m.get("cached_tree_changes"):
        L.append("<details><summary>Uncommitted changes measured</summary>\n")
        L += ["```", *m["cached_tree_changes"], "```", "</details>", ""]
    L += ["## Commands", ""]
    L += [
        "```sh",
        "# this report",
        " ".join(m.get("argv", [])),
        "# re-render it from results.json (no measuring)",
        "python -m perf.report perf/results/<this directory>",
        "# hot functions (pytest-benchmark), saved for later comparison",
        "make bench   # pytest tests/bench --benchmark-enable --benchmark-autosave;"
        " python -m perf.run",
        "# compare the last two saved runs, or one against a saved id",
        ".venv/bin/pytest tests/bench --benchmark-enable --benchmark-compare",
        ".venv/bin/pytest tests/bench --benchmark-enable --benchmark-compare=0001 "
        "--benchmark-compare-fail=median:10%",
        ".venv/bin/pytest-benchmark compare --columns=min,median,max --group-by=name",
        "```",
        "",
    ]
    L += [
        "One step by hand (what `perf.run` does for a cold `id`, cached side):",
        "",
        "```sh",
        "python -m testing.gendir --user-groups 2000 --large-size 5000 /tmp/gen   # = bigroupuser",
        "# slapd: testing.slapd.Slapd(workdir, ldif, 'dc=example,dc=test');"
        " cached: testing.daemon.CachedDaemon",
        "unshare --mount --propagation private -- sh -c 'mount --bind $PIPES /var/lib/sss/pipes &&"
        " mount --bind $MC /var/lib/sss/mc && mount --bind $NSSWITCH /etc/nsswitch.conf &&"
        " exec python -m perf.timecmd -- id bigroupuser'",
        "# SSSD: testing.sssd.SssdDaemon runs `sssd -i --logger=stderr` under unshare -m with",
        "# /var/lib/sss, /etc/sssd, /run, /var/log/sssd bound to its work directory;",
        "# sss_cache runs in that namespace: nsenter -m -t <sssd pid> -- sss_cache -E",
        "```",
        "",
    ]
    plans = m.get("plans", {})
    if plans:
        rows = []
        for k, v in plans.items():
            if not any(v.get(x) for x in ("id_cycles", "initgr_cycles", "group_cycles")):
                continue
            t, key = k.split(" ", 1)
            rows.append(
                [
                    TARGET_LABELS.get(t, t),
                    key,
                    str(v["id_cycles"]),
                    str(v["warm_reps"]),
                    "yes" if v["inval"] else "no",
                    str(v["initgr_cycles"]),
                    str(v["group_cycles"]),
                ]
            )
        L += ["### Repetitions", ""]
        L.append(
            "A cycle starts the daemon with an empty cache (store, memory cache and"
            " sockets removed) and looks up a name that does not exist, so the LDAP"
            " connection is up before the first measured step. Warm steps repeat"
            " inside each id/group cycle."
        )
        L += [
            "",
            md_table(
                [
                    "daemon",
                    "scenario",
                    "id cycles",
                    "warm reps per cycle",
                    "cache -E",
                    "initgroups cycles",
                    "group cycles",
                ],
                rows,
            ),
            "",
        ]
    for t, text in results.configs.items():
        L += [f"### {TARGET_LABELS.get(t, t)} configuration", "", "```ini", text.strip(), "```", ""]
    if m.get("install_log"):
        L += ["### Package installation", "", *[f"- `{x}`" for x in m["install_log"]], ""]
    return L


def _load(v: object) -> str:
    if isinstance(v, (list, tuple)):
        return " ".join(f"{float(x):.2f}" for x in v)
    return "?"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m perf.report RESULTS_DIR", file=sys.stderr)
        return 2
    out = Path(args[0])
    results = Results.load(out / "results.json")
    print(write_report(out, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
