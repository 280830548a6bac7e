"""Issue 47: the node-side revert plan (``host.base.RevertPlan``) is checked in full before any of it
is used (``agent.revertplan.plan_problem``). A malformed plan - a field missing, of another type, a path
outside the state dir or relative, a step ``StepRunner`` does not run, a field beyond its bound - is
refused by the agent as the timer runs it: exit 7, ONE line naming what is wrong, nothing on disk
changed (every file checksummed before and after), the arm left for the operator."""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
from typing import Any, Callable, Dict

import pytest

from cpctl.agent import revertplan
from cpctl.host.agent import agent_source
from tests.ops.test_confirm_plan_kill import NEW_SCHEDULER, _armed_files, _make_due, _prepare

Plan = Dict[str, Any]


def _files(root: str) -> Dict[str, str]:
    """Every file below ``root``: its sha256 (a symlink: where it points)."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                found[path] = "-> " + os.readlink(path)
            else:
                with open(path, "rb") as handle:
                    found[path] = hashlib.sha256(handle.read()).hexdigest()
    return found


def _step(plan: Plan, index: int, **fields: Any) -> None:
    plan["entry"]["steps"][index].update(fields)


# (what is wrong, how the plan is broken, what the line names)
BROKEN: "list[tuple[str, Callable[[Plan], Any], str]]" = [
    ("missing key", lambda p: p.pop("verdict"), "plan.verdict is missing"),
    ("missing nested key", lambda p: p["entry"].pop("commit"), "plan.entry.commit is missing"),
    ("missing step path", lambda p: p["entry"]["steps"][0].pop("path"), "plan.entry.steps[0].path is missing"),
    ("a write without its staged bytes", lambda p: p["entry"]["steps"][0].pop("staged"),
     "plan.entry.steps[0].staged is missing (a write step)"),
    ("wrong type", lambda p: p["entry"].update(commit="0"), "plan.entry.commit is not a whole number"),
    ("a bool for a number", lambda p: p["verify"].update(timeout=True), "plan.verify.timeout is not a whole number"),
    ("a list for an object", lambda p: p.update(verdict=[]), "plan.verdict is not an object"),
    ("the commit step not a step", lambda p: p["entry"].update(commit=5), "plan.entry.commit is not one of its steps"),
    ("an unknown field", lambda p: p.update(extra=1), "plan.extra is not a field of a revert plan"),
    ("an op that is not an op", lambda p: p.update(op="../../x"), "plan.op is not of the form"),
    ("a step op that is not an op", lambda p: p["entry"].update(op="ABC"), "plan.entry.op is not of the form"),
    ("not a sha256", lambda p: p.update(armed="xyz"), "plan.armed is not of the form"),
    ("a bad step kind", lambda p: _step(p, 0, kind="chmod"), "plan.entry.steps[0].kind is not of the form"),
    ("a relative path", lambda p: _step(p, 0, staged="confirm/kube-scheduler.yaml.new"),
     "plan.entry.steps[0].staged is not an absolute clean path"),
    ("a path with ..", lambda p: _step(p, 1, kept=os.path.dirname(p["arm"]) + "/../../x.removed"),
     "plan.entry.steps[1].kept is not an absolute clean path"),
    ("the lock outside the state dir", lambda p: p.update(lock="/tmp/elsewhere/lock"), "plan.lock is /tmp/elsewhere"),
    ("the arm outside the state dir", lambda p: p.update(arm="/etc/kubernetes/admin.conf"),
     "plan.arm is /etc/kubernetes/admin.conf, not the state dir's"),
    ("a keep-in record outside the state dir", lambda p: p.update(keepin=["/etc/kubernetes/admin.conf"]),
     "the plan names '/etc/kubernetes/admin.conf' as a keep-in record"),
    ("a staged copy outside the state dir", lambda p: _step(p, 0, staged="/etc/kubernetes/admin.conf"),
     "the plan names /etc/kubernetes/admin.conf, outside what a revert of kube-scheduler.yaml may touch"),
    ("an oversized text", lambda p: p["verdict"].update(reason="x" * 5000),
     "plan.verdict.reason is longer than 4096 characters"),
    ("too many steps", lambda p: p["entry"].update(steps=p["entry"]["steps"] * 40),
     "plan.entry.steps is not a list of 1 to 64 items"),
    ("an oversized record", lambda p: p["record"].update(diff="x" * (5 << 20)), "plan.record is larger than"),
    ("a sha256 and a newline", lambda p: p.update(armed=p["armed"] + "\n"), "plan.armed is not of the form"),
    ("a credential slice that is no range", lambda p: p.update(api={
        "server": "https://10.0.0.1:6443", "kubeconfig": "/etc/kubernetes/admin.conf", "sha256": "0" * 64,
        "tls": {}, "slices": {"key_data": [1, 2, 3]}}), "plan.api.slices.key_data is not a list of 2 to 2 items"),
    ("a mode beyond its bound", lambda p: _step(p, 0, mode=1 << 20), "plan.entry.steps[0].mode is not a whole number"),
    ("shown keys that are no list of texts", lambda p: p.update(shown_keys=[{"scheduler.extraArgs.v": "4"}]),
     "plan.shown_keys[0] is not text"),
    ("a secret pattern that does not compile", lambda p: p.update(secret_patterns=["(?P<name>["]),
     "plan.secret_patterns[0] is no regular expression"),
    ("no secret pattern", lambda p: p.update(secret_patterns=[]), "plan.secret_patterns is not a list of 1 to 32"),
    ("too many secret patterns", lambda p: p.update(secret_patterns=["x"] * 33),
     "plan.secret_patterns is not a list of 1 to 32 items"),
    ("an oversized secret pattern", lambda p: p.update(secret_patterns=["x" * 5000]),
     "plan.secret_patterns[0] is longer than 4096 characters"),
    ("a secret pattern that is no text", lambda p: p.update(secret_patterns=[7]),
     "plan.secret_patterns[0] is not text"),
    ("an API server that is not a URL", lambda p: p.update(api={
        "server": "file:///etc/passwd", "kubeconfig": "/etc/kubernetes/admin.conf", "sha256": "0" * 64, "tls": {},
        "slices": {}}), "plan.api.server is not of the form"),
]


def test_the_plan_cpctl_builds_is_the_shape_the_agent_checks(tmp_path: Any) -> None:
    """``ops.confirm._plan`` builds exactly the fields of ``host.base.RevertPlan``, the agent passes
    it, and the agent requires each of them: one shape on both sides of the agent boundary."""
    from cpctl.host.base import RevertPlan
    _, plan = _prepare(str(tmp_path / "n"))
    assert set(plan) == set(RevertPlan.__annotations__)
    assert revertplan.plan_problem(plan) == ""
    for key in RevertPlan.__annotations__:
        assert revertplan.plan_problem({k: v for k, v in plan.items() if k != key}) == "plan.%s is missing" % key


@pytest.mark.parametrize("what,break_it,said", BROKEN, ids=[b[0] for b in BROKEN])
def test_each_kind_of_malformed_plan_is_named(tmp_path: Any, what: str, break_it: Callable[[Plan], Any],
                                              said: str) -> None:
    _, plan = _prepare(str(tmp_path / "n"))
    broken = copy.deepcopy(plan)
    break_it(broken)
    problem = revertplan.plan_problem(broken)
    assert said in problem, (what, problem)
    assert "\n" not in problem, problem


@pytest.mark.parametrize("what,break_it,said", [b for b in BROKEN if b[0] in (
    "missing key", "wrong type", "the lock outside the state dir", "a relative path", "a bad step kind",
    "an oversized text")], ids=lambda v: v if isinstance(v, str) else "")
def test_the_timer_refuses_a_malformed_plan_and_changes_nothing(tmp_path: Any, what: str,
                                                                break_it: Callable[[Plan], Any], said: str) -> None:
    """The agent as the timer runs it (the loader, the plan's own digest right): exit 7, one line on
    stderr naming what is wrong, every file below the node's root as it was - the arm (due now, so a
    good plan would revert at once) and the changed manifest stay for the operator."""
    node, plan = _prepare(str(tmp_path / "n"))
    _make_due(plan["arm"])
    broken = copy.deepcopy(plan)
    break_it(broken)
    argv, _ = _armed_files(node, broken, agent_source())
    before = _files(node.root)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7, (what, proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "refused" in lines[0] and said in lines[0], (what, proc.stderr)
    assert "the arm stays" in lines[0], lines[0]
    assert _files(node.root) == before, what
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        assert handle.read() == NEW_SCHEDULER


def test_a_plan_that_is_not_json_is_refused_in_one_line(tmp_path: Any) -> None:
    """Bytes whose digest the timer recorded but that are no JSON object (a truncated write): exit 7,
    one line, nothing changed - never a traceback."""
    node, plan = _prepare(str(tmp_path / "n"))
    _make_due(plan["arm"])
    argv, plan_path = _armed_files(node, plan, agent_source())
    with open(plan_path, "wb") as handle:
        handle.write(b'{"version": 1, "op": ')
    argv[argv.index("--plan-sha256") + 1] = hashlib.sha256(b'{"version": 1, "op": ').hexdigest()
    before = _files(node.root)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "is not JSON" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert _files(node.root) == before
