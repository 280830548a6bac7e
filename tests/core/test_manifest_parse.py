"""parse_pod parses byte-identical manifests once per process (a fan-out over many masters sees
the same kubeadm files on each): every caller still gets its own tree, and errors stay errors."""

from __future__ import annotations

from typing import Any

import pytest

from cpctl.core import manifests
from tests.coreutil import MANIFESTS


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list:
    """The real parser, counted; the memo starts empty."""
    calls: list = []
    real = manifests._parse_pod
    monkeypatch.setattr(manifests, "_PARSED", {})
    monkeypatch.setattr(manifests, "_parse_pod", lambda data: calls.append(data) or real(data))
    return calls


def test_identical_bytes_are_parsed_once_and_copied(parses: list) -> None:
    data = MANIFESTS["kube-scheduler.yaml"]
    first, second = manifests.parse_pod(data), manifests.parse_pod(data)
    assert first == second and len(parses) == 1
    first["metadata"]["name"] = "changed"
    first["spec"]["containers"][0]["command"].append("--v=9")
    third = manifests.parse_pod(data)
    assert third == second and third["metadata"]["name"] == "kube-scheduler"
    assert "--v=9" not in third["spec"]["containers"][0]["command"]
    manifests.parse_pod(data + b"\n# one more byte\n")
    assert len(parses) == 2


def test_invalid_bytes_fail_every_time(parses: list) -> None:
    for _ in range(3):
        with pytest.raises(manifests.InvalidManifest, match="not a v1 Pod"):
            manifests.parse_pod(b"apiVersion: v1\nkind: Service\nmetadata: {name: x}\n")
    assert len(parses) == 1


def test_large_manifests_are_not_kept(parses: list) -> None:
    data = MANIFESTS["kube-scheduler.yaml"] + b"#" * (manifests._PARSED_MAX_BYTES + 1) + b"\n"
    manifests.parse_pod(data)
    manifests.parse_pod(data)
    assert len(parses) == 2


@pytest.mark.parametrize("text, check", [
    # The kubelet's YAML-to-JSON step knows no sets or ordered maps: the tags are ignored and the
    # collections decode as the mapping and the list they are written as.
    ("x: !!set {a, b}", lambda v: v == {"a": None, "b": None}),
    ("x: !!omap [{k: [1]}]", lambda v: v == [{"k": [1]}]),
])
def test_yaml_collections_are_copied_too(parses: list, text: str, check: Any) -> None:
    data = MANIFESTS["kube-scheduler.yaml"] + ("metadata2:\n  %s\n" % text).encode()
    first = manifests.parse_pod(data)
    second = manifests.parse_pod(data)
    assert check(second["metadata2"]["x"])
    assert first["metadata2"]["x"] is not second["metadata2"]["x"] and len(parses) == 1
