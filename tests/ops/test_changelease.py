"""The cluster's change lease (issues 32, 45): when a waiting run may take it over, and how its holder
keeps it - renewed while the run lasts, lost to another run, stopped before its next master."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.local import LocalHost
from cpctl.ops import changelease
from cpctl.ops.changelease import Holder, LeaseSeen, Waiting, gone_here, holder_identity, machine_tags

TAGS = ("aaaaaaaa", "bbbbbbbb", "cccccccc")       # this machine, its boot, its PID namespace (hashed)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()                                       # a pid that existed and is gone now
    return child.pid


def test_a_holder_of_this_machine_whose_process_is_gone_is_taken_over_at_once() -> None:
    gone = "cpctl root@%s pid %d machine %s 0123abcd" % (socket.gethostname(), dead_pid(), "/".join(machine_tags()))
    if machine_tags()[0] == "-":
        pytest.skip("this machine has no /etc/machine-id: no holder is ever 'gone here'")
    assert Waiting().expired_version(LeaseSeen(False, gone, "41")) == "41"


def test_the_same_host_name_on_another_machine_is_not_gone_here() -> None:
    """Issue 45: a holder on another machine with this host name, whose PID does not exist here, was
    taken over at once. Only the machine-id tag says "this machine"; an earlier boot of this machine
    is gone; another PID namespace (a container) of this boot cannot be looked up: kept."""
    pid, host = dead_pid(), socket.gethostname()
    assert not gone_here("cpctl root@%s pid %d 0123abcd" % (host, pid), TAGS)                # the old words
    assert not gone_here("cpctl root@%s pid %d machine dddddddd/bbbbbbbb/cccccccc 0123abcd" % (host, pid), TAGS)
    assert gone_here("cpctl root@%s pid %d machine aaaaaaaa/bbbbbbbb/cccccccc 0123abcd" % (host, pid), TAGS)
    assert gone_here("cpctl root@elsewhere pid %d machine aaaaaaaa/eeeeeeee/cccccccc 0123abcd" % os.getpid(), TAGS)
    assert not gone_here("cpctl root@%s pid %d machine aaaaaaaa/bbbbbbbb/ffffffff 0123abcd" % (host, pid), TAGS)
    assert not gone_here("cpctl root@%s pid %d machine aaaaaaaa/bbbbbbbb/cccccccc 0123abcd" % (host, os.getpid()),
                         TAGS)                                                                # alive
    assert not gone_here("cpctl root@%s pid %d machine aaaaaaaa/bbbbbbbb/cccccccc 0123abcd" % (host, pid),
                         ("-", "bbbbbbbb", "cccccccc"))                                       # no machine-id here


def test_a_live_or_remote_holder_keeps_it_until_it_has_not_changed_for_the_lease_time() -> None:
    waiting = Waiting()
    me = holder_identity()
    assert str(os.getpid()) in me and socket.gethostname() in me and "/".join(machine_tags()) in me
    assert "machine-id" not in me and open("/etc/machine-id").read().strip() not in me \
        if os.path.exists("/etc/machine-id") else True                          # published only hashed
    assert waiting.expired_version(LeaseSeen(False, me, "7")) == ""              # alive: this process
    other = "cpctl ops@another-machine pid 1 machine 1a2b3c4d/5e6f7a8b/9c0d1e2f 0123abcd"
    assert waiting.expired_version(LeaseSeen(False, other, "7")) == ""           # cannot be looked up
    assert waiting.expired_version(LeaseSeen(False, "not cpctl's words", "7")) == ""
    waiting.first_seen -= changelease.LEASE_SECONDS + 1                          # seen unchanged that long
    assert waiting.expired_version(LeaseSeen(False, other, "7")) == "7"
    assert waiting.expired_version(LeaseSeen(False, other, "8")) == ""           # it was renewed: a new clock
    waiting.first_seen -= 31                                                     # its own leaseDurationSeconds
    assert waiting.expired_version(LeaseSeen(False, other, "8", duration=30)) == "8"


# --- against the lab's API server, with a short lease period ---------------------------------------------
LEASE = 4            # seconds: the Lease's leaseDurationSeconds in these tests (cpctl's is 600)
RETRY = 0.2          # a renewal every 0.2 s: 20 renewals per lease period, a margin a busy machine keeps
DEADLINE = 2.0


@pytest.fixture
def short_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(changelease, "LEASE_SECONDS", LEASE)
    monkeypatch.setattr(changelease, "RETRY_PERIOD", RETRY)
    monkeypatch.setattr(changelease, "RENEW_DEADLINE", DEADLINE)


def lab_node(lab: Any) -> Node:
    return Node(LocalHost(), str(lab.manifests_dir()), str(lab.state_dir()), lab.node_name(),
                kubeconfig=lab.kubeconfig)


def wait_for_takeover(node: Node, me: str, waiting: Waiting, seconds: float) -> float:
    """Try as a waiting run does (once every RETRY seconds) for ``seconds``; when it took the lease."""
    started = time.monotonic()
    expired = ""
    while time.monotonic() - started < seconds:
        seen = changelease.try_take(node, me, expired)
        if seen.taken:
            return time.monotonic() - started
        expired = waiting.expired_version(seen)
        time.sleep(RETRY)
    return -1.0


def test_an_alive_holder_is_never_taken_over_and_a_stopped_one_is(lab: Any, short_lease: None) -> None:
    """Issue 45: a waiting run took the Lease over after LEASE_SECONDS on the same resourceVersion
    while its holder was still changing masters (a 900 s run with a 600 s lease). The holder renews
    now: a run three lease periods long is never taken over; once it stops renewing (a SIGKILLed run),
    the waiter takes it after the lease period."""
    node = lab_node(lab)
    first, second = holder_identity(), holder_identity()
    assert changelease.try_take(node, first).taken
    holder = Holder(first, lambda: changelease.renew(node, first))
    holder.start()
    try:
        assert wait_for_takeover(node, second, Waiting(), 3 * LEASE) < 0      # never, for three lease periods
        assert not holder.lost and not holder.error
        holder.check("master2")                                               # still ours: goes on
    finally:
        holder.stop()                                                         # as a SIGKILL would: no release
    took = wait_for_takeover(node, second, Waiting(), 60)   # 60 s: LEASE plus a busy machine's margin
    assert took >= LEASE - 1, took                          # not before the lease period (1 s: the last renewal)
    holder.renew_now()
    assert holder.lost.startswith(second)
    with pytest.raises(CpctlError) as err:
        holder.check("master2")
    assert err.value.code == ExitCode.LOCKED
    assert "not started on master2: this run lost the cluster's change lease" in err.value.message
    assert second in err.value.message
    assert changelease.release(node, first) == second                  # not ours to give back: said, kept
    assert changelease.release(node, second) == ""


def test_a_holder_that_cannot_renew_stops_before_its_next_master(lab: Any, short_lease: None) -> None:
    """No API server answers its renewals for RENEW_DEADLINE: it cannot tell whether another run took
    the Lease, so it does not go on (it tries again for up to RENEW_DEADLINE first)."""
    node = lab_node(lab)
    me = holder_identity()
    assert changelease.try_take(node, me).taken
    calls = []

    def unreachable() -> LeaseSeen:
        calls.append(time.monotonic())
        raise CpctlError("master1: connection refused", ExitCode.API)
    holder = Holder(me, unreachable)
    holder.renewed -= DEADLINE + 1
    with pytest.raises(CpctlError) as err:
        holder.check("master3")
    assert err.value.code == ExitCode.LOCKED and len(calls) >= 2
    assert "could not renew the cluster's change lease" in err.value.message
    assert "master1: connection refused" in err.value.message
    holder = Holder(me, lambda: changelease.renew(node, me))
    holder.renewed -= DEADLINE + 1
    holder.check("master3")                                   # renewed now: goes on
    assert changelease.release(node, me) == ""
