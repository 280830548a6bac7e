"""SIGKILL of the node-side revert plan (remote ``--confirm-within``, issue #25) before each of its
file operations: the plan writes cpctl's own journal first, so the next cpctl command finishes or
rolls back the revert - never a half-reverted manifest, companion file or arm record."""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import time
from types import ModuleType
from typing import Any, Dict, List

import pytest

from cpctl.agent import crictlread, fileops, noderevert, revertplan
from cpctl.core import confirmations, views
from cpctl.core.confirmations import Arm
from cpctl.core.settings import Settings
from cpctl.host.agent import AGENT_MODULES
from cpctl.host.local import LocalHost
from cpctl.ops import confirm, edits
from cpctl.ops.wiring import open_node
from cpctl.timeutil import iso
from tests.coreutil import MANIFESTS, NODE, NodeDirs, in_child, killed_run, sha

SCHEDULER = MANIFESTS["kube-scheduler.yaml"]
NEW_SCHEDULER = SCHEDULER.replace(b"    - --leader-elect=true\n", b"    - --leader-elect=true\n    - --v=4\n")
MUTATING = ("write_atomic", "move", "unlink", "append")
OP = "fedcba9876543210"


def _settings(node: NodeDirs) -> Settings:
    return Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none", lock_timeout=1)


def _prepare(root: str) -> "tuple[NodeDirs, Dict[str, Any]]":
    """The scheduler changed and armed (revision 1 keeps the old bytes), and the plan a remote arm writes."""
    node = NodeDirs(root, files={"kube-scheduler.yaml": SCHEDULER})
    opened = open_node(_settings(node), LocalHost())
    edits.replace(opened, "scheduler", NEW_SCHEDULER, "test", "apply", edits.ApplyOptions(timeout=1, settle=0))
    armed = Arm(OP, "kube-scheduler", "kube-scheduler.yaml", sha(NEW_SCHEDULER), sha(SCHEDULER), 1, "apply", iso(),
                iso(time.time() + 3600), "root", "test", NODE, "kill test", "process", pid=0)
    with opened.session("kill test"):
        opened.host.makedirs(confirmations.directory(opened.state), 0o700)
        opened.apply(confirmations.arm_change(opened.state, armed))
        plan = confirm._plan(opened, armed, confirm._plan_base(opened, armed))
    return node, plan


def _holding(name: str) -> List[ModuleType]:
    """Every module of the agent that holds ``name`` (its own or imported): wrapped in each, a primitive
    is wrapped wherever the node-side revert calls it, as in the one program the node runs."""
    modules = [importlib.import_module("cpctl.agent." + m) for m in AGENT_MODULES]
    return [module for module in modules if hasattr(module, name)]


