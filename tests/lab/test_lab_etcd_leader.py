"""Issue 46: a stop, restart or manifest change of etcd on the master whose member leads hands the
leadership to a healthy voter first (docs/etcd.md, "Leadership before a change of etcd"), on the lab's
``ha`` profile, whose kubelets run the real etcd (3 members, kubeadm's flags and PKI) from the masters'
manifests. What is compared is etcd's own account: its logs and its endpoint status, not cpctl's words.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest

from tests.lab.test_lab_realetcd import _etcdctl, real_etcd  # noqa: F401 - the fixture
from tests.labfixture import is_ready, mirror, run_cpctl, wait_for

pytestmark = pytest.mark.timeout(900)


def _members(lab: Any, master: int) -> Tuple[int, Dict[int, str]]:
    """(the leader's member ID, member ID -> name) as etcd reports them through ``master``'s member."""
    listed = _etcdctl(lab, master, "member", "list", "-w", "json")
    assert listed.returncode == 0, listed.stderr
    names = {int(m["ID"]): str(m["name"]) for m in json.loads(listed.stdout)["members"]}
    status = _etcdctl(lab, master, "endpoint", "status", "-w", "json")
    assert status.returncode == 0, status.stderr
    return int(json.loads(status.stdout)[0]["Status"]["leader"]), names


def _said(text: str, msg: str, **fields: str) -> bool:
    """Whether an etcd log line (JSON, zap) says ``msg`` with these fields."""
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("msg") == msg and all(entry.get(k) == v for k, v in fields.items()):
            return True
    return False


def _log_sizes(lab: Any) -> Dict[Path, int]:
    return {path: path.stat().st_size for path in (lab.dir / "containers").glob("*/etcd.log")}


def _new_log(lab: Any, before: Dict[Path, int]) -> Dict[Path, str]:
    """What each etcd wrote to its log since ``before`` (new containers: all of it)."""
    out = {}
    for path in (lab.dir / "containers").glob("*/etcd.log"):
        with open(path, "rb") as handle:
            handle.seek(before.get(path, 0))
            out[path] = handle.read().decode("utf-8", "replace")
    return out


class LeaderSampler(threading.Thread):
    """Asks the members that stay up, in turn, whom they name as leader, until stopped: every answer
    must name one (0: no leader, an election under way)."""

    def __init__(self, lab: Any, masters: List[int]) -> None:
        super().__init__(daemon=True)
        self.lab, self.masters = lab, masters
        self.seen: List[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            for master in self.masters:
                status = _etcdctl(self.lab, master, "endpoint", "status", "-w", "json")
                if status.returncode == 0:
                    self.seen.append(int(json.loads(status.stdout)[0]["Status"]["leader"]))


def test_restart_of_etcd_on_the_leaders_master_moves_leadership_first(real_etcd: Any,  # noqa: F811
                                                                     lab_factory: Callable[..., Any]) -> None:
    lab = lab_factory(profile="ha")
    leader, names = _members(lab, 1)
    assert len(names) == 3 and leader in names
    here = next(m for m in (1, 2, 3) if lab.node_name(m) == names[leader])
    others = [m for m in (1, 2, 3) if m != here]
    before = _log_sizes(lab)
    sampler = LeaderSampler(lab, others)
    sampler.start()
    try:
        run = run_cpctl(lab.env_for(here), "restart", "etcd", "--reason", "leader test", timeout=300)
    finally:
        sampler.halt.set()
        sampler.join(120)
    assert run.returncode == 0, run.stdout + run.stderr
    logs = _new_log(lab, before)
    now, _ = _members(lab, others[0])
    assert now != leader and now in names
    moved = "etcd leadership moved from %s to %s before restart of etcd" % (names[leader], names[now])
    assert moved in run.stdout, run.stdout            # in the result (with -H/-i too), not only on stderr
    # etcd's own account: the transfer asked through its maintenance API, the transferee's election
    # started by the old leader's MsgTimeoutNow - the only election, no pre-vote after an election timeout
    old, new = "%x" % leader, "%x" % now
    text = "".join(logs.values())
    assert _said(text, "leadership transfer starting", **{"current-leader-member-id": old,
                                                          "transferee-member-id": new}), text[-4000:]
    assert "%s [term" % new in text and "received MsgTimeoutNow from %s and starts an election" % old in text
    assert text.count("is starting a new election") == 1 and text.count("became leader") == 1, text[-4000:]
    stayed = "".join(v for k, v in logs.items() if k in before)        # the members up throughout, and the old one
    assert "became pre-candidate" not in stayed, stayed[-4000:]
    # ... before the kubelet stopped it: then the old leader had nothing to hand over itself
    assert _said(text, "skipped leadership transfer; local server is not leader",
                 **{"local-member-id": old, "current-leader-member-id": new}), text[-4000:]
    assert text.index("leadership transfer finished") < text.index("skipped leadership transfer")
    # and whoever was asked meanwhile named a leader
    assert sampler.seen and all(seen != 0 for seen in sampler.seen), sampler.seen
    history = json.loads(run_cpctl(lab.env_for(here), "-o", "json", "history", "--limit", "100").stdout)["history"]
    records = [r for r in history if r["action"] == "etcd-move-leader"]
    assert [(r["member"], r["to"]) for r in records] == [(names[leader], names[now])]
    assert "before restart of etcd" in records[0]["reason"]
    wait_for(lambda: is_ready(mirror(lab, "etcd", here)), 120, "etcd's mirror pod Ready after the restart")
    # --no-move-leader: cpctl neither asks nor moves (etcd 3.5 itself hands leadership over on SIGTERM,
    # bounded by its own timeout: the log says so)
    again = next(m for m in (1, 2, 3) if lab.node_name(m) == names[now])
    before = _log_sizes(lab)
    run = run_cpctl(lab.env_for(again), "restart", "etcd", "--no-move-leader", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "etcd leadership not checked before restart of etcd (--no-move-leader)" in run.stdout, run.stdout
    text = "".join(_new_log(lab, before).values())
    assert text.index("received signal; shutting down") < text.index("leadership transfer starting"), text[-4000:]
    history = json.loads(run_cpctl(lab.env_for(again), "-o", "json", "history", "--limit", "100").stdout)["history"]
    assert [r for r in history if r["action"] == "etcd-move-leader"] == []


def test_flags_of_etcd_on_the_leaders_master_moves_leadership_first(real_etcd: Any,  # noqa: F811
                                                                   lab_factory: Callable[..., Any]) -> None:
    """The manifest changes (edit, apply, flags, rollback) go through one path: flags stands for them."""
    lab = lab_factory(profile="ha")
    leader, names = _members(lab, 1)
    here = next(m for m in (1, 2, 3) if lab.node_name(m) == names[leader])
    run = run_cpctl(lab.env_for(here), "flags", "etcd", "--set", "heartbeat-interval=150", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    now, _ = _members(lab, next(m for m in (1, 2, 3) if m != here))
    assert now != leader
    assert "etcd leadership moved from %s to %s before flags of etcd" % (names[leader], names[now]) in run.stderr
    # the same change again is no change: nothing goes down, nothing is asked
    again = run_cpctl(lab.env_for(here), "flags", "etcd", "--set", "heartbeat-interval=150", timeout=300)
    assert again.returncode == 0 and "leadership" not in again.stderr, again.stderr


def test_single_member_restart_goes_on_and_says_so(real_etcd: Any, lab: Any) -> None:  # noqa: F811
    run = run_cpctl(lab, "restart", "etcd", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert ("etcd member %s is the only voting member: no leadership to move before restart of etcd; going on"
            % lab.node_name(1)) in run.stdout, run.stdout
    wait_for(lambda: is_ready(mirror(lab, "etcd")), 120, "etcd's mirror pod Ready after the restart")
