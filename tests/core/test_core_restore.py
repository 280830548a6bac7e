"""Issue #2 rule 5: a restore is refused (exit 4, nothing changed) when the kubelet would see
the pod twice or when the parked file is not a single valid Pod."""

from __future__ import annotations

import os

import pytest

from tests.coreutil import MANIFESTS, NodeDirs, assert_settled, snapshot

NAME = "kube-scheduler.yaml"
DATA = MANIFESTS[NAME]


@pytest.fixture
def parked(tmp_path):
    node = NodeDirs(str(tmp_path))
    node.run("stop", "scheduler")
    return node


def _refused(node: NodeDirs, needle: str) -> None:
    before = snapshot(node.manifests, node.state)
    err = node.run("start", "scheduler", rc=4).stderr
    assert needle in err, err
    assert snapshot(node.manifests, node.state) == before


@pytest.mark.parametrize("stray", ["kube-scheduler.yaml.bak", "kube-scheduler.yaml~", "scheduler-copy.yaml",
                                   "kube-scheduler.json"])
def test_duplicate_pod_in_manifests_dir(parked, stray):
    with open(os.path.join(parked.manifests, stray), "wb") as handle:
        handle.write(DATA)
    _refused(parked, "already defines pod kube-system/kube-scheduler")
    os.unlink(os.path.join(parked.manifests, stray))
    parked.run("start", "scheduler")
    assert_settled(parked)


def test_same_pod_name_other_namespace_is_not_a_duplicate(parked):
    other = DATA.replace(b"namespace: kube-system", b"namespace: other")
    with open(os.path.join(parked.manifests, "sched-other.yaml"), "wb") as handle:
        handle.write(other)
    parked.run("start", "kube-scheduler")
    assert "kube-scheduler.yaml" in parked.present()


def test_dot_file_copy_is_not_a_duplicate(parked):
    """The kubelet skips dot files, so a .kube-scheduler.yaml.swp does not block the restore."""
    with open(os.path.join(parked.manifests, ".kube-scheduler.yaml.swp"), "wb") as handle:
        handle.write(DATA)
    parked.run("start", "scheduler")
    assert "kube-scheduler.yaml" in parked.present()


TAMPERED = {
    "invalid-yaml": b"apiVersion: v1\nkind: Pod\nmetadata: {name: [unclosed\n",
    "multi-doc": b"---\n---\n" + DATA,      # the kubelet reads the first document: here an empty one
    "deployment": DATA.replace(b"kind: Pod", b"kind: Deployment").replace(b"apiVersion: v1", b"apiVersion: apps/v1"),
    "empty": b"",
    "whitespace": b"\n   \n",
    "binary": os.urandom(64) + b"\0\x01\x02",
    "no-containers": b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-scheduler\n  namespace: kube-system\n",
    "list": b"- apiVersion: v1\n  kind: Pod\n",
}


def test_tampered_parked_file(parked):
    path = os.path.join(parked.parked, NAME)
    for case in sorted(TAMPERED):
        with open(path, "wb") as handle:
            handle.write(TAMPERED[case])
        _refused(parked, "is not a valid Pod")
        assert NAME not in parked.present(), case


def test_parked_file_replaced_by_symlink_or_too_big(parked):
    path = os.path.join(parked.parked, NAME)
    target = os.path.join(parked.root, "elsewhere.yaml")
    with open(target, "wb") as handle:
        handle.write(DATA)
    os.unlink(path)
    os.symlink(target, path)
    _refused(parked, "not a regular file")
    os.unlink(path)
    with open(path, "wb") as handle:
        handle.write(DATA + b"#" * (10 << 20))       # the kubelet reads at most 10 MiB
    _refused(parked, "too large")
