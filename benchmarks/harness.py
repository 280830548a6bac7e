"""Timing helpers shared by the benchmarks: repeated runs, medians, percentiles, the report."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from typing import Callable, Optional, Sequence

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def time_command(argv: Sequence[str], runs: int = 15, env: Optional[dict] = None, warmup: int = 2) -> list:
    """Wall-clock seconds of ``runs`` executions of ``argv`` (after ``warmup`` discarded runs)."""
    samples = []
    for i in range(warmup + runs):
        start = time.perf_counter()
        proc = subprocess.run(list(argv), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), proc.returncode, proc.stderr[-300:]))
        if i >= warmup:
            samples.append(elapsed)
    return samples


def time_call(fn: Callable[[], None], runs: int = 10) -> list:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def cpu_seconds(pid: int, reaped_children: bool = False) -> float:
    """CPU time (user + system) of a running process, from /proc/PID/stat; with
    ``reaped_children`` also that of the children it has waited for (cutime + cstime)."""
    with open("/proc/%d/stat" % pid) as handle:
        fields = handle.read().rpartition(")")[2].split()      # fields 14-17 of proc(5), from 0 after ")"
    ticks = sum(int(f) for f in fields[11:15 if reaped_children else 13])
    return ticks / os.sysconf("SC_CLK_TCK")


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def percentile(samples: Sequence[float], pct: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, int(round(pct / 100.0 * (len(ordered) - 1)))))
    return ordered[index]


def machine_info() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s, %d cores, Python %s, %s, %s" % (cpu, os.cpu_count() or 0, platform.python_version(),
                                                platform.system(), time.strftime("%Y-%m-%d"))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_section(name: str, body: str) -> None:
    """Replace (or add) the section ``name`` of RESULTS.md, keeping the others."""
    sections: dict = {}
    order: list = []
    if os.path.exists(RESULTS):
        current = None
        with open(RESULTS) as handle:
            for line in handle:
                if line.startswith("## "):
                    current = line[3:].strip()
                    order.append(current)
                    sections[current] = ""
                elif current:
                    sections[current] += line
    if name not in sections:
        order.append(name)
    sections[name] = "\n" + body.strip() + "\n\n"
    with open(RESULTS + ".tmp", "w") as handle:
        handle.write("# cpctl benchmark results\n\nRe-run with `python -m benchmarks all` "
                     "(or one of: startup, roundtrip, watch, drift, fanout, apply, certs, apiserver, failfast; "
                     "`latency` runs only by name).\n\n")
        for key in order:
            handle.write("## %s\n%s" % (key, sections[key]))
    os.replace(RESULTS + ".tmp", RESULTS)


def load_average() -> str:
    """The 1/5/15-minute load average, for the report (other jobs on the machine skew timings)."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return "%.2f / %.2f / %.2f (1/5/15 min)" % (one, five, fifteen)
