"""The pieces behind apply/edit/flags/rollback, without a kubelet (issue #14): flag edits in the
manifest's text, the reviewer's checks, and the revision store read as untrusted input."""

from __future__ import annotations

import difflib
import json
import os
from typing import Any, Dict, List

import pytest

from cpctl.core import checks, flags, manifests
from cpctl.core.settings import Settings
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.local import LocalHost
from cpctl.ops import edits
from cpctl.ops.wiring import open_node
from tests.coreutil import NODE, NodeDirs

APISERVER = b"""# written by kubeadm; edited by hand on 2026-11-30
apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-apiserver
    - --advertise-address=10.0.0.11   # this master
    - --enable-admission-plugins=NodeRestriction
    - --profiling=false
    - --secure-port=6443
    image: registry.k8s.io/kube-apiserver:v1.31.2
    name: kube-apiserver
  hostNetwork: true
"""


def _changed_lines(old: bytes, new: bytes) -> List[str]:
    return [line for line in difflib.unified_diff(old.decode().splitlines(), new.decode().splitlines(), lineterm="",
                                                  n=0) if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def _set(data: bytes, sets: Any = (), unsets: Any = ()) -> bytes:
    new, _ = edits.flags_version(data, "kube-apiserver", None, list(sets), list(unsets))
    return new


def test_flags_are_changed_in_place_and_nothing_else_moves() -> None:
    new = _set(APISERVER, [("enable-admission-plugins", "NodeRestriction,AlwaysPullImages"), ("v", "2")],
               ["profiling"])
    assert _changed_lines(APISERVER, new) == [
        "-    - --enable-admission-plugins=NodeRestriction",
        "-    - --profiling=false",
        "+    - --enable-admission-plugins=NodeRestriction,AlwaysPullImages",
        "+    - --v=2",
    ]
    assert new.startswith(b"# written by kubeadm") and b"# this master" in new
    command = manifests.parse_pod(new)["spec"]["containers"][0]["command"]
    assert command[-1] == "--v=2" and "--profiling=false" not in command


def test_values_that_need_quotes_are_quoted_and_read_back_exactly() -> None:
    for value in ("a: b", "x #y", "'quoted'", "", " lead", "{json}", "yes"):
        new = _set(APISERVER, [("audit-log-path", value)])
        command = manifests.parse_pod(new)["spec"]["containers"][0]["command"]
        assert command[-1] == "--audit-log-path=" + value, (value, new)


def test_a_flow_style_list_is_rewritten_whole_and_says_so() -> None:
    flow = APISERVER.replace(b"""  - command:
    - kube-apiserver
    - --advertise-address=10.0.0.11   # this master
    - --enable-admission-plugins=NodeRestriction
    - --profiling=false
    - --secure-port=6443
""", b"""  - command: [kube-apiserver, --secure-port=6443]
""")
    new, said = edits.flags_version(flow, "kube-apiserver", None, [("v", "3")], [])
    assert said[-1].startswith("the file was re-written as a whole")
    assert manifests.parse_pod(new)["spec"]["containers"][0]["command"] == ["kube-apiserver", "--secure-port=6443",
                                                                           "--v=3"]


def test_flags_in_args_get_new_flags_in_args() -> None:
    data = APISERVER.replace(b"  - command:\n    - kube-apiserver\n", b"  - args:\n")
    new = _set(data, [("v", "4")])
    container = manifests.parse_pod(new)["spec"]["containers"][0]
    assert container["args"][-1] == "--v=4" and "command" not in container


def test_two_word_and_repeated_flags_are_refused() -> None:
    two_words = APISERVER.replace(b"- --profiling=false\n", b"- --profiling\n    - 'false'\n")
    with pytest.raises(CpctlError) as err:
        _set(two_words, unsets=["profiling"])
    assert err.value.code == ExitCode.REFUSED and "cpctl edit" in err.value.message
    repeated = APISERVER.replace(b"- --profiling=false\n", b"- --profiling=false\n    - --profiling=true\n")
    with pytest.raises(CpctlError) as err:
        _set(repeated, [("profiling", "true")])
    assert "given 2 times" in err.value.message


def test_unset_of_an_absent_flag_changes_nothing() -> None:
    new, said = edits.flags_version(APISERVER, "kube-apiserver", None, [], ["audit-log-path"])
    assert new == APISERVER and said == ["--audit-log-path was not set"]
    # a name the binary does not know is a typo, not "nothing to do" (issue #39): exit 2
    with pytest.raises(CpctlError) as err:
        edits.flags_version(APISERVER, "kube-apiserver", None, [], ["no-such"])
    assert err.value.code == ExitCode.USAGE and "kube-apiserver has no flag --no-such" in err.value.message


def test_assignment_parsing_and_container_choice() -> None:
    assert flags.parse_assignment("--v=2") == ("v", "2")
    assert flags.parse_assignment("a=b=c") == ("a", "b=c")
    for bad in ("novalue", "=x", "bad name=1"):
        with pytest.raises(CpctlError) as err:
            flags.parse_assignment(bad)
        assert err.value.code == ExitCode.USAGE
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}}
    with pytest.raises(CpctlError) as err:
        flags.pick_container(pod, None)
    assert "--container" in err.value.message and "a, b" in err.value.message
    assert flags.pick_container(pod, "b")[0] == 1


