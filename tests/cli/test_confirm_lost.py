"""A connection to a master lost during a ``--confirm-within`` change (issue 35 item 5), at each step
before the arm is known: the line says honestly what may stand there and how to look, with the
``-H`` that reaches it - not only "connection lost" (exit 8). The lost connection after the arm is
the real-sshd test in tests/fleet/test_confirm_remote.py; these steps need a seam (a real drop
cannot be timed to land between two agent calls)."""

from __future__ import annotations

from typing import Any, Dict

import click
import pytest

from cpctl.cli.commands import confirm as confirm_cli
from cpctl.cli.context import CliState
from cpctl.core.node import Node
from cpctl.core.settings import Settings
from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.targets import RemoteOptions
from cpctl.host.local import LocalHost
from cpctl.ops import confirm as confirm_ops


class Remote(LocalHost):
    """This machine, standing in for a master named m1 over SSH (nothing is called on it here)."""

    is_remote = True
    name = "m1"


def _run(tmp_path: Any, action: Any) -> str:
    node = Node(Remote(), str(tmp_path / "manifests"), str(tmp_path / "state"), "cp-1")
    node.invocation = ("-i", "inv.yaml", "-H", "m1")
    state = CliState(Settings())
    state.remote = RemoteOptions(["m1"], "inv.yaml")
    ctx = click.Context(click.Command("flags"), obj=state)
    run = confirm_cli.guarded(ctx, "apiserver", "flags", action, confirm_ops.ConfirmOptions(300), False)
    with ctx, pytest.raises(CpctlError) as caught:
        run(node)
    assert caught.value.code == ExitCode.UNREACHABLE
    return caught.value.message


def _lost(node: Node) -> Dict[str, object]:
    raise CpctlError("m1: connection lost (agent exited)", ExitCode.UNREACHABLE)


def test_lost_during_the_change_is_not_armed_and_says_how_to_look(tmp_path: Any) -> None:
    message = _run(tmp_path, _lost)
    assert message == ("connection to m1 lost during the flags of apiserver: the change may or may not be in place, "
                       "and it is NOT armed: nothing reverts it by itself; look: cpctl -i inv.yaml -H m1 status")


def test_lost_while_arming_may_or_may_not_be_armed(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(confirm_ops, "arm", lambda node, result, options, launcher: _lost(node))
    message = _run(tmp_path, lambda node: {"changed": True, "component": "kube-apiserver"})
    assert message == ("connection to m1 lost during arming the revert of apiserver: the change is in place; its "
                       "revert may or may not be armed; look: cpctl -i inv.yaml -H m1 status")


def test_other_failures_are_not_reworded(tmp_path: Any) -> None:
    def refused(node: Node) -> Dict[str, object]:
        raise CpctlError("flags of kube-apiserver refused: ...", ExitCode.REFUSED)
    node = Node(Remote(), str(tmp_path / "manifests"), str(tmp_path / "state"), "cp-1")
    state = CliState(Settings())
    ctx = click.Context(click.Command("flags"), obj=state)
    run = confirm_cli.guarded(ctx, "apiserver", "flags", refused, confirm_ops.ConfirmOptions(300), False)
    with ctx, pytest.raises(CpctlError, match="^flags of kube-apiserver refused"):
        run(node)
