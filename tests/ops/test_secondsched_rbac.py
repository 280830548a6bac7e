"""``scheduler add --grant-rbac`` and ``scheduler remove`` against a lab that enforces RBAC (issue #22 item 10).

* the identity bound is the one the API server authenticates for the scheduler's kubeconfig (a
  SelfSubjectReview - ``kubectl auth whoami`` - else the client certificate's CN/O), not the name of
  the kubeconfig's user entry;
* a Role/RoleBinding that already exists under cpctl's names is checked: someone else's is refused,
  cpctl's own is fixed;
* ``scheduler remove`` deletes the Role and RoleBinding cpctl created, and only those.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from typing import Any, Iterator

import pytest
import yaml

from cpctl.ops import x509name
from cpctl_lab.control import start_lab
from cpctl_lab.rbac import TOKEN_FILE
from tests.labfixture import FAST, KUBECTL, kubectl
from tests.ops.test_secondsched_lab import cpctl

pytestmark = pytest.mark.end_to_end
ROLE = "cpctl:my-scheduler-lease"


@pytest.fixture
def rbac_lab(tmp_path: Any) -> Iterator[Any]:
    with start_lab(tmp_path / "lab", masters=1, rbac=True, **FAST) as handle:
        yield handle


def _scheduler_conf(lab: Any) -> str:
    return str(lab.manifests_dir().parent / "scheduler.conf")


def _whoami(lab: Any, kubeconfig: str) -> str:
    proc = subprocess.run([KUBECTL, "--kubeconfig", kubeconfig, "--cache-dir", str(lab.dir / "kcache"), "auth",
                           "whoami", "-o", "json"], capture_output=True, text=True, timeout=15,
                          env=dict(os.environ, HOME=str(lab.dir)))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["status"]["userInfo"]["username"]


def _get(lab: Any, kind: str, name: str = ROLE) -> Any:
    proc = kubectl(lab, "get", kind, "-n", "kube-system", name, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def _create(lab: Any, obj: dict) -> None:
    subprocess.run([KUBECTL, "--cache-dir", str(lab.dir / "kcache"), "create", "-f", "-"], input=json.dumps(obj),
                   text=True, capture_output=True, check=True,
                   env=dict(os.environ, KUBECONFIG=lab.kubeconfig, HOME=str(lab.dir)))


def _with_credential(lab: Any, entry: str, user: dict) -> None:
    """The scheduler's kubeconfig with its user entry renamed to ``entry`` and credential ``user``."""
    path = _scheduler_conf(lab)
    with open(path) as handle:
        config = yaml.safe_load(handle)
    config["users"] = [{"name": entry, "user": user}]
    config["contexts"][0]["context"]["user"] = entry
    with open(path, "w") as handle:
        yaml.safe_dump(config, handle)


