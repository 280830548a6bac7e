"""Decoded-pod comparison: the kubelet names a static pod by a hash of the DECODED object, so an
edit that changes only comments or formatting keeps the pod untouched. same_pod/decoded_digest
tell such an edit from one that gives a new pod (for the watch and drift code)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import yaml

from cpctl.core import manifests
from cpctl.host.local import LocalHost
from tests.core.test_manifest_rules import APISERVER


def reversed_keys(value: Any) -> Any:
    """The same data with every mapping's keys in the opposite order."""
    if isinstance(value, dict):
        return {k: reversed_keys(value[k]) for k in reversed(list(value))}
    return [reversed_keys(v) for v in value] if isinstance(value, list) else value


NO_OPS = {
    "a comment and blank lines": APISERVER.replace(b"spec:\n", b"# edited by hand\n\nspec:  # the spec\n"),
    "another key order": yaml.safe_dump(reversed_keys(yaml.safe_load(APISERVER)), sort_keys=False).encode(),
    # (after a comment: text that starts with "{" is JSON for the kubelet, and flow YAML is no JSON)
    "flow style": b"# one line\n" + yaml.safe_dump(yaml.safe_load(APISERVER), default_flow_style=True,
                                                   width=10 ** 6).encode(),
    "quoted text": APISERVER.replace(b"name: kube-apiserver\n  namespace", b"name: 'kube-apiserver'\n  namespace"),
    "the same as JSON": json.dumps(yaml.safe_load(APISERVER), indent=1).encode(),
    "a number spelled in hex": APISERVER.replace(b"periodSeconds: 1\n", b"periodSeconds: 0x1\n"),
    "an anchor and an alias": APISERVER.replace(b"      httpGet:\n        host: 192.168.56.10\n        path: /readyz",
                                                b"      httpGet: &get\n        host: 192.168.56.10\n"
                                                b"        path: /readyz"),
    "a null field": APISERVER.replace(b"  hostNetwork: true\n", b"  hostNetwork: true\n  dnsConfig: null\n"),
    "a second document": APISERVER + b"---\nkind: ignored\n",
}


@pytest.mark.parametrize("what", sorted(NO_OPS))
def test_edits_the_kubelet_ignores_keep_the_same_pod(what: str) -> None:
    edited = NO_OPS[what]
    assert edited != APISERVER, "the edit must change the bytes"
    assert manifests.same_pod(APISERVER, edited)
    assert manifests.decoded_digest(manifests.parse_pod(edited)) == manifests.decoded_digest(
        manifests.parse_pod(APISERVER))


CHANGES = {
    "a flag": APISERVER.replace(b"--secure-port=6443", b"--secure-port=6444"),
    "the image": APISERVER.replace(b"kube-apiserver:v1.30.0", b"kube-apiserver:v1.30.1"),
    "list order": APISERVER.replace(b"    - --allow-privileged=true\n    - --authorization-mode=Node,RBAC\n",
                                    b"    - --authorization-mode=Node,RBAC\n    - --allow-privileged=true\n"),
    "an empty label instead of none": APISERVER.replace(b"    tier: control-plane\n",
                                                        b"    tier: control-plane\n    extra: null\n"),
    "a number as text": APISERVER.replace(b"periodSeconds: 1\n", b"periodSeconds: 2\n"),
}


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_real_changes_give_another_pod(what: str) -> None:
    assert not manifests.same_pod(APISERVER, CHANGES[what])


def test_an_invalid_manifest_is_never_the_same_pod() -> None:
    broken = APISERVER.replace(b"image: registry", b"image: [registry")
    assert not manifests.same_pod(broken, broken) and not manifests.same_pod(APISERVER, broken)


def test_a_manifest_carries_its_digest(tmp_path: Any) -> None:
    (tmp_path / "kube-apiserver.yaml").write_bytes(APISERVER)
    (tmp_path / "reformatted.yaml").write_bytes(NO_OPS["flow style"])
    (tmp_path / "broken.yaml").write_bytes(b"kind: [\n")
    os.symlink("kube-apiserver.yaml", str(tmp_path / "link"))
    found = {m.file: m for m in manifests.scan(LocalHost(), str(tmp_path)).manifests}
    digest = manifests.decoded_digest(manifests.parse_pod(APISERVER))
    assert found["kube-apiserver.yaml"].digest == found["reformatted.yaml"].digest == found["link"].digest == digest
    assert found["kube-apiserver.yaml"].checksum != found["reformatted.yaml"].checksum
    assert found["broken.yaml"].digest is None
    assert len(digest) == 64 and int(digest, 16) >= 0
