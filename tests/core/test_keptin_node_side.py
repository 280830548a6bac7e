"""Issue 33: the node-side revert of a master without cpctl puts a ``--keep-in kubeadm-config`` write
back with cpctl's own rule (``agent.putback.config_undo``, which ``core.keptin.undo`` applies too), and
reaches the API with the node's kubeconfig without a copy of any credential (``kubeapi.node_access``
records where each one is in the file; ``agent.putback._api_from`` reads them there, only while the file
is the one cpctl read)."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest
import yaml

from cpctl.agent import putback, revertplan, tinyyaml
from cpctl.core import keptin
from cpctl.core import kubeadmconfig as kc
from cpctl.host.local import LocalHost
from cpctl.probes.kubeapi import node_access
from tests.coreutil import go_yaml

CERT, KEY, CA = b"-----BEGIN CERTIFICATE-----\ncert\n", b"-----BEGIN EC PRIVATE KEY-----\nkey\n", b"ca-pem\n"


V3 = """apiServer:
  certSANs:
  - 10.0.0.10
  extraArgs:
    authorization-mode: Node,RBAC
apiVersion: kubeadm.k8s.io/v1beta3
controllerManager: {}
dns: {}
etcd:
  local:
    dataDir: /var/lib/etcd
featureGates:
  EtcdLearnerMode: true
kind: ClusterConfiguration
kubernetesVersion: v1.30.4
networking:
  serviceSubnet: 10.96.0.0/12
