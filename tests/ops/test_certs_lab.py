"""``cpctl certs`` and ``restart --stale-certs`` against the lab's real certificates (issues 26, 36).

The lab makes a real CA and kubeadm's certificates at ``lab up``; ``cpctl lab certs-renew`` rewrites
the files like ``kubeadm certs renew all``, and its components re-read them as the real binaries do
(real-node-facts.md; the catalogue's ``CERT_RELOADS``): etcd at each handshake, the API server within
a (scaled) minute, the controller-manager and the scheduler never (their kubeconfigs embed the client
certificate). So after a renewal etcd is current, the API server "reloads by itself, not yet" and then
current, the controller-manager and the scheduler STALE; ``restart --stale-certs`` restarts those two
only, says why it leaves the others, and then nothing is STALE. An expired certificate, one from
another CA, a garbage file, a kubeconfig with an embedded and one with a file-referenced certificate,
a component that does not answer TLS: each a clear verdict, never a traceback.
"""

from __future__ import annotations

import base64
import datetime
import json
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from cpctl.cli.render import status_text
from cpctl.timeutil import format_duration
from cpctl_lab import etcdbin, pki
from cpctl_lab.control import LabHandle
from tests.coreutil import schema_valid
from tests.labfixture import mirror, run_cpctl

COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
#: What a renewal leaves needing a restart: the binaries that never re-read their kubeconfigs.
NEED_RESTART = ["kube-controller-manager", "kube-scheduler"]




def certs_json(lab: LabHandle) -> dict[str, Any]:
    proc = run_cpctl(lab, "certs", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def verdicts(data: dict[str, Any]) -> dict[str, str]:
    return {c["component"]: c["verdict"] for c in data["components"]}


def by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in data["certificates"]}


