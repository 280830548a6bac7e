"""Issue #16 item 3: one small hostile file is one invalid manifest, never a dead tool.

Each file below is decoded within bounded time and memory and reported with a clear reason;
with all of them in the manifests dir, `cpctl status`, `check`, `stop` and `start` of another
component still work, exit with a documented code and print at most one stderr line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, Tuple

import pytest

from cpctl.core import manifests
from tests.coreutil import MANIFESTS, NodeDirs

POD = MANIFESTS["kube-scheduler.yaml"]


def _laughs() -> bytes:
    """A "billion laughs" Pod: nine levels of nine aliases, 9**9 strings once expanded."""
    levels = [b"  l0: &l0 [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n"]
    levels += [b"  l%d: &l%d [%s]\n" % (i, i, b",".join([b"*l%d" % (i - 1)] * 9)) for i in range(1, 9)]
    return (b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: lol\nlol:\n" + b"".join(levels)
            + b"spec:\n  containers:\n  - {name: lol, image: 'registry.k8s.io/pause:3.9'}\n")


# file -> (bytes, words of the reason)
HOSTILE: Dict[str, Tuple[bytes, str]] = {
    "recursive-alias": (POD + b"x: &a [*a]\n", "recursive alias"),
    "billion-laughs": (_laughs(), "alias bomb"),
    "huge-integer": (POD + b"  priority: " + b"9" * 5000 + b"\n", "spec.priority: must be an integer"),
    "namespace-list": (POD.replace(b"namespace: kube-system", b"namespace: [a]"),
                       "metadata.namespace: must be a string, not a list"),
    "list-as-key": (POD.replace(b"    tier: control-plane", b"    ? [tier, x]\n    : control-plane"),
                    "unsupported mapping key: a list"),
    "null-as-key": (POD.replace(b"    tier: control-plane", b"    ~: control-plane"), "unsupported mapping key: null"),
    "newline-in-key": (POD.replace(b"    tier: control-plane", b'    "tier\\n]x": control-plane'),
                       'metadata.labels: Invalid value: "tier\\n]x"'),
    "deep-flow": (POD + b"x: " + b"[" * 100000 + b"]" * 100000 + b"\n", "nest"),
    "deep-block": (POD + b"".join(b"  " * i + b"x:\n" for i in range(3000)), "nested deeper than 100 levels"),
    "deep-json": (b'{"apiVersion": "v1", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested deeper"),
    "wide-json": (b'{"apiVersion": "v1", "x": [' + b"[]," * 200000 + b"[]]}", "more than 100000 JSON values"),
    "binary": (bytes(range(256)) * 16, "binary content"),
    "invalid-utf8": (POD + b"# caf\xe9\n", "not UTF-8"),
    "utf16": (b"\xff\xfe" + POD.decode().encode("utf-16-le"), "UTF-16"),
    "control-character": (POD + b"x: \x07\n", "invalid YAML"),
    "nan": (POD + b"x: .nan\n", ".nan or .inf"),
    "json-nan": (b'{"apiVersion": "v1", "kind": "Pod", "x": NaN}', "invalid JSON"),
    "many-nodes": (b"- x\n" * 150000, "more than 100000 YAML nodes"),
    "huge-file": (POD + b"#" * (10 << 20) + b"\n", "too large"),
    "containers-mapping": (POD.replace(b"  containers:\n  - command:", b"  containers:\n    command:"),
                           "spec.containers: must be a list"),
    "command-text": (POD.replace(b"  - command:\n    - kube-scheduler\n", b"  - command: kube-scheduler\n    args:\n"),
                     "spec.containers[0].command: must be a list"),
    "probe-list": (POD.replace(b"    name: kube-scheduler\n", b"    name: kube-scheduler\n    livenessProbe: [x]\n"),
                   "livenessProbe: must be a mapping"),
    "bad-int-tag": (POD + b"x: !!int ten\n", "cannot decode"),
    "empty": (b"", "empty file"),
    "comments-only": (b"# nothing here\n", "document is empty"),
}

# Parse every file of a directory the way cpctl does, in a process with at most 1 GiB of address
# space; one JSON line per file, then the peak RSS of this program: VmHWM, its own address space's
# high-water mark (getrusage's ru_maxrss is kept across exec on Linux: it counted the pytest worker
# that started the probe, ~400 MB late in a CI run, not the parser).
PROBE = """
import json, os, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from cpctl.core import manifests
directory = sys.argv[1]
for name in sorted(os.listdir(directory)):
    with open(os.path.join(directory, name), "rb") as handle:
        data = handle.read()
    start = time.monotonic()
    try:
        manifests.parse_pod(data)
        error = None
    except manifests.InvalidManifest as exc:
        error = str(exc)
    print(json.dumps({"file": name, "error": error, "seconds": time.monotonic() - start}), flush=True)
