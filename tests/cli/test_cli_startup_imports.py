"""What ``cpctl --help`` and a local ``cpctl status`` import: only what the path needs.

Start-up time is mostly imports (benchmarks/RESULTS.md section 1), so these tests pin the
structure rather than a timing: each runs cpctl as a user does, in a fresh interpreter, lists
every module it imported (``python -X importtime``) and fails when one that the path must not
load shows up (the lab plugin, package metadata scanning, the journal, OpenSSL's hashlib...).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Set, Tuple

import pytest

MANIFEST = """apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: kube-system}
spec:
  containers: [{name: %s, image: registry.k8s.io/%s:v1.30.0}]
"""
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

# Never on either path: plugins are listed from their metadata text, not imported; nothing remote.
NEVER = ("cpctl_lab", "importlib.metadata", "email", "urllib.request", "zipfile", "csv", "paramiko",
         "cryptography", "cpctl.fleet", "cpctl.host.ssh", "cpctl.host.keeper", "cpctl.cli.commands.lifecycle",
         "cpctl.cli.commands.edits", "cpctl.ops.drift")
# --help formats click's help from the command table: no command, no core, no error types.
NOT_FOR_HELP = NEVER + ("yaml", "json", "dataclasses", "signal", "shutil", "subprocess", "cpctl.errors",
                        "cpctl.core", "cpctl.ops", "cpctl.host", "cpctl.probes.base", "cpctl.probes.waiter",
                        "cpctl.cli.commands", "cpctl.cli.fanout")
# A local status reads the manifests and the state dir: no change code, no diagnosis, no URL
# parsing without a kubeconfig, no fork to learn that crictl is missing, no OpenSSL for sha256,
# no gates (what a wait checks after Ready: the Lease, /readyz).
NOT_FOR_STATUS = NEVER + ("cpctl.core.journal", "cpctl.core.revisions", "cpctl.probes.diagnose", "hashlib",
                          "_hashlib", "hmac", "secrets", "random", "decimal", "calendar", "urllib.parse",
                          "ipaddress", "subprocess", "shlex",
                          "cpctl.core.pending",   # read only when a change was left unverified
                          "cpctl.probes.gates", "cpctl.probes.lease")   # a wait's gates: a view waits for nothing
# Whatever the node holds, a view loads no change pipeline: an arm's record is read by the arm module
# (core.confirmations) alone; ops.confirm and what it needs come only to revert an overdue arm.
CHANGE_PIPELINE = ("cpctl.ops.confirm", "cpctl.ops.edits", "cpctl.core.replace", "cpctl.core.journal",
                   "cpctl.core.revisions", "cpctl.core.companions", "cpctl.core.checks", "secrets")


def _run(argv: List[str], env: Dict[str, str]) -> Tuple[subprocess.CompletedProcess, Set[str]]:
    """Run ``python -X importtime ARGV``: the result and every module it imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime"] + argv, env=env, capture_output=True, text=True,
                          timeout=60)
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
               if line.startswith("import time:") and line.count("|") == 2}
    modules.discard("imported package")            # the header line
    return proc, modules


def _imports(argv: List[str], env: Dict[str, str]) -> Tuple[subprocess.CompletedProcess, Set[str]]:
    """Run ``python -m cpctl ARGV``: the result and the modules it imported beyond the interpreter's
    own start-up (``site``; an editable install's finder imports pathlib and urllib.parse there)."""
    proc, modules = _run(["-m", "cpctl"] + argv, env)
    assert "cpctl.cli.main" in modules, proc.stderr[-2000:]
    return proc, modules - _run(["-c", "pass"], env)[1]


