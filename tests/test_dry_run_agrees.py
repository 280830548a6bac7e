"""A dry run is the real run with its side effects withheld: on the same prepared dirs, each
changing command's ``--dry-run`` and real run agree on refusing or acting, and on the moves.

The dry run goes first and must leave every file as it was (the state dir is not even created);
then the real run on the same dirs must end with exactly the files the plan's moves predict."""

from __future__ import annotations

import json
import os
import shutil
from typing import Callable, Dict, List, Tuple

import pytest

from tests.coreutil import MANIFESTS, NodeDirs, snapshot

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
