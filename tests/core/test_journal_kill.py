"""SIGKILL at every step of every kind of change, then recovery: the crash-safety invariants hold.

Each kind of change (stop, start, start-edited, scheduler-add, scheduler-remove, move-stray,
restore-missing, apply, apply-parked, rollback, keep-in, apply-companion: a manifest and a companion file
written by one change) runs in a forked child on a ``MockHost`` that
kills the process just before its Nth host call, for every N from the first call to the last - every
instant between two file operations is a kill point. The next cpctl command (``status``, in-process)
must then find the node in one of the two states the change goes between, completed or rolled back,
say which, and leave no journal, no staged or temp file, and never two loadable files for one pod in
the manifests dir.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from typing import Any, Callable, Dict, List, Tuple

import pytest

from cpctl.core import keptin, kubeadmconfig, views
from cpctl.core.companions import Companion
from cpctl.core.settings import Settings
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.local import LocalHost
from cpctl.ops import drift, edits, keepin, lifecycle
from cpctl.ops import scheduler as secondsched
from cpctl.ops.wiring import open_node
from tests.coreutil import MANIFESTS, NODE, NodeDirs, killed_run, sha

SCHEDULER = MANIFESTS["kube-scheduler.yaml"]
STRAY = b"not a pod: an editor's leftover\n"
NEW_SCHEDULER = SCHEDULER.replace(b"    - --leader-elect=true\n", b"    - --leader-elect=true\n    - --v=4\n")
EDIT_OPTIONS = edits.ApplyOptions(timeout=1, settle=0)
OLD_COMPANION, NEW_COMPANION = b"policy v1\n", b"policy v2\n"


def _companion_path(root: str) -> str:
    """A companion file below the node's kube dir (``root``): allowed by the journal only because the
    change records it in ``companions``."""
    return root + "/companion/policy.yaml"


def _mounting(data: bytes, node_path: str) -> bytes:
    """The manifest with a hostPath volume for ``node_path`` mounted read-only into its container."""
    import yaml
    pod = yaml.safe_load(data)
    pod["spec"].setdefault("volumes", []).append({"name": "policy", "hostPath": {"path": node_path, "type": "File"}})
    pod["spec"]["containers"][0].setdefault("volumeMounts", []).append(
        {"name": "policy", "mountPath": "/etc/policy/policy.yaml", "readOnly": True})
    return yaml.safe_dump(pod, sort_keys=False).encode()


def _apply_companion(node: Any) -> Any:
    path = _companion_path(os.path.dirname(node.manifests_dir))
    new = _mounting(NEW_SCHEDULER, path)
    return edits.replace(node, "scheduler", new, "test", "apply", edits.ApplyOptions(timeout=1, settle=0, force=True),
                         companions=[Companion(path, NEW_COMPANION, "policy.yaml")])


def _run(node: NodeDirs, kind: str, kill_at: int) -> Tuple[int, int]:
    """Run one change in a forked child that SIGKILLs itself before its ``kill_at``-th host call."""
    return killed_run(node, CHANGES[kind], kill_at)


THEIRS = SCHEDULER.replace(b"    - --leader-elect=true\n", b"    - --leader-elect=true\n    - --v=7\n")


def _displace(node: Any) -> None:
    """Another writer replaced cpctl's applied version: cpctl keeps its own bytes as a revision
    (the journaled "displaced" change), then reports the conflict."""
    with node.session("kill test"):
        manifest = edits.current(node, "scheduler", "apply")
        written = edits.Written(manifest, NEW_SCHEDULER, sha(NEW_SCHEDULER), 1, "apply")
        try:
            edits.still_ours(node, written, EDIT_OPTIONS, "in the kill test")
        except CpctlError as exc:
            assert exc.code == ExitCode.CONFLICT
            return
    raise AssertionError("no conflict")


# what kubeadm renders the patch file's ops against (no API in this test: given, not read)
CLUSTER_CONFIGURATION = {"apiVersion": "kubeadm.k8s.io/v1beta3", "kind": "ClusterConfiguration", "scheduler": {}}
CHANGES: Dict[str, Callable[[Any], Any]] = {
    "stop": lambda node: lifecycle.stop(node, ["scheduler"], "kill test", None, False, 1),
    "start": lambda node: lifecycle.start(node, ["scheduler"], False, 1),
    "scheduler-add": lambda node: secondsched.add(node, "my-scheduler", wait=False),
    "scheduler-remove": lambda node: secondsched.remove(node, "my-scheduler", wait=False),
    "move-stray": lambda node: drift.fix(node, drift.check(node), remove_strays=True),
    "restore-missing": lambda node: drift.fix(node, drift.check(node), remove_strays=False, timeout=1,
                                              restore_missing=True),
    "apply": lambda node: edits.replace(node, "scheduler", NEW_SCHEDULER, "test", "apply", EDIT_OPTIONS),
    "rollback": lambda node: edits.replace(node, "scheduler", SCHEDULER, "revision 1", "rollback", EDIT_OPTIONS),
    "apply-parked": lambda node: edits.replace(node, "scheduler", NEW_SCHEDULER, "test", "apply",
                                               edits.ApplyOptions(timeout=1, settle=0, parked=True)),
    "start-edited": lambda node: lifecycle.start(node, ["scheduler"], False, 1),
    "apply-companion": _apply_companion,
    "keep-in": lambda node: keepin.write_patch(node, keepin.plan(
        node, "kube-scheduler", SCHEDULER, NEW_SCHEDULER, kubeadmconfig.FlagChange([("v", "4")]),
        [kubeadmconfig.KeepIn("patches")], config=CLUSTER_CONFIGURATION), None),
    "displaced": _displace,
    "keep-in-undo": lambda node: keptin.undo_patch(node, _kept_patch(node)),
}

PATCH_BYTES = b'- {"op": "add", "path": "/spec/containers/0/command/-", "value": "--v=4"}\n'


def _kept_patch(node: Any) -> Any:
    """The record of a --keep-in patches change that created the patch file (there was none before)."""
    path = os.path.join(os.path.dirname(node.manifests_dir), "patches", "kube-scheduler+json.yaml")
    return keptin.KeptPatch("0123456789abcdef", "kube-scheduler", "kube-scheduler.yaml", sha(SCHEDULER),
                            sha(NEW_SCHEDULER), path, None, sha(PATCH_BYTES))


def _prepare(kind: str, root: str) -> NodeDirs:
    """A node in the state the change starts from (set up without faults)."""
    if kind in ("scheduler-add", "scheduler-remove", "apply", "rollback", "keep-in", "displaced", "keep-in-undo"):
        node = NodeDirs(root, files={"kube-scheduler.yaml": SCHEDULER})
    elif kind == "apply-companion":
        node = NodeDirs(root, files={"kube-scheduler.yaml": _mounting(SCHEDULER, _companion_path(root))})
        os.makedirs(os.path.dirname(_companion_path(root)))
        with open(_companion_path(root), "wb") as handle:
            handle.write(OLD_COMPANION)
    else:
        node = NodeDirs(root)
    if kind in ("start", "start-edited", "apply-parked"):
        _done(_run(node, "stop", 0))
    if kind == "start-edited":                  # the parked copy changed by hand
        with open(os.path.join(node.parked, "kube-scheduler.yaml"), "wb") as handle:
            handle.write(NEW_SCHEDULER)
    if kind == "scheduler-remove":
        _done(_run(node, "scheduler-add", 0))
    if kind in ("rollback", "displaced"):
        _done(_run(node, "apply", 0))
    if kind == "displaced":
        with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "wb") as handle:
            handle.write(THEIRS)
    if kind == "keep-in-undo":                  # the patch file a kept change wrote, and its record
        _done(_run(node, "keep-in", 0))
        settings = Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none")
        opened = open_node(settings, LocalHost())
        with opened.session("test"):
            keptin.save_patch(opened, _kept_patch(opened))
    if kind == "move-stray":
        with open(os.path.join(node.manifests, "kube-scheduler.yaml.orig"), "wb") as handle:
            handle.write(STRAY)
    if kind == "restore-missing":
        settings = Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none")
        drift.record(open_node(settings, LocalHost()), accept=False)
        os.unlink(os.path.join(node.manifests, "kube-scheduler.yaml"))
    return node


def _done(result: Tuple[int, int]) -> int:
    status, calls = result
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the change failed without a fault"
    return calls


def _recover(node: NodeDirs) -> Dict[str, Any]:
    """What the next cpctl command does first: finish or roll back, then show the node."""
    settings = Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none")
    return views.status(open_node(settings, LocalHost()))


def _files(directory: str) -> Dict[str, bytes]:
    out = {}
    for base, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(base, name), "rb") as handle:
                out[os.path.relpath(os.path.join(base, name), directory)] = handle.read()
    return out


def _actions(node: NodeDirs) -> List[str]:
    return [r["action"] for r in node.history()]


def _common(node: NodeDirs, status: Dict[str, Any]) -> None:
    """No journal, nothing staged, no dot-temp file, no pod defined twice in the manifests dir."""
    assert not os.path.exists(node.journal)
    staged = os.path.join(node.state, "staged")
    assert not (os.path.isdir(staged) and os.listdir(staged))
    for directory in (node.manifests, node.state):
        leftovers = [p for p in _files(directory) if ".cpctl-tmp" in p]
        assert not leftovers, leftovers
    assert not [w for w in status["warnings"] if "several files" in w]


def _check_stop_or_start(node: NodeDirs, kind: str, status: Dict[str, Any]) -> str:
    scheduler = [b for b in [*_files(node.manifests).values(), *_files(node.parked).values()]
                 if b == node.files["kube-scheduler.yaml"]]
    assert len(scheduler) == 1, "the scheduler's bytes must exist exactly once"
    parked = os.path.exists(os.path.join(node.parked, "kube-scheduler.yaml"))
    meta = os.path.exists(os.path.join(node.state, "meta", "kube-scheduler.yaml.json"))
    assert parked == meta, "a parked manifest has its metadata, a running one none"
    expected = (["stop"] if kind == "stop" else ["stop", "start"])
    if (kind == "stop") == parked:
        assert _actions(node) == expected
        return "completed"
    assert _actions(node) == expected[:-1]
    return "rolled back"


def _check_scheduler_add(node: NodeDirs, status: Dict[str, Any]) -> str:
    manifest = os.path.exists(os.path.join(node.manifests, "my-scheduler.yaml"))
    config = os.path.exists(os.path.join(node.root, "my-scheduler-config.yaml"))
    assert manifest == config, "never a scheduler manifest without its config, nor a config left alone"
    assert _actions(node) == (["scheduler-add"] if manifest else [])
    return "completed" if manifest else "rolled back"


def _check_scheduler_remove(node: NodeDirs, status: Dict[str, Any]) -> str:
    manifest = os.path.exists(os.path.join(node.manifests, "my-scheduler.yaml"))
    config = os.path.exists(os.path.join(node.root, "my-scheduler-config.yaml"))
    removed = _files(os.path.join(node.state, "removed")) if os.path.isdir(os.path.join(node.state, "removed")) else {}
    if manifest:
        assert config and not removed and _actions(node) == ["scheduler-add"]
        return "rolled back"
    assert not config, "the config goes with the manifest"
    assert sorted(os.path.basename(p) for p in removed) == ["my-scheduler-config.yaml", "my-scheduler.yaml"]
    assert _actions(node) == ["scheduler-add", "scheduler-remove"]
    return "completed"


def _check_move_stray(node: NodeDirs, status: Dict[str, Any]) -> str:
    here = os.path.exists(os.path.join(node.manifests, "kube-scheduler.yaml.orig"))
    strays = os.path.join(node.state, "strays")
    moved = [b for b in (_files(strays).values() if os.path.isdir(strays) else []) if b == STRAY]
    assert here + len(moved) == 1, "the stray's bytes exist exactly once"
    assert _actions(node) == ([] if here else ["move-stray"])
    return "rolled back" if here else "completed"


def _check_restore_missing(node: NodeDirs, status: Dict[str, Any]) -> str:
    """The manifest is back with the baseline's exact bytes (and on record), or still missing."""
    here = _files(node.manifests).get("kube-scheduler.yaml")
    row = next(r for r in status["components"] if r["file"] == "kube-scheduler.yaml")
    if here is None:
        assert row["state"] == "missing" and _actions(node) == []
        return "rolled back"
    assert here == node.files["kube-scheduler.yaml"], "the baseline's bytes, complete"
    assert row["state"] == "present" and _actions(node) == ["restore-missing"]
    return "completed"


