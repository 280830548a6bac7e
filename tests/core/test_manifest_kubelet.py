"""What the kubelet loads from the manifests dir, and how it reads the bytes (kubelet parity):
symlinks followed, 10 MiB, JSON only when the text starts with "{", the first YAML document only,
go-yaml's YAML 1.1 scalars. A real directory, scanned through the real host primitives."""

from __future__ import annotations

import os
import threading
from typing import Any, Dict

import pytest

from cpctl.core import manifests
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.local import LocalHost
from tests.coreutil import MANIFESTS

POD = MANIFESTS["kube-scheduler.yaml"]


def pod_named(name: str) -> bytes:
    return POD.replace(b"kube-scheduler", name.encode())


def scan_of(directory: str) -> Dict[str, manifests.Manifest]:
    return {m.file: m for m in manifests.scan(LocalHost(), directory).manifests}


@pytest.fixture
def mdir(tmp_path: Any) -> str:
    path = tmp_path / "manifests"
    path.mkdir()
    (path / "kube-scheduler.yaml").write_bytes(POD)
    return str(path)


# --- symlinks ------------------------------------------------------------------------------------

def test_a_symlink_to_a_file_is_loaded_like_the_file(mdir: str, tmp_path: Any) -> None:
    outside = tmp_path / "haproxy.yaml"
    outside.write_bytes(pod_named("haproxy"))
    os.symlink(str(outside), os.path.join(mdir, "haproxy.yaml"))
    os.symlink("kube-scheduler.yaml", os.path.join(mdir, "sched-link"))
    scan = manifests.scan(LocalHost(), mdir)
    found = {m.file: m for m in scan.manifests}
    link = found["haproxy.yaml"]
    assert link.kind == "symlink" and link.valid and link.error is None
    assert (link.pod_name, link.namespace, link.target) == ("haproxy", "kube-system", str(outside))
    assert link.data == pod_named("haproxy") and link.checksum == manifests.checksum(pod_named("haproxy"))
    # A link to a manifest of the dir is a second definition of its pod, as for the kubelet.
    assert scan.duplicates() == {("kube-system", "kube-scheduler"): ["kube-scheduler.yaml", "sched-link"]}


