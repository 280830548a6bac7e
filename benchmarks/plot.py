"""Plots for RESULTS.md (matplotlib: benchmark venv only, see benchmarks/requirements.txt)."""

from __future__ import annotations

import math
from typing import Dict, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)
from matplotlib.ticker import NullFormatter  # noqa: E402

CPCTL_STYLE = dict(color="#d62728", linewidth=3, marker="o", zorder=5)
# cpctl's variants: all red, told apart by line style (cold: the first command, which starts the
# keeper by default; warm: the next command; direct: --persist 0, no keeper).
CPCTL_VARIANTS = {"cold": "-", "warm": ":", "direct": "--"}
# Tableau colours without cpctl's red, so no other line can be mistaken for it.
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
MARKERS = ["s", "^", "v", "D", "P", "X", "<", ">", "*"]


def _spread(values: Sequence[float], gap: float) -> list:
    """Label heights (log10) pushed apart by at least ``gap`` so end labels do not overlap."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    placed = list(values)
    for prev, cur in zip(order, order[1:]):
        placed[cur] = max(placed[cur], placed[prev] + gap)
    return placed


def plot_fanout(series: Dict[str, Dict[int, float]], counts: Sequence[int], path: str,
                title: str = "Read the manifests dir of N masters over SSH (lower is better)",
                xlabel: str = "hosts (sshd on loopback, same machine)") -> None:
    """Median wall time (s) against host count, one line per tool, log-scaled time axis."""
    fig, ax = plt.subplots(figsize=(8.5, 5.2), dpi=120)
    ordered = sorted(series.items(), key=lambda item: -max(item[1].values()))
    ends = []
    others = 0
    for label, per in ordered:
        xs = [n for n in counts if n in per]
        ys = [per[n] for n in xs]
        if label.startswith("cpctl"):
            variant = "direct" if "--persist 0" in label else "warm" if "(warm)" in label else "cold"
            style = dict(CPCTL_STYLE, linestyle=CPCTL_VARIANTS[variant])
        else:
            style = dict(color=COLORS[others % len(COLORS)], marker=MARKERS[others % len(MARKERS)], linewidth=1.6)
            others += 1
        ax.plot(xs, ys, label=label, **style)
        ends.append((xs[-1], ys[-1], style["color"]))
    heights = _spread([math.log10(y) for _x, y, _c in ends], 0.045)
    for (x, y, color), height in zip(ends, heights):
        ax.annotate("%.2f s" % y, (x, y), xytext=(x * 1.06, 10 ** height), fontsize=8, color=color,
                    va="center")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(counts))
    ax.set_xticklabels([str(n) for n in counts])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(min(counts) * 0.85, max(counts) * 1.6)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("median wall time per run (s, log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
