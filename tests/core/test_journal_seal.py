"""A journal is acted on only when cpctl wrote it on this node: its seal (HMAC under STATE/journal.key).

Issue 49 section 5: a crafted journal could still overwrite or remove files below /etc/kubernetes that
the path rules allow for companion files (an encryption config named in ``companions``, a kubeadm patch
file named by a ``keep-in`` undo). Every such journal is refused now - before any of it runs, one line,
exit 7, the journal left for the operator - by cpctl's recovery and by the node-side revert alike, while
an honest journal (sealed when its change was made) is still finished or rolled back.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from cpctl.agent import journalseal, noderevert, txn
from tests.coreutil import MANIFESTS, NodeDirs, sha, snapshot

SCHEDULER = "kube-scheduler.yaml"
ATTACKER = b"kind: EncryptionConfiguration\nresources: []\n"


def _node(tmp_path: Any) -> NodeDirs:
    """A node whose kube dir (the manifests dir's parent) holds an encryption config and a kubeadm
    patch file, and a state dir (0700) without a journal key yet."""
    node = NodeDirs(str(tmp_path / "kubernetes"))
    for sub in ("", "staged"):
        os.makedirs(os.path.join(node.state, sub), mode=0o700, exist_ok=True)
        os.chmod(os.path.join(node.state, sub), 0o700)
    os.makedirs(os.path.join(node.root, "patches"))
    for path, data in ((_encryption(node), b"kind: EncryptionConfiguration\n# the cluster's keys\n"),
                       (_patch(node), b"- op: add\n  path: /spec/containers/0/command/-\n  value: --v=2\n")):
        with open(path, "wb") as handle:
            handle.write(data)
    return node


def _encryption(node: NodeDirs) -> str:
    return os.path.join(node.root, "encryption-config.yaml")


def _patch(node: NodeDirs) -> str:
    return os.path.join(node.root, "patches", "kube-apiserver+json.yaml")


def _entry(node: NodeDirs, action: str, steps: list, **extra: Any) -> Dict[str, Any]:
    """A journal whose commit step (a write of the scheduler's manifest with its current bytes) is
    done: recovery rolls it forward and redoes every later step."""
    manifest = os.path.join(node.manifests, SCHEDULER)
    staged = os.path.join(node.state, "staged", "c0ffee.0.new")
    with open(staged, "wb") as handle:
        handle.write(MANIFESTS[SCHEDULER])
    first = {"kind": "write", "path": manifest, "checksum": sha(MANIFESTS[SCHEDULER]), "staged": staged,
             "before": sha(MANIFESTS[SCHEDULER]), "kept": staged, "mode": 0o600}
    entry = {"version": 2, "op": "c0ffee0000000001", "action": action, "component": "kube-scheduler",
             "file": SCHEDULER, "checksum": sha(MANIFESTS[SCHEDULER]), "commit": 0, "steps": [first] + steps,
             "record": {}, "started": "2026-01-01T00:00:00Z", "pid": 424242}
    entry.update(extra)
    return entry


def _overwrite_encryption_config(node: NodeDirs) -> Dict[str, Any]:
    """A write of the encryption config, named in the journal's own ``companions`` (the allowance a
    ``--with-file`` change records)."""
    evil = os.path.join(node.state, "staged", "c0ffee.1.new")
    with open(evil, "wb") as handle:
        handle.write(ATTACKER)
    with open(_encryption(node), "rb") as handle:
        before = sha(handle.read())
    step = {"kind": "write", "path": _encryption(node), "checksum": sha(ATTACKER), "staged": evil, "before": before,
            "kept": os.path.join(node.state, "staged", "c0ffee.1.old"), "mode": 0o600}
    return _entry(node, "apply", [step], companions=[_encryption(node)])


def _remove_patch(node: NodeDirs) -> Dict[str, Any]:
    """The removal of a kubeadm patch file, as a ``keep-in`` undo records it."""
    step = {"kind": "remove", "path": _patch(node), "kept": os.path.join(node.state, "staged", "c0ffee.1.removed")}
    return _entry(node, "keep-in", [step], record={"patch": _patch(node), "undo": True})


def _write(node: NodeDirs, entry: Dict[str, Any]) -> None:
    with open(node.journal, "w") as handle:
        json.dump(entry, handle)
    os.chmod(node.journal, 0o600)


def _files(node: NodeDirs) -> Dict[str, Any]:
    """The node's files a journal could reach (manifests, the kube dir's own files) and the journal
    with its staged files (kept for the operator)."""
    return snapshot(node.manifests, _encryption(node), os.path.dirname(_patch(node)), node.journal,
                    os.path.join(node.state, "staged"))


def _assert_refused(node: NodeDirs, entry: Dict[str, Any], why: str) -> None:
    _write(node, entry)
    before = _files(node)
    for command in (("status",), ("stop", "etcd")):
        proc = node.run(*command, rc=7)
        assert "journal.json is not a journal cpctl wrote on this node (%s" % why in proc.stderr, proc.stderr
        assert "nothing of it runs" in proc.stderr
        assert _files(node) == before, command          # nothing touched, the journal kept


def test_a_crafted_journal_cannot_overwrite_the_encryption_config(tmp_path: Any) -> None:
    node = _node(tmp_path)
    _assert_refused(node, _overwrite_encryption_config(node), "it carries no seal")
    with open(_encryption(node), "rb") as handle:
        assert handle.read() != ATTACKER


def test_a_crafted_journal_cannot_remove_a_kubeadm_patch_file(tmp_path: Any) -> None:
    node = _node(tmp_path)
    _assert_refused(node, _remove_patch(node), "it carries no seal")
    assert os.path.exists(_patch(node))


def test_a_journal_sealed_on_another_node_or_edited_is_refused(tmp_path: Any) -> None:
    node = _node(tmp_path)
    elsewhere = str(tmp_path / "other-state")
    os.makedirs(elsewhere, mode=0o700)
    foreign = journalseal.sealed(_remove_patch(node), journalseal.journal_key(elsewhere, create=True))
    journalseal.journal_key(node.state, create=True)
    _assert_refused(node, foreign, "its seal does not match this node's key")
    mine = journalseal.sealed(_entry(node, "apply", []), journalseal.journal_key(node.state))
    mine["steps"] = _remove_patch(node)["steps"]                   # sealed here, then edited
    mine["action"], mine["record"] = "keep-in", {"patch": _patch(node), "undo": True}
    _assert_refused(node, mine, "its seal does not match this node's key")
    assert os.path.exists(_patch(node))


def test_an_honest_journal_is_sealed_and_recovered(tmp_path: Any) -> None:
    """cpctl's own journal carries the seal (the key created 0600 on the first change), and the next
    command acts on it: a killed stop after its move is completed."""
    node = _node(tmp_path)
    key = os.path.join(node.state, journalseal.JOURNAL_KEY)
    node.run("stop", "scheduler")
    assert os.stat(key).st_mode & 0o777 == 0o600
    with open(key, "rb") as handle:
        first = handle.read()
    node.run("start", "scheduler")
    with open(key, "rb") as handle:
        assert handle.read() == first                                 # created once, never replaced
    from tests.coreutil import journal_for, sealed
    entry = journal_for(node, "stop", SCHEDULER)
    os.rename(entry["src"], entry["dst"])
    _write(node, sealed(node.state, entry))
    proc = node.run("status")
    assert "completed interrupted stop of kube-scheduler" in proc.stderr, proc.stderr
    assert not os.path.exists(node.journal)


def test_a_key_that_is_not_cpctls_stops_changes_before_anything_is_written(tmp_path: Any) -> None:
    node = _node(tmp_path)
    key = os.path.join(node.state, journalseal.JOURNAL_KEY)
    with open(key, "w") as handle:
        handle.write("0" * 64 + "\n")
    os.chmod(key, 0o644)
    before = _files(node)
    proc = node.run("stop", "scheduler", rc=7)
    assert "journal.key is not a regular file of mode 0600" in proc.stderr, proc.stderr
    assert _files(node) == before and not os.path.exists(node.journal)


def _plan(node: NodeDirs, entry: Dict[str, Any]) -> Dict[str, Any]:
    """The node-side revert's plan, whose own change ``entry`` is (what ``ops.confirm`` arms)."""
    state = node.state
    return {"entry": entry, "record": {}, "op": entry["op"], "journal": node.journal,
            "history": os.path.join(state, "history.jsonl"), "arm": os.path.join(state, "confirm", "x.json"),
            "verdict": {"node": "cp-1"}, "patches": []}


