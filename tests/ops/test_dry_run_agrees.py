"""A dry run is the real run with its side effects withheld: on the same prepared dirs, each
changing command's ``--dry-run`` and real run agree on refusing or acting, and on the moves (stop,
start, restart, check --fix) or the bytes written (apply, flags, rollback, --parked: one decision,
``ops.edits.review``).

The dry run goes first and must leave every file as it was (the state dir is not even created);
then the real run on the same dirs must end with exactly the files the plan's moves predict."""

from __future__ import annotations

import json
import os
import shutil
from typing import Callable, Dict, List, Tuple

import pytest

from tests.coreutil import MANIFESTS, NodeDirs, snapshot, tamper_baseline_copy

Prepare = Callable[[NodeDirs], None]


def _nothing(node: NodeDirs) -> None:
    """The four kubeadm manifests, nothing parked."""


def _bak_copy(node: NodeDirs) -> None:
    """An operator's backup left in the manifests dir: the kubelet runs it as a second file."""
    shutil.copy(os.path.join(node.manifests, "kube-scheduler.yaml"),
                os.path.join(node.manifests, "kube-scheduler.yaml.bak"))


def _parked_scheduler(node: NodeDirs) -> None:
    node.run("stop", "scheduler", "--no-wait")


def _parked_then_bak(node: NodeDirs) -> None:
    node.run("stop", "scheduler", "--no-wait")
    with open(os.path.join(node.manifests, "kube-scheduler.yaml.bak"), "wb") as handle:
        handle.write(MANIFESTS["kube-scheduler.yaml"])


def _parked_etcd_apiserver(node: NodeDirs) -> None:
    node.run("stop", "etcd", "apiserver", "--no-wait")


CASES: List[Tuple[str, Prepare, List[str]]] = [
    ("stop", _nothing, ["stop", "scheduler"]),
    ("stop-bak", _bak_copy, ["stop", "scheduler"]),
    ("stop-several", _nothing, ["stop", "scheduler", "etcd", "controller-manager"]),
    ("stop-parked", _parked_scheduler, ["stop", "scheduler"]),
    ("stop-unknown", _nothing, ["stop", "no-such-pod"]),
    ("start", _parked_scheduler, ["start", "scheduler"]),
    ("start-in-place", _nothing, ["start", "scheduler"]),
    ("start-clash", _parked_then_bak, ["start", "scheduler"]),
    ("start-all-parked", _parked_etcd_apiserver, ["start", "--all-parked"]),
    ("restart", _nothing, ["restart", "scheduler"]),
    ("restart-bak", _bak_copy, ["restart", "scheduler"]),
    ("restart-parked", _parked_scheduler, ["restart", "scheduler"]),
]


def _listing(node: NodeDirs) -> Dict[str, List[str]]:
    parked = sorted(os.listdir(node.parked)) if os.path.isdir(node.parked) else []
    return {"manifests": sorted(n for n in os.listdir(node.manifests) if not n.startswith(".")), "parked": parked}


def _predicted(node: NodeDirs, before: Dict[str, List[str]], plan: List[dict]) -> Dict[str, List[str]]:
    """The listing after the plan's moves, applied in order to ``before``."""
    where = {"manifests": set(before["manifests"]), "parked": set(before["parked"])}
    dirs = {node.manifests: "manifests", node.parked: "parked"}
    for step in plan:
        if "move" not in step:
            continue
        src, dst = step["move"]
        where[dirs[os.path.dirname(src)]].remove(os.path.basename(src))
        where[dirs[os.path.dirname(dst)]].add(os.path.basename(dst))
    return {key: sorted(value) for key, value in where.items()}


@pytest.mark.parametrize("name, prepare, argv", CASES, ids=[c[0] for c in CASES])
def test_dry_run_and_real_run_agree(tmp_path, name: str, prepare: Prepare, argv: List[str]) -> None:
    node = NodeDirs(str(tmp_path))
    prepare(node)
    before_files = snapshot(node.manifests, node.state)
    before = _listing(node)
    dry = node.run("-o", "json", *argv, "--dry-run", rc=None)
    assert snapshot(node.manifests, node.state) == before_files, "the dry run changed files"
    real = node.run("-o", "json", *argv, "--no-wait" if argv[0] != "restart" else "--timeout=5", rc=None)
    assert dry.returncode == real.returncode, (name, dry.stderr, real.stderr)
    if real.returncode != 0:
        assert json.loads(dry.stderr)["error"]["reason"] == json.loads(real.stderr)["error"]["reason"]
        assert snapshot(node.manifests) == {k: v for k, v in before_files.items() if k.startswith(node.manifests)}
        assert _listing(node) == before, "a refused run moved files"
        return
    plan = json.loads(dry.stdout)["plan"]
    assert _listing(node) == _predicted(node, before, plan)
    moved = [step for step in plan if "move" in step]
    changed = json.loads(real.stdout)["changed"]
    assert changed == bool(moved), (plan, real.stdout)