def _whoami_by_token(kubeconfig: str) -> str:
    """A SelfSubjectReview with the kubeconfig's bearer token (kubectl sends none over plain HTTP,
    the lab's API scheme; cpctl's client does, as it must for tokens)."""
    import urllib.request
    with open(kubeconfig) as handle:
        config = yaml.safe_load(handle)
    request = urllib.request.Request(
        config["clusters"][0]["cluster"]["server"] + "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        data=json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode(),
        headers={"Authorization": "Bearer " + config["users"][0]["user"]["token"],
                 "Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())["status"]["userInfo"]["username"]


def test_the_lab_answers_self_subject_reviews_for_each_credential(rbac_lab: Any) -> None:
    assert _whoami(rbac_lab, rbac_lab.kubeconfig) == "kubernetes-admin"          # the real kubectl auth whoami
    assert _whoami_by_token(_scheduler_conf(rbac_lab)) == "system:kube-scheduler"


def test_grant_binds_the_authenticated_identity_not_the_entry_name(rbac_lab: Any) -> None:
    with open(rbac_lab.dir / TOKEN_FILE, "w") as handle:
        handle.write('tok-custom,custom:my-scheduler,1001,"team:schedulers"\n')
    _with_credential(rbac_lab, "scheduler-entry", {"token": "tok-custom"})
    assert _whoami_by_token(_scheduler_conf(rbac_lab)) == "custom:my-scheduler"
    # the Lease exists (a custom identity has no create right on Leases; kubeadm's scheduler user has)
    _create(rbac_lab, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "my-scheduler", "namespace": "kube-system"}, "spec": {}})
    dry = json.loads(cpctl(rbac_lab, "-o", "json", "scheduler", "add", "my-scheduler", "--dry-run").stdout)
    assert dry["rbac"]["identity"] == "custom:my-scheduler" and dry["rbac"]["allowed"] is False
    out = cpctl(rbac_lab, "scheduler", "add", "my-scheduler", "--grant-rbac", "--timeout", "30").stdout
    assert "Lease RBAC granted" in out and "lease my-scheduler renewed" in out, out
    binding = _get(rbac_lab, "rolebinding")
    assert [s["name"] for s in binding["subjects"]] == ["custom:my-scheduler"]
    lease = json.loads(kubectl(rbac_lab, "get", "lease", "-n", "kube-system", "my-scheduler", "-o", "json").stdout)
    assert lease["spec"]["holderIdentity"], "the scheduler took its Lease"


def test_grant_lets_an_identity_without_create_make_its_lease(rbac_lab: Any) -> None:
    """RBAC cannot limit a create by name: an identity that may not create Leases gets that rule too,
    and the scheduler creates its Lease on its first election (no Lease exists before)."""
    with open(rbac_lab.dir / TOKEN_FILE, "w") as handle:
        handle.write('tok-custom,custom:my-scheduler,1001,"team:schedulers"\n')
    _with_credential(rbac_lab, "scheduler-entry", {"token": "tok-custom"})
    dry = json.loads(cpctl(rbac_lab, "-o", "json", "scheduler", "add", "my-scheduler", "--dry-run").stdout)
    assert dry["rbac"]["denied"] == ["get", "update", "create"], dry["rbac"]
    assert "- create" in dry["rbac"]["yaml"], "the printed Role allows the create"
    out = cpctl(rbac_lab, "scheduler", "add", "my-scheduler", "--grant-rbac", "--timeout", "30").stdout
    assert "Lease RBAC granted" in out and "lease my-scheduler renewed" in out, out
    assert _get(rbac_lab, "role")["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["my-scheduler"],
         "verbs": ["get", "update"]}]
    lease = json.loads(kubectl(rbac_lab, "get", "lease", "-n", "kube-system", "my-scheduler", "-o", "json").stdout)
    assert lease["spec"]["holderIdentity"], "the scheduler created and took its Lease"


def _openssl_cert(tmp_path: Any, subject: str, *more: str) -> tuple:
    key, crt = str(tmp_path / "c.key"), str(tmp_path / "c.crt")
    proc = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                           "-days", "1", "-subj", subject, *more], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("openssl cannot make a certificate: %s" % proc.stderr.strip())
    with open(crt, "rb") as c, open(key, "rb") as k:
        return c.read(), k.read()


def test_certificate_subject_is_read_as_the_api_server_reads_it(tmp_path: Any) -> None:
    crt, _key = _openssl_cert(tmp_path, "/O=system:masters/O=team:ops/CN=someone")
    assert x509name.subject(crt) == {"O": ["system:masters", "team:ops"], "CN": ["someone"]}
    for hostile in (b"", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", crt[:200],
                    b"-----BEGIN CERTIFICATE-----\n" + base64.b64encode(b"\x30\x84\xff\xff\xff\xff") +
                    b"\n-----END CERTIFICATE-----\n"):
        assert x509name.subject(hostile) is None


