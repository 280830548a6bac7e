"""Issue 33: the node-side revert of a master without cpctl puts a ``--keep-in kubeadm-config`` write
back with cpctl's own rule (``host.ops.config_undo``, which ``core.keptin.undo`` applies too), and
reaches the API with the node's kubeconfig without a copy of any credential (``kubeapi.node_access``
records where each one is in the file; ``host.ops._api_from`` reads them there, only while the file
is the one cpctl read)."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest

from cpctl.host import ops as hostops
from cpctl.host.local import LocalHost
from cpctl.probes.kubeapi import node_access

CERT, KEY, CA = b"-----BEGIN CERTIFICATE-----\ncert\n", b"-----BEGIN EC PRIVATE KEY-----\nkey\n", b"ca-pem\n"


@pytest.mark.parametrize("text,version,written,expected", [
    (None, "", "7", "gone"),                 # no ConfigMap: nothing to put back
    ("before", "9", "7", "done"),            # holds the text before already
    ("after", "7", "7", "write"),            # still cpctl's write: put back over that version
    ("after", "9", "7", "theirs"),           # same text, but someone wrote since: theirs
    ("other", "9", "7", "theirs"),
    ("after", "9", "", "write"),             # killed before recording the version: the text is cpctl's
    ("other", "9", "", "nothing"),           # cpctl's write never landed
])
def test_one_rule_for_putting_a_kept_write_back(text: Any, version: str, written: str, expected: str) -> None:
    assert hostops.config_undo(text, version, "before", "after", written) == expected


def _kubeconfig(tmp_path: Any, user: str) -> str:
    path = str(tmp_path / "admin.conf")
    with open(path, "w") as handle:
        handle.write("apiVersion: v1\nkind: Config\ncurrent-context: a@k\nclusters:\n- name: k\n  cluster:\n"
                     "    certificate-authority-data: %s\n    server: https://127.0.0.1:6443\ncontexts:\n"
                     "- name: a@k\n  context:\n    cluster: k\n    user: a\nusers:\n- name: a\n  user:\n%s"
                     % (base64.b64encode(CA).decode(), user))
    return path


def test_the_plan_names_where_the_credentials_are_never_them(tmp_path: Any) -> None:
    path = _kubeconfig(tmp_path, "    client-certificate-data: %s\n    client-key-data: %s\n"
                       % (base64.b64encode(CERT).decode(), base64.b64encode(KEY).decode()))
    ref = node_access(LocalHost(), path)
    assert ref is not None and set(ref["slices"]) == {"ca_data", "cert_data", "key_data"}
    text = json.dumps(ref)
    assert base64.b64encode(KEY).decode() not in text, text
    assert not {"ca_data", "cert_data", "key_data"} & set(ref["tls"]), ref["tls"]
    assert hostops._api_from(ref) == ("https://127.0.0.1:6443", {"ca_data": CA, "cert_data": CERT, "key_data": KEY})
    with open(path, "a") as handle:                # renewed since the arm (kubeadm certs renew rewrites it)
        handle.write("preferences: {}\n")
    assert hostops._api_from(ref) is None


@pytest.mark.parametrize("user", [
    "    token: abcdef0123456789\n",                                        # an auth header: not sent by the agent
    "    client-certificate-data: %s\n    client-key-data: >-\n      %s\n      %s\n" % (   # folded: not one run
        base64.b64encode(CERT).decode(), base64.b64encode(KEY).decode()[:8], base64.b64encode(KEY).decode()[8:]),
])
def test_a_kubeconfig_the_agent_cannot_use_gives_no_access(tmp_path: Any, user: str) -> None:
    assert node_access(LocalHost(), _kubeconfig(tmp_path, user)) is None
    assert node_access(LocalHost(), "%s:%s" % (_kubeconfig(tmp_path, "    client-certificate-data: %s\n"
                                                            "    client-key-data: %s\n" % (
                                                                base64.b64encode(CERT).decode(),
                                                                base64.b64encode(KEY).decode())),
                                              os.devnull)) is None      # a list of files


@pytest.mark.parametrize("now,was,expected", [
    ("b", "b", "done"), (None, None, "done"),        # as before the change already
    ("a", "b", "write"), ("a", None, "write"),       # cpctl's bytes: put back (or remove)
    ("x", "b", "theirs"), (None, "b", "theirs"),     # someone else's (or removed by someone): left
])
def test_one_rule_for_putting_a_kept_patch_file_back(now: Any, was: Any, expected: str) -> None:
    assert hostops.patch_undo(now, was, "a") == expected


def _plan_with_patch(tmp_path: Any, patch_path: str, record: str = "") -> Any:
    kube = str(tmp_path / "etc" / "kubernetes")
    os.makedirs(kube + "/manifests")
    state = str(tmp_path / "state")
    manifest = kube + "/manifests/kube-scheduler.yaml"
    revert = {"file": "kube-scheduler.yaml", "commit": 0, "steps": [{"kind": "write", "path": manifest}]}
    undo = {"file": os.path.basename(patch_path), "commit": 0,
            "steps": [{"kind": "remove", "path": patch_path, "kept": state + "/confirm/x.patch0.0.removed"}]}
    return {"entry": revert, "journal": state + "/journal.json",
            "patches": [{"entry": undo, "record": record or state + "/keepin/kube-scheduler.yaml.0a1b2c3d.patch.json"}]}


def test_a_patch_undo_in_a_plan_touches_only_a_kubeadm_patch_file_below_the_kube_dir(tmp_path: Any) -> None:
    kube = str(tmp_path / "etc" / "kubernetes")
    good = _plan_with_patch(tmp_path / "a", str(tmp_path / "a" / "etc" / "kubernetes" / "patches" /
                                                  "kube-scheduler+json.yaml"))
    assert hostops._plan_paths_problem(good) == ""
    for bad in (kube + "/admin.conf", kube + "/manifests/kube-scheduler.yaml", "/etc/passwd",
                kube + "/patches/../admin.conf"):
        plan = _plan_with_patch(tmp_path / str(abs(hash(bad))), bad.replace(kube, str(
            tmp_path / str(abs(hash(bad))) / "etc" / "kubernetes")))
        assert hostops._plan_paths_problem(plan), bad
    elsewhere = _plan_with_patch(tmp_path / "r", str(tmp_path / "r" / "etc" / "kubernetes" / "patches" /
                                                      "kube-scheduler+json.yaml"), record="/etc/kubernetes/admin.conf")
    assert "keep-in record" in hostops._plan_paths_problem(elsewhere)


@pytest.mark.parametrize("answers,said", [
    ([(200, {"data": {"ClusterConfiguration": "someone else's"}, "metadata": {"resourceVersion": "12"}})],
     "changed by someone else"),
    ([(200, {"data": {"ClusterConfiguration": "after"}, "metadata": {"resourceVersion": "7"}}), (409, None)],
     "changed while cpctl put"),
])
def test_what_the_master_leaves_for_the_operator_names_the_check_as_run_on_that_master(
        monkeypatch: pytest.MonkeyPatch, answers: list, said: str) -> None:
    """When the master's own revert leaves the ClusterConfiguration as it is (someone else changed
    it, or wrote it meanwhile), its line says how to check it: the command as the operator runs it
    against that master (``-H``/``-i``), carried in the plan, never a bare ``cpctl check`` that would
    run on the operator's own machine."""
    asked = list(answers)
    monkeypatch.setattr(hostops, "_api_json", lambda method, url, access, body=None: asked.pop(0))
    kept = {"namespace": "kube-system", "name": "kubeadm-config", "key": "ClusterConfiguration",
            "before": "before", "after": "after", "resource_version": "7", "component": "kube-scheduler",
            "op": "flags"}
    hint = "cpctl -H admin@10.0.0.11 check --kubeadm"
    line = hostops._put_back_config({"check_hint": hint}, kept, ("https://10.0.0.11:6443", {}))
    assert said in line and line.endswith("check it (%s)" % hint) and not asked