def test_credentials_in_flags_are_redacted() -> None:
    text = "--token=s3cr3t --oidc-client-secret=abc --etcd-password=pw --tls-cert-file=/x"
    assert flags.redact(text) == "--token=<redacted> --oidc-client-secret=<redacted> --etcd-password=<redacted> " \
                                 "--tls-cert-file=/x"


# --- the reviewer's checks ---------------------------------------------------------------------
def _pod(command: List[str], **spec: Any) -> Dict[str, Any]:
    base = {"hostNetwork": True, "containers": [{"name": "c", "command": command}]}
    return {"metadata": {"name": command[0]}, "spec": dict(base, **spec)}


def test_listeners_of_the_known_components() -> None:
    assert checks.listeners(_pod(["kube-apiserver"])) == [("", 6443)]
    assert checks.listeners(_pod(["/usr/local/bin/kube-scheduler", "--bind-address=127.0.0.1"])) == \
        [("127.0.0.1", 10259)]
    etcd = _pod(["etcd", "--listen-client-urls=https://127.0.0.1:2379,https://[fd00::1]:2379",
                 "--listen-peer-urls=https://10.0.0.1:2380", "--listen-metrics-urls=http://0.0.0.0:2381"])
    assert checks.listeners(etcd) == [("", 2381), ("10.0.0.1", 2380), ("127.0.0.1", 2379), ("fd00::1", 2379)]
    assert checks.listeners(_pod(["x"], hostNetwork=False)) == []


def _review(node: NodeDirs, filename: str, new: bytes) -> checks.Review:
    opened = open_node(Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none"),
                       LocalHost())
    scan = opened.scan()
    current = next(m for m in scan.manifests if m.file == filename)
    return checks.review(opened.host, current, new, scan, "test")


def test_only_problems_the_change_brings_refuse_it(node: NodeDirs) -> None:
    old = node.files["kube-scheduler.yaml"]        # its --kubeconfig is mounted from nowhere already
    verdict = _review(node, "kube-scheduler.yaml", old.replace(b"- --leader-elect=true\n",
                                                               b"- --leader-elect=false\n"))
    assert not verdict.problems
    assert verdict.warnings and "so does the current version" in verdict.warnings[0]
    worse = old.replace(b"- --leader-elect=true\n", b"- --leader-elect=true\n    - --leader-elect=false\n")
    assert "gives --leader-elect more than once" in _review(node, "kube-scheduler.yaml", worse).problems[0]


def test_a_port_another_static_pod_listens_on_is_refused(node: NodeDirs) -> None:
    old = node.files["kube-scheduler.yaml"]
    clash = old.replace(b"- --leader-elect=true\n", b"- --leader-elect=true\n    - --secure-port=6443\n")
    assert _review(node, "kube-scheduler.yaml", clash).problems == [
        "port 6443 is also used by kube-apiserver (kube-apiserver.yaml)"]