def test_the_node_side_revert_refuses_an_unsealed_journal_of_its_own_change(tmp_path: Any) -> None:
    """The node-side revert (``cpctl.agent``, no cpctl installed) meets a pending journal naming its own
    change's steps: acted on only with this node's seal, the same rule as cpctl's recovery."""
    node = _node(tmp_path)
    entry = _overwrite_encryption_config(node)
    plan = _plan(node, entry)
    _write(node, entry)
    before = _files(node)
    code, message = noderevert._pending_journal(plan, txn._node_runner())
    assert code == 7 and "is not a journal cpctl wrote on this node (it carries no seal)" in message, message
    assert "NOT reverted" in message
    assert _files(node) == before
    _write(node, journalseal.sealed(entry, journalseal.journal_key(node.state, create=True)))  # as _run_entry does
    code, message = noderevert._pending_journal(plan, txn._node_runner())
    assert code == 0 and message == "reverted", message
    with open(_encryption(node), "rb") as handle:
        assert handle.read() == ATTACKER                     # sealed here: its own change, finished
    assert not os.path.exists(node.journal)


def test_check_says_an_unsealed_journal_is_left_for_the_operator(tmp_path: Any) -> None:
    """``check`` never promises that the next command recovers a journal it will refuse."""
    node = _node(tmp_path)
    _write(node, _remove_patch(node))
    proc = node.run("check", rc=1)
    assert "journal.json is not a journal cpctl wrote on this node (it carries no seal): nothing of it runs" \
        in proc.stdout, proc.stdout
    assert "completes or rolls it back" not in proc.stdout
    assert os.path.exists(_patch(node)) and os.path.exists(node.journal)
