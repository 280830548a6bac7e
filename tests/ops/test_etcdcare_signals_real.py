"""Issue 46: SIGINT and SIGKILL while ``cpctl etcd move-leader``, ``alarm disarm`` and ``recover-space``
change a real 3-member etcd (tests.realetcd, each member seen as a master by tests.etcdnodes).

Each run is caught while its request is in flight: as soon as cpctl's intent (``etcd-op.json``) names
the member it changes, cpctl itself is frozen (SIGSTOP), then the etcd member its request waits on,
then cpctl runs on into that request, which cannot end now, and gets the signal. A cpctl whose request
was answered before it was frozen (it then ends by itself) is a missed catch, tried again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List

import pytest

from tests import etcdnodes as en
from tests.ops.test_etcdcare_real import QUOTA, _fill_history, _leader, valid
from tests.realetcd import RealEtcd

pytestmark = pytest.mark.timeout(900)
#: After cpctl runs on into its request: long enough that it reached the request on 2 busy cores; a
#: request to a frozen member cannot end meanwhile, so a longer pause changes nothing.
INTO_REQUEST = 1.0
ATTEMPTS = 4


def _intent(cluster: RealEtcd) -> Dict[str, Any]:
    return dict(json.loads((cluster.members["m1"].root / "var/lib/cpctl/etcd-op.json").read_text()))


def _still(cluster: RealEtcd, intent: Dict[str, Any]) -> bool:
    """The same intent is there still: cpctl is inside that request (a frozen member cannot answer it)."""
    try:
        return _intent(cluster) == intent
    except (OSError, ValueError):
        return False


def _caught(cluster: RealEtcd, args: List[str], sig: int, waits_on: Callable[[Dict[str, Any]], str]) -> Dict[str, Any]:
    """Run ``cpctl ARGS`` on m1's node and catch it in the request of its first intent (see the module
    docstring); its exit code, stderr and the intent it was caught in ({}: answered before the catch, and
    cpctl killed)."""
    proc = subprocess.Popen([sys.executable, "-m", "cpctl", *en.node_args(cluster, "m1"), *args], cwd=en.REPO,
                            env=en.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    frozen: List[int] = []
    intent: Dict[str, Any] = {}
    try:
        deadline = time.monotonic() + en.RUN_TIMEOUT
        while not intent and proc.poll() is None and time.monotonic() < deadline:
            try:
                intent = _intent(cluster)
            except (OSError, ValueError):
                intent = {}
            if intent.get("pid") != proc.pid:       # none yet, or a missed catch's (killed) run's
                intent = {}
                time.sleep(0.001)
        if intent and proc.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP)
            member = cluster.members[waits_on(intent)].proc
            assert member is not None
            os.kill(member.pid, signal.SIGSTOP)
            frozen.append(member.pid)
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(INTO_REQUEST)
            if proc.poll() is None and _still(cluster, intent):
                os.kill(proc.pid, sig)
            else:                   # answered before the freeze: cpctl went on (maybe into a frozen member)
                intent = {}
                proc.kill()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    return {"rc": proc.returncode, "stdout": out, "stderr": err, "intent": intent}


def _catch(cluster: RealEtcd, args: List[str], sig: int, waits_on: Callable[[Dict[str, Any]], str],
           again: Callable[[], None] = lambda: None) -> Dict[str, Any]:
    """``_caught`` until a catch (``again()`` sets the scene anew after a miss)."""
    for _ in range(ATTEMPTS):
        seen = _caught(cluster, args, sig, waits_on)
        if seen["intent"]:
            return seen
        _healthy(cluster)
        again()
    raise AssertionError("cpctl was never caught in its request in %d attempts" % ATTEMPTS)


def _healthy(cluster: RealEtcd) -> Dict[str, Any]:
    """Once every member answers its status naming a leader (not /health: NOSPACE makes it false),
    cpctl's etcd status (the first run after a killed one names it)."""
    def answering() -> bool:
        try:
            found = en.statuses(cluster)
        except (AssertionError, OSError):
            return False
        return len(found) == 3 and all(s["leader"] for s in found.values())
    cluster.wait_for(answering, "every member answering, naming a leader")
    return dict(valid("etcd-status", en.cpctl_json(cluster, "m1", "etcd", "status")))


def _actions(cluster: RealEtcd) -> List[str]:
    return [r["action"] for r in en.history(cluster, "m1")]


# --------------------------------------------------------------------------- move-leader

def test_sigint_during_move_leader_says_where_and_leaves_a_leader(real_etcd: RealEtcd) -> None:
    seen = _catch(real_etcd, ["etcd", "move-leader"], signal.SIGINT, lambda intent: str(intent["to"]))
    assert seen["rc"] == 130, seen
    line = seen["stderr"].splitlines()[-1]
    assert line.startswith("cpctl: interrupted (SIGINT) while etcd leadership was being handed from %s to %s"
                           % (seen["intent"]["member"], seen["intent"]["to"])), seen
    assert "Traceback" not in seen["stderr"]
    assert not (real_etcd.members["m1"].root / "var/lib/cpctl/etcd-op.json").exists()
    assert _actions(real_etcd)[-1] == "etcd-move-leader-interrupted"
    status = _healthy(real_etcd)                      # the transfer ended or was abandoned: a leader, all healthy
    assert status["leader"] and status["voters_healthy"] == 3 and status["interrupted"] == []
    moved = valid("etcd-move-leader", en.cpctl_json(real_etcd, "m1", "etcd", "move-leader"))   # the lock is free
    assert moved["changed"] is True and _leader(real_etcd) == moved["to_member"]


