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
import time
from typing import Any, Optional, Tuple

from benchmarks.harness import load_average, machine_info, median, table, write_section
from benchmarks.sshd import Fleet, begin, start_fleet

COUNTS = (1, 5, 20)
CPCTL = "cpctl status"                   # as an operator types it: the keeper by default (60 s)
DIRECT = "cpctl status --persist 0"      # no keeper: the run makes and closes its own connections
PNG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fanout.png")
LATENCY_PNG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fanout-latency.png")

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

# The floor of any paramiko fan-out, cpctl's included: one thread per host, each connecting
# (host key checked against known_hosts, RejectPolicy) and running one command, no other work.
# ``ls``: the others' job; ``agent``: cpctl's remote start (the stdlib agent read from stdin, as
# cpctl sends it) answering one ``listdir`` of the manifests dir, without any of cpctl's own code
# in the client. Side by side with cpctl and parallel-ssh, it tells what the SSH library and the
# remote Python cost on this machine from what cpctl adds.
PARAMIKO_FLOOR = """import json, os, sys, threading
import paramiko
mode, port, key_path, known, base, payload_path, agent_cmd = sys.argv[1:8]
hosts = sys.argv[8:]
key = paramiko.Ed25519Key.from_private_key_file(key_path)
keys = paramiko.HostKeys(known)
payload = open(payload_path, "rb").read() if mode == "agent" else b""
out, failed = {}, []

def one(host):
    try:
        client = paramiko.SSHClient()
        client._system_host_keys = keys
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(host, port=int(port), username="root", pkey=key, look_for_keys=False,
                       allow_agent=False)
        chan = client.get_transport().open_session()
        manifests = os.path.join(base, "hosts", host, "manifests")
        if mode == "ls":
            chan.exec_command("ls " + manifests)
        else:
            chan.exec_command(agent_cmd)
            chan.sendall(payload + json.dumps({"op": "listdir", "args": {"path": manifests}}).encode() + b"\\n")
            chan.shutdown_write()
        data = b""
        while True:
            chunk = chan.recv(65536)
            if not chunk:
                break
            data += chunk
        out[host] = data.decode()
        if chan.recv_exit_status() != 0:
            failed.append(host)
        client.close()
    except Exception as exc:
        failed.append("%s: %s" % (host, exc))

threads = [threading.Thread(target=one, args=(h,)) for h in hosts]
for t in threads:
    t.start()
for t in threads:
    t.join()
sys.stdout.write("".join(out[h] for h in hosts if h in out))
sys.exit("failed: %s" % failed if failed else 0)
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

    def __init__(self, name: str, argv, env, state: str = "cold", before=None, after=None,
                 keeper: bool = False) -> None:
        self.name, self.argv, self.env, self.state = name, argv, env, state
        self.before, self.after, self.keeper = before, after, keeper

    @property
    def cpu_countable(self) -> bool:
        """Whether the CPU of one run can be measured: every connection it opened ends with it
        (a keeper's or a warm ControlPersist master's outlives the run, and is not its child)."""
        return self.state == "cold" and not self.keeper


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
    """End the cpctl keeper (``cpctl keeper stop``): the next run starts a new one."""
    subprocess.run([sys.executable, "-m", "cpctl", "keeper", "stop"], env=env, capture_output=True, timeout=30,
                   check=True)


def _keeper_ready(env: dict, count: int, timeout: float = 30.0) -> None:
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
    base_env.pop("CPCTL_PERSIST", None)
    keeper_env = dict(base_env, CPCTL_KEEPER_DIR=os.path.join(work, "keeper"))
    # cold: the first command, which starts the keeper (none runs: stopped before); warm: the next
    # command within the idle time, no flag, finds its connections and agents
    out = [Tool(CPCTL, cpctl + ["status"], keeper_env, "cold", before=lambda: _stop_keeper(keeper_env), keeper=True),
           Tool(CPCTL, cpctl + ["status"], keeper_env, "warm", before=lambda: _keeper_ready(keeper_env, count),
                keeper=True),
           Tool(DIRECT, cpctl + ["--persist", "0", "status"], base_env)]

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
    payload, agent_cmd = _agent_start(work)
    for mode in ("ls", "agent"):
        out.append(Tool(PARAMIKO_FLOOR_NAMES[mode], [py, "-c", PARAMIKO_FLOOR, mode, str(fleet.port), fleet.client_key,
                                                     fleet.known_hosts, fleet.base, payload, agent_cmd] + addresses,
                        base_env))
    out.append(Tool("fabric ThreadingGroup", [py, "-c", FABRIC, fleet.ssh_config, fleet.known_hosts, cmd] + aliases,
                    base_env))
    ssh_env = dict(base_env, HOSTS=" ".join(aliases), CFG=fleet.ssh_config, CMD=cmd)
    out.append(Tool("ssh loop (sequential)", ["bash", "-c", SSH_SEQ], ssh_env))
    out.append(Tool("ssh loop (parallel &)", ["bash", "-c", SSH_PAR], ssh_env))
    return out


PARAMIKO_FLOOR_NAMES = {"ls": "paramiko, bare: ls", "agent": "paramiko, bare: cpctl's agent"}


def _agent_start(work: str) -> Tuple[str, str]:
    """The agent's stdin payload, in a file, and its start command, as cpctl sends them."""
    import shlex

    from cpctl.host.agent import agent_bootstrap, agent_payload
    path = os.path.join(work, "agent-payload")
    if not os.path.exists(path):
        with open(path, "wb") as handle:
            handle.write(agent_payload())
    return path, " ".join(shlex.quote(arg) for arg in agent_bootstrap("python3"))


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


