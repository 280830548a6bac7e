"""``cpctl watch -o json``: event -> verdict latency, idle CPU and memory.

A watch runs on a manifests dir with the 4 control-plane manifests (``--probe none``: verdicts
only, no mirror pod follow-ups). The benchmark makes one change at a time - touch, modify,
create, delete, move out, move back in - and measures from just before the system call to the
moment the JSON line for that file is read from the watch's stdout (a reader thread stamps each
line as it arrives). The default 50 ms debounce is part of the latency on purpose: it is what a
user gets; a second pass with ``--debounce 0`` shows the rest.

Then the watch sits idle for 60 s: CPU from /proc/<pid>/stat (utime + stime), memory from
/proc/<pid>/status (VmRSS now, VmHWM peak).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks.harness import cpu_seconds, load_average, machine_info, median, percentile, table, write_section

MANIFEST = """apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: kube-system}
spec:
  containers: [{name: %s, image: registry.k8s.io/%s:v1.30.0}]
"""
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
KINDS = ("touch", "modify", "create", "delete", "move out", "move in")
VERDICT_TIMEOUT = 3.0
class WatchProcess:
    """``cpctl watch`` as a child process, its stdout lines queued with their arrival time."""

    def __init__(self, argv: list, env: dict) -> None:
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.lines: queue.SimpleQueue = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in iter(self.proc.stdout.readline, b""):
            self.lines.put((time.perf_counter(), raw))

    def next_for(self, name: str, timeout: float) -> tuple:
        """(arrival time, record) of the next line about ``name``; (None, None) on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, None
            try:
                stamp, raw = self.lines.get(timeout=left)
            except queue.Empty:
                return None, None
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if record.get("file") == name:
                return stamp, record

    def drain(self) -> int:
        count = 0
        while True:
            try:
                self.lines.get_nowait()
            except queue.Empty:
                return count
            count += 1

    def stop(self) -> str:
        self.proc.terminate()
        try:
            _out, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _out, err = self.proc.communicate()
        return (err or b"").decode(errors="replace")


def _write(path: str, text: str, mode: str = "w") -> None:
    with open(path, mode) as handle:
        handle.write(text)