def _forbidden(modules: Set[str], names: Tuple[str, ...]) -> List[str]:
    """The imported modules that are one of ``names`` or inside one of those packages."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.fixture()
def env(tmp_path: "os.PathLike[str]") -> Dict[str, str]:
    """A prepared manifests dir (kubeadm's four), an empty state dir, no kubeconfig, no crictl, no
    kubelet files."""
    mdir = os.path.join(str(tmp_path), "manifests")
    os.mkdir(mdir)
    for name in COMPONENTS:
        with open(os.path.join(mdir, name + ".yaml"), "w") as handle:
            handle.write(MANIFEST % (name, name, name))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CPCTL_")}
    return dict(clean, CPCTL_MANIFESTS_DIR=mdir, CPCTL_STATE_DIR=os.path.join(str(tmp_path), "state"),
                CPCTL_NODE_NAME="bench", KUBECONFIG=os.path.join(str(tmp_path), "no-kubeconfig"),
                CPCTL_CRICTL=os.path.join(str(tmp_path), "no-crictl"),
                CPCTL_KUBELET_DIR=os.path.join(str(tmp_path), "no-kubelet"))   # also on a machine with a kubelet


def test_help_imports_click_and_the_command_table_only(env: Dict[str, str]) -> None:
    proc, modules = _imports(["--help"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Commands:" in proc.stdout and "status" in proc.stdout
    # the lab's command is listed from its entry point text, without importing the lab
    assert "lab" in proc.stdout.split("Commands:", 1)[1]
    assert _forbidden(modules, NOT_FOR_HELP) == []


def test_local_status_imports_only_what_a_view_reads(env: Dict[str, str]) -> None:
    proc, modules = _imports(["status"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] and line.split()[0] in COMPONENTS]
    assert sorted(row[0] for row in rows) == sorted(COMPONENTS)
    assert all(row[2] == "present" and "unknown" in row for row in rows), proc.stdout
    assert _forbidden(modules, NOT_FOR_STATUS) == []


def test_status_without_a_probe_imports_no_more(env: Dict[str, str]) -> None:
    proc, modules = _imports(["--probe", "none", "status", "-o", "json"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"component": "kube-scheduler"' in proc.stdout
    assert _forbidden(modules, NOT_FOR_STATUS) == []


def _arm(env: Dict[str, str], deadline: float) -> None:
    """An arm record as cpctl writes it (STATE/confirm/kube-scheduler.yaml.json, dirs 0700)."""
    confirm = os.path.join(env["CPCTL_STATE_DIR"], "confirm")
    os.makedirs(confirm, mode=0o700)
    os.chmod(env["CPCTL_STATE_DIR"], 0o700)

    def iso(at: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    record = {"op": "op-1", "component": "kube-scheduler", "file": "kube-scheduler.yaml", "checksum": "a" * 64,
              "previous": "b" * 64, "revision": 1, "action": "flags", "armed_at": iso(time.time() - 60),
              "deadline": iso(deadline), "by": "tester", "host": "bench", "node": "bench", "reason": None,
              "timer": "none", "unit": "", "pid": 0, "check": ""}
    with open(os.path.join(confirm, "kube-scheduler.yaml.json"), "w") as handle:
        json.dump(record, handle)


def test_status_of_a_node_with_a_pending_confirmation_loads_no_change_code(env: Dict[str, str]) -> None:
    _arm(env, time.time() + 3600)
    proc, modules = _imports(["status", "-o", "json"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = json.loads(proc.stdout)
    rows = {row["component"]: row for row in shown["components"]}
    assert rows["kube-scheduler"]["unconfirmed"]["action"] == "flags", shown
    assert _forbidden(modules, NOT_FOR_STATUS + CHANGE_PIPELINE) == []


def test_status_of_an_overdue_arm_reports_it_and_loads_no_revert(env: Dict[str, str]) -> None:
    """The same record past its deadline (issue 35: read-only means read-only): the view reports it
    overdue and leaves it to the node's timer - no revert code loads, the record stays."""
    _arm(env, time.time() - 5)
    proc, modules = _imports(["status", "-o", "json"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {row["component"]: row for row in json.loads(proc.stdout)["components"]}
    assert rows["kube-scheduler"]["unconfirmed"]["overdue"] is True, rows
    assert _forbidden(modules, NOT_FOR_STATUS + CHANGE_PIPELINE) == []
    assert os.path.exists(os.path.join(env["CPCTL_STATE_DIR"], "confirm", "kube-scheduler.yaml.json"))


# Against a live API server (the lab's: plain HTTP on 127.0.0.1, as an insecure port would be) the
# probe's requests go through cpctl's own HTTP/1.1 reader: no http.client and its email parser, no
# ssl for a server that is not HTTPS, no idna codec for a host name; and still no change code. Nor
# the socket module (the C module _socket is enough), urllib.parse or ipaddress for a plain URL,
# decimal for the manifests' resource requests (kubeadm's, as the lab's) or shlex for the kubelet's
# kubeadm-flags.env (no quotes in kubeadm's).
NOT_FOR_LIVE_STATUS = NOT_FOR_STATUS + CHANGE_PIPELINE + (
    "http", "ssl", "_ssl", "encodings.idna", "stringprep", "socket", "selectors")
#: What asking the node's etcd for its alarms over TLS loads (a status that shows etcd, issue 45).
ETCD_QUESTION = ("ssl", "_ssl", "socket", "selectors", "ipaddress", "random", "urllib.parse")


def _imports_without_site(argv: List[str], env: Dict[str, str]) -> Tuple[subprocess.CompletedProcess, Set[str]]:
    """``_imports`` under ``python -S``, cpctl, click and yaml found through PYTHONPATH: no .pth file
    runs, so what an editable install's finder imports at start-up (pathlib, urllib.parse,
    ipaddress) is not taken for the interpreter's own and left out of the check."""
    import click
    import yaml

    import cpctl
    roots = [os.path.dirname(os.path.dirname(os.path.abspath(m.__file__ or ""))) for m in (cpctl, click, yaml)]
    env = dict(env, PYTHONPATH=os.pathsep.join(dict.fromkeys(roots)))
    proc, modules = _run(["-S", "-m", "cpctl"] + argv, env)
    assert "cpctl.cli.main" in modules, proc.stderr[-2000:]
    return proc, modules - _run(["-S", "-c", "pass"], env)[1]


def test_status_against_a_live_api_imports_no_http_library(lab) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CPCTL_")}
    env = dict(clean, **lab.env)
    # one list of the node's pods answers the four mirror pods: a GET of one would fail here
    lab.inject_faults([{"method": "GET", "path": "^/api/v1/namespaces/kube-system/pods/", "action": "status",
                        "code": 500}])
    proc, modules = _imports_without_site(["status", "-o", "json"], env)
    assert [rule["hits"] for rule in lab.clear_faults()] == [0]
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {row["component"]: row for row in json.loads(proc.stdout)["components"]}
    assert sorted(rows) == sorted(COMPONENTS)
    # the pods were read from the API (not the runtime): the check below is not blind
    assert all(row["observed"]["source"] == "api" and row["pod_state"] == "running" for row in rows.values()), rows
    assert "cpctl.probes.kubeapi" in modules and "_socket" in modules
    # issue 45: a status that shows etcd asks the node's etcd for the cluster's alarms, over TLS with the
    # node's etcd client pair: that question alone brings ssl (and what ssl imports) and urllib.parse
    assert _forbidden(modules, tuple(n for n in NOT_FOR_LIVE_STATUS if n not in ETCD_QUESTION)) == []
    assert "ssl" in modules and "cpctl.ops.etcdcare" in modules
    # a status that does not show etcd asks nothing of it: none of those
    proc, modules = _imports_without_site(["status", "-o", "json", "kube-scheduler"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _forbidden(modules, NOT_FOR_LIVE_STATUS + ("cpctl.ops.etcdcare",)) == []


def _status_with_and_without_start(env: Dict[str, str], script: str) -> Tuple[Any, Any]:
    """``script`` (a ``cpctl status`` through ``cpctl.cli.start``) run in a fresh interpreter, and the
    same with ``cpctl.cli.main``'s entry instead (no start-up settings): both must succeed."""
    runs = []
    for module in ("cpctl.cli.start", "cpctl.cli.main"):
        text = script.replace("from cpctl.cli.start import entry", "from %s import entry" % module)
        proc = subprocess.run([sys.executable, "-c", text], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "kube-scheduler" in proc.stdout, proc.stderr[-2000:]
        runs.append(proc)
    return runs[0], runs[1]


def test_start_up_makes_no_garbage_collector_pass(env: Dict[str, str]) -> None:
    """``cpctl.cli.start`` widens the collector's young generation before click is imported, so a
    status (imports, the view, the output) ends without one pass: the default (700) made 35 of
    them, ~4.5 ms. Counted with ``gc.callbacks`` in a fresh interpreter running the entry point."""
    script = ("import atexit, gc, sys\n"
              "passes = []\n"
              "gc.callbacks.append(lambda phase, info: passes.append(1) if phase == 'start' else None)\n"
              "atexit.register(lambda: sys.stderr.write('GC PASSES %d\\n' % len(passes)))\n"
              "sys.argv = ['cpctl', 'status']\n"
              "from cpctl.cli.start import entry\n"
              "entry()\n")
    proc, default = _status_with_and_without_start(env, script)
    assert "GC PASSES 0\n" in proc.stderr, proc.stderr[-500:]
    # the count is not blind: with the default threshold the same run makes passes
    assert "GC PASSES 0\n" not in default.stderr, default.stderr[-500:]


def test_exit_skips_the_collectors_last_pass_over_what_is_alive(env: Dict[str, str]) -> None:
    """At exit the interpreter makes a full collector pass over every object alive (~8 ms of a
    status) before it tears the modules down; ``cpctl.cli.start`` freezes them in an atexit handler
    that runs after every other one the command's libraries register (handlers run in reverse
    order of registration): a handler registered before the entry point sees the heap frozen, and
    without ``cpctl.cli.start`` nothing is."""
    script = ("import atexit, gc, sys\n"
              "atexit.register(lambda: sys.stderr.write('FROZEN %d\\n' % gc.get_freeze_count()))\n"
              "sys.argv = ['cpctl', 'status']\n"
              "from cpctl.cli.start import entry\n"
              "entry()\n")
    proc, plain = _status_with_and_without_start(env, script)
    frozen = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("FROZEN ")]
    assert len(frozen) == 1 and frozen[0] > 10000, proc.stderr[-500:]   # click, yaml, cpctl: ~10^5 objects
    # not blind: the command line without the entry point's settings leaves the heap unfrozen
    assert "FROZEN 0\n" in plain.stderr, plain.stderr[-500:]


def test_status_without_a_confirm_dir_loads_no_arm_code(env: Dict[str, str]) -> None:
    """A node where ``--confirm-within`` was never used has a state dir but no STATE/confirm: the
    arm records' module is not loaded at all (with one, the test above shows what is)."""
    os.makedirs(env["CPCTL_STATE_DIR"], mode=0o700)
    proc, modules = _imports(["status", "-o", "json"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "cpctl.core.state" in modules and "cpctl.core.confirmations" not in modules
    _arm(env, time.time() + 3600)
    proc, modules = _imports(["status", "-o", "json"], env)
    assert proc.returncode == 0 and "cpctl.core.confirmations" in modules, proc.stderr[-2000:]