def test_a_host_path_that_must_exist_is_checked(node: NodeDirs, tmp_path: Any) -> None:
    old = node.files["kube-scheduler.yaml"]
    missing = old + b"  volumes:\n  - hostPath:\n      path: %s\n      type: File\n    name: x\n" % (
        str(tmp_path / "nope").encode())
    [problem] = _review(node, "kube-scheduler.yaml", missing).problems
    assert "does not exist on the node (the pod would never start)" in problem
    (tmp_path / "nope").mkdir()
    [problem] = _review(node, "kube-scheduler.yaml", missing).problems
    assert "is a dir, not a File" in problem


# --- revisions ---------------------------------------------------------------------------------
def _opened(node: NodeDirs) -> Any:
    return open_node(Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none"),
                     LocalHost())


def _apply(node: NodeDirs, data: bytes, keep: int = 10, action: str = "apply") -> Dict[str, Any]:
    return edits.replace(_opened(node), "scheduler", data, "test", action, edits.ApplyOptions(keep=keep, settle=0))


def _version(node: NodeDirs, number: int) -> bytes:
    return node.files["kube-scheduler.yaml"].replace(b"- --leader-elect=true\n",
                                                     b"- --leader-elect=true\n    - --v=%d\n" % number)


def test_revisions_are_bounded_and_keep_counting(node: NodeDirs) -> None:
    for number in range(1, 8):
        result = _apply(node, _version(node, number), keep=3)
        assert (result.revision, result.new_revision) == (number, number + 1)
    listed = edits.list_revisions(_opened(node), "scheduler")["revisions"]
    assert [r["number"] for r in listed] == [1, 6, 7, 8], "the original stays, then the newest 3"
    assert listed[0]["original"] and listed[0]["action"] == "original" and listed[-1]["current"]
    assert sorted(os.listdir(os.path.join(node.state, "revisions"))) == sorted(
        "kube-scheduler.yaml.%d%s" % (n, s) for n in (1, 6, 7, 8) for s in ("", ".json"))
    assert all(os.stat(os.path.join(node.state, "revisions", n)).st_mode & 0o077 == 0
               for n in os.listdir(os.path.join(node.state, "revisions")))


def test_rollback_target_skips_failed_versions_and_checks_the_bytes(node: NodeDirs) -> None:
    _apply(node, _version(node, 1))
    revision, data, _ = edits.rollback_target(_opened(node), "scheduler", None)
    assert revision.number == 1 and data == node.files["kube-scheduler.yaml"]
    meta_path = os.path.join(node.state, "revisions", "kube-scheduler.yaml.1.json")
    with open(meta_path) as handle:
        meta = json.load(handle)
    with open(meta_path, "w") as handle:
        json.dump(dict(meta, failed=True), handle)
    with pytest.raises(CpctlError) as err:
        edits.rollback_target(_opened(node), "scheduler", None)
    assert err.value.code == ExitCode.NOT_FOUND and "--to" in err.value.message
    with pytest.raises(CpctlError) as err:
        edits.rollback_target(_opened(node), "scheduler", 1)
    assert err.value.code == ExitCode.REFUSED and "marked failed" in err.value.message and "--force" in \
        err.value.message, "a failed revision is refused without --force"
    assert edits.rollback_target(_opened(node), "scheduler", 1, force=True)[0].number == 1
    with open(os.path.join(node.state, "revisions", "kube-scheduler.yaml.1"), "ab") as handle:
        handle.write(b"# tampered\n")
    with pytest.raises(CpctlError) as err:
        edits.rollback_target(_opened(node), "scheduler", 1, force=True)
    assert err.value.code == ExitCode.REFUSED and "does not match its recorded checksum" in err.value.message


@pytest.mark.parametrize("meta", ['{"number": 1', '[]', '{"number": "1"}',
                                  '{"number": 2, "file": "kube-scheduler.yaml"}'])
def test_a_corrupt_revision_record_is_one_clear_error(node: NodeDirs, meta: str) -> None:
    _apply(node, _version(node, 1))
    with open(os.path.join(node.state, "revisions", "kube-scheduler.yaml.1.json"), "w") as handle:
        handle.write(meta)
    proc = node.run("revisions", "scheduler", rc=7)
    assert "kube-scheduler.yaml.1.json is corrupt" in proc.stderr
