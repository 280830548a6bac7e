"""One change behind a 50 ms link (issue 47): what a change on a remote master costs beyond the same
change made on the master, and how many SSH round trips the commands make.

A three-master lab (the lab's simulated kubelet, default lags; three, so that a change of the API server
keeps a quorum of them serving) whose first master is reached over a real OpenSSH sshd on
127.0.0.1 (benchmarks/sshd.py, needs root), through the delaying TCP proxy of the latency benchmark
(``benchmarks.fanout.start_proxies``: every chunk 25 ms each way, a 50 ms round trip). Measured:

* ``cpctl -H m flags kube-scheduler --set v=N`` behind the proxy, against the same change made
  locally on the lab master (``cpctl flags kube-scheduler --set v=N`` with the lab's environment), in
  interleaved pairs (remote, local, remote, local...): the median of each and of the pairs'
  differences; remote once through a warm connection keeper (what an operator types twice in a
  row) and once with ``--persist 0`` (the run opens and closes its own connection);
* the agent requests (round trips) each flow makes, counted by the process itself
  (``CPCTL_TRACE_ROUNDTRIPS``, ``cpctl.host.agent.RoundTrips``): ``status``, the ``flags`` change, and
  the review flow ``-H m flags kube-apiserver --set ... --keep-in kubeadm-config --confirm-within 5m``
  (then confirmed), a connection's own trips (handshake, agent start) not included;
* the bytes a new connection ships to start the agent (``agent_payload``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from benchmarks.harness import load_average, machine_info, median, table, write_section

SECTION = "15. One change behind a 50 ms link"
PAIRS = 3
TRACE_ENV = "CPCTL_TRACE_ROUNDTRIPS"


class Setup:
    """The lab master, the sshd and its delaying proxy, and how cpctl reaches the master each way."""

    def __init__(self, work: str) -> None:
        from benchmarks.fanout import start_proxies
        from benchmarks.sshd import start_fleet
        from cpctl_lab.control import start_lab
        self.work = work
        self.lab = start_lab(os.path.join(work, "lab"), masters=3, timeout=60)
        self.fleet: Any = None
        self.proxies: Any = None
        try:
            self.fleet = start_fleet(os.path.join(work, "fleet"), 1)
            self.proxies, self.config, self.known = start_proxies(self.fleet, work)
        except BaseException:
            self.stop()
            raise
        self.local_env = dict(os.environ, LC_ALL="C.UTF-8", **self.lab.env)
        self.local_env.pop("CPCTL_PROBE", None)
        hosts = {}
        for master in (1, 2, 3):            # all three: a change of the API server counts them all (the census)
            env = self.lab.env_for(master)
            hosts["m%d" % master] = {
                "ansible_host": "h1", "manifests_dir": env["CPCTL_MANIFESTS_DIR"], "state_dir": env["CPCTL_STATE_DIR"],
                "node_name": env["CPCTL_NODE_NAME"], "kubeconfig": env["KUBECONFIG"], "crictl": env["CPCTL_CRICTL"],
                "node_root": env["CPCTL_NODE_ROOT"]}
        self.inventory = os.path.join(work, "inventory.yaml")
        with open(self.inventory, "w") as handle:
            json.dump({"all": {"hosts": hosts}}, handle)
        self.remote_env = {k: v for k, v in os.environ.items()
                           if not k.startswith("CPCTL_") and k not in ("KUBECONFIG", "SSH_AUTH_SOCK")}
        self.remote_env.update(LC_ALL="C.UTF-8", CPCTL_KEEPER_DIR=os.path.join(work, "keeper"))
        for name in ("CPCTL_CONFIRM_BOOT_DIR",):
            if name in os.environ:
                self.remote_env[name] = os.environ[name]

    def remote(self, *args: str, delayed: bool = True) -> List[str]:
        """``cpctl -i INV -H m1 ARGS`` through the proxy (or straight to sshd)."""
        config, known = (self.config, self.known) if delayed else (self.fleet.ssh_config, self.fleet.known_hosts)
        return [sys.executable, "-m", "cpctl", "-i", self.inventory, "-H", "m1", "--ssh-config", config,
                "--known-hosts", known] + list(args)

    def local(self, *args: str) -> List[str]:
        return [sys.executable, "-m", "cpctl"] + list(args)

    def stop(self) -> None:
        subprocess.run([sys.executable, "-m", "cpctl", "keeper", "stop"], env=getattr(self, "remote_env", os.environ),
                       capture_output=True, timeout=30, check=False)
        if self.proxies is not None:
            self.proxies.terminate()
            self.proxies.join(10)
        if self.fleet is not None:
            self.fleet.stop()
        self.lab.stop()


def run_cpctl(argv: List[str], env: Dict[str, str], trace: Optional[str] = None) -> Tuple[float, Dict[str, Any]]:
    """One run: (seconds, its round-trip report, empty when it made no agent request)."""
    if trace:
        env = dict(env, **{TRACE_ENV: trace})
        if os.path.exists(trace):
            os.unlink(trace)
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv[2:]), proc.returncode,
                                                    (proc.stdout[-800:] + proc.stderr[-800:]).decode(errors="replace")))
    report: Dict[str, Any] = {}
    if trace and os.path.exists(trace):
        with open(trace) as handle:
            report = json.load(handle)
    return elapsed, report


def count_flows(setup: Setup, trace: str, delayed: bool = True,
                only: Optional[List[str]] = None) -> Dict[str, Dict[str, Any]]:
    """The round-trip reports of ``status``, a ``flags`` change and the review flow (+ its confirm)."""
    env = dict(setup.remote_env, CPCTL_PERSIST="0")
    flows = {
        "status": setup.remote("status", delayed=delayed),
        "flags kube-scheduler --set v=N": setup.remote("flags", "kube-scheduler", "--set", "v=7", delayed=delayed),
        "review flow (flags kube-apiserver --keep-in kubeadm-config --confirm-within 5m)": setup.remote(
            "flags", "kube-apiserver", "--set", "audit-log-maxage=11", "--keep-in", "kubeadm-config",
            "--confirm-within", "5m", delayed=delayed),
        "confirm kube-apiserver": setup.remote("confirm", "kube-apiserver", delayed=delayed),
    }
    return {name: run_cpctl(argv, env, trace)[1] for name, argv in flows.items()
            if not only or name.split()[0] in only}


def pairs(setup: Setup, count: int) -> Dict[str, List[float]]:
    """Interleaved: remote (keeper warm), remote (--persist 0), local; ``count`` rounds."""
    times: Dict[str, List[float]] = {"remote": [], "remote0": [], "local": []}
    keeper_env = dict(setup.remote_env)
    keeper_env.pop("CPCTL_PERSIST", None)
    level = 10
    run_cpctl(setup.remote("flags", "kube-scheduler", "--set", "v=%d" % level), keeper_env)   # warms the keeper
    for _ in range(count):
        level += 1
        times["remote"].append(run_cpctl(setup.remote("flags", "kube-scheduler", "--set", "v=%d" % level),
                                         keeper_env)[0])
        level += 1
        times["local"].append(run_cpctl(setup.local("flags", "kube-scheduler", "--set", "v=%d" % level),
                                        setup.local_env)[0])
        level += 1
        times["remote0"].append(run_cpctl(setup.remote("--persist", "0", "flags", "kube-scheduler", "--set",
                                                       "v=%d" % level), keeper_env)[0])
    return times


def _change_bytes() -> int:
    """What a change's connection carries of the agent: the start, and its modules as they travel (base64
    in the JSON of its first ``transaction`` request)."""
    import json

    from cpctl.agent import rpc
    from cpctl.host.agent import agent_load, agent_payload
    return len(agent_payload()) + len(json.dumps(rpc.encode(agent_load("transaction"))))


def _ops(report: Dict[str, Any]) -> str:
    ops = sorted((report.get("ops") or {}).items(), key=lambda kv: -kv[1])
    return ", ".join("%s %d" % kv for kv in ops[:6])


def run(count: int = 0) -> str:
    """Section 15; ``count`` pairs (default 3, or $CPCTL_BENCH_RUNS)."""
    from benchmarks.fanout import ONE_WAY
    from benchmarks.sshd import begin
    from cpctl.host.agent import agent_payload
    count = count or int(os.environ.get("CPCTL_BENCH_RUNS", str(PAIRS)))
    load_before, work = begin("changelatency", "change")
    setup: Optional[Setup] = None
    try:
        setup = Setup(work)
        counts = count_flows(setup, os.path.join(work, "trace.json"))
        times = pairs(setup, count)
    finally:
        if setup is not None:
            setup.stop()
        shutil.rmtree(work, ignore_errors=True)
    load_after = load_average()
    diffs = [r - loc for r, loc in zip(times["remote"], times["local"])]
    diffs0 = [r - loc for r, loc in zip(times["remote0"], times["local"])]
    rows = [["remote, keeper warm", "%.2f s" % median(times["remote"]), "%.2f s" % median(times["local"]),
             "%+.2f s" % median(diffs), "%.2f×" % (median(times["remote"]) / median(times["local"]))],
            ["remote, --persist 0", "%.2f s" % median(times["remote0"]), "%.2f s" % median(times["local"]),
             "%+.2f s" % median(diffs0), "%.2f×" % (median(times["remote0"]) / median(times["local"]))]]
    trips = [[name, str(report.get("total", 0)), _ops(report)] for name, report in counts.items()]
    verdict = median(diffs)
    body = "\n".join([
        "`python -m benchmarks changelatency`: the first master of a three-master lab (default lags) over a "
        "real OpenSSH sshd on 127.0.0.1, through a proxy delaying every chunk %d ms each way; "
        "`flags kube-scheduler --set v=N`, remote (`-i inv -H m1`) and local (the lab's environment) in "
        "interleaved runs, %d each, medians; "
        "the difference is the median of the pairs' differences." % (ONE_WAY * 1000, count),
        "",
        table(["how", "remote", "local", "remote − local", "remote ÷ local"], rows),
        "",
        "Agent round trips per run behind the proxy (`CPCTL_TRACE_ROUNDTRIPS`; a `batch` is one; the "
        "connection's own handshake and agent start not counted), `--persist 0`:",
        "",
        table(["flow", "round trips", "by op (most first)"], trips),
        "",
        "Bytes shipped on a new connection to start the agent (zlib-compressed source of what a view "
        "reads with): %d (%.0f KB); a change adds its modules to its first transaction request: %d (%.0f KB) "
        "in all." % (len(agent_payload()), len(agent_payload()) / 1024.0, _change_bytes(), _change_bytes() / 1024.0),
        "",
        "Goal (issue 47): remote − local ≤ 1.0 s: %+.2f s, %s; status ≤ 2 round trips: %s; the review flow "
        "≤ 20: %s; ≤ 100 KB shipped: %s." % (
            verdict, "met" if verdict <= 1.0 else "MISSED",
            "met" if counts["status"].get("total", 99) <= 2 else "MISSED",
            "met" if list(counts.values())[2].get("total", 999) <= 20 else "MISSED (%d)"
            % list(counts.values())[2].get("total", 0),
            "met" if _change_bytes() <= 100 * 1024 else "MISSED"),
        "",
        "Load average before/after: %s / %s. %s" % (load_before, load_after, machine_info()),
    ])
    write_section(SECTION, body)
    return body


if __name__ == "__main__":
    print(run())
