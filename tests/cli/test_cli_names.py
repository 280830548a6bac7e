"""Component names as an operator types them (issue #17): a typo gets "did you mean", the file name
from ``ls /etc/kubernetes/manifests`` works like the component name."""

from __future__ import annotations

from tests.coreutil import NodeDirs


def test_a_typo_gets_did_you_mean_and_the_known_names(node: NodeDirs) -> None:
    proc = node.run("stop", "schedular", rc=3)
    assert "did you mean 'scheduler'?" in proc.stderr
    assert "known: etcd, apiserver, controller-manager, scheduler" in proc.stderr
    far = node.run("stop", "zzz", rc=3)
    assert "did you mean" not in far.stderr and "known: etcd, apiserver" in far.stderr


def test_the_file_name_names_the_component_present_or_parked(node: NodeDirs) -> None:
    node.run("stop", "kube-scheduler.yaml")
    assert "kube-scheduler.yaml" in node.parked_files()
    node.run("start", "kube-scheduler.yaml")
    assert "kube-scheduler.yaml" in node.present()
