"""``cpctl certs`` against a real etcd (issue 45 item 4): etcd 3.5 caps TLS at 1.2 and, with kubeadm's
--client-cert-auth=true, ends a handshake without a client certificate before a TLS 1.2 client sees
its certificate; cpctl now presents the node's etcd client pair and gives a verdict on both the
client and the peer port (real-node-facts.md "etcd, measured on the real binaries")."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml
from cryptography.hazmat.primitives.serialization import Encoding

from cpctl.core.node import Node
from cpctl.host.local import LocalHost
from cpctl.ops import certs
from cpctl_lab import pki
from tests.realetcd import Factory, RealEtcd


def etcd_manifest(cluster: RealEtcd, name: str, cert_file: str = "server.crt") -> Dict[str, Any]:
    """kubeadm's etcd static pod for member ``name``, its paths as on the node (under its root)."""
    member = cluster.members[name]
    root = str(member.root)
    command = ["etcd"] + [a.replace(root, "") for a in member.argv]
    command = [a.replace("/pki/etcd/server.crt", "/pki/etcd/" + cert_file) for a in command]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "etcd", "namespace": "kube-system", "labels": {"component": "etcd"}},
            "spec": {"hostNetwork": True, "containers": [{
                "name": "etcd", "image": "registry.k8s.io/etcd:%s-0" % cluster.install.version, "command": command,
                "volumeMounts": [{"name": "etcd-certs", "mountPath": "/etc/kubernetes/pki/etcd"},
                                 {"name": "etcd-data", "mountPath": "/var/lib/etcd"}]}],
                "volumes": [{"name": "etcd-certs", "hostPath": {"path": "/etc/kubernetes/pki/etcd",
                                                                  "type": "DirectoryOrCreate"}},
                            {"name": "etcd-data", "hostPath": {"path": "/var/lib/etcd", "type": "DirectoryOrCreate"}}]}}


def node_of(cluster: RealEtcd, name: str, cert_file: str = "server.crt") -> Node:
    """A cpctl Node for the master running member ``name``: its root is the member's root."""
    member = cluster.members[name]
    manifests = member.root / "etc" / "kubernetes" / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "etcd.yaml").write_text(yaml.safe_dump(etcd_manifest(cluster, name, cert_file)))
    node = Node(LocalHost(), str(manifests), str(member.root / "state"), name)
    node.node_root = str(member.root)
    return node


def etcd_verdict(node: Node) -> Dict[str, Any]:
    (comp,) = [c for c in certs.report(node)["components"] if c["component"] == "etcd"]
    return comp


@pytest.mark.parametrize("version", ["3.5", "3.4"])
def test_etcd_serving_certs_get_a_verdict_and_a_renewal_is_served_at_once(real_etcd_factory: Factory,
                                                                        version: str) -> None:
    cluster = real_etcd_factory(members=1, version=version)
    node = node_of(cluster, "m1")
    member = cluster.members["m1"]
    comp = etcd_verdict(node)
    assert comp["verdict"] == certs.CURRENT, comp
    assert sorted(e["port"] for e in comp["evidence"]) == sorted([member.client_port, member.peer_port])
    # kubeadm certs renew: a new server certificate under the same names, no restart; the next
    # handshake serves it (same PID), so etcd stays current
    pid = cluster.pids()[0]
    sans = pki.SANs(["m1", "localhost"], ["127.0.0.1", "::1"])
    pki.write_pair(member.pki, "etcd/server", pki.issue(cluster.cas["etcd/ca"], "m1", server=True, sans=sans))
    comp = etcd_verdict(node)
    assert comp["verdict"] == certs.CURRENT and cluster.pids() == [pid], comp


def test_an_etcd_serving_another_file_than_its_manifest_names_is_stale(real_etcd_factory: Factory) -> None:
    """The manifest names server-next.crt (changed an hour ago) while the running etcd serves
    server.crt: STALE, restart needed."""
    cluster = real_etcd_factory(members=1)
    member = cluster.members["m1"]
    sans = pki.SANs(["m1", "localhost"], ["127.0.0.1", "::1"])
    pki.write_pair(member.pki, "etcd/server-next", pki.issue(cluster.cas["etcd/ca"], "m1", server=True, sans=sans))
    hour_ago = time.time() - 3600
    os.utime(member.pki / "etcd/server-next.crt", (hour_ago, hour_ago))
    comp = etcd_verdict(node_of(cluster, "m1", "server-next.crt"))
    assert comp["verdict"] == certs.STALE, comp
    assert "server-next.crt" in comp["why"]


def test_without_a_client_certificate_etcd_35_shows_nothing(real_etcd_factory: Factory) -> None:
    """What cpctl did before: a handshake without a client certificate. etcd 3.5 (TLS 1.2 at most)
    ends it before the certificate is seen; with the node's healthcheck-client pair it is seen."""
    cluster = real_etcd_factory(members=1, version="3.5")
    member = cluster.members["m1"]
    host = LocalHost()
    with pytest.raises(OSError):
        host.peer_cert("127.0.0.1", member.client_port, 5.0)
    ca, cert, key = cluster.client_pair("m1")
    served = host.peer_cert("127.0.0.1", member.client_port, 5.0, tls={"cert_file": cert, "key_file": key})
    assert served["der"] == pki.load_pair(Path(member.pki), "etcd/server").cert.public_bytes(Encoding.DER)
