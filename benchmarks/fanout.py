"""Fan-out: one read-only look at the manifests dir of 1, 5 and 20 masters over real SSH.

Needs root (it starts 20 sshd, one per loopback address 127.0.0.1 .. 127.0.0.20, own host keys,
key-only root login; see benchmarks/sshd.py). Every tool gets the same hosts, the same client
key, the same ssh_config and known_hosts (strict host key checking), runs in a fresh process
per run (as a user would run it) and does the same job on every host:

* ``cpctl -i inv.yaml --probe none status`` - connect, start the stdlib agent (``python3 -c``),
  read the manifests and state dirs, parse the manifests. ``--probe none``: no mirror pod
  checks, so only the SSH/agent path is measured;
* Ansible ad-hoc ``ansible all -m command -a "ls {{ manifests_dir }}"`` with the same inventory:
  *stock* (forks 5, no pipelining, default ControlPersist=60s, interpreter discovery) and
  *tuned* (forks 20, pipelining, ControlPersist=300s, interpreter given). ControlPersist makes
  the next run reuse live master connections: *cold* runs get a fresh control dir (masters
  closed after the run), *warm* runs reuse masters left by a previous run;
* parallel-ssh (``ParallelSSHClient.run_command``), Fabric (``ThreadingGroup.run``), and plain
  OpenSSH, sequential (``for h; do ssh h ...; done``) and parallel (``ssh h ... &`` + ``wait``),
  each running ``ls`` of that host's manifests dir.

For the cold runs it also counts CPU: the servers' (the sshd listeners' own and reaped
children's) and the client's; with both on this machine's cores, that bounds the wall time of
the 20-host run from below, whatever the client does.
"""

from __future__ import annotations

import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Optional, Tuple

from benchmarks.harness import load_average, machine_info, median, table, write_section
from benchmarks.sshd import Fleet, FleetError, require, start_fleet

COUNTS = (1, 5, 20)
PERSISTED = "cpctl status --persist 60s"
PNG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fanout.png")

PSSH = """import sys
from pssh.clients import ParallelSSHClient
port, key, cmd, hosts = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
client = ParallelSSHClient(hosts, user="root", port=port, pkey=key, pool_size=len(hosts), allow_agent=False,
                           identity_auth=False, num_retries=1, timeout=30)
output = client.run_command(cmd)
client.join(output)
for host_out in output:
    sys.stdout.write("".join(line + "\\n" for line in host_out.stdout))
    if host_out.exit_code != 0:
        sys.exit("%s: exit %s" % (host_out.host, host_out.exit_code))
"""

FABRIC = """import sys
import paramiko
from fabric import Config, ThreadingGroup
ssh_config, known_hosts, cmd, hosts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
config = Config(runtime_ssh_path=ssh_config,
                overrides={"connect_kwargs": {"allow_agent": False, "look_for_keys": False}})
group = ThreadingGroup(*hosts, config=config)
for conn in group:
    conn.client.load_host_keys(known_hosts)          # strict, like the others
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
results = group.run(cmd, hide=True)
for conn, result in results.items():
    sys.stdout.write(result.stdout)
group.close()
"""

SSH_SEQ = 'for h in $HOSTS; do ssh -F "$CFG" "$h" "$CMD" || exit 1; done'
SSH_PAR = 'for h in $HOSTS; do ssh -F "$CFG" "$h" "$CMD" & done; wait'


def write_inventory(fleet: Fleet, count: int, path: str) -> None:
    """Ansible-form inventory that cpctl reads too (ansible_* keys, plus cpctl's per-host dirs)."""
    lines = ["all:", "  hosts:"]
    for alias, address in zip(fleet.aliases(count), fleet.addresses):
        lines.append("    %s: {ansible_host: %s, ansible_port: %d, ansible_user: root, node_name: %s, "
                     "manifests_dir: %s, state_dir: %s}" % (alias, address, fleet.port, alias,
                                                            fleet.manifests_dir(address), fleet.state_dir(address)))
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")


class Tool:
    """One way of doing the job: ``argv``/``env`` per run; ``before``/``after`` are not timed."""

    def __init__(self, name: str, argv, env, state: str = "cold", before=None, after=None) -> None:
        self.name, self.argv, self.env, self.state = name, argv, env, state
        self.before, self.after = before, after

    @property
    def cpu_countable(self) -> bool:
        """Whether the CPU of one run can be measured: every connection it opened ends with it
        (a keeper's or a warm ControlPersist master's outlives the run, and is not its child)."""
        return self.state == "cold" and self.name != PERSISTED