def _revision_files(node: NodeDirs) -> List[str]:
    revisions = os.path.join(node.state, "revisions")
    return sorted(n for n in (os.listdir(revisions) if os.path.isdir(revisions) else []) if not n.startswith("."))


def _parked_meta_checksum(node: NodeDirs) -> str:
    with open(os.path.join(node.state, "meta", "kube-scheduler.yaml.json")) as handle:
        return str(json.load(handle)["checksum"])


def _check_apply_parked(node: NodeDirs, status: Dict[str, Any]) -> str:
    """The parked copy holds the old or the new bytes, its metadata says which; the old kept when new."""
    assert "kube-scheduler.yaml" not in _files(node.manifests), "a parked change never runs the pod"
    now = _files(node.parked)["kube-scheduler.yaml"]
    assert now in (SCHEDULER, NEW_SCHEDULER)
    assert _parked_meta_checksum(node) == sha(now), "the metadata follows the parked bytes"
    if now == NEW_SCHEDULER:
        assert _actions(node) == ["stop", "apply"] and node.history()[-1]["parked"] is True
        assert _revision_files(node) == ["kube-scheduler.yaml.%d%s" % (n, s) for n in (1, 2) for s in ("", ".json")]
        for number, data in ((1, SCHEDULER), (2, NEW_SCHEDULER)):     # the version replaced and the one written
            with open(os.path.join(node.state, "revisions", "kube-scheduler.yaml.%d" % number), "rb") as handle:
                assert handle.read() == data
        return "completed"
    assert _actions(node) == ["stop"] and _revision_files(node) == []
    return "rolled back"