def _run(plan: Dict[str, Any], kill_at: int) -> "tuple[int, int]":
    """``_plan_apply`` in a forked child that SIGKILLs itself before its ``kill_at``-th file change."""
    def child() -> int:
        count = [0]
        for name in MUTATING:
            real = getattr(fileops, name)

            def counted(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
                count[0] += 1
                if count[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                return _real(*args, **kwargs)
            for module in _holding(name):
                setattr(module, name, counted)
        rc, _ = noderevert._plan_apply(plan)
        assert rc == 0, rc
        return count[0]
    return in_child(child)


def _manifest(node: NodeDirs) -> bytes:
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        return handle.read()


def _actions(node: NodeDirs) -> List[str]:
    return [r["action"] for r in node.history()]


@pytest.mark.slow
def test_sigkill_before_every_file_change_of_the_node_side_revert(tmp_path: Any) -> None:
    node, plan = _prepare(str(tmp_path / "count"))
    status, calls = _run(plan, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the plan failed without a fault"
    assert _manifest(node) == SCHEDULER and _actions(node)[-1] == "rollback"
    seen = {"completed": 0, "rolled back": 0}
    for kill_at in range(1, calls + 1):
        root = str(tmp_path / ("k%d" % kill_at))
        node, plan = _prepare(root)
        status, _ = _run(plan, kill_at)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, kill_at
        views.status(open_node(_settings(node), LocalHost()))     # the next command: recovery first
        assert not os.path.exists(node.journal), kill_at
        staged = os.path.join(node.state, "staged")
        assert not (os.path.isdir(staged) and os.listdir(staged))
        armed = os.path.exists(os.path.join(node.state, "confirm", "kube-scheduler.yaml.json"))
        if _manifest(node) == NEW_SCHEDULER:
            assert armed and _actions(node)[-1] == "armed", (kill_at, _actions(node))
            seen["rolled back"] += 1
        else:
            assert _manifest(node) == SCHEDULER and not armed, kill_at
            assert _actions(node).count("rollback") == 1 and _actions(node)[-1] == "rollback", _actions(node)
            seen["completed"] += 1
        shutil.rmtree(root)
    assert seen["completed"] and seen["rolled back"], seen
    assert calls >= 8, calls          # journal, each step, history, the journal cleared, the staged files


@pytest.mark.slow
def test_the_node_side_revert_finishes_its_own_interrupted_run(tmp_path: Any) -> None:
    """Issue 33 (one recovery): the node-side revert SIGKILLed before any of its file operations (a
    reboot, the OOM killer) and nothing of cpctl run since - the next run of the revert itself (the
    timer firing again after the reboot) finishes or rolls back its own journal with the journal's
    recovery (``StepRunner.recover``), then reverts: the old version back, the arm gone, one
    ``rollback`` in the history, no journal (the plan's own files go with ``_plan_cleanup`` at the
    end of every run). It used to refuse ("run any cpctl command on this
    node"), which a master managed over SSH never gets."""
    _, calls = _run(_prepare(str(tmp_path / "count"))[1], 0)
    for kill_at in range(1, calls + 1):
        root = str(tmp_path / ("k%d" % kill_at))
        node, plan = _prepare(root)
        status, _ = _run(plan, kill_at)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, kill_at
        rc, message = noderevert._plan_apply(plan)
        assert rc == 0, (kill_at, message)
        assert not os.path.exists(node.journal), kill_at
        assert _manifest(node) == SCHEDULER, (kill_at, message)
        assert not os.path.exists(os.path.join(node.state, "confirm", "kube-scheduler.yaml.json")), kill_at
        assert _actions(node).count("rollback") == 1 and _actions(node)[-1] == "rollback", (kill_at, _actions(node))
        shutil.rmtree(root)


def test_a_revert_step_that_fails_before_the_commit_changes_nothing_and_is_retried(tmp_path: Any,
                                                                                   monkeypatch: Any) -> None:
    """The journal's own loop (``StepRunner.run``) on the node: the manifest's write fails (EROFS)
    -> what was done is undone, the journal cleared, the arm kept, exit 7 (retried with back-off);
    the next try, the filesystem writable again, reverts from the same staged bytes."""
    import errno
    node, plan = _prepare(str(tmp_path / "n"))
    real = fileops.write_atomic

    def read_only(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.startswith(node.manifests + "/"):
            raise OSError(errno.EROFS, "Read-only file system", path)
        return real(path, *args, **kwargs)
    for module in _holding("write_atomic"):
        monkeypatch.setattr(module, "write_atomic", read_only)
    rc, message = noderevert._plan_apply(plan)
    assert rc == 7 and "Read-only file system" in message and "nothing changed" in message, message
    assert _manifest(node) == NEW_SCHEDULER and not os.path.exists(node.journal)
    assert os.path.exists(os.path.join(node.state, "confirm", "kube-scheduler.yaml.json"))
    assert _actions(node)[-1] == "armed"
    for module in _holding("write_atomic"):
        monkeypatch.setattr(module, "write_atomic", real)
    assert noderevert._plan_apply(plan) == (0, "reverted")
    assert _manifest(node) == SCHEDULER and _actions(node)[-1] == "rollback"


@pytest.mark.slow
def test_the_plan_finishes_an_arm_whose_cpctl_was_killed(tmp_path: Any) -> None:
    """cpctl killed at any point of writing the arm (its journal, the record, the history line, the
    journal cleared): the node-side plan finishes that journal as cpctl's recovery would - the arm on
    record exactly once when its file is there - then reverts it, or finds nothing armed."""

    def arm_child(root: str, kill_at: int) -> "tuple[NodeDirs, Dict[str, Any], int]":
        node = NodeDirs(root, files={"kube-scheduler.yaml": SCHEDULER})
        opened = open_node(_settings(node), LocalHost())
        edits.replace(opened, "scheduler", NEW_SCHEDULER, "test", "apply", edits.ApplyOptions(timeout=1, settle=0))
        armed = Arm(OP, "kube-scheduler", "kube-scheduler.yaml", sha(NEW_SCHEDULER), sha(SCHEDULER), 1, "apply",
                    iso(), iso(time.time() + 3600), "root", "test", NODE, "kill test", "process", pid=0)
        opened.host.makedirs(confirmations.directory(opened.state), 0o700)
        with opened.session("plan"):
            plan = confirm._plan(opened, armed, confirm._plan_base(opened, armed))
        def arm(child: Any) -> None:
            with child.session("kill test"):
                child.apply(confirmations.arm_change(child.state, armed))
        calls = killed_run(node, arm, kill_at)[1]
        return node, plan, calls

    _, _, calls = arm_child(str(tmp_path / "count"), 0)
    outcomes = set()
    for kill_at in range(1, calls + 1):
        root = str(tmp_path / ("k%d" % kill_at))
        node, plan, _ = arm_child(root, kill_at)
        rc, message = noderevert._plan_apply(plan)
        assert rc == 0, (kill_at, message)
        actions = _actions(node)
        assert not os.path.exists(node.journal), kill_at
        if message == "reverted":
            assert actions.count("armed") == 1 and _manifest(node) == SCHEDULER, (kill_at, actions)
        else:
            assert "armed" not in actions and _manifest(node) == NEW_SCHEDULER, (kill_at, actions)
        outcomes.add(message == "reverted")
        shutil.rmtree(root)
    assert outcomes == {True, False}


def _armed_files(node: NodeDirs, plan: Dict[str, Any], agent: bytes) -> "tuple[List[str], str]":
    """The agent and the plan written as a remote arm writes them (its verify step made instant), and
    the timer's command line: (argv, plan path)."""
    import hashlib
    import json
    import sys

    from cpctl.host.agent import agent_source
    base = os.path.join(node.state, "confirm", "kube-scheduler.yaml." + OP)
    plan = dict(plan, verify=dict(plan["verify"], url="", crictl="", settle=0, timeout=5))
    data = (json.dumps(plan, sort_keys=True) + "\n").encode()
    with open(base + ".agent.py", "wb") as handle:
        handle.write(agent)
    with open(base + ".plan", "wb") as handle:
        handle.write(data)
    real = agent_source()
    return [sys.executable, "-c", revertplan.VERIFY_LOADER, base + ".agent.py", hashlib.sha256(real).hexdigest(),
            "revert-plan", base + ".plan", "--plan-sha256", hashlib.sha256(data).hexdigest()], base + ".plan"


def _make_due(arm_path: str) -> None:
    """The arm record's deadline moved to now: the plan run waits for the arm to be due."""
    import json
    with open(arm_path) as handle:
        record = json.load(handle)
    record["deadline"] = iso(time.time() - 1)
    with open(arm_path, "w") as handle:
        json.dump(record, handle)


def test_the_timer_runs_only_the_agent_and_the_plan_it_armed(tmp_path: Any) -> None:
    """Issue 33 item 4: the state dir's agent code and plan run only when their sha256 is the one the
    timer's command line recorded at arm time; a plan naming a path outside a revert's allowance is
    refused too. Each refusal changes nothing; the genuine pair reverts."""
    import subprocess

    from cpctl.host.agent import agent_source
    assert not set("%$\\") & set(revertplan.VERIFY_LOADER), "a systemd unit's command line would expand these"
    node, plan = _prepare(str(tmp_path / "a"))
    tampered = agent_source().replace(b"def revert_plan_main(argv):", b"def revert_plan_main(argv):\n    return 0\n\n\n"
                                                                       b"def _unused(argv):", 1)
    argv, _ = _armed_files(node, plan, tampered)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7 and "is not the agent cpctl armed" in proc.stderr, proc.stderr
    argv, plan_path = _armed_files(node, plan, agent_source())
    with open(plan_path, "ab") as handle:
        handle.write(b" ")                                   # changed after the arm
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7, proc.stderr
    crafted = dict(plan, entry=dict(plan["entry"], steps=plan["entry"]["steps"] + [
        {"kind": "write", "path": os.path.join(node.root, "admin.conf"), "checksum": sha(b"x"),
         "staged": plan["entry"]["steps"][0].get("staged") or os.path.join(node.state, "x")}]))
    argv, _ = _armed_files(node, crafted, agent_source())      # its digest is right: its paths are not
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7, proc.stderr
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        assert handle.read() == NEW_SCHEDULER
    assert not os.path.exists(os.path.join(node.root, "admin.conf"))
    _make_due(plan["arm"])                                    # the timer fires at the deadline
    argv, _ = _armed_files(node, plan, agent_source())
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        assert handle.read() == SCHEDULER
    left = sorted(n for n in os.listdir(os.path.join(node.state, "confirm")) if n.startswith("kube-scheduler.yaml."))
    assert left == [], "the reverted plan's files pile up in the state dir: %s" % left


def _crictl_shim(tmp_path: Any, uid: str, container: str) -> str:
    """A crictl printing one ready sandbox of uid ``uid`` running ``container`` (as crictl's JSON)."""
    import json
    import sys
    pods = {"items": [{"id": "sb-" + uid, "state": "SANDBOX_READY", "createdAt": "1000",
                       "metadata": {"name": "kube-scheduler-" + NODE, "namespace": "kube-system", "uid": uid}}]}
    ps = {"containers": [{"id": container, "state": "CONTAINER_RUNNING", "createdAt": "2000000000000000000",
                          "metadata": {"name": "kube-scheduler", "attempt": 0}}]}
    path = str(tmp_path / ("crictl-" + container))
    with open(path, "w") as handle:
        handle.write("#!%s\nimport sys\nprint(%r if sys.argv[1] == 'pods' else %r)\n"
                     % (sys.executable, json.dumps(pods), json.dumps(ps)))
    os.chmod(path, 0o755)
    return path


def test_the_node_side_check_reads_the_pod_as_the_crictl_probe_does(tmp_path: Any) -> None:
    """Issue 33 (no second verifier): the node-side revert's check reads crictl with the crictl probe's
    own reader (``agent.crictlread.crictl_pod``) and judges "new" with the waiter's rule (``is_new_since``)
    against the pod cpctl's crictl probe saw at arm time: the old pod still running is NOT verified,
    a new one is."""
    from cpctl.host.local import LocalHost
    from cpctl.probes.base import PodTarget
    from cpctl.probes.crictl import CrictlProbe
    old = _crictl_shim(tmp_path, "u1", "c1")
    target = PodTarget("kube-scheduler", "kube-system", NODE, {}, "kube-scheduler.yaml")
    before = CrictlProbe(LocalHost(), old).observe(target).identity()
    assert before == {"present": True, "uid": "u1", "containers": ["c1"], "started": 2000000000.0}
    check = {"crictl": old, "pod": target.mirror_name, "namespace": "kube-system", "before": before, "url": "",
             "timeout": 5, "settle": 0}      # 5 s: a crictl shim may wait a while for a core on a busy machine
    ok, why = crictlread._plan_verify(check)
    assert not ok and "still the old pod" in why, why
    ok, why = crictlread._plan_verify(dict(check, crictl=_crictl_shim(tmp_path, "u2", "c2")))
    assert ok and "a new kube-scheduler-%s pod runs" % NODE in why, why