scheduler: {}
"""
V4 = """apiServer:
  extraArgs:
  - name: service-account-issuer
    value: https://a
  - name: service-account-issuer
    value: https://b
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
scheduler: {}
"""


def _with(text: str, change: Any) -> str:
    """``text`` (a ClusterConfiguration) changed by ``change`` (a function of its value), as cpctl writes it."""
    value = yaml.safe_load(text)
    change(value)
    return kc.dump_config(value)


def _both(now: str, before: str, after: str) -> Any:
    """The undo as the node side (the YAML subset) and as cpctl (its YAML library) make it: the same
    decision and the same keys, and texts that read the same."""
    node = putback.config_undo(now, before, after)
    core = putback.config_undo(now, before, after, keptin.load_config, kc.dump_config)
    assert node[0] == core[0] and node[2] == core[2], (node, core)
    if node[0] == "write":
        assert yaml.safe_load(node[1]) == yaml.safe_load(core[1]), (node[1], core[1])
    return node


def test_the_undo_removes_exactly_cpctls_keys_and_keeps_everyone_elses() -> None:
    """Issue 49 item 1: someone else changed the ClusterConfiguration while a kept flag was in it (another
    section's flag, a flag of the same section): the undo takes cpctl's flag out and leaves theirs - no
    longer the whole text at a resourceVersion (that left the reverted flag for the next upgrade)."""
    after = _with(V3, lambda c: c["scheduler"].update(extraArgs={"v": "4"}))
    theirs = _with(after, lambda c: (c["controllerManager"].update(extraArgs={"profiling": "false"}),
                                     c["scheduler"]["extraArgs"].update({"bind-address": "0.0.0.0"})))
    decision, text, keys = _both(theirs, V3, after)
    assert (decision, keys) == ("write", ["scheduler.extraArgs.v"])
    assert yaml.safe_load(text) == _with_value(theirs, lambda c: c["scheduler"]["extraArgs"].pop("v"))
    # the section cpctl made is gone again, the one that was there ({}) stays
    alone = _with(after, lambda c: c["controllerManager"].update(extraArgs={"profiling": "false"}))
    assert yaml.safe_load(_both(alone, V3, after)[1])["scheduler"] == {}
    # nobody else wrote the text: the text before, byte for byte; back already: nothing to do; no ConfigMap
    assert _both(after, V3, after) == ("write", V3, [])
    assert _both(V3, V3, after)[0] == "done"
    assert putback.config_undo(None, V3, after)[0] == "gone"
    # cpctl's write never landed (killed before it): its keys hold their value before - nothing to do
    never = _with(V3, lambda c: c["controllerManager"].update(extraArgs={"profiling": "false"}))
    assert _both(never, V3, after)[0] == "done"


def _with_value(text: str, change: Any) -> Any:
    value = yaml.safe_load(text)
    change(value)
    return value


def test_a_key_someone_else_changed_too_is_a_conflict_nothing_written() -> None:
    after = _with(V3, lambda c: c["scheduler"].update(extraArgs={"v": "4"}))
    theirs = _with(after, lambda c: c["scheduler"]["extraArgs"].update(v="9"))
    assert _both(theirs, V3, after) == ("conflict", "", ["scheduler.extraArgs.v"])
    removed = _with(after, lambda c: c["scheduler"].pop("extraArgs"))       # removed by someone: as before
    assert _both(removed, V3, after)[0] == "done"
    # a changed value and an unset flag: each goes back to its value before
    changed = _with(V3, lambda c: c["apiServer"]["extraArgs"].update({"authorization-mode": "RBAC"}))
    decision, text, _ = _both(_with(changed, lambda c: c.update(clusterName="x")), V3, changed)
    assert decision == "write" and yaml.safe_load(text)["apiServer"]["extraArgs"] == {"authorization-mode": "Node,RBAC"}
    unset = _with(V3, lambda c: c["apiServer"].pop("extraArgs"))
    decision, text, _ = _both(_with(unset, lambda c: c.update(clusterName="x")), V3, unset)
    assert decision == "write" and yaml.safe_load(text)["apiServer"]["extraArgs"] == {"authorization-mode": "Node,RBAC"}
    assert yaml.safe_load(text)["clusterName"] == "x"


def test_v1beta4_lists_are_merged_by_name_every_instance_kept() -> None:
    """A v1beta4 name/value list (and extraVolumes) is keyed by name: cpctl's name goes, another writer's
    name and the two issuers stay; a volume someone else added stays with cpctl's gone."""
    audit = {"name": "audit", "hostPath": "/etc/kubernetes/audit", "mountPath": "/etc/kubernetes/audit",
             "readOnly": True, "pathType": "DirectoryOrCreate"}
    after = _with(V4, lambda c: (c["apiServer"]["extraArgs"].append({"name": "audit-policy-file",
                                                                       "value": "/etc/kubernetes/audit/p.yaml"}),
                                 c["apiServer"].update(extraVolumes=[audit])))
    theirs = _with(after, lambda c: (c["apiServer"]["extraArgs"].append({"name": "profiling", "value": "false"}),
                                     c["apiServer"]["extraVolumes"].append(dict(audit, name="logs"))))
    decision, text, keys = _both(theirs, V4, after)
    assert decision == "write" and keys == ["apiServer.extraArgs[name=audit-policy-file]",
                                            "apiServer.extraVolumes[name=audit]"], keys
    api = yaml.safe_load(text)["apiServer"]
    assert [a["name"] for a in api["extraArgs"]] == ["service-account-issuer", "service-account-issuer", "profiling"]
    assert [v["name"] for v in api["extraVolumes"]] == ["logs"]
    # another writer's YAML library wrote cpctl's volume with its keys in another order: still cpctl's
    resorted = yaml.safe_dump(yaml.safe_load(theirs), sort_keys=True)
    decision, again, _ = _both(resorted, V4, after)
    assert decision == "write" and yaml.safe_load(again) == yaml.safe_load(text)
    # the issuers changed by cpctl (every instance), and by someone else too: a conflict on that name
    issuers = _with(V4, lambda c: c["apiServer"].update(extraArgs=[{"name": "service-account-issuer", "value": "x"}]))
    assert _both(_with(issuers, lambda c: c["apiServer"]["extraArgs"].append(
        {"name": "service-account-issuer", "value": "y"})), V4, issuers)[0] == "conflict"


GO_YAML = """apiServer:
  certSANs:
  - 127.0.0.1
  - "10.0.0.10"
  extraArgs:
    audit-log-maxage: "30"
    oidc-username-claim: 'e''mail' # a comment
  timeoutForControlPlane: 4m0s
apiVersion: kubeadm.k8s.io/v1beta3
controlPlaneEndpoint: k8s.example:6443
controllerManager: {}
dns: {}
etcd:
  local:
    dataDir: /var/lib/etcd
    extraArgs:
      listen-metrics-urls: http://0.0.0.0:2381
imageRepository: registry.k8s.io
kind: ClusterConfiguration
kubernetesVersion: v1.30.4
networking:
  dnsDomain: cluster.local
  podSubnet: 10.244.0.0/16
scheduler:
  extraArgs:
    v: "2"
    note: "caf\\u00e9 \\"x\\"\\ttab"
"""


@pytest.mark.parametrize("text", [GO_YAML, V3, V4, kc.dump_config(yaml.safe_load(GO_YAML)),
                                  "---\n" + V4.replace("  - name", "    - name").replace("    value", "      value")])
def test_the_node_sides_yaml_reads_what_kubeadm_and_cpctl_write(text: str) -> None:
    """The agent has no YAML library: it reads and writes the subset kubeadm (go-yaml) and cpctl
    (PyYAML) write a ClusterConfiguration in - what it writes reads, in any YAML reader, as what it read."""
    assert yaml.safe_load(tinyyaml.yaml_dump(tinyyaml.yaml_load(text))) == yaml.safe_load(text)


@pytest.mark.parametrize("text", [
    "a: {b: 1}\n", "a: [1, 2]\n", "a: &x 1\nb: *x\n", "a: !!str 1\n", "a: |0\n  x\n", "a: >\n  x\n\u2028\n",
    "a: b\n  c: d\n", "a: 1\n---\nb: 2\n", "a: 1\na: 2\n", "a:\n\t- 1\n", "a: \"open\n", "- 1\n- 2\n" * 0 + "x\n",
    "a:\n" + "".join("%s- \n" % (" " * i) for i in range(0, 200, 2)),
])
def test_yaml_the_node_side_does_not_read_is_left_to_cpctl(text: str) -> None:
    """Anything outside that subset is refused (never guessed): the node side leaves the undo to the
    next cpctl command, which reads any YAML."""
    with pytest.raises(ValueError):
        tinyyaml.yaml_load(text)
    assert putback.config_undo(text, V3, V3.replace("scheduler: {}", "scheduler:\n  extraArgs:\n    v: '4'"))[0] == \
        "unreadable"


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
    assert putback._api_from(ref) == ("https://127.0.0.1:6443", {"ca_data": CA, "cert_data": CERT, "key_data": KEY})
    with open(path, "a") as handle:                # renewed since the arm (kubeadm certs renew rewrites it)
        handle.write("preferences: {}\n")
    assert putback._api_from(ref) is None


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
    assert putback.patch_undo(now, was, "a") == expected


def _plan_with_patch(tmp_path: Any, patch_path: str, record: str = "") -> Any:
    kube = str(tmp_path / "etc" / "kubernetes")
    os.makedirs(kube + "/manifests")
    state = str(tmp_path / "state")
    manifest = kube + "/manifests/kube-scheduler.yaml"
    revert = {"file": "kube-scheduler.yaml", "commit": 0, "steps": [{"kind": "write", "path": manifest}],
              "companions": []}
    undo = {"file": os.path.basename(patch_path), "commit": 0,
            "steps": [{"kind": "remove", "path": patch_path, "kept": state + "/confirm/x.patch0.0.removed"}]}
    return {"entry": revert, "journal": state + "/journal.json",
            "patches": [{"entry": undo, "record": record or state + "/keepin/kube-scheduler.yaml.0a1b2c3d.patch.json"}]}


def test_a_patch_undo_in_a_plan_touches_only_a_kubeadm_patch_file_below_the_kube_dir(tmp_path: Any) -> None:
    kube = str(tmp_path / "etc" / "kubernetes")
    good = _plan_with_patch(tmp_path / "a", str(tmp_path / "a" / "etc" / "kubernetes" / "patches" /
                                                  "kube-scheduler+json.yaml"))
    assert revertplan._plan_paths_problem(good) == ""
    for bad in (kube + "/admin.conf", kube + "/manifests/kube-scheduler.yaml", "/etc/passwd",
                kube + "/patches/../admin.conf"):
        plan = _plan_with_patch(tmp_path / str(abs(hash(bad))), bad.replace(kube, str(
            tmp_path / str(abs(hash(bad))) / "etc" / "kubernetes")))
        assert revertplan._plan_paths_problem(plan), bad
    elsewhere = _plan_with_patch(tmp_path / "r", str(tmp_path / "r" / "etc" / "kubernetes" / "patches" /
                                                      "kube-scheduler+json.yaml"), record="/etc/kubernetes/admin.conf")
    assert "keep-in record" in revertplan._plan_paths_problem(elsewhere)


SCHEDULER_V4 = V3.replace("scheduler: {}", "scheduler:\n  extraArgs:\n    v: '4'")


@pytest.mark.parametrize("answers,said,settled", [
    ([(200, {"data": {"ClusterConfiguration": SCHEDULER_V4.replace("'4'", "'9'")},
             "metadata": {"resourceVersion": "12"}})], "someone else changed scheduler.extraArgs.v too", False),
    ([(200, {"data": {"ClusterConfiguration": SCHEDULER_V4}, "metadata": {"resourceVersion": "7"}}), (409, None)] * 2,
     "changed while cpctl put", False),
])
def test_what_the_master_leaves_for_the_operator_names_the_check_as_run_on_that_master(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any, answers: list, said: str, settled: bool) -> None:
    """When the master's own revert leaves the ClusterConfiguration as it is (someone else changed
    cpctl's key too, or wrote it meanwhile, twice), its line says how to check it: the command as the
    operator runs it against that master (``-H``/``-i``), carried in the plan, never a bare ``cpctl
    check`` that would run on the operator's own machine - and the record stays until it is resolved."""
    asked = list(answers)
    monkeypatch.setattr(putback, "_api_json", lambda method, url, access, body=None: asked.pop(0))
    kept = {"namespace": "kube-system", "name": "kubeadm-config", "key": "ClusterConfiguration",
            "before": V3, "after": SCHEDULER_V4, "resource_version": "7", "component": "kube-scheduler",
            "op": "flags", "file": "kube-scheduler.yaml"}
    hint = "cpctl -H admin@10.0.0.11 check --kubeadm"
    line, done = putback._put_back_config(_plan_for(tmp_path, hint), kept, ("https://10.0.0.11:6443", {}),
                                          "/s/keepin/r")
    assert said in line and line.endswith("check it (%s)" % hint) and not asked and done is settled, line


def _plan_for(tmp_path: Any, hint: str = "cpctl check --kubeadm", shown: Any = ()) -> dict[str, Any]:
    """What ``_put_back_config`` reads of a revert plan: its state dir (``journal``), who reverts, the
    keys whose values may be shown, the check's hint."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    from cpctl.redaction import secret_text_patterns
    return {"check_hint": hint, "journal": str(state / "journal.json"), "shown_keys": list(shown),
            "secret_patterns": secret_text_patterns(),
            "verdict": {"user": "root", "host": "laptop", "node": "cp-1",
                        "origin": "cpctl revert-unconfirmed kube-scheduler (node-side plan, armed by me)"}}


def test_a_put_back_the_master_refuses_is_in_its_history_with_their_values_never_a_secret(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Issue 49: the master's own revert refuses to put a ClusterConfiguration back (someone else changed
    cpctl's own keys too). That used to reach syslog, ``check`` and stderr only - ``cpctl history`` (no lock,
    no recovery) never showed it. Now one history record ``keep-in-conflict`` through the agent's one
    history writer: the keys, the other writer's value of each - a credential's only as ``<redacted>``, by
    cpctl's one redaction rule applied at arm time (the plan's ``shown_keys``) -, the record kept and the
    one command that resolves it; valid against history.json."""
    from cpctl.agent import journalseal
    from cpctl.redaction import REDACTED
    from tests.coreutil import schema_valid
    after = _with(V3, lambda c: (c["scheduler"].update(extraArgs={"v": "4"}),
                                 c["etcd"]["local"].update(extraArgs={"initial-cluster-token": "ours"})))
    theirs = _with(after, lambda c: (c["scheduler"]["extraArgs"].update(v="9"),
                                     c["etcd"]["local"]["extraArgs"].update({"initial-cluster-token": "s3cret"})))
    record = keptin.KeptConfig("0123abcd", "etcd", "etcd.yaml", "a" * 64, "b" * 64, "kube-system", "kubeadm-config",
                               "ClusterConfiguration", V3, after, "7")
    shown = keptin.shown_keys([record])
    assert shown == ["scheduler.extraArgs.v"], shown        # the token's key: not shown
    assert putback.REDACTED == REDACTED
    monkeypatch.setattr(putback, "_api_json", lambda method, url, access, body=None: (
        200, {"data": {"ClusterConfiguration": theirs}, "metadata": {"resourceVersion": "12"}}))
    plan = _plan_for(tmp_path, shown=shown)
    kept = dict(vars(record))
    line, done = putback._put_back_config(plan, kept, ("https://10.0.0.11:6443", {}), "/s/keepin/r.json")
    assert "NOT put back" in line and not done, line
    records = journalseal.parse_records((tmp_path / "state" / "history.jsonl").read_bytes())
    assert len(records) == 1, records
    [conflict] = records
    assert conflict["action"] == "keep-in-conflict" and conflict["configmap"] == "kube-system/kubeadm-config"
    assert conflict["keys"] == ["etcd.local.extraArgs.initial-cluster-token", "scheduler.extraArgs.v"], conflict
    assert conflict["theirs"] == {"scheduler.extraArgs.v": "9",
                                  "etcd.local.extraArgs.initial-cluster-token": REDACTED}, conflict
    assert "s3cret" not in json.dumps(conflict) and "ours" not in json.dumps(conflict)
    assert conflict["keepin_record"] == "/s/keepin/r.json" and "node-side plan" in conflict["origin"]
    assert conflict["resolve"] == "kubectl -n kube-system edit configmap kubeadm-config"
    assert "scheduler.extraArgs.v=9" in conflict["reason"] and conflict["resolve"] in conflict["reason"]
    schema_valid("history", {"node": "cp-1", "history": records, "host": None})
    # they removed cpctl's key instead of changing it back: nothing to put back (as before), nothing recorded
    gone = _with(after, lambda c: (c["scheduler"].pop("extraArgs"), c["etcd"]["local"].pop("extraArgs")))
    assert putback.config_theirs(gone, V3, after) == {}


#: a private key as one short line (a multi-line one: test_the_masters_revert_refuses_a_multi_line_value_...)
PEM_KEY = "-----BEGIN PRIVATE KEY-----MIIEvQIBADANBgkq-----END PRIVATE KEY-----"


@pytest.mark.parametrize("secret,material", [(PEM_KEY, "MIIEvQIBADANBgkq"),
                                             ("--client-token=tok3nMaterial", "tok3nMaterial")])
def test_a_secret_under_a_harmless_key_name_never_reaches_the_masters_history_file(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any, secret: str, material: str) -> None:
    """Review of issue 49: which values ``theirs`` shows was decided by the key's NAME only (``shown_keys``),
    so another writer's private key (or ``--token=...``) under a harmless name (``scheduler.extraArgs.v``)
    went as it is into the history file on the master - the CLI redacts on display, the file kept it. The
    plan now carries cpctl's text patterns of a secret (``redaction.secret_text_patterns``, one rule) and the
    agent shows such a value only as ``<redacted>``: the file on disk holds no key material; a harmless
    value is still shown."""
    from cpctl.agent import journalseal
    from cpctl.redaction import REDACTED
    after = _with(V3, lambda c: c["scheduler"].update(extraArgs={"v": "4", "profiling": "false"}))
    theirs = _with(after, lambda c: c["scheduler"]["extraArgs"].update(v=secret, profiling="true"))
    record = keptin.KeptConfig("0123abcd", "kube-scheduler", "kube-scheduler.yaml", "a" * 64, "b" * 64,
                               "kube-system", "kubeadm-config", "ClusterConfiguration", V3, after, "7")
    shown = keptin.shown_keys([record])
    assert shown == ["scheduler.extraArgs.profiling", "scheduler.extraArgs.v"], shown    # both names harmless
    monkeypatch.setattr(putback, "_api_json", lambda method, url, access, body=None: (
        200, {"data": {"ClusterConfiguration": theirs}, "metadata": {"resourceVersion": "12"}}))
    line, done = putback._put_back_config(_plan_for(tmp_path, shown=shown), dict(vars(record)),
                                          ("https://10.0.0.11:6443", {}), "/s/keepin/r.json")
    assert "NOT put back" in line and not done, line
    on_disk = (tmp_path / "state" / "history.jsonl").read_bytes()
    assert material.encode() not in on_disk and b"KEY-----MII" not in on_disk, on_disk
    [conflict] = journalseal.parse_records(on_disk)
    assert conflict["theirs"] == {"scheduler.extraArgs.v": REDACTED, "scheduler.extraArgs.profiling": "true"}
    assert "scheduler.extraArgs.profiling=true" in conflict["reason"], conflict



#: another writer's multi-line values in the ClusterConfiguration: a certificate, an indented first line,
#: kept trailing newlines, a long line kubeadm wraps
THEIR_TEXTS = {"ca-pem": "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUX\n-----END CERTIFICATE-----\n",
               "indented": "  two: spaces first\nthen # not a comment\n\n- nor an item",
               "kept": "x\n\n\n", "long": "a long value " * 9}
KUBEADM_V3 = go_yaml(_with_value(V3, lambda c: c["apiServer"]["extraArgs"].update(THEIR_TEXTS)))


def _plan_with_kept(tmp_path: Any, before: str, after: str, shown: Any = ()) -> Any:
    """A revert plan (``_plan_for``) with one keep-in record of cpctl's write of ``after`` over ``before``
    on disk, as ``core.keptin`` writes it: (plan, the record's path)."""
    plan = _plan_for(tmp_path, "cpctl -H admin@10.0.0.11 check --kubeadm", shown)
    (tmp_path / "state" / "keepin").mkdir(mode=0o700)
    kept = {"op": "0123abcd", "component": "kube-scheduler", "file": "kube-scheduler.yaml", "previous": "a" * 64,
            "checksum": "b" * 64, "namespace": "kube-system", "name": "kubeadm-config", "key": "ClusterConfiguration",
            "before": before, "after": after, "resource_version": "7", "time": "2026-12-07T00:00:00Z"}
    path = tmp_path / "state" / "keepin" / putback.kept_record_name("kube-scheduler.yaml", "0123abcd")
    path.write_text(json.dumps(kept))
    plan.update(keepin=[str(path)], entry={"file": "kube-scheduler.yaml"}, api={"server": "from the kubeconfig"})
    return plan, str(path)


def _cluster(monkeypatch: pytest.MonkeyPatch, text: str) -> list:
    """The API server as the master's revert sees it: the ConfigMap holding ``text``; [(method, body)] asked."""
    asked: list = []

    def answer(method: str, url: str, access: Any, body: Any = None) -> Any:
        asked.append((method, body))
        if method == "GET":
            return 200, {"data": {"ClusterConfiguration": text}, "metadata": {"resourceVersion": "12"}}
        return 200, dict(body, metadata={"resourceVersion": "13"})
    monkeypatch.setattr(putback, "_api_json", answer)
    monkeypatch.setattr(putback, "_api_from", lambda ref: ("https://10.0.0.11:6443", {}))
    return asked


def _history(tmp_path: Any) -> Any:
    from cpctl.agent import journalseal
    from tests.coreutil import schema_valid
    path = tmp_path / "state" / "history.jsonl"
    records = journalseal.parse_records(path.read_bytes()) if path.exists() else []
    schema_valid("history", {"node": "cp-1", "history": records, "host": None})
    return records


def test_the_masters_revert_takes_cpctls_flag_out_beside_multi_line_values(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Issue 49 item 1, left open: kubeadm writes a string with a newline as a block scalar, and cpctl
    (PyYAML) as a quoted value over several lines; the master's own revert refused the whole
    ClusterConfiguration then - the reverted flag stayed for the next ``kubeadm upgrade``, said in syslog
    only, nothing in ``cpctl history``. Now it reads them: cpctl's flag taken out exactly, the other
    writers' multi-line values (and the one they added since) kept as they were, ``keep-in-undone``."""
    after = kc.dump_config(_with_value(KUBEADM_V3, lambda c: c["scheduler"].update(extraArgs={"v": "4"})))
    theirs = dict(THEIR_TEXTS, profiling="false", motd="  welcome\n\n  to cp-1\n")
    now = go_yaml(_with_value(after, lambda c: c["controllerManager"].update(extraArgs=theirs)))
    assert "|2-\n" in KUBEADM_V3 and "|+\n" in now and "-----END CERTIFICATE-----\n\n" in after   # each form
    plan, record = _plan_with_kept(tmp_path, KUBEADM_V3, after)
    asked = _cluster(monkeypatch, now)
    lines = putback._plan_keepin(plan)
    assert [m for m, _ in asked] == ["GET", "PUT"], lines
    written = asked[1][1]["data"]["ClusterConfiguration"]
    cfg = yaml.safe_load(written)
    assert cfg == _with_value(now, lambda c: c["scheduler"].pop("extraArgs")), written      # scheduler: {} as before
    assert cfg["apiServer"]["extraArgs"] == dict(THEIR_TEXTS, **{"authorization-mode": "Node,RBAC"})
    assert cfg["controllerManager"]["extraArgs"] == theirs and cfg["scheduler"] == {}, cfg
    assert lines == ["kube-system/kubeadm-config: cpctl's scheduler.extraArgs.v put back as before the change, what "
                     "others changed since kept (resourceVersion 13)"], lines
    [undone] = _history(tmp_path)
    assert undone["action"] == "keep-in-undone" and undone["keys"] == ["scheduler.extraArgs.v"], undone
    assert not os.path.exists(record)


@pytest.mark.parametrize("their_v,shown", [
    ("9\nnine\n", "9\nnine\n"),
    ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq\n-----END PRIVATE KEY-----\n", "<redacted>"),
])
def test_the_masters_revert_refuses_a_multi_line_value_of_theirs_on_cpctls_key(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any, their_v: str, shown: str) -> None:
    """Someone else set cpctl's own key to a multi-line value (go-yaml: a block scalar): a conflict, read -
    nothing written, ``keep-in-conflict`` with their value (a private key's only as ``<redacted>``, in the
    file on the master too), the record kept."""
    after = kc.dump_config(_with_value(KUBEADM_V3, lambda c: c["scheduler"].update(extraArgs={"v": "4"})))
    now = go_yaml(_with_value(after, lambda c: c["scheduler"]["extraArgs"].update(v=their_v)))
    assert "v: |\n" in now
    plan, record = _plan_with_kept(tmp_path, KUBEADM_V3, after, shown=["scheduler.extraArgs.v"])
    asked = _cluster(monkeypatch, now)
    [line] = putback._plan_keepin(plan)
    assert [m for m, _ in asked] == ["GET"] and "NOT put back: someone else changed scheduler.extraArgs.v" in line
    [conflict] = _history(tmp_path)
    assert conflict["action"] == "keep-in-conflict" and conflict["theirs"] == {"scheduler.extraArgs.v": shown}
    assert b"MIIEvQIBADANBgkq" not in (tmp_path / "state" / "history.jsonl").read_bytes()
    assert conflict["keepin_record"] == record and os.path.exists(record)


@pytest.mark.parametrize("now", [
    KUBEADM_V3.replace("kind: ClusterConfiguration", "kind: &k ClusterConfiguration"),       # an anchor
    KUBEADM_V3.replace("    indented: |2-\n", "    indented: |2-\n    \u2028\n"),               # a raw U+2028
])
def test_what_the_masters_revert_cannot_read_is_in_its_history_never_lost_silently(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any, now: str) -> None:
    """YAML the agent still does not read: nothing written, said loudly - the line, and a ``keep-in-pending``
    history record ``cpctl history`` shows (locally and over ``-H``) with the record kept for the next cpctl
    command, which reads any YAML and puts it back, and the check to run meanwhile."""
    after = kc.dump_config(_with_value(KUBEADM_V3, lambda c: c["scheduler"].update(extraArgs={"v": "4"})))
    plan, record = _plan_with_kept(tmp_path, KUBEADM_V3, after)
    asked = _cluster(monkeypatch, now)
    [line] = putback._plan_keepin(plan)
    assert [m for m, _ in asked] == ["GET"] and "kube-system/kubeadm-config NOT put back yet (" in line, line
    [pending] = _history(tmp_path)
    assert pending["action"] == "keep-in-pending" and pending["keepin_record"] == record and os.path.exists(record)
    assert pending["configmap"] == "kube-system/kubeadm-config" and "node-side plan" in pending["origin"]
    assert "YAML the master's revert does not read" in pending["reason"], pending
    assert "the next cpctl command on this node puts it back" in pending["reason"]
    assert pending["reason"].endswith("check it (cpctl -H admin@10.0.0.11 check --kubeadm)"), pending