def test_stop_with_a_bak_copy_is_refused_in_the_dry_run_too(tmp_path) -> None:
    """The case that diverged: the dry run planned a move that the real stop refuses (exit 4)."""
    node = NodeDirs(str(tmp_path))
    _bak_copy(node)
    proc = node.run("stop", "scheduler", "--dry-run", rc=4)
    assert "matches several files" in proc.stderr and "kube-scheduler.yaml.bak" in proc.stderr
    assert not os.path.exists(node.state)


def test_restart_refused_before_parking_does_not_claim_a_parked_manifest(tmp_path) -> None:
    """A restart whose stop is refused before any move reports the refusal, not "could NOT be put
    back ... it stays parked" (nothing was ever parked)."""
    node = NodeDirs(str(tmp_path))
    _bak_copy(node)
    proc = node.run("restart", "scheduler", rc=4)
    assert "matches several files" in proc.stderr
    assert "put back" not in proc.stderr and "parked" not in proc.stderr
    assert _listing(node)["parked"] == []


def test_restart_dry_run_lists_the_park_and_the_restore(tmp_path) -> None:
    node = NodeDirs(str(tmp_path))
    plan = json.loads(node.run("-o", "json", "restart", "scheduler", "--dry-run").stdout)["plan"]
    assert [(step["action"], os.path.basename(os.path.dirname(step["move"][1]))) for step in plan] == \
        [("stop", "parked"), ("start", "manifests")]
    assert not os.path.exists(node.state)


# --- check --fix: the dry run is ``drift.fix`` itself on a dry-run node -----------------------------

def _meta_path(node: NodeDirs, filename: str) -> str:
    return os.path.join(node.state, "meta", filename + ".json")


def _rewrite_meta(node: NodeDirs, filename: str, **fields: str) -> None:
    """Age a park: its metadata's times set in the past (as if parked long ago)."""
    path = _meta_path(node, filename)
    with open(path) as handle:
        meta = json.load(handle)
    meta.update(fields)
    with open(path, "w") as handle:
        json.dump(meta, handle)


def _overdue(node: NodeDirs) -> None:
    """The controller-manager parked with --for, past its deadline."""
    node.run("stop", "controller-manager", "--no-wait", "--for", "1h")
    _rewrite_meta(node, "kube-controller-manager.yaml", until="2000-01-01T00:00:00Z",
                  parked_at="1999-12-31T00:00:00Z")


def _parked_long(node: NodeDirs) -> None:
    """The scheduler parked without a deadline long ago: over --max-parked, but maybe on purpose."""
    node.run("stop", "scheduler", "--no-wait")
    _rewrite_meta(node, "kube-scheduler.yaml", parked_at="2000-01-01T00:00:00Z")


def _junk_stray(node: NodeDirs) -> None:
    """A loadable file that is no pod (the kubelet reports it; nothing runs it)."""
    with open(os.path.join(node.manifests, "notes.yaml"), "w") as handle:
        handle.write("just: some notes\n")


def _strays(node: NodeDirs) -> None:
    _junk_stray(node)
    _bak_copy(node)


def _vanished(node: NodeDirs) -> None:
    """A baseline taken, then the scheduler's manifest removed by hand."""
    node.run("baseline")
    os.unlink(os.path.join(node.manifests, "kube-scheduler.yaml"))


def _vanished_tampered(node: NodeDirs) -> None:
    """As ``_vanished``, and the baseline's copy no longer matches its checksum."""
    _vanished(node)
    tamper_baseline_copy(node, "kube-scheduler.yaml")