with open("/proc/self/status") as status:
    print(json.dumps({"maxrss_kib": int([l.split()[1] for l in status if l.startswith("VmHWM:")][0])}))
"""


def _write_all(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    for name, (data, _) in HOSTILE.items():
        with open(os.path.join(directory, "hostile-%s.yaml" % name), "wb") as handle:
            handle.write(data)


def test_each_hostile_file_is_an_invalid_manifest_in_bounded_time_and_memory(tmp_path: Any) -> None:
    assert len(HOSTILE["billion-laughs"][0]) <= 641, "as small as the Pod of the report"
    _write_all(str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    results = {r["file"]: r for r in lines if "file" in r}
    for name, (_, words) in HOSTILE.items():
        result = results["hostile-%s.yaml" % name]
        assert result["error"] and words in result["error"], (name, result)
        assert "\n" not in result["error"] and len(result["error"]) < 600, result["error"]
        assert result["seconds"] < 15, result      # generous: the decode bounds stop these far sooner
    assert lines[-1]["maxrss_kib"] < 400 << 10, "a hostile file took %d KiB" % lines[-1]["maxrss_kib"]


def test_a_huge_number_where_no_number_is_read_is_just_text() -> None:
    """go-yaml keeps a number it cannot hold as text: harmless in a field the kubelet ignores."""
    pod = manifests.parse_pod(POD + b"x-note: " + b"9" * 5000 + b"\n")
    assert pod["x-note"] == "9" * 5000


def test_hostile_files_leave_every_command_working(node: NodeDirs) -> None:
    _write_all(node.manifests)
    text = node.run("status").stdout
    data = json.loads(node.run("-o", "json", "status").stdout)
    rows = {r["file"]: r for r in data["components"]}
    for name, (_, words) in HOSTILE.items():
        row = rows["hostile-%s.yaml" % name]
        assert row["state"] == "invalid" and words in row["error"], row
        assert "warning: hostile-%s.yaml is not a valid Pod manifest" % name in text
    assert {rows[f]["state"] for f in MANIFESTS} == {"present"}
    check = node.run("check", rc=None)
    assert check.returncode in (0, 1), check.stderr
    report = json.loads(node.run("-o", "json", "check", rc=None).stdout)
    assert {f["file"] for f in report["findings"] if f["kind"] == "stray"} >= {"hostile-%s.yaml" % n for n in HOSTILE}
    node.run("stop", "scheduler")
    node.run("start", "scheduler")
    node.run("restart", "etcd")
    node.run("stop", "hostile-billion-laughs", rc=4)
    assert sorted(node.present()) == sorted(list(MANIFESTS) + ["hostile-%s.yaml" % n for n in HOSTILE])


@pytest.mark.parametrize("name", ["billion-laughs", "recursive-alias", "huge-integer", "namespace-list"])
def test_a_parked_hostile_file_is_refused_on_start(node: NodeDirs, name: str) -> None:
    """The restore check parses the parked file too: refused (exit 4), never a crash."""
    node.run("stop", "scheduler")
    with open(os.path.join(node.parked, "kube-scheduler.yaml"), "wb") as handle:
        handle.write(HOSTILE[name][0])
    err = node.run("start", "scheduler", rc=4).stderr
    assert "is not a valid Pod" in err and HOSTILE[name][1] in err, err


def test_the_wall_time_bound_stops_a_slow_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backstop behind the node bounds: a decode still running after PARSE_SECONDS stops."""
    monkeypatch.setattr(manifests, "PARSE_SECONDS", 0.0)
    with pytest.raises(manifests.InvalidManifest, match="decoding took longer than"):
        manifests.decode(b"- x\n" * 5000)
    monkeypatch.setattr(manifests, "PARSE_SECONDS", 2.0)
    assert len(manifests.decode(b"- x\n" * 5000)[0]) == 5000