def test_sigkill_during_move_leader_is_named_by_the_next_run(real_etcd: RealEtcd) -> None:
    seen = _catch(real_etcd, ["etcd", "move-leader"], signal.SIGKILL, lambda intent: str(intent["to"]))
    assert seen["rc"] == -signal.SIGKILL, seen
    assert _intent(real_etcd)["op"] == "move-leader"
    status = _healthy(real_etcd)
    assert len(status["interrupted"]) == 1, status
    assert ("while member %s was being changed (its leadership handed over)" % seen["intent"]["member"]
            in status["interrupted"][0])
    assert _actions(real_etcd)[-1] == "etcd-move-leader-killed"
    assert valid("etcd-status", en.cpctl_json(real_etcd, "m1", "etcd", "status"))["interrupted"] == []


# --------------------------------------------------------------------------- alarm disarm and recover-space

def _nospace(quota_cluster: Callable[..., RealEtcd]) -> RealEtcd:
    cluster = quota_cluster(quota_backend_bytes=QUOTA)
    _fill_history(cluster)
    return cluster


def test_sigint_during_alarm_disarm_names_the_alarm_and_leaves_the_rest(real_etcd_factory: Any) -> None:
    cluster = _nospace(real_etcd_factory)
    seen = _catch(cluster, ["etcd", "alarm", "disarm"], signal.SIGINT, lambda intent: "m1",
                  again=lambda: _fill_history(cluster))
    assert seen["rc"] == 130, seen
    line = seen["stderr"].splitlines()[-1]
    assert line.startswith("cpctl: interrupted (SIGINT) while the NOSPACE alarm of etcd member %s was being "
                           "disarmed" % seen["intent"]["member"]), seen
    assert not (cluster.members["m1"].root / "var/lib/cpctl/etcd-op.json").exists()
    assert _actions(cluster)[-1] == "etcd-alarm-disarm-interrupted"
    _healthy(cluster)
    # the SIGINT landed while the disarm request was in flight: etcd may have carried it out or not
    still_armed = "NOSPACE" in {a["alarm"] for a in cluster.alarms()}
    valid("etcd-recover-space", en.cpctl_json(cluster, "m1", "etcd", "recover-space"))   # and then it recovers
    assert cluster.alarms() == []
    if still_armed:
        # recover-space compacted, defragmented and disarmed: a write succeeds (etcd may answer 429, its "try
        # again", while a member applies a backlog after the defrags)
        deadline = time.monotonic() + 60
        answer = cluster.put(b"/after", b"x")
        while answer[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
            answer = cluster.put(b"/after", b"x")
        assert answer[0] == 200, answer


def test_sigkill_during_alarm_disarm_is_named_by_the_next_run(real_etcd_factory: Any) -> None:
    cluster = _nospace(real_etcd_factory)
    seen = _catch(cluster, ["etcd", "alarm", "disarm"], signal.SIGKILL, lambda intent: "m1",
                  again=lambda: _fill_history(cluster))
    assert seen["rc"] == -signal.SIGKILL, seen
    assert _intent(cluster)["op"] == "alarm-disarm"
    status = _healthy(cluster)
    assert len(status["interrupted"]) == 1 and "(its alarm disarmed)" in status["interrupted"][0], status
    assert _actions(cluster)[-1] == "etcd-alarm-disarm-killed"


def test_sigint_during_recover_space_keeps_nospace_armed_and_a_rerun_recovers(real_etcd_factory: Any) -> None:
    cluster = _nospace(real_etcd_factory)
    seen = _catch(cluster, ["etcd", "recover-space"], signal.SIGINT, lambda intent: str(intent["member"]),
                  again=lambda: _fill_history(cluster))
    assert seen["rc"] == 130, seen
    line = seen["stderr"].splitlines()[-1]
    assert line.startswith("cpctl: interrupted (SIGINT) while etcd member %s was being defragmented"
                           % seen["intent"]["member"]), seen
    assert "NOSPACE" in {a["alarm"] for a in cluster.alarms()}        # never disarmed half-way
    actions = _actions(cluster)
    assert "etcd-compact" in actions and actions[-1] == "etcd-defrag-interrupted"
    _healthy(cluster)
    done = valid("etcd-recover-space", en.cpctl_json(cluster, "m1", "etcd", "recover-space"))
    assert done["changed"] is True and cluster.alarms() == []


def test_sigkill_during_recover_space_is_named_and_a_rerun_recovers(real_etcd_factory: Any) -> None:
    cluster = _nospace(real_etcd_factory)
    seen = _catch(cluster, ["etcd", "recover-space"], signal.SIGKILL, lambda intent: str(intent["member"]),
                  again=lambda: _fill_history(cluster))
    assert seen["rc"] == -signal.SIGKILL, seen
    assert _intent(cluster)["op"] == "defrag"
    assert "NOSPACE" in {a["alarm"] for a in cluster.alarms()}
    _healthy(cluster)
    done = valid("etcd-recover-space", en.cpctl_json(cluster, "m1", "etcd", "recover-space"))
    assert done["changed"] is True and cluster.alarms() == []
    assert "etcd-defrag-killed" in _actions(cluster)