def renew(lab: LabHandle) -> str:
    proc = subprocess.run([sys.executable, "-m", "cpctl", "lab", "certs-renew", "--dir", str(lab.dir)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def served_der(port: int, client: Optional[Path] = None) -> bytes:
    """The certificate served on ``port``; ``client``: the pki dir whose ``etcd/healthcheck-client``
    pair to present (a real etcd 3.5 with --client-cert-auth rejects a handshake without one before
    the server's certificate is seen: real-node-facts.md "etcd, measured")."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if client is not None:
        ctx.load_cert_chain(str(client / "etcd/healthcheck-client.crt"), str(client / "etcd/healthcheck-client.key"))
    with socket.create_connection(("127.0.0.1", port), 3) as sock, ctx.wrap_socket(sock) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der
    return der


def file_der(path: Path) -> bytes:
    return x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(serialization.Encoding.DER)


def minute_ago(*paths: Path) -> None:
    """Make the files' last change 61 s old, as if the minute after a renewal had passed (the lab's
    API server re-reads a changed file once it is a scaled minute old: it takes the slowest case)."""
    import os
    import time
    then = time.time() - 61
    for path in paths:
        os.utime(path, (then, then))


def seed_ports(lab: LabHandle) -> dict[str, int]:
    return json.loads((lab.dir / "seed-ports.json").read_text())[lab.masters[0]]


def test_lab_makes_kubeadm_pki_and_serves_the_files(lab: LabHandle) -> None:
    """Item 1: every kubeadm file exists, chains to its CA; kubeconfigs embed their client
    certificate (kubelet.conf names a file); the apiserver and etcd serve the files' certificates."""
    etc = lab.root_dir() / "etc/kubernetes"
    cas = {name: x509.load_pem_x509_certificate((etc / f"pki/{name}.crt").read_bytes()) for name in pki.CAS}
    for leaf in pki.leaves(lab.masters[0]):
        cert = x509.load_pem_x509_certificate((etc / f"pki/{leaf.name}.crt").read_bytes())
        cert.verify_directly_issued_by(cas[leaf.ca])
        assert (etc / f"pki/{leaf.name}.key").stat().st_mode & 0o777 == 0o600
    for conf in ("admin.conf", "super-admin.conf", "controller-manager.conf", "scheduler.conf"):
        user = yaml.safe_load((etc / conf).read_text())["users"][0]["user"]
        cert = x509.load_pem_x509_certificate(base64.b64decode(user["client-certificate-data"]))
        cert.verify_directly_issued_by(cas["ca"])
    kubelet_user = yaml.safe_load((etc / "kubelet.conf").read_text())["users"][0]["user"]
    assert "client-certificate-data" not in kubelet_user
    assert Path(kubelet_user["client-certificate"]).is_file()
    assert Path(kubelet_user["client-certificate"]).is_symlink()         # as the kubelet rotates it
    ports = seed_ports(lab)
    assert served_der(ports["apiserver"]) == file_der(etc / "pki/apiserver.crt")
    assert served_der(ports["etcd-client"], etc / "pki") == file_der(etc / "pki/etcd/server.crt")
    assert served_der(ports["etcd-peer"], etc / "pki") == file_der(etc / "pki/etcd/peer.crt")
    # a renewal rewrites the files: etcd serves the new one at the next handshake, the API server
    # keeps the old one until its (scaled) minute has passed since the files changed
    before = served_der(ports["apiserver"])
    out = renew(lab)
    assert "pki/apiserver.crt renewed" in out and "scheduler.conf renewed" in out and "kubelet.conf" not in out
    assert file_der(etc / "pki/apiserver.crt") != before
    assert served_der(ports["apiserver"]) == before
    assert served_der(ports["etcd-client"], etc / "pki") == file_der(etc / "pki/etcd/server.crt")
    assert served_der(ports["etcd-peer"], etc / "pki") == file_der(etc / "pki/etcd/peer.crt")
    minute_ago(etc / "pki/apiserver.crt", etc / "pki/apiserver.key")
    assert served_der(ports["apiserver"]) == file_der(etc / "pki/apiserver.crt")


def test_renew_then_restart_stale_certs(lab: LabHandle) -> None:
    """Done-when (issue 36): after certs-renew etcd is current (it re-reads at each handshake), the API
    server reloads by itself (not yet: inside its minute), the controller-manager and the scheduler
    are STALE; restart --stale-certs (dry run first: the list, nothing moved) restarts those two only
    and says why for the others; afterwards nothing is STALE, and once the minute has passed the API
    server is current too."""
    fresh = certs_json(lab)
    assert verdicts(fresh) == dict.fromkeys(COMPONENTS, "current")
    certs = by_name(fresh)
    assert certs["pki/ca.crt"]["chain"] == "self-signed CA"
    assert certs["pki/apiserver-etcd-client.crt"]["chain"] == "ok"
    assert certs["admin.conf"]["embedded"] is True and certs["kubelet.conf"]["embedded"] is False
    assert certs["kubelet.conf"]["subject"].startswith("CN=system:node:")
    renew(lab)
    renewed = {"etcd": "current", "kube-apiserver": "reloading", "kube-controller-manager": "STALE",
               "kube-scheduler": "STALE"}
    stale = certs_json(lab)
    assert verdicts(stale) == renewed
    assert stale["stale"] == NEED_RESTART
    why = {c["component"]: c for c in stale["components"]}
    assert {e["kind"] for e in why["etcd"]["evidence"]} == {"serving"}
    api = why["kube-apiserver"]
    assert {(e["kind"], e["verdict"]) for e in api["evidence"]} == {("serving", "reloading"), ("client", "reloads")}
    assert api["why"].startswith("reloads by itself, not yet: serves ") and "pki/apiserver.crt" in api["why"]
    assert "scheduler.conf" in why["kube-scheduler"]["why"]

    dry = run_cpctl(lab, "restart", "--stale-certs", "--dry-run", "-o", "json")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert [s["component"] for s in planned["plan"] if s["action"] == "stop"] == NEED_RESTART
    assert {left["component"]: left["verdict"] for left in planned["left"]} == {
        "etcd": "current", "kube-apiserver": "reloading"}
    assert verdicts(certs_json(lab)) == renewed   # the dry run changed nothing

    done = run_cpctl(lab, "restart", "--stale-certs", timeout=240)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == NEED_RESTART + ["etcd", "kube-apiserver"]
    assert lines[2] == "etcd: not restarted (current) - uses the files on disk"
    assert lines[3].startswith("kube-apiserver: not restarted (reloading) - no restart needed: reloads by "
                               "itself, not yet: serves a certificate valid until ")
    after = certs_json(lab)
    assert "STALE" not in verdicts(after).values() and after["stale"] == []
    assert verdicts(after) == dict(renewed, **dict.fromkeys(NEED_RESTART, "current"))
    etc = lab.root_dir() / "etc/kubernetes"
    minute_ago(etc / "pki/apiserver.crt", etc / "pki/apiserver.key")
    assert verdicts(certs_json(lab)) == dict.fromkeys(COMPONENTS, "current")
    again = run_cpctl(lab, "restart", "--stale-certs")
    assert again.returncode == 0 and "no component uses an old certificate" in again.stdout
    history = run_cpctl(lab, "history", "-o", "json")
    restarts = [r for r in json.loads(history.stdout)["history"] if r.get("reason") == "certificates renewed"]
    assert {r["component"] for r in restarts} == set(NEED_RESTART)


def test_the_api_server_turns_current_within_its_scaled_minute(lab_factory: Any) -> None:
    """Done-when, on the lab's clock: with time scaled down 20 times the API server's minute is 3 s;
    after certs-renew `cpctl certs` shows etcd and the API server current within that window (no
    file's time is touched), the controller-manager and the scheduler STALE the whole time."""
    import time
    lab = lab_factory(masters=1, time_scale=0.05)
    renew(lab)
    renewed_at = time.monotonic()
    seen = []
    deadline = renewed_at + 120        # a busy machine: the window is 3 s, a certs run takes ~1 s
    while True:
        now = verdicts(certs_json(lab))
        seen.append(now["kube-apiserver"])
        assert {k: now[k] for k in ("etcd", *NEED_RESTART)} == {"etcd": "current", **dict.fromkeys(NEED_RESTART,
                                                                                                "STALE")}
        if now["kube-apiserver"] == "current" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert seen[-1] == "current", seen
    assert set(seen) <= {"reloading", "current"}, seen


def test_restarting_only_the_scheduler_leaves_the_others_stale(lab: LabHandle) -> None:
    renew(lab)
    proc = run_cpctl(lab, "restart", "scheduler")
    assert proc.returncode == 0, proc.stderr
    assert verdicts(certs_json(lab)) == {"etcd": "current", "kube-apiserver": "reloading",
                                         "kube-controller-manager": "STALE", "kube-scheduler": "current"}
    text = run_cpctl(lab, "certs")
    assert text.returncode == 0
    assert "kube-scheduler           current" in text.stdout
    assert "holds the old controller-manager.conf: restart needed" in text.stdout


def test_bad_certificates_are_verdicts(lab: LabHandle) -> None:
    """An expired certificate, one from another CA, garbage, a file over the size limit: each
    named in the table, exit 0, no traceback."""
    pkidir = lab.root_dir() / "etc/kubernetes/pki"
    ca = pki.load_pair(pkidir, "ca")
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=400)
    pki.write_pair(pkidir, "apiserver-kubelet-client", pki.issue(ca, "kube-apiserver-kubelet-client",
                                                                   not_before=long_ago, days=30))
    pki.write_pair(pkidir, "front-proxy-client", pki.issue(pki.make_ca("someone-else"), "front-proxy-client"))
    (pkidir / "etcd/healthcheck-client.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64 !!\n"
                                                          b"-----END CERTIFICATE-----\n")
    (pkidir / "etcd/peer.crt").write_bytes(b"\x00" * (300 << 10))
    data = certs_json(lab)
    certs = by_name(data)
    assert certs["pki/apiserver-kubelet-client.crt"]["days_left"] < -300
    assert certs["pki/front-proxy-client.crt"]["chain"] == "NOT signed by pki/front-proxy-ca.crt"
    assert certs["pki/etcd/healthcheck-client.crt"]["error"] in (
        "its PEM certificate is not valid base64", "not a valid X.509 certificate (ValueError)")
    assert certs["pki/etcd/peer.crt"]["error"].startswith("cannot read")
    etcd = {c["component"]: c for c in data["components"]}["etcd"]
    assert etcd["verdict"] == "unknown" and "pki/etcd/peer.crt: cannot read" in etcd["why"]
    text = run_cpctl(lab, "certs")
    assert text.returncode == 0 and "Traceback" not in text.stderr
    assert "EXPIRED" in text.stdout and "NOT signed by pki/front-proxy-ca.crt" in text.stdout


