"""Issue 20 item 5: the probe registry is real - verification is a composition.

A probe registered in ``cpctl.probes.registry.PROBES`` is built and asked by the verifying waiter
(by its ``--probe`` name and in ``auto`` mode) with no other change; a gate added to a waiter runs
after Ready; the CLI's ``--probe`` choices are the registry's, read without importing a probe;
the probes only look (the canary, which creates a pod, is a gate in ``ops/``).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest

from cpctl.host.local import LocalHost
from cpctl.ops.wiring import make_waiter
from cpctl.probes import registry
from cpctl.probes.base import PodState, PodTarget, Probe, ProbeOptions
from cpctl.probes.gates import GateResult, GateRun
from cpctl.probes.waiter import VerifyingWaiter

ROOT = Path(__file__).resolve().parents[2]
SEEN: List[str] = []    # what the registered test probe was asked, in order


class StubbornProbe:
    """A probe of this test: the pod is gone until ``READY_AFTER`` looks, then a new Ready pod."""

    name = "stubborn"
    max_call = 1.0
    via_api = False
    identifies = True
    READY_AFTER = 2

    def __init__(self, options: ProbeOptions) -> None:
        self.options = options

    @classmethod
    def from_options(cls, options: ProbeOptions) -> "StubbornProbe":
        return cls(options)

    def observe(self, target: PodTarget, timeout: Optional[float] = None) -> PodState:
        SEEN.append(target.mirror_name)
        if len(SEEN) < self.READY_AFTER:
            return PodState(False, source=self.name)
        return PodState(True, True, "Running", uid="uid-%d" % len(SEEN), source=self.name)


class NoteGate:
    """A gate of this test: records that it ran and says so in the wait's detail."""

    name = "note"

    def __init__(self) -> None:
        self.ran: List[str] = []

    def applies(self, target: PodTarget) -> bool:
        return True

    def before(self, target: PodTarget, run: GateRun) -> object:
        return "snapshot of %s" % target.component

    def check(self, target: PodTarget, before: object, run: GateRun) -> GateResult:
        self.ran.append(str(before))
        return GateResult(", noted", True)


@pytest.fixture
def stubborn(monkeypatch: pytest.MonkeyPatch) -> None:
    """``stubborn`` registered as the registry's recipe says: one line in ``PROBES``."""
    SEEN.clear()
    monkeypatch.setitem(registry.PROBES, "stubborn", "tests.probes.test_probes_registry:StubbornProbe")


def target() -> PodTarget:
    # not a catalogue component: no built-in gate applies, only the test's own
    return PodTarget("test-pod", "kube-system", "node1", {}, "test-pod.yaml")


def test_a_registered_probe_is_what_the_waiter_asks_by_its_name(stubborn: None) -> None:
    waiter = make_waiter("stubborn", host=LocalHost(), kubeconfig="/nonexistent/kubeconfig", poll=0.0)
    assert isinstance(waiter, VerifyingWaiter)
    assert [p.name for p in waiter.probes_for(target())] == ["stubborn"]
    result = waiter.wait_stopped(target(), None, 5)
    assert result.verified and result.detail.startswith("pod test-pod-node1 gone (stubborn)"), result.detail


def test_auto_asks_a_registered_probe_after_the_others(stubborn: None, tmp_path: Path) -> None:
    """In auto mode the api probe (no kubeconfig) and crictl (not installed) cannot look: the
    registered probe sees the new pod, and the gates added to the waiter run after Ready."""
    waiter = make_waiter("auto", host=LocalHost(), kubeconfig=str(tmp_path / "no-kubeconfig"),
                                  crictl=str(tmp_path / "no-crictl"), poll=0.0)
    assert [p.name for p in waiter.probes_for(target())] == registry.names() == \
        ["api", "crictl", "health", "stubborn"]
    gate = NoteGate()
    waiter.add_gate(gate)
    before = waiter.before(target())
    result = waiter.wait_started(target(), before, 5)
    assert result.verified, result.detail
    assert result.detail.startswith("pod test-pod-node1 Running and Ready (stubborn), noted"), result.detail
    assert gate.ran == ["snapshot of test-pod"]


def test_a_probe_is_typed_by_the_protocol() -> None:
    options = ProbeOptions(LocalHost(), "/nonexistent/kubeconfig")
    probes: List[Probe] = registry.build_probes(options)
    assert [p.name for p in probes] == list(registry.PROBES)
    for probe in probes:
        assert isinstance(probe.max_call, float) and isinstance(probe.via_api, bool)
        assert isinstance(probe.identifies, bool) and callable(probe.observe)
    with pytest.raises(KeyError):
        registry.probe_class("no-such-probe")


def test_the_cli_choices_are_the_registry_read_without_a_probe_module() -> None:
    code = ("import sys, cpctl.cli.main; "
            "print(sorted(m for m in sys.modules if m.startswith('cpctl.probes.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert loaded.stdout.strip() in ("[]", "['cpctl.probes.registry']"), loaded.stdout
    helped = subprocess.run([sys.executable, "-m", "cpctl", "--help"], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, COLUMNS="200"))
    assert helped.returncode == 0, helped.stderr
    assert "[%s]" % "|".join(registry.CHOICES) in helped.stdout.replace("\n", " ").replace(" ", ""), helped.stdout
    assert registry.CHOICES == ("auto",) + tuple(registry.PROBES) + ("none",)


def test_probes_only_look() -> None:
    """No module of ``cpctl/probes`` but the API client itself creates or deletes an object: the
    canary gate lives in ``cpctl/ops/canary.py``."""
    writers = []
    for path in sorted((ROOT / "cpctl" / "probes").glob("*.py")):
        if path.name == "kubeapi.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("create_pod", "delete_pod"):
                writers.append("%s:%d %s" % (path.name, node.lineno, node.attr))
    assert writers == []
    assert (ROOT / "cpctl" / "ops" / "canary.py").is_file()