def test_links_the_kubelet_cannot_read_are_invalid_with_the_reason(mdir: str, tmp_path: Any) -> None:
    os.symlink(str(tmp_path / "gone.yaml"), os.path.join(mdir, "dangling.yaml"))
    os.symlink(str(tmp_path), os.path.join(mdir, "to-dir"))
    os.symlink("loop-b", os.path.join(mdir, "loop-a"))
    os.symlink("loop-a", os.path.join(mdir, "loop-b"))
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    os.symlink(fifo, os.path.join(mdir, "to-fifo.yaml"))
    found: Dict[str, manifests.Manifest] = {}
    worker = threading.Thread(target=lambda: found.update(scan_of(mdir)), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "scanning opened a FIFO and waited for a writer"
    assert "symlink to nothing" in (found["dangling.yaml"].error or "")
    assert "symlink to a directory" in (found["to-dir"].error or "")
    assert "symlink to nothing" in (found["loop-a"].error or "")
    assert "symlink to a special file" in (found["to-fifo.yaml"].error or "")
    assert all(m.kind == "symlink" and not m.valid for n, m in found.items() if n != "kube-scheduler.yaml")


def test_read_file_never_waits_on_a_fifo(tmp_path: Any) -> None:
    """A manifest replaced by a FIFO between a listing and a read: refused, not waited on."""
    from cpctl.agent import fileops
    fifo = str(tmp_path / "kube-scheduler.yaml")
    os.mkfifo(fifo)
    outcome: list = []

    def read() -> None:
        try:
            fileops.read_file(fifo, 1 << 20)
        except OSError as exc:
            outcome.append(exc)
    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and "not a regular file" in str(outcome[0])


def test_moving_a_link_is_refused_before_anything_changes(mdir: str, tmp_path: Any) -> None:
    outside = tmp_path / "haproxy.yaml"
    outside.write_bytes(pod_named("haproxy"))
    os.symlink(str(outside), os.path.join(mdir, "haproxy.yaml"))
    found = scan_of(mdir)
    with pytest.raises(CpctlError) as caught:
        manifests.refuse_link(found["haproxy.yaml"], "stop")
    assert caught.value.code == ExitCode.REFUSED and "symlink" in caught.value.message
    assert str(outside) in caught.value.message
    manifests.refuse_link(found["kube-scheduler.yaml"], "stop")     # a regular file: no objection


# --- size ----------------------------------------------------------------------------------------

def test_the_size_limit_is_the_kubelets_10_mib(mdir: str) -> None:
    padded = POD + b"# " + b"x" * (5 << 20) + b"\n"
    with open(os.path.join(mdir, "padded.yaml"), "wb") as handle:
        handle.write(padded.replace(b"name: kube-scheduler", b"name: padded"))
    with open(os.path.join(mdir, "huge.yaml"), "wb") as handle:
        handle.write(POD + b"#" * (manifests.MAX_MANIFEST_BYTES - len(POD)) + b"\n")
    found = scan_of(mdir)
    assert found["padded.yaml"].valid and found["padded.yaml"].pod_name == "padded"
    assert found["huge.yaml"].data is None and "too large" in (found["huge.yaml"].error or "")
    assert manifests.MAX_MANIFEST_BYTES == 10 << 20


# --- JSON or YAML, first document only -----------------------------------------------------------

JSON_POD = (b' \n {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j", "namespace": "kube-system"},'
            b' "spec": {"containers": [{"name": "j", "image": "registry.k8s.io/pause:3.9"}]}}\n')


def test_json_is_what_starts_with_a_brace() -> None:
    assert manifests.parse_pod(JSON_POD)["metadata"]["name"] == "j"
    # YAML flow style also starts with "{": the kubelet hands it to its JSON decoder, which fails.
    flow = b'{apiVersion: v1, kind: Pod, metadata: {name: f}, spec: {containers: [{name: f, image: x}]}}\n'
    with pytest.raises(manifests.InvalidManifest, match="invalid JSON"):
        manifests.parse_pod(flow)
    # Not first: a comment line first makes the same text YAML, which the kubelet accepts.
    assert manifests.parse_pod(b"# generated\n" + flow)["metadata"]["name"] == "f"
    with pytest.raises(manifests.InvalidManifest, match="invalid JSON"):
        manifests.parse_pod(JSON_POD.replace(b'"kind": "Pod"', b'"kind": "Pod", "x": NaN'))


def test_only_the_first_yaml_document_is_decoded(mdir: str) -> None:
    second = pod_named("second")
    with open(os.path.join(mdir, "multi.yaml"), "wb") as handle:
        handle.write(pod_named("first") + b"---\n" + second + b"---\nbroken: [\n")
    found = scan_of(mdir)["multi.yaml"]
    assert found.valid and found.pod_name == "first"
    assert found.notes == [manifests.MORE_DOCUMENTS]
    assert scan_of(mdir)["kube-scheduler.yaml"].notes == []
    # An empty first document is what the kubelet decodes: nothing, so no pod.
    with pytest.raises(manifests.InvalidManifest, match="first. YAML document is empty"):
        manifests.parse_pod(b"---\n---\n" + POD)
    with pytest.raises(manifests.InvalidManifest, match="invalid YAML at line 3"):
        manifests.parse_pod(b"# only the first document\nkind: Pod\n  bad: indent\n---\n" + POD)


def test_yaml_1_1_scalars_as_the_kubelets_yaml_library_reads_them() -> None:
    """go-yaml v2: yes/no/on/off/y/n are booleans, 0x10 and 017 integers, 1e3 text, 1e+3 a float."""
    decoded, _ = manifests.decode(b"a: [yes, No, on, OFF, y, n, 'on', 0x10, 017, 08, 1_000, 1e3, 1e+3, .5, "
                                  b"2024-01-02, ~, 99999999999999999999999]\n")
    assert decoded["a"] == [True, False, True, False, True, False, "on", 16, 15, 8.0, 1000, "1e3", 1000.0, 0.5,
                            "2024-01-02", None, 1e23]
    # So an unquoted "on" in a command is a boolean where the kubelet wants a string.
    with pytest.raises(manifests.InvalidManifest, match=r"command\[1\]: must be a string, not a boolean"):
        manifests.parse_pod(POD.replace(b"    - --kubeconfig", b"    - on\n    - --kubeconfig"))


def test_mapping_keys_are_made_text_as_the_yaml_to_json_step_does() -> None:
    decoded, _ = manifests.decode(b"k: {1: a, 1.5: b, 1e+7: c, true: d, n: e, '2': f}\n")
    assert decoded["k"] == {"1": "a", "1.5": "b", "1e+07": "c", "true": "d", "false": "e", "2": "f"}
    for bad in (b"k: {[1]: a}\n", b"k: {~: a}\n", b"? {a: 1}\n: b\n"):
        with pytest.raises(manifests.InvalidManifest, match="unsupported mapping key"):
            manifests.decode(bad)


def test_anchors_aliases_and_merge_keys() -> None:
    decoded, _ = manifests.decode(b"base: &b {x: 1, z: [1, 2]}\nuse: *b\nm: {<<: *b, x: 2}\n"
                                  b"l: {<<: [{a: 1}, {a: 2, c: 3}], d: 4}\nq: {'<<': 1}\n")
    assert decoded["use"] == {"x": 1, "z": [1, 2]} and decoded["m"] == {"x": 2, "z": [1, 2]}
    assert decoded["l"] == {"a": 1, "c": 3, "d": 4} and decoded["q"] == {"<<": 1}
    with pytest.raises(manifests.InvalidManifest, match="unknown anchor"):
        manifests.decode(b"a: *nowhere\n")


def test_explicit_tags() -> None:
    decoded, _ = manifests.decode(b"a: !!str 10\nb: !!int '10'\nc: !!float 1\nd: !custom text\n"
                                  b"e: !!binary aGVsbG8=\n")
    assert decoded == {"a": "10", "b": 10, "c": 1.0, "d": "text", "e": "hello"}
    with pytest.raises(manifests.InvalidManifest, match="cannot decode"):
        manifests.decode(b"a: !!int ten\n")


def test_without_libyaml_the_same_values_and_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyYAML's pure-Python parser gives the same events: same values, same refusals."""
    from tests.core.test_manifest_rules import APISERVER
    fast = manifests.decode(APISERVER)
    monkeypatch.setattr(manifests, "_c_parser", lambda: None)
    assert manifests.decode(APISERVER) == fast
    with pytest.raises(manifests.InvalidManifest, match="recursive alias"):
        manifests.decode(b"x: &a [*a]\n")