def _check_start_edited(node: NodeDirs, status: Dict[str, Any]) -> str:
    """The hand-edited bytes run and what cpctl parked is a revision, or all is still parked."""
    here = _files(node.manifests).get("kube-scheduler.yaml")
    parked = _files(node.parked).get("kube-scheduler.yaml")
    assert (here is None) != (parked is None), "the bytes are in exactly one place"
    if here is not None:
        assert here == NEW_SCHEDULER and _actions(node) == ["stop", "start"]
        assert node.history()[-1]["revision"] == 1 and node.history()[-1]["hand_edited"]
        assert not os.path.exists(os.path.join(node.state, "meta", "kube-scheduler.yaml.json"))
        with open(os.path.join(node.state, "revisions", "kube-scheduler.yaml.1"), "rb") as handle:
            assert handle.read() == SCHEDULER, "what cpctl parked, kept"
        return "completed"
    assert parked == NEW_SCHEDULER and _actions(node) == ["stop"] and _revision_files(node) == []
    assert _parked_meta_checksum(node) == sha(SCHEDULER), "still says what cpctl parked"
    return "rolled back"


def _check_replace(node: NodeDirs, kind: str, status: Dict[str, Any]) -> str:
    """Old or new bytes complete in the manifests dir; every version a completed change replaced or
    wrote kept once as a revision (the original first); a rolled-back change adds none."""
    now = _files(node.manifests)["kube-scheduler.yaml"]
    revisions = os.path.join(node.state, "revisions")
    kept = sorted(n for n in (os.listdir(revisions) if os.path.isdir(revisions) else []) if not n.startswith("."))
    before, after = (SCHEDULER, NEW_SCHEDULER) if kind == "apply" else (NEW_SCHEDULER, SCHEDULER)
    earlier = ["apply"] if kind == "rollback" else []
    assert now in (before, after), "the manifest holds one version, complete"
    assert len(_files(node.manifests)) == 1, "no second file for the pod"
    marks = _pending(node)
    if now == after:
        # killed after the commit and before the verdict: "verification pending" names these bytes
        assert set(marks) <= {"kube-scheduler.yaml"}
        if marks:
            assert marks["kube-scheduler.yaml"]["checksum"] == sha(after) and marks["kube-scheduler.yaml"]["op"]
            assert [w for w in status["warnings"] if "never verified" in w], status["warnings"]
    else:
        assert not marks, "a rolled-back change leaves no verification pending"
        assert not [w for w in status["warnings"] if "never verified" in w]
    assert _actions(node) == earlier + ([kind] if now == after else [])
    versions = [SCHEDULER, NEW_SCHEDULER] if now == after or earlier else []
    assert kept == sorted(["kube-scheduler.yaml.%d%s" % (n, suffix) for n in range(1, len(versions) + 1)
                           for suffix in ("", ".json")]), "each version once; a rolled-back change keeps none"
    for number, data in enumerate(versions, 1):
        with open(os.path.join(revisions, "kube-scheduler.yaml.%d" % number), "rb") as handle:
            assert handle.read() == data
    return "completed" if now == after else "rolled back"