def test_the_subject_comes_from_cryptography_as_the_hand_written_reader_gave_it(tmp_path: Any) -> None:
    """Issue 48: the subject is read by ``cryptography`` (no DER walker of cpctl's own any more), with the
    answers the hand-written reader gave: the first certificate of a bundle (text before it ignored),
    UTF-8 values, every O in order, no key for an attribute the subject lacks, None for what is not a
    certificate."""
    first, _key = _openssl_cert(tmp_path, "/O=b:zwei/O=a:eins/CN=\u00fcser-\u00e9", "-utf8")
    second, _key = _openssl_cert(tmp_path, "/CN=second")
    assert x509name.subject(b"a comment\n" + first + second) == {"CN": ["\u00fcser-\u00e9"], "O": ["b:zwei", "a:eins"]}
    assert x509name.subject(_openssl_cert(tmp_path, "/C=DE/ST=Berlin")[0]) == {}
    assert x509name.subject(first.replace(b"CERTIFICATE", b"PRIVATE KEY")) is None
    assert not hasattr(x509name, "_tlv") and "cryptography" in (x509name.__doc__ or "")


def test_without_self_subject_review_the_certificate_names_the_identity(rbac_lab: Any, tmp_path: Any) -> None:
    crt, key = _openssl_cert(tmp_path, "/O=team:schedulers/CN=cert:my-scheduler")
    _with_credential(rbac_lab, "scheduler-entry", {"client-certificate-data": base64.b64encode(crt).decode(),
                                                   "client-key-data": base64.b64encode(key).decode()})
    rbac_lab.inject_faults([{"method": "POST", "path": "selfsubjectreviews", "action": "status", "code": 404}])
    dry = json.loads(cpctl(rbac_lab, "-o", "json", "scheduler", "add", "my-scheduler", "--dry-run").stdout)
    assert dry["rbac"]["identity"] == "cert:my-scheduler", dry["rbac"]


def test_a_foreign_role_under_cpctls_name_is_refused(rbac_lab: Any) -> None:
    foreign = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": ROLE, "namespace": "kube-system"},
               "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}
    _create(rbac_lab, foreign)
    before = sorted(os.listdir(rbac_lab.manifests_dir()))
    refused = cpctl(rbac_lab, "scheduler", "add", "my-scheduler", "--grant-rbac", rc=4)
    assert "Role kube-system/%s already exists and was not created by cpctl" % ROLE in refused.stderr
    assert sorted(os.listdir(rbac_lab.manifests_dir())) == before, "nothing written"
    assert _get(rbac_lab, "role")["rules"] == foreign["rules"], "theirs untouched"
    assert _get(rbac_lab, "rolebinding") is None


def test_cpctls_own_role_with_wrong_rules_is_fixed(rbac_lab: Any) -> None:
    tampered = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": ROLE, "namespace": "kube-system",
                             "labels": {"app.kubernetes.io/managed-by": "cpctl"},
                             "annotations": {"cpctl/scheduler": "my-scheduler"}},
                "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["other"],
                           "verbs": ["get"]}]}
    _create(rbac_lab, tampered)
    out = cpctl(rbac_lab, "scheduler", "add", "my-scheduler", "--grant-rbac", "--timeout", "30").stdout
    assert "Lease RBAC granted" in out and "lease my-scheduler renewed" in out, out
    assert _get(rbac_lab, "role")["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                                "resourceNames": ["my-scheduler"], "verbs": ["get", "update"]}]


def test_remove_deletes_only_what_cpctl_created(rbac_lab: Any) -> None:
    cpctl(rbac_lab, "scheduler", "add", "my-scheduler", "--grant-rbac", "--timeout", "30")
    assert _get(rbac_lab, "role") and _get(rbac_lab, "rolebinding")
    kubectl(rbac_lab, "annotate", "rolebinding", "-n", "kube-system", ROLE, "cpctl/scheduler-")   # now not ours
    out = cpctl(rbac_lab, "scheduler", "remove", "my-scheduler", "--timeout", "30").stdout
    assert "Role kube-system/%s deleted" % ROLE in out, out
    assert "RoleBinding kube-system/%s left in place: not created by cpctl" % ROLE in out, out
    assert _get(rbac_lab, "role") is None and _get(rbac_lab, "rolebinding") is not None