def run(runs: int = 0) -> str:
    """Section 5; ``runs`` rounds (default 7, or $CPCTL_BENCH_RUNS)."""
    runs = runs or int(os.environ.get("CPCTL_BENCH_RUNS", "7"))
    load_before, work = begin("fanout", "fanout")
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
    cp = medians[(CPCTL, "cold")]
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
    top = COUNTS[-1]
    pssh = medians.get(("parallel-ssh", "cold"), {})
    for key in ((CPCTL, "cold"), (DIRECT, "cold")):
        if key in medians and top in pssh:
            ratio = medians[key][top] / pssh[top]
            verdicts.append("%s (%s) ÷ parallel-ssh at %d hosts = %.2f (goal ≤ 0.67, host keys checked by cpctl "
                            "only: %s)" % (key + (top, ratio, "met" if ratio <= 0.67 else "MISSED")))
    floor = medians.get((PARAMIKO_FLOOR_NAMES["agent"], "cold"), {})
    bare_ls = medians.get((PARAMIKO_FLOOR_NAMES["ls"], "cold"), {})
    if top in floor and top in pssh and top in bare_ls and (DIRECT, "cold") in medians:
        verdicts.append("at %d hosts, paramiko alone ÷ parallel-ssh = %.2f running `ls` and %.2f starting cpctl's "
                        "agent (no cpctl code in the client: the floor of cpctl's design on this machine); "
                        "%s (cold) ÷ that floor = %.2f" % (top, bare_ls[top] / pssh[top], floor[top] / pssh[top],
                                                           DIRECT, medians[(DIRECT, "cold")][top] / floor[top]))
    for key in ((CPCTL, "cold"), (CPCTL, "warm"), (DIRECT, "cold")):
        if key in medians:
            scaling = medians[key][top] / medians[key][COUNTS[0]]
            verdicts.append("%s (%s): %d hosts / 1 host = %.2f×" % (key + (top, scaling)))
    for ansible, ours in ((("ansible tuned", "cold"), (CPCTL, "cold")),
                          (("ansible tuned", "warm"), (CPCTL, "warm"))):
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
            "(`python3 -c 'import paramiko'`; paid once per run, whatever the host count, by the keeper the "
            "first command starts, or with `--persist 0` by the run itself; a warm run does not import "
            "paramiko at all).\n\n%s\n\n"
            "Notes:\n\n"
            "* Hosts: %d sshd (OpenSSH, one per loopback address, own ed25519 host key, key-only root "
            "login) on this same 2-core machine, so the servers' CPU (key exchange, session set-up, the "
            "remote command) competes with the client's: real fan-out over a network is latency-bound "
            "and parallelises better than here.\n"
            "* cpctl runs `--probe none status`: SSH connect + host key check + the stdlib agent "
            "(`python3 -S -c`, ~17 ms of remote CPU per host to start) reading both dirs in one round "
            "trip, then cpctl parses the manifests; the others run `ls` only. Everything is cold unless "
            "marked warm: a fresh process, new SSH connections.\n"
            "* `cpctl status` as typed, no flag (connections kept 60 s by default): *cold* is the first "
            "command, which starts the keeper (`cpctl keeper stop` before the run), the keeper connects; "
            "*warm* is the next command (once the keeper has its agents back, untimed), which finds that "
            "keeper, its connections and, on each master, the agent the cold run left idle (reset, not "
            "restarted), so a warm run costs Python start-up, one Unix socket per host and one round "
            "trip to each agent. `cpctl status --persist 0`: no keeper, the run connects by itself (its "
            "CPU can be counted: nothing outlives it).\n"
            "* Ansible uses ControlPersist (60 s by default; 300 s when tuned, to outlive a round): its "
            "*cold* runs start with an empty control dir (and close the masters afterwards), its *warm* "
            "runs reuse master connections opened by the "
            "previous run (no TCP/SSH handshake, only new sessions on the old connections). Tuned = "
            "forks 20, pipelining, interpreter set (no discovery); stock = forks 5, no pipelining, "
            "interpreter discovery.\n"
            "* *paramiko, bare*: a `python3 -c` script, one thread per host, each connecting with "
            "paramiko (known_hosts, RejectPolicy, the same key) and running one command, nothing else: "
            "`ls` (the others' job) or cpctl's agent, started as cpctl starts it (the same payload on "
            "stdin) and answering one `listdir`. What the SSH library and the remote Python cost here, "
            "whatever the client adds.\n"
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
    ours, wall = cpu.get(DIRECT, {}), medians.get((DIRECT, "cold"), {})
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