def _bin(name: str) -> str:
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else (shutil.which(name) or name)


def _close_masters(control_dir: str) -> None:
    """Ask every ControlPersist master in ``control_dir`` to exit (ssh -O exit), then forget the dir."""
    for sock in glob.glob(os.path.join(control_dir, "*")):
        subprocess.run(["ssh", "-o", "ControlPath=%s" % sock, "-O", "exit", "x"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10, check=False)
    shutil.rmtree(control_dir, ignore_errors=True)


def _stop_keeper(env: dict) -> None:
    """End the cpctl keeper (``cpctl keeper stop``): the next --persist run starts a new one."""
    subprocess.run([sys.executable, "-m", "cpctl", "keeper", "stop"], env=env, capture_output=True, timeout=30,
                   check=True)


def _keeper_ready(env: dict, count: int, timeout: float = 20.0) -> None:
    """Wait (untimed) until the keeper has an agent ready for each of ``count`` hosts, as it has
    between two commands typed by hand."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = subprocess.run([sys.executable, "-m", "cpctl", "-o", "json", "keeper", "status"], env=env,
                              capture_output=True, timeout=30, check=True)
        conns = json.loads(proc.stdout).get("connections", [])
        if sum(1 for c in conns if c["agent_ready"]) >= count:
            return
        time.sleep(0.05)
    raise RuntimeError("the keeper did not get %d agents ready within %gs" % (count, timeout))


def tools(fleet: Fleet, count: int, work: str) -> list:
    py = sys.executable
    inventory = os.path.join(work, "inventory-%d.yaml" % count)
    write_inventory(fleet, count, inventory)
    aliases = fleet.aliases(count)
    addresses = fleet.addresses[:count]
    cmd = fleet.ls_command()
    base_env = dict(os.environ, LC_ALL="C.UTF-8")
    cpctl = [py, "-m", "cpctl", "-i", inventory, "--ssh-config", fleet.ssh_config, "--known-hosts",
             fleet.known_hosts, "--forks", "20", "--probe", "none", "-o", "json"]
    keeper_env = dict(base_env, CPCTL_KEEPER_DIR=os.path.join(work, "keeper"))
    persist = cpctl + ["--persist", "60s", "status"]
    # cold --persist starts a new keeper; the warm run then finds its connections and agents
    out = [Tool(PERSISTED, persist, keeper_env, "cold", before=lambda: _stop_keeper(keeper_env)),
           Tool(PERSISTED, persist, keeper_env, "warm", before=lambda: _keeper_ready(keeper_env, count)),
           Tool("cpctl status", cpctl + ["status"], base_env)]

    ansible_cfg = os.path.join(work, "ansible.cfg")
    if not os.path.exists(ansible_cfg):
        with open(ansible_cfg, "w") as handle:
            handle.write("[defaults]\n")
    ansible = [_bin("ansible"), "all", "-i", inventory, "-m", "command", "-a", "ls {{ manifests_dir }}"]
    common = dict(base_env, ANSIBLE_CONFIG=ansible_cfg, ANSIBLE_SSH_COMMON_ARGS="-F %s" % fleet.ssh_config,
                  ANSIBLE_LOCAL_TEMP=os.path.join(work, "ansible-local"), ANSIBLE_NOCOLOR="1",
                  ANSIBLE_HOST_KEY_CHECKING="True")
    # ControlPersist outlives a whole round (all tools, all host counts), so warm stays warm
    tuned = dict(common, ANSIBLE_FORKS="20", ANSIBLE_PIPELINING="True",
                 ANSIBLE_SSH_ARGS="-C -o ControlMaster=auto -o ControlPersist=300s",
                 ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3")
    cold_dir = os.path.join(work, "cp-cold")
    warm_dir = os.path.join(work, "cp-warm-%d" % count)
    stock_env = dict(common, ANSIBLE_SSH_CONTROL_PATH_DIR=cold_dir)
    tuned_cold = dict(tuned, ANSIBLE_SSH_CONTROL_PATH_DIR=cold_dir)
    tuned_warm = dict(tuned, ANSIBLE_SSH_CONTROL_PATH_DIR=warm_dir)
    out += [
        Tool("ansible stock", ansible, stock_env, "cold", after=lambda: _close_masters(cold_dir)),
        Tool("ansible tuned", ansible, tuned_cold, "cold", after=lambda: _close_masters(cold_dir)),
        Tool("ansible tuned", ansible, tuned_warm, "warm"),
    ]
    out.append(Tool("parallel-ssh", [py, "-c", PSSH, str(fleet.port), fleet.client_key, cmd] + addresses,
                    base_env))
    out.append(Tool("fabric ThreadingGroup", [py, "-c", FABRIC, fleet.ssh_config, fleet.known_hosts, cmd] + aliases,
                    base_env))
    ssh_env = dict(base_env, HOSTS=" ".join(aliases), CFG=fleet.ssh_config, CMD=cmd)
    out.append(Tool("ssh loop (sequential)", ["bash", "-c", SSH_SEQ], ssh_env))
    out.append(Tool("ssh loop (parallel &)", ["bash", "-c", SSH_PAR], ssh_env))
    return out


def _once(tool: Tool, count: int, check: bool, fleet: Optional[Fleet] = None) -> Tuple[float, Optional[tuple]]:
    """One run: its wall time and, with ``fleet`` and where countable, the CPU seconds used by its
    servers and by the client (the command and every child it waited for)."""
    if tool.before:
        tool.before()
    counted = fleet is not None and tool.cpu_countable
    if counted:
        held = fleet.connections()
        cpu_before = fleet.server_cpu(held)
    client_before = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(tool.argv, env=tool.env, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    elapsed = time.perf_counter() - start
    client_cpu = _children_cpu() - client_before
    if tool.after:
        tool.after()
    cpu = (fleet.server_cpu(held) - cpu_before, client_cpu) if counted else None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-600:].decode(errors="replace")
        raise RuntimeError("%s (%d hosts) failed (%d): %s" % (tool.name, count, proc.returncode, tail))
    if check:
        seen = proc.stdout.count(b"kube-scheduler.yaml")
        if seen < count:
            raise RuntimeError("%s (%d hosts): listed kube-scheduler.yaml %d times: %s" % (
                tool.name, count, seen, proc.stdout[-600:].decode(errors="replace")))
    return elapsed, cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def available(tool: Tool) -> bool:
    if tool.name.startswith("ansible"):
        return os.path.exists(tool.argv[0]) or bool(shutil.which(tool.argv[0]))
    if tool.name.startswith(("parallel-ssh", "fabric")):
        module = "pssh" if tool.name.startswith("parallel") else "fabric"
        return subprocess.run([sys.executable, "-c", "import %s" % module], capture_output=True).returncode == 0
    return True


def measure(fleet: Fleet, work: str, runs: int) -> tuple:
    """Every round runs every tool at every host count: a machine whose speed drifts (a VM's
    steal time does) then shifts the 1-host and 20-host cells alike, not the ratio between them."""
    results: dict = {}
    cpu_of: dict = {}
    skipped: list = []
    chosen: dict = {}
    for count in COUNTS:
        chosen[count] = []
        for tool in tools(fleet, count, work):
            if available(tool):
                chosen[count].append(tool)
            elif tool.name not in skipped:
                skipped.append(tool.name)
        for tool in chosen[count]:                # warm-up and output check; leaves warm masters
            _once(tool, count, check=True)
    for _ in range(runs):
        for count in COUNTS:
            for tool in chosen[count]:
                elapsed, cpu = _once(tool, count, check=False, fleet=fleet)
                results.setdefault((tool.name, tool.state), {}).setdefault(count, []).append(elapsed)
                if cpu is not None:
                    cpu_of.setdefault(tool.name, {}).setdefault(count, []).append(cpu)
    for count in COUNTS:
        for tool in chosen[count]:
            if tool.state == "warm" and tool.name.startswith("ansible"):
                _close_masters(tool.env["ANSIBLE_SSH_CONTROL_PATH_DIR"])
            elif tool.state == "warm":
                _stop_keeper(tool.env)
    return results, cpu_of, skipped


def _floor(argv: list, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return median(samples)


def run(runs: int = 7) -> str:
    try:
        require()
    except FleetError as exc:
        raise SystemExit("fanout benchmark: %s" % exc) from None
    load_before = load_average()
    work = tempfile.mkdtemp(prefix="cpctl-bench-fanout-")
    fleet = None
    try:
        fleet = start_fleet(os.path.join(work, "fleet"), max(COUNTS))
        results, cpu, skipped = measure(fleet, work, runs)
        floors = {"python3 -c pass": _floor([sys.executable, "-c", "pass"], 7),
                  "python3 -c 'import paramiko'": _floor([sys.executable, "-c", "import paramiko"], 7)}
    finally:
        if fleet is not None:
            fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    load_after = load_average()
    medians = {key: {n: median(v) for n, v in per.items()} for key, per in results.items()}
    cp = medians[("cpctl status", "cold")]
    rows = []
    for (name, state), per in medians.items():
        label = "%s (%s)" % (name, state)
        cells = []
        for n in COUNTS:
            cells.append("%.2f s" % per[n] if n in per else "—")
        ratios = ["%.1f×" % (per[n] / cp[n]) if n in per else "—" for n in COUNTS]
        rows.append([label] + cells + ["%.2f×" % (per[COUNTS[-1]] / per[COUNTS[0]])] + ratios)
    headers = ["tool"] + ["%d host%s" % (n, "" if n == 1 else "s") for n in COUNTS] + [
        "%d / 1" % COUNTS[-1]] + ["÷ cpctl @%d" % n for n in COUNTS]
    verdicts = []
    for key in (("cpctl status", "cold"), (PERSISTED, "warm")):
        if key in medians:
            scaling = medians[key][COUNTS[-1]] / medians[key][COUNTS[0]]
            verdicts.append("%s (%s): %d hosts / 1 host = %.2f× (target ≤ 1.5×: %s)" % (
                key + (COUNTS[-1], scaling, "met" if scaling <= 1.5 else "MISSED")))
    for ansible, ours in ((("ansible tuned", "cold"), ("cpctl status", "cold")),
                          (("ansible tuned", "warm"), (PERSISTED, "warm"))):
        if ansible in medians and ours in medians:
            at20 = medians[ansible][COUNTS[-1]] / medians[ours][COUNTS[-1]]
            at1 = medians[ansible][COUNTS[0]] / medians[ours][COUNTS[0]]
            verdicts.append("tuned Ansible (%s) / %s (%s): %.1f× at %d hosts (target ≥ 6×: %s), %.1f× at 1 host "
                            "(target ≥ 3×: %s)" % (ansible[1], ours[0], ours[1], at20, COUNTS[-1],
                                                   "met" if at20 >= 6 else "MISSED", at1,
                                                   "met" if at1 >= 3 else "MISSED"))
    cpu_note = _cpu_note(cpu, medians)
    plot_note = _plot(medians)
    body = ("Machine: %s. Load average before: %s, after: %s. Median of %d runs per cell (after one "
            "warm-up run that also checks each host's listing); every round runs every tool at every host "
            "count, so a drift in the machine's speed moves all cells of a round alike.\n\n%s\n\n"
            "%s.\n\nFixed costs in every cold cpctl run: Python start-up %.0f ms, `import paramiko` %.0f ms "
            "(`python3 -c 'import paramiko'`; paid once per run, whatever the host count; a run through the "
            "keeper does not import paramiko at all).\n\n%s\n\n"
            "Notes:\n\n"
            "* Hosts: %d sshd (OpenSSH, one per loopback address, own ed25519 host key, key-only root "
            "login) on this same 2-core machine, so the servers' CPU (key exchange, session set-up, the "
            "remote command) competes with the client's: real fan-out over a network is latency-bound "
            "and parallelises better than here.\n"
            "* cpctl runs `--probe none status`: SSH connect + host key check + the stdlib agent "
            "(`python3 -S -c`, ~17 ms of remote CPU per host to start) reading both dirs in one round "
            "trip, then cpctl parses the manifests; the others run `ls` only. Everything is cold unless "
            "marked warm: a fresh process, new SSH connections.\n"
            "* `cpctl --persist 60s`: *cold* starts a new keeper (`cpctl keeper stop` before the run), which "
            "connects; *warm* runs next (once the keeper has its agents back, untimed) and finds that "
            "keeper, its connections and, on each master, the agent the cold run left idle (reset, not "
            "restarted), so a warm run costs Python start-up, one Unix socket per host and one round "
            "trip to each agent.\n"
            "* Ansible uses ControlPersist (60 s by default; 300 s when tuned, to outlive a round): its "
            "*cold* runs start with an empty control dir (and close the masters afterwards), its *warm* "
            "runs reuse master connections opened by the "
            "previous run (no TCP/SSH handshake, only new sessions on the old connections). Tuned = "
            "forks 20, pipelining, interpreter set (no discovery); stock = forks 5, no pipelining, "
            "interpreter discovery.\n"
            "* parallel-ssh (ssh2-python) does no host key verification; Fabric was given the same "
            "known_hosts with RejectPolicy; the ssh loops use the shared ssh_config (BatchMode, strict).\n"
            "* parallel-ssh and Fabric run as `python3 -c <script>` in a fresh process, so their import "
            "time counts like cpctl's.%s\n\n%s\n"
            % (machine_info(), load_before, load_after, runs, table(headers, rows), "; ".join(verdicts),
               floors["python3 -c pass"] * 1000, floors["python3 -c 'import paramiko'"] * 1000, cpu_note,
               max(COUNTS),
               ("\n* Not installed, skipped: %s (use `bash benchmarks/run.sh`)." % ", ".join(skipped))
               if skipped else "", plot_note))
    write_section("5. Fan-out over SSH", body)
    return body


def _cpu_note(cpu: dict, medians: dict) -> str:
    """The CPU of the cold runs: their servers' (all sshd and what they ran, summed) and the
    client's, and what that implies for the cold scaling target on this machine, where the
    servers share the client's cores."""
    if not cpu:
        return ""
    cores, top = len(os.sched_getaffinity(0)), COUNTS[-1]

    def cell(per: dict, n: int, side: int) -> str:
        return "%.0f ms" % (1000 * median([c[side] for c in per[n]])) if n in per else "—"

    rows = [[name] + [cell(per, n, 0) for n in COUNTS] + [cell(per, COUNTS[0], 1), cell(per, top, 1)]
            for name, per in cpu.items()]
    headers = (["tool (cold)"] + ["servers, %d host%s" % (n, "" if n == 1 else "s") for n in COUNTS]
               + ["client, 1 host", "client, %d hosts" % top])
    text = ("CPU per run, median per cell. *Servers*: every sshd and what it ran (key exchange, auth, "
            "session, the remote command), summed over the %d servers, from the sshd listeners' own and "
            "reaped children's CPU (`/proc/PID/stat`). *Client*: the command and the children it waited "
            "for (Ansible's ControlPersist masters detach, so theirs is left out):\n\n%s"
            % (top, table(headers, rows)))
    ours, wall = cpu.get("cpctl status", {}), medians.get(("cpctl status", "cold"), {})
    if top in ours and COUNTS[0] in ours and COUNTS[0] in wall:
        servers = median([c[0] for c in ours[top]])
        client, client_one = (median([c[1] for c in ours[n]]) for n in (top, COUNTS[0]))
        budget = 1.5 * wall[COUNTS[0]]
        spare = (budget * cores - servers - client_one) / (top - 1)
        text += ("\n\nCold scaling on this machine: at %d hosts the servers used %.2f s of CPU and cpctl "
                 "%.2f s, so the run needs at least %.2f s on %d cores; 1.5 × the 1-host run is %.2f s. A "
                 "client costing no more than its start-up (%.2f s, the 1-host run's) would still need "
                 "%.2f s: %s" % (
                     top, servers, client, (servers + client) / cores, cores, budget, client_one,
                     (servers + client_one) / cores,
                     "the cold target is out of reach here, whatever the client does (over a network "
                     "each master does its own handshake)." if spare <= 0 else
                     "reaching the target needs, at the very least (both cores busy all along), a client "
                     "spending at most %.1f ms of CPU per extra host (cpctl: %.1f ms)." % (
                         1000 * spare, 1000 * (client - client_one) / (top - 1))))
    return text


def _plot(medians: dict) -> str:
    try:
        from benchmarks.plot import plot_fanout
    except ImportError:
        return "Plot skipped: matplotlib is not installed (`bash benchmarks/run.sh` installs it)."
    series = {"%s (%s)" % key: per for key, per in medians.items()}
    plot_fanout(series, COUNTS, PNG)
    return "![fan-out time vs hosts](fanout.png)"