FIX_CASES: List[Tuple[str, Prepare, List[str]]] = [
    ("fix-overdue", _overdue, ["check", "--fix"]),
    ("fix-parked-on-purpose", _parked_long, ["check", "--fix", "--max-parked", "1m"]),
    ("fix-strays", _strays, ["check", "--fix", "--remove-strays"]),
    ("fix-strays-allow-restart", _strays, ["check", "--fix", "--remove-strays", "--allow-restart"]),
    ("fix-restore-missing", _vanished, ["check", "--fix", "--restore-missing"]),
    ("fix-restore-missing-tampered", _vanished_tampered, ["check", "--fix", "--restore-missing"]),
    ("fix-all", lambda node: (_overdue(node), _vanished(node), _junk_stray(node)),
     ["check", "--fix", "--remove-strays", "--restore-missing"]),
]


def _tree(node: NodeDirs) -> Dict[str, List[str]]:
    """The files a fix may move or write: the manifests dir, the parked ones, the strays kept."""
    strays = os.path.join(node.state, "strays")
    kept = [name for stamp in (os.listdir(strays) if os.path.isdir(strays) else [])
            for name in os.listdir(os.path.join(strays, stamp))]
    return dict(_listing(node), strays=sorted(kept))


def _predicted_tree(node: NodeDirs, before: Dict[str, List[str]], steps: List[dict]) -> Dict[str, List[str]]:
    """``before`` after the planned moves and writes, in order (a stray's time-stamped folder is
    only "strays": the dry run and the real run stamp their own)."""
    where = {key: set(value) for key, value in before.items()}

    def place(path: str) -> str:
        parent = os.path.dirname(path)
        if os.path.dirname(parent) == os.path.join(node.state, "strays"):
            return "strays"
        return {node.manifests: "manifests", node.parked: "parked"}.get(parent, "")

    for step in steps:
        if "move" in step:
            src, dst = step["move"]
            where.get(place(src), set()).discard(os.path.basename(src))
            if place(dst):
                where[place(dst)].add(os.path.basename(dst))
        elif "write" in step and place(step["write"]):
            where[place(step["write"])].add(os.path.basename(step["write"]))
        elif "remove" in step:
            where.get(place(step["remove"]), set()).discard(os.path.basename(step["remove"]))
    return {key: sorted(value) for key, value in where.items()}


def _actions(proc) -> List[dict]:  # type: ignore[no-untyped-def]
    return json.loads(proc.stdout)["actions"]


@pytest.mark.parametrize("name, prepare, argv", FIX_CASES, ids=[c[0] for c in FIX_CASES])
def test_fix_dry_run_and_real_run_agree(tmp_path, name: str, prepare: Prepare, argv: List[str]) -> None:
    node = NodeDirs(str(tmp_path))
    prepare(node)
    before_files = snapshot(node.manifests, node.state)
    before = _tree(node)
    dry = node.run("-o", "json", *argv, "--dry-run", rc=None)
    assert snapshot(node.manifests, node.state) == before_files, "the dry run changed files"
    real = node.run("-o", "json", *argv, rc=None)
    assert dry.returncode in (0, 1) and real.returncode in (0, 1), (dry.stderr, real.stderr)
    planned, done = _actions(dry), _actions(real)
    assert [(a["action"], a["file"], a["ok"]) for a in planned] == \
        [(a["action"], a["file"], a["ok"]) for a in done], (planned, done)
    assert planned, "every case has something to fix or to refuse"
    steps = [step for action in planned for step in action.get("plan", [])]
    assert all(action.get("plan") for action in planned if action["ok"]), planned
    assert not any(action.get("plan") for action in planned if not action["ok"]), planned
    assert _tree(node) == _predicted_tree(node, before, steps), (steps, _tree(node))
    assert all(a["message"].startswith("would ") for a in planned if a["ok"]), planned


def test_fix_dry_run_refuses_a_running_stray_like_the_real_run(tmp_path) -> None:
    """The case that diverged: without --allow-restart the dry run said it would move the
    scheduler's .bak copy (which defines the running pod) while the real run refuses to."""
    node = NodeDirs(str(tmp_path))
    _bak_copy(node)
    dry = node.run("-o", "json", "check", "--fix", "--remove-strays", "--dry-run", rc=1)
    (action,) = _actions(dry)
    assert action["action"] == "move-stray" and not action["ok"] and "--allow-restart" in action["message"]
    text = node.run("check", "--fix", "--remove-strays", "--dry-run", rc=1).stdout
    assert "WOULD-NOT move-stray" in text and "kube-scheduler.yaml.bak" in text