# --------------------------------------------------------------------------- where latency rules

LATENCY_COUNTS = (1, 50)            # CPCTL_BENCH_COUNTS=1,10,50 for more points (a round takes minutes)
ONE_WAY = 0.025                      # seconds each way: a 50 ms round trip
OLD_PLAYBOOK = """- hosts: all
  gather_facts: false
  tasks:
    - name: cpctl installed on the master, run by command (the old examples/ansible/cpctl-restart.yml way)
      ansible.builtin.command: >-
        {{ cpctl_bin }} --node-name {{ cpctl_node_name }} --manifests-dir {{ cpctl_manifests_dir }}
        --state-dir {{ cpctl_state_dir }} --probe none -o json status
      register: cpctl_status
      changed_when: false
      failed_when: cpctl_status.rc != 0 or 'kube-scheduler.yaml' not in cpctl_status.stdout
"""
COLLECTION_PLAYBOOK = """- hosts: all
  gather_facts: false
  tasks:
    - name: The same status through the cpctl.controlplane collection (cpctl on the controller)
      cpctl.controlplane.controlplane_info:
        drift: false
      register: info
      failed_when: info.failed or info.ansible_facts.cpctl.status.components | length != 4
"""


def _serve_proxies(routes: list, delay: float, ready: Any) -> None:
    """The delaying TCP proxies (one process, one asyncio loop): each ``(address, listen_port,
    upstream_port)`` accepts on ``address:listen_port`` and relays to ``address:upstream_port``,
    every chunk delivered ``delay`` s after it arrived, in order, in both directions; a new
    connection waits one round trip before its first byte flows (the TCP handshake's)."""
    import asyncio
    import signal
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))     # connections still open die with the process

    async def pipe(loop: Any, src: Any, dst: Any) -> None:
        queue: asyncio.Queue = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if dst.can_write_eof():
                        dst.write_eof()
                    return
                dst.write(data)
                await dst.drain()

        task = loop.create_task(deliver())
        try:
            while True:
                data = await src.read(1 << 16)
                queue.put_nowait((loop.time() + delay, data))
                if not data:
                    break
            await task
        except (ConnectionError, OSError):
            task.cancel()
            dst.close()                   # the other direction ends too

    live: set = set()                     # running connections: a pending task must stay referenced

    def handler(address: str, upstream: int) -> Any:
        async def handle(reader: Any, writer: Any) -> None:
            loop = asyncio.get_running_loop()
            me = asyncio.current_task()
            live.add(me)
            try:
                await asyncio.sleep(2 * delay)
                up_reader, up_writer = await asyncio.open_connection(address, upstream)
            except OSError:
                writer.close()
                live.discard(me)
                return
            try:
                await asyncio.gather(pipe(loop, reader, up_writer), pipe(loop, up_reader, writer))
            finally:
                for w in (writer, up_writer):
                    w.close()
                live.discard(me)
        return handle

    async def main() -> None:
        servers = [await asyncio.start_server(handler(address, upstream), address, port, backlog=256)
                   for address, port, upstream in routes]
        ready.set()
        await asyncio.gather(*(s.serve_forever() for s in servers))

    asyncio.run(main())