def _check_apply_companion(node: NodeDirs, status: Dict[str, Any]) -> str:
    """Manifest and companion file change together: (old, v1) with no record, or (new, v2) recorded
    with the old companion bytes kept beside revision 1."""
    now = _files(node.manifests)["kube-scheduler.yaml"]
    path = _companion_path(node.root)
    with open(path, "rb") as handle:
        companion = handle.read()
    assert os.listdir(os.path.dirname(path)) == ["policy.yaml"], "no temp file left next to the companion"
    if now == _mounting(SCHEDULER, path):
        assert companion == OLD_COMPANION, "rolled back together"
        assert _actions(node) == []
        return "rolled back"
    assert now == _mounting(NEW_SCHEDULER, path) and companion == NEW_COMPANION, "completed together"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert _actions(node) == ["apply"] and node.history()[-1]["companions"][0]["path"] == path
    with open(os.path.join(node.state, "revisions", "kube-scheduler.yaml.1.f0"), "rb") as handle:
        assert handle.read() == OLD_COMPANION, "the companion's previous bytes are kept with the revision"
    return "completed"


def _check_keep_in(node: NodeDirs, status: Dict[str, Any]) -> str:
    """The kubeadm patch file is absent (rolled back, no record) or complete (recorded)."""
    path = os.path.join(node.root, "patches", "kube-scheduler+json.yaml")
    if not os.path.exists(path):
        assert _actions(node) == []
        return "rolled back"
    with open(path, "rb") as handle:
        assert handle.read() == b'- {"op": "add", "path": "/spec/containers/0/command/-", "value": "--v=4"}\n'
    assert _actions(node) == ["keep-in"]
    return "completed"