def test_component_without_a_tls_answer_is_unknown(lab: LabHandle) -> None:
    """A scheduler that names a --tls-cert-file but whose --secure-port answers plain HTTP: unknown,
    with the reason; the others keep their verdicts."""
    mdir = lab.manifests_dir()
    pod = yaml.safe_load((mdir / "kube-scheduler.yaml").read_text())
    plain = seed_ports(lab)["etcd-metrics"]
    container = pod["spec"]["containers"][0]
    container["command"] = [a for a in container["command"] if not a.startswith("--secure-port=")] + [
        f"--secure-port={plain}", "--tls-cert-file=/etc/kubernetes/pki/apiserver.crt",
        "--tls-private-key-file=/etc/kubernetes/pki/apiserver.key"]
    container["volumeMounts"].append({"mountPath": "/etc/kubernetes/pki", "name": "k8s-certs", "readOnly": True})
    pod["spec"]["volumes"].append({"hostPath": {"path": str(lab.root_dir() / "etc/kubernetes/pki"),
                                                "type": "DirectoryOrCreate"}, "name": "k8s-certs"})
    (mdir / ".kube-scheduler.tmp").write_text(yaml.safe_dump(pod))
    (mdir / ".kube-scheduler.tmp").rename(mdir / "kube-scheduler.yaml")
    data = certs_json(lab)
    sched = {c["component"]: c for c in data["components"]}["kube-scheduler"]
    assert sched["verdict"] == "unknown"
    assert f"no TLS answer on 127.0.0.1:{plain}" in sched["why"]
    assert verdicts(data)["kube-apiserver"] == "current"