def start_proxies(fleet: Fleet, work: str) -> Tuple[Any, str, str]:
    """One delaying proxy per sshd (its own port, the same address), and an ssh_config and
    known_hosts that reach the masters through them; the proxy process."""
    import multiprocessing

    from benchmarks.sshd import _pick_port
    port = _pick_port(fleet.addresses)
    ready = multiprocessing.Event()
    proc = multiprocessing.Process(target=_serve_proxies, daemon=True,
                                   args=([(a, port, fleet.port) for a in fleet.addresses], ONE_WAY, ready))
    proc.start()
    if not ready.wait(30):
        proc.terminate()
        raise RuntimeError("the delaying proxies did not start")
    config = os.path.join(work, "ssh_config-latency")
    known = os.path.join(work, "known_hosts-latency")
    with open(fleet.ssh_config) as handle:
        text = handle.read().replace("Port %d\n" % fleet.port, "Port %d\n" % port)
    with open(config, "w") as handle:
        handle.write(text.replace(fleet.known_hosts, known))
    with open(fleet.known_hosts) as handle:
        lines = handle.read().replace("]:%d " % fleet.port, "]:%d " % port)
    with open(known, "w") as handle:
        handle.write(lines)
    return proc, config, known


def latency_tools(fleet: Fleet, count: int, work: str, config: str, known: str) -> list:
    """Every contender, doing cpctl's read-only status of ``count`` masters through the proxies."""
    py = sys.executable
    inventory = os.path.join(work, "latency-%d.yaml" % count)
    lines = ["all:", "  hosts:"]
    for alias, address in zip(fleet.aliases(count), fleet.addresses):
        lines.append("    %s: {node_name: %s, manifests_dir: %s, state_dir: %s}"
                     % (alias, alias, fleet.manifests_dir(address), fleet.state_dir(address)))
    with open(inventory, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    ini = os.path.join(work, "latency-%d.ini" % count)
    with open(ini, "w") as handle:
        handle.write("[all]\n" + "".join(
            "%s cpctl_node_name=%s cpctl_manifests_dir=%s cpctl_state_dir=%s\n"
            % (alias, alias, fleet.manifests_dir(address), fleet.state_dir(address))
            for alias, address in zip(fleet.aliases(count), fleet.addresses)))
        handle.write("[all:vars]\nansible_user=root\nansible_python_interpreter=/usr/bin/python3\n"
                     "cpctl_bin=%s -m cpctl\ncpctl_ssh_config=%s\ncpctl_known_hosts=%s\ncpctl_probe=none\n"
                     % (py, config, known))
    base_env = dict(os.environ, LC_ALL="C.UTF-8")
    cpctl = [py, "-m", "cpctl", "-i", inventory, "--ssh-config", config, "--known-hosts", known,
             "--forks", str(max(LATENCY_COUNTS)), "--probe", "none", "-o", "json"]
    base_env.pop("CPCTL_PERSIST", None)
    keeper_env = dict(base_env, CPCTL_KEEPER_DIR=os.path.join(work, "keeper-latency"))
    # as in section 5: the first command starts the keeper (cold), the next one, right after, is warm
    out = [Tool(CPCTL, cpctl + ["status"], keeper_env, "cold", before=lambda: _stop_keeper(keeper_env), keeper=True),
           Tool(CPCTL, cpctl + ["status"], keeper_env, "warm", before=lambda: _keeper_ready(keeper_env, count, 60),
                keeper=True),
           Tool(DIRECT, cpctl + ["--persist", "0", "status"], base_env)]
    if os.environ.get("CPCTL_BENCH_NO_ANSIBLE") or not available(Tool("ansible", [_bin("ansible")], base_env)):
        return out                                   # cpctl's rows only (minutes instead of ~15)

    ansible_cfg = os.path.join(work, "ansible.cfg")
    if not os.path.exists(ansible_cfg):
        with open(ansible_cfg, "w") as handle:
            handle.write("[defaults]\n")
    playbooks = {}
    for name, text in (("old", OLD_PLAYBOOK), ("collection", COLLECTION_PLAYBOOK)):
        playbooks[name] = os.path.join(work, "latency-%s.yml" % name)
        with open(playbooks[name], "w") as handle:
            handle.write(text)
    tuned = dict(base_env, ANSIBLE_CONFIG=ansible_cfg, ANSIBLE_SSH_COMMON_ARGS="-F %s" % config,
                 ANSIBLE_LOCAL_TEMP=os.path.join(work, "ansible-local"), ANSIBLE_NOCOLOR="1",
                 ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_FORKS=str(count), ANSIBLE_PIPELINING="True",
                 ANSIBLE_SSH_ARGS="-o ControlMaster=auto -o ControlPersist=900s",
                 ANSIBLE_COLLECTIONS_PATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cold_dir = os.path.join(work, "cp-latency-cold")
    warm_dir = os.path.join(work, "cp-latency-warm-%d" % count)
    cold = dict(tuned, ANSIBLE_SSH_CONTROL_PATH_DIR=cold_dir)
    warm = dict(tuned, ANSIBLE_SSH_CONTROL_PATH_DIR=warm_dir)
    ping = [_bin("ansible"), "all", "-i", ini, "-m", "ping"]
    playbook = [_bin("ansible-playbook"), "-i", ini]
    collection_warm = dict(warm, CPCTL_KEEPER_DIR=os.path.join(work, "keeper-collection"))
    out += [
        Tool("ansible -m ping", ping, cold, "cold", after=lambda: _close_masters(cold_dir)),
        Tool("ansible -m ping", ping, warm, "warm"),
        Tool("ansible + collection", playbook + [playbooks["collection"]], cold, "cold"),
        Tool("ansible + collection", playbook + [playbooks["collection"], "-e", "cpctl_persist=600s"],
             collection_warm, "warm", before=lambda: _keeper_ready(collection_warm, count)),
        Tool("ansible + command: playbook", playbook + [playbooks["old"]], cold, "cold",
             after=lambda: _close_masters(cold_dir)),
        Tool("ansible + command: playbook", playbook + [playbooks["old"]], warm, "warm"),
    ]
    return out


def _latency_once(tool: Tool, count: int, warmup: bool = False) -> float:
    """One timed run (``before``/``after`` untimed; the warm-up round skips ``before``: it is the
    run that opens what the warm runs then find)."""
    if tool.before and not warmup:
        tool.before()
    start = time.perf_counter()
    proc = subprocess.run(tool.argv, env=tool.env, stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
    elapsed = time.perf_counter() - start
    if tool.after:
        tool.after()
    if proc.returncode != 0:
        tail = (proc.stdout[-1500:] + proc.stderr[-600:]).decode(errors="replace")
        raise RuntimeError("%s %s (%d hosts) failed (%d): %s" % (tool.name, tool.state, count, proc.returncode, tail))
    return elapsed


def run_latency(runs: int = 3) -> str:
    """cpctl (cold, warm), tuned Ansible with the collection, with the old command: playbook, and
    a plain ``ansible -m ping``, side by side over the same masters behind a 50 ms round trip."""
    counts = tuple(int(n) for n in os.environ.get("CPCTL_BENCH_COUNTS", "").split(",") if n) or LATENCY_COUNTS
    load_before, work = begin("fanout latency", "latency")
    fleet, proxies = None, None
    results: dict = {}
    chosen: dict = {}
    try:
        fleet = start_fleet(os.path.join(work, "fleet"), max(counts))
        proxies, config, known = start_proxies(fleet, work)
        chosen = {n: latency_tools(fleet, n, work, config, known) for n in counts}
        for n in counts:                            # warm-up: opens the warm masters and keepers
            for tool in chosen[n]:
                _latency_once(tool, n, warmup=True)
        for _ in range(runs):
            for n in counts:
                for tool in chosen[n]:
                    results.setdefault((tool.name, tool.state), {}).setdefault(n, []).append(_latency_once(tool, n))
    finally:
        for n in chosen:
            for tool in chosen[n]:
                if tool.state == "warm" and "ANSIBLE_SSH_CONTROL_PATH_DIR" in tool.env:
                    _close_masters(tool.env["ANSIBLE_SSH_CONTROL_PATH_DIR"])
                if tool.state == "warm" and "CPCTL_KEEPER_DIR" in tool.env:
                    subprocess.run([sys.executable, "-m", "cpctl", "keeper", "stop"], env=tool.env,
                                   capture_output=True, timeout=30)
        if proxies is not None:
            proxies.terminate()
            proxies.join(10)
        if fleet is not None:
            fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    return _latency_report(results, counts, runs, load_before, load_average())


def _latency_report(results: dict, counts: tuple, runs: int, load_before: str, load_after: str) -> str:
    medians = {key: {n: median(v) for n, v in per.items()} for key, per in results.items()}
    top, one = counts[-1], counts[0]
    cold = medians[(CPCTL, "cold")]
    headers = (["tool"] + ["%d host%s" % (n, "" if n == 1 else "s") for n in counts] + ["%d / %d" % (top, one)]
               + ["÷ cpctl cold @%d" % n for n in (one, top)])
    rows = [["%s (%s)" % key] + ["%.2f s" % per[n] for n in counts] + ["%.2f×" % (per[top] / per[one])]
            + ["%.1f×" % (per[n] / cold[n]) for n in (one, top)] for key, per in medians.items()]
    verdicts = []
    for key, goal in (((CPCTL, "cold"), 2.0), ((CPCTL, "warm"), 1.5), ((DIRECT, "cold"), 2.0)):
        scaling = medians[key][top] / medians[key][one]
        verdicts.append("%s (%s): %d hosts / %d = %.2f× (goal ≤ %g×: %s)"
                        % (key[0], key[1], top, one, scaling, goal, "met" if scaling <= goal else "MISSED"))
    for state in ("cold", "warm"):
        if ("ansible + collection", state) not in medians:
            verdicts.append("Ansible's rows skipped (not installed, or CPCTL_BENCH_NO_ANSIBLE set)")
            break
        ours, ping = medians[("ansible + collection", state)], medians[("ansible -m ping", state)]
        old = medians[("ansible + command: playbook", state)]
        verdicts.append("the collection's playbook ÷ `ansible -m ping` (%s): %.2f× at %d hosts, %.2f× at 1 (goal ≤ "
                        "1.5×: %s); the old command: playbook ÷ ping: %.2f× at %d" % (
                            state, ours[top] / ping[top], top, ours[one] / ping[one],
                            "met" if ours[top] / ping[top] <= 1.5 else "MISSED", old[top] / ping[top], top))
    plot_note = ""
    try:
        from benchmarks.plot import plot_fanout
        plot_fanout({"%s (%s)" % key: per for key, per in medians.items()}, counts, LATENCY_PNG,
                    title="cpctl status of N masters behind a 50 ms round trip (lower is better)",
                    xlabel="hosts (sshd on loopback behind a 25 ms-each-way proxy)")
        plot_note = "![fan-out behind a 50 ms round trip](fanout-latency.png)"
    except ImportError:
        plot_note = "Plot skipped: matplotlib is not installed (`bash benchmarks/run.sh` installs it)."
    body = ("Machine: %s. Load average before: %s, after: %s. Median of %d runs per cell after a warm-up "
            "round; every round runs every tool at every host count.\n\n%s\n\n%s.\n\n"
            "Notes:\n\n"
            "* Every master is an sshd on its own loopback address behind its own asyncio TCP proxy "
            "(`benchmarks/fanout.py`, `_serve_proxies`) that delivers each chunk 25 ms after it arrived, "
            "in both directions, and holds a new connection one round trip before its first byte (the TCP "
            "handshake): a 50 ms round trip, as between regions. No netem: this machine's kernel has no "
            "`sch_netem` (`tc qdisc add ... netem` in a network namespace: \"Specified qdisc kind is "
            "unknown\"), so the delay costs the proxy's CPU on the same cores.\n"
            "* The job is the same everywhere: cpctl's read-only `status` of each master (`--probe none`). "
            "cpctl: one process, its own SSH fan-out (forks %d); as typed, no flag: *cold* is the first "
            "command (no keeper running: it starts one), *warm* the next command within the keeper's default "
            "idle time (60 s), its agents ready; `--persist 0`: no keeper, the run connects by itself. "
            "Ansible: tuned (forks = "
            "hosts, pipelining, ControlPersist 900 s, interpreter given); *cold* = a fresh ControlPath dir, "
            "*warm* = the masters of the previous run. `ansible -m "
            "ping` is Ansible's own floor. *+ collection*: `cpctl.controlplane.controlplane_info` — one cpctl "
            "process per host on the controller with its own SSH connection (*warm*: `cpctl_persist=600s`, "
            "through the keeper; Ansible's ControlPersist does not apply to it). *+ command: playbook*: the "
            "old way, `ansible.builtin.command` running cpctl installed on each master.\n"
            "* The hosts, the proxies, Ansible's forks and the client share this machine's 2 cores (and "
            "other jobs: see the load average), so CPU-heavy contenders pay for it here in a way a real "
            "fleet spreads over its masters.\n\n%s\n"
            % (machine_info(), load_before, load_after, runs, table(headers, rows), "; ".join(verdicts),
               max(LATENCY_COUNTS), plot_note))
    write_section("8. Fan-out where latency rules (50 ms round trip)", body)
    return body