# --- replacements: apply, flags, rollback (and --parked) ------------------------------------------
SCHEDULER = MANIFESTS["kube-scheduler.yaml"]
WITH_V4 = SCHEDULER.replace(b"    - --leader-elect=true\n", b"    - --leader-elect=true\n    - --v=4\n")
DUPLICATE = SCHEDULER.replace(b"    - --leader-elect=true\n",
                              b"    - --leader-elect=true\n    - --leader-elect=false\n")
RENAMED = SCHEDULER.replace(b"  name: kube-scheduler\n", b"  name: other-scheduler\n", 1)


def _new_file(node: NodeDirs, data: bytes) -> str:
    path = os.path.join(node.root, "new.yaml")
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def _applied_v4(node: NodeDirs) -> None:
    node.run("apply", "scheduler", "-f", _new_file(node, WITH_V4), "--settle", "0")


REPLACEMENTS: List[Tuple[str, Prepare, Callable[[NodeDirs], List[str]], bytes]] = [
    ("apply", _nothing, lambda node: ["apply", "scheduler", "-f", _new_file(node, WITH_V4)], WITH_V4),
    ("apply-unchanged", _nothing, lambda node: ["apply", "scheduler", "-f", _new_file(node, SCHEDULER)], SCHEDULER),
    ("apply-duplicate-flag", _nothing, lambda node: ["apply", "scheduler", "-f", _new_file(node, DUPLICATE)], b""),
    ("apply-other-pod-name", _nothing, lambda node: ["apply", "scheduler", "-f", _new_file(node, RENAMED)], b""),
    ("apply-not-yaml", _nothing, lambda node: ["apply", "scheduler", "-f", _new_file(node, b"kind: [\n")], b""),
    ("apply-bak", _bak_copy, lambda node: ["apply", "scheduler", "-f", _new_file(node, WITH_V4)], WITH_V4),
    ("apply-parked-running", _nothing,
     lambda node: ["apply", "scheduler", "--parked", "-f", _new_file(node, WITH_V4)], b""),
    ("apply-parked", _parked_scheduler,
     lambda node: ["apply", "scheduler", "--parked", "-f", _new_file(node, WITH_V4)], WITH_V4),
    ("flags", _nothing, lambda node: ["flags", "scheduler", "--set", "v=4"], b""),
    ("flags-misspelled", _nothing, lambda node: ["flags", "scheduler", "--set", "bind-adress=0.0.0.0"], b""),
    ("flags-same", _nothing, lambda node: ["flags", "scheduler", "--set", "leader-elect=true"], SCHEDULER),
    ("rollback", _applied_v4, lambda node: ["rollback", "scheduler"], SCHEDULER),
    ("rollback-nothing-kept", _nothing, lambda node: ["rollback", "scheduler"], b""),
]


@pytest.mark.parametrize("name, prepare, argv_of, written", REPLACEMENTS, ids=[c[0] for c in REPLACEMENTS])
def test_replacement_dry_run_and_real_run_agree(tmp_path, name: str, prepare: Prepare,
                                                argv_of: Callable[[NodeDirs], List[str]], written: bytes) -> None:
    """The dry run changes nothing and refuses exactly what the real run refuses (same exit code and
    reason); when both act, the real run writes the bytes whose diff the dry run showed."""
    node = NodeDirs(str(tmp_path))
    prepare(node)
    argv = argv_of(node)
    target = os.path.join(node.parked if "--parked" in argv else node.manifests, "kube-scheduler.yaml")
    before_files = snapshot(node.manifests, node.state)
    dry = node.run("-o", "json", *argv, "--dry-run", rc=None)
    assert snapshot(node.manifests, node.state) == before_files, "the dry run changed files"
    real = node.run("-o", "json", *argv, "--settle", "0", rc=None)
    assert dry.returncode == real.returncode, (name, dry.stdout, dry.stderr, real.stderr)
    if real.returncode != 0:
        assert json.loads(dry.stderr)["error"]["reason"] == json.loads(real.stderr)["error"]["reason"]
        assert snapshot(node.manifests) == {k: v for k, v in before_files.items() if k.startswith(node.manifests)}
        return
    planned, done = json.loads(dry.stdout), json.loads(real.stdout)
    assert planned["dry_run"] is True and planned["changed"] is False
    assert done["changed"] == bool(planned.get("diff")), (planned, done)
    with open(target, "rb") as handle:
        now = handle.read()
    if written:
        assert now == written
    if done["changed"]:
        assert planned["message"].startswith("would ")