def _touch(path: str) -> None:
    """What touch(1) does to an existing file: open for writing, set the times, close."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOCTTY | os.O_NONBLOCK, 0o644)
    try:
        os.utime(fd)
    finally:
        os.close(fd)


def _event(kind: str, mdir: str, outside: str, serial: int) -> str:
    """Make one change; return the file name the verdict will name. Called right after t0."""
    if kind == "touch":
        _touch(os.path.join(mdir, "etcd.yaml"))
        return "etcd.yaml"
    if kind == "modify":
        _write(os.path.join(mdir, "kube-apiserver.yaml"), "# edit %d\n" % serial, "a")
        return "kube-apiserver.yaml"
    if kind == "create":
        _write(os.path.join(mdir, "extra.yaml"), MANIFEST % ("extra", "extra", "pause"))
        return "extra.yaml"
    if kind == "delete":
        os.unlink(os.path.join(mdir, "extra.yaml"))
        return "extra.yaml"
    if kind == "move out":
        os.rename(os.path.join(mdir, "kube-scheduler.yaml"), os.path.join(outside, "kube-scheduler.yaml"))
        return "kube-scheduler.yaml"
    os.rename(os.path.join(outside, "kube-scheduler.yaml"), os.path.join(mdir, "kube-scheduler.yaml"))
    return "kube-scheduler.yaml"


def _wait_armed(watch: WatchProcess, mdir: str) -> None:
    """The watch prints nothing at start: poke a file until a verdict shows inotify is armed."""
    path = os.path.join(mdir, "etcd.yaml")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if watch.proc.poll() is not None:
            raise RuntimeError("cpctl watch exited (%s): %s" % (watch.proc.returncode, watch.stop()[-400:]))
        _touch(path)
        stamp, _record = watch.next_for("etcd.yaml", 0.3)
        if stamp is not None:
            time.sleep(0.2)
            watch.drain()
            return
    raise RuntimeError("cpctl watch gave no verdict within 30 s")


def _proc_status(pid: int) -> dict:
    out = {}
    with open("/proc/%d/status" % pid) as handle:
        for line in handle:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def measure(env: dict, mdir: str, outside: str, rounds: int, debounce: int, idle: float) -> dict:
    start = [sys.executable, "-m", "cpctl"]
    argv = start + ["--probe", "none", "-o", "json", "watch", "--debounce", str(debounce)]
    watch = WatchProcess(argv, env)
    try:
        _wait_armed(watch, mdir)
        latencies: dict = {kind: [] for kind in KINDS}
        missed: list = []
        extra = 0
        for serial in range(rounds):
            for kind in KINDS:
                start = time.perf_counter()
                name = _event(kind, mdir, outside, serial)
                stamp, _record = watch.next_for(name, VERDICT_TIMEOUT)
                if stamp is None:
                    missed.append(kind)
                else:
                    latencies[kind].append(stamp - start)
                time.sleep(0.15)          # > debounce: the next change is a new burst
                extra += watch.drain()
        result = {"latencies": latencies, "missed": missed, "extra": extra}
        if idle:
            pid = watch.proc.pid
            before = cpu_seconds(pid)
            time.sleep(idle)
            used = cpu_seconds(pid) - before
            status = _proc_status(pid)
            result.update(idle_cpu=used, idle=idle, rss=status.get("VmRSS"), hwm=status.get("VmHWM"),
                          threads=status.get("Threads"))
        return result
    finally:
        watch.stop()


def _kb_to_mb(text: str) -> float:
    return int(text.split()[0]) / 1024.0


def run(rounds: int = 10, idle: float = 60.0) -> str:
    load_before = load_average()
    work = tempfile.mkdtemp(prefix="cpctl-bench-watch-")
    try:
        mdir = os.path.join(work, "manifests")
        outside = os.path.join(work, "parked")
        os.mkdir(mdir)
        os.mkdir(outside)
        for name in CONTROL_PLANE:
            _write(os.path.join(mdir, name + ".yaml"), MANIFEST % (name, name, name))
        env = dict(os.environ, CPCTL_MANIFESTS_DIR=mdir, CPCTL_STATE_DIR=os.path.join(work, "state"),
                   CPCTL_NODE_NAME="bench", KUBECONFIG=os.path.join(work, "no-kubeconfig"))
        default = measure(env, mdir, outside, rounds, 50, idle)
        nodebounce = measure(env, mdir, outside, rounds, 0, 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for label, result in (("--debounce 50 (default)", default), ("--debounce 0", nodebounce)):
        every = [x for values in result["latencies"].values() for x in values]
        rows.append([label, "all %d" % len(every), "%.1f ms" % (median(every) * 1000),
                     "%.1f ms" % (percentile(every, 99) * 1000), "%.1f ms" % (max(every) * 1000)])
        for kind in KINDS:
            values = result["latencies"][kind]
            if values:
                rows.append(["", "%s (%d)" % (kind, len(values)), "%.1f ms" % (median(values) * 1000),
                             "%.1f ms" % (percentile(values, 99) * 1000), "%.1f ms" % (max(values) * 1000)])
    every = [x for values in default["latencies"].values() for x in values]
    p99 = percentile(every, 99)
    cpu_pct = default["idle_cpu"] / default["idle"] * 100
    rss, hwm = _kb_to_mb(default["rss"]), _kb_to_mb(default["hwm"])
    missed = default["missed"] + nodebounce["missed"]
    body = ("Machine: %s. Load average before: %s, after: %s. %d rounds of %d kinds of change per pass "
            "(%d events), one change at a time, 150 ms apart; `--probe none` (verdict lines only).\n\n%s\n\n"
            "Idle for %.0f s after the events (default debounce): CPU %.3f s = %.3f%% of one core; "
            "VmRSS %.1f MB, peak VmHWM %.1f MB, %s threads.\n\n"
            "Targets: p99 latency ≤ 100 ms — %.1f ms: %s; idle CPU ≈ 0 — %s; RSS ≤ 40 MB — %s.\n\n"
            "Notes: latency runs from just before the system call to the JSON line read from the pipe, "
            "so it includes inotify delivery, watchdog's dispatch, the debounce (50 ms by default, a "
            "designed delay so an editor save gives one line), reading/parsing the file and the write. "
            "`touch` is what touch(1) does (open for writing, set times, close: content unchanged, verdict "
            "`ignore`); a bare utime() (IN_ATTRIB only) gets no verdict by design. Missed events "
            "(no verdict within %.0f s): %s; "
            "extra lines beyond the one awaited: %d and %d.\n"
            % (machine_info(), load_before, load_average(), rounds, len(KINDS), rounds * len(KINDS),
               table(["pass", "events", "p50", "p99", "max"], rows), default["idle"], default["idle_cpu"],
               cpu_pct, rss, hwm, default["threads"], p99 * 1000, "met" if p99 <= 0.1 else "MISSED",
               "met" if cpu_pct < 0.1 else "MISSED", "met" if hwm <= 40 else "MISSED (peak)" if rss <= 40
               else "MISSED", VERDICT_TIMEOUT, ", ".join(missed) or "none", default["extra"],
               nodebounce["extra"]))
    write_section("3. Watch", body)
    return body