def test_certs_usage(lab: LabHandle) -> None:
    proc = run_cpctl(lab, "restart")
    assert proc.returncode == 2 and "--stale-certs" in proc.stderr
    proc = run_cpctl(lab, "restart", "scheduler", "--stale-certs")
    assert proc.returncode == 2


def test_check_reports_expiring_and_stale_with_metrics(lab: LabHandle, tmp_path: Path) -> None:
    """Item 4: check finds certificates expiring within --cert-warn and components on an old
    certificate; the textfile carries cpctl_cert_not_after_seconds and cpctl_component_cert_stale."""
    clean = run_cpctl(lab, "check", "-o", "json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    prom = tmp_path / "cpctl.prom"
    soon = run_cpctl(lab, "check", "--cert-warn", "366d", "--prometheus-textfile", str(prom), "-o", "json")
    assert soon.returncode == 1
    expiring = [f for f in json.loads(soon.stdout)["findings"] if f["kind"] == "cert_expiring"]
    assert {f["file"] for f in expiring} >= {"pki/apiserver.crt", "admin.conf", "kubelet.conf"}
    assert not {f["file"] for f in expiring} & {"pki/ca.crt", "pki/etcd/ca.crt"}    # CAs: ten years
    text = prom.read_text()
    node = lab.masters[0]
    assert f'cpctl_cert_not_after_seconds{{file="pki/apiserver.crt",node="{node}",subject="CN=kube-apiserver"}}' in text
    assert f'cpctl_component_cert_stale{{component="etcd",node="{node}"}} 0' in text
    renew(lab)
    stale = run_cpctl(lab, "check", "--prometheus-textfile", str(prom), "-o", "json")
    assert stale.returncode == 1
    found = {f["component"] for f in json.loads(stale.stdout)["findings"] if f["kind"] == "cert_stale"}
    assert found == set(NEED_RESTART)
    assert f'cpctl_component_cert_stale{{component="kube-scheduler",node="{node}"}} 1' in prom.read_text()
    bad = run_cpctl(lab, "check", "--cert-warn", "soon")
    assert bad.returncode == 2 and "--cert-warn" in bad.stderr


def test_status_shows_container_start_next_to_the_pod_age(lab: LabHandle) -> None:
    """Item 5: the API server's mirror pod keeps its age across a restart (real-node-facts.md), so
    status shows the container's start time and restart count too - from the API and from crictl."""
    import time
    pod = mirror(lab, "kube-apiserver")
    assert pod is not None
    created = datetime.datetime.strptime(pod["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    # timestamps have whole seconds: restart in a later second than the mirror pod's creation, or a
    # fast lab makes both the same second and the ages equal
    time.sleep(max(0.0, created + 1.1 - time.time()))
    before = time.time()
    assert run_cpctl(lab, "restart", "apiserver").returncode == 0
    for probe, kubeconfig in (("api", lab.kubeconfig), ("crictl", str(lab.dir / "no-such.conf"))):
        proc = run_cpctl(lab, "status", "apiserver", "-o", "json", KUBECONFIG=kubeconfig)
        assert proc.returncode == 0, proc.stderr
        seen = json.loads(proc.stdout)["components"][0]["observed"]
        # crictl: the runtime's attempt count of the same pod UID (a static pod moved out and back
        # keeps its UID), the API: containerStatuses[].restartCount - either a number
        assert seen["source"] == probe and isinstance(seen["restarts"], int) and seen["restarts"] >= 0
        started = datetime.datetime.strptime(seen["container_started"], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        assert started >= int(before) and seen["container_age_seconds"] <= time.time() - before + 1
        if probe == "api":
            assert seen["age_seconds"] > seen["container_age_seconds"]      # AGE is no proof of a restart
        text = status_text(json.loads(proc.stdout)).splitlines()[2].split()     # the same data as text
        assert text[3:6] == ["running", str(seen["restarts"]), format_duration(seen["age_seconds"])], text


def test_certs_reads_a_real_etcd_35_certificate(lab_factory: Any) -> None:
    if etcdbin.find() is None:
        pytest.skip("no real etcd installed")
    lab = lab_factory()
    assert lab.info["etcd"]["kind"] == "real"
    assert verdicts(certs_json(lab))["etcd"] == "current"


@pytest.mark.parametrize("profile, to, version", [("default", "1.31", "v1.31.12"), ("ha", "1.34", "v1.34.1")])
def test_renew_after_a_kubeadm_upgrade_then_restart_stale_certs(lab_factory: Any, profile: str, to: str,
                                                                 version: str) -> None:
    """Issue 48, certificate renewal after an upgrade: cpctl changed the scheduler (kept in
    kubeadm-config) and then ``kubeadm upgrade`` replaced every manifest, renewing each moved
    component's certificates before the move - so all four come back current. ``kubeadm certs renew
    all`` after it leaves exactly the controller-manager and the scheduler on the old certificate;
    ``restart --stale-certs`` restarts those two (the upgraded bytes stay in place, no cpctl write) and
    ``check`` (with a baseline taken after the upgrade) is clean afterwards: no cert_stale, no drift,
    and the upgrade is not taken for a lost change."""
    lab = lab_factory(profile=profile)
    flags = run_cpctl(lab, "flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config", "--timeout", "60")
    assert flags.returncode == 0, flags.stderr
    proc = subprocess.run([sys.executable, "-m", "cpctl", "lab", "kubeadm-upgrade", "--dir", str(lab.dir),
                           "--to", to], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and "renewed" in proc.stdout, proc.stdout + proc.stderr
    mdir = lab.manifests_dir()
    upgraded = {name: (mdir / f"{name}.yaml").read_bytes() for name in COMPONENTS}
    assert all(version.encode() in upgraded[name] for name in COMPONENTS[1:]), "not upgraded"
    assert verdicts(certs_json(lab)) == dict.fromkeys(COMPONENTS, "current")
    assert run_cpctl(lab, "baseline").returncode == 0          # the upgraded manifests are the baseline
    clean = run_cpctl(lab, "check", "-o", "json")
    assert clean.returncode == 0 and schema_valid("check", json.loads(clean.stdout))["findings"] == [], \
        clean.stdout + clean.stderr

    renew(lab)
    stale = certs_json(lab)
    assert stale["stale"] == NEED_RESTART, stale["components"]
    found = run_cpctl(lab, "check", "-o", "json")
    assert found.returncode == 1
    assert {f["component"] for f in schema_valid("check", json.loads(found.stdout))["findings"]} == set(
        NEED_RESTART), found.stdout

    done = run_cpctl(lab, "restart", "--stale-certs", "--timeout", "120", "-o", "json", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    restarted = schema_valid("outcomes", json.loads(done.stdout))     # restart's stop/start, left: described
    assert [r["component"] for r in restarted["results"]] == NEED_RESTART and restarted["stale_certs"] is True
    assert all(r["action"] == "restart" and r["changed"] and r["start"]["wait"]["verified"]
               for r in restarted["results"])
    assert {left["component"]: left["verdict"] for left in restarted["left"]} == {"etcd": "current",
                                                                                   "kube-apiserver": "reloading"}
    assert {name: (mdir / f"{name}.yaml").read_bytes() for name in COMPONENTS} == upgraded
    after = certs_json(lab)
    assert after["stale"] == [] and "STALE" not in verdicts(after).values(), after["components"]
    check = run_cpctl(lab, "check", "-o", "json")
    assert check.returncode == 0, check.stdout + check.stderr
    assert schema_valid("check", json.loads(check.stdout))["findings"] == []
    history = json.loads(run_cpctl(lab, "history", "-o", "json").stdout)["history"]
    restarts = [r for r in history if r.get("reason") == "certificates renewed"]
    assert sorted({r["component"] for r in restarts}) == NEED_RESTART, restarts