def _check_keep_in_undo(node: NodeDirs, status: Dict[str, Any]) -> str:
    """The patch file is there as the kept change wrote it (undo rolled back) or gone (undo recorded)."""
    path = os.path.join(node.root, "patches", "kube-scheduler+json.yaml")
    if os.path.exists(path):
        with open(path, "rb") as handle:
            assert handle.read() == PATCH_BYTES
        assert _actions(node) == ["keep-in"]
        return "rolled back"
    assert _actions(node) == ["keep-in", "keep-in"] and node.history()[-1].get("undo") is True
    return "completed"


def _check_displaced(node: NodeDirs, status: Dict[str, Any]) -> str:
    """Theirs always stays in place; cpctl's bytes (revision 2, kept by the apply) are labelled
    ``displaced`` exactly when the change is recorded."""
    assert _files(node.manifests) == {"kube-scheduler.yaml": THEIRS}, "the other writer's version is untouched"
    revisions = os.path.join(node.state, "revisions")
    kept = sorted(n for n in os.listdir(revisions) if not n.startswith("."))
    assert kept == ["kube-scheduler.yaml.1", "kube-scheduler.yaml.1.json", "kube-scheduler.yaml.2",
                    "kube-scheduler.yaml.2.json"]
    with open(os.path.join(revisions, "kube-scheduler.yaml.2"), "rb") as handle:
        assert handle.read() == NEW_SCHEDULER
    with open(os.path.join(revisions, "kube-scheduler.yaml.2.json"), "rb") as handle:
        label = json.loads(handle.read())["action"]
    if _actions(node) == ["apply", "displaced"]:
        assert label == "displaced"
        return "completed"
    assert _actions(node) == ["apply"] and label == "apply"
    return "rolled back"


def _pending(node: NodeDirs) -> Dict[str, Any]:
    """STATE/pending.json's entries (file -> entry), {} when absent."""
    import json
    path = os.path.join(node.state, "pending.json")
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        return json.load(handle)["changes"]


CHECKS: Dict[str, Callable[..., str]] = {
    "stop": lambda node, status: _check_stop_or_start(node, "stop", status),
    "start": lambda node, status: _check_stop_or_start(node, "start", status),
    "scheduler-add": _check_scheduler_add,
    "scheduler-remove": _check_scheduler_remove,
    "move-stray": _check_move_stray,
    "restore-missing": _check_restore_missing,
    "apply-parked": _check_apply_parked,
    "start-edited": _check_start_edited,
    "apply": lambda node, status: _check_replace(node, "apply", status),
    "rollback": lambda node, status: _check_replace(node, "rollback", status),
    "keep-in": _check_keep_in,
    "apply-companion": _check_apply_companion,
    "displaced": _check_displaced,
    "keep-in-undo": _check_keep_in_undo,
}


@pytest.mark.slow      # a kill-point sweep: a CLI process per host call of each kind
@pytest.mark.parametrize("kind", sorted(CHECKS))
def test_sigkill_before_every_host_call(kind: str, tmp_path: Any) -> None:
    calls = _done(_run(_prepare(kind, str(tmp_path / "count")), kind, 0))
    seen = {"completed": 0, "rolled back": 0}
    for kill_at in range(1, calls + 1):
        root = str(tmp_path / ("k%d" % kill_at))
        node = _prepare(kind, root)      # afresh: generated manifests name absolute paths of their node
        status, _ = _run(node, kind, kill_at)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, \
            "kill point %d of %d not reached" % (kill_at, calls)
        view = _recover(node)
        _common(node, view)
        seen[CHECKS[kind](node, view)] += 1
        seen["verification pending"] = seen.get("verification pending", 0) + bool(_pending(node))
        shutil.rmtree(root)
    assert seen["completed"] and seen["rolled back"], seen
    if kind in ("apply", "rollback"):        # some kill points fall after the commit, before the verdict
        assert seen["verification pending"], seen
