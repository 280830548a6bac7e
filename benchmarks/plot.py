"""Plots for RESULTS.md (matplotlib: benchmark venv only, see benchmarks/requirements.txt)."""

from __future__ import annotations

from typing import Dict, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

STYLES = {"cpctl": dict(color="#d62728", linewidth=3, marker="o", zorder=5)}


def plot_fanout(series: Dict[str, Dict[int, float]], counts: Sequence[int], path: str) -> None:
    """Median wall time (s) against host count, one line per tool, log-scaled time axis."""
    fig, ax = plt.subplots(figsize=(8.5, 5.2), dpi=120)
    ordered = sorted(series.items(), key=lambda item: -max(item[1].values()))
    for label, per in ordered:
        xs = [n for n in counts if n in per]
        ys = [per[n] for n in xs]
        style = STYLES["cpctl"] if label.startswith("cpctl") else dict(marker="s", linewidth=1.6)
        ax.plot(xs, ys, label=label, **style)
        ax.annotate("%.2f s" % ys[-1], (xs[-1], ys[-1]), textcoords="offset points", xytext=(6, -3), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(counts))
    ax.set_xticklabels([str(n) for n in counts])
    ax.set_xlim(min(counts) * 0.85, max(counts) * 1.6)
    ax.set_xlabel("hosts (sshd on loopback, same machine)")
    ax.set_ylabel("median wall time per run (s, log scale)")
    ax.set_title("Read the manifests dir of N masters over SSH (lower is better)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
