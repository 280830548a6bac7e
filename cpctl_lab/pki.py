"""Real X.509 certificates for the lab's nodes, in kubeadm's layout (``cryptography``).

kubeadm (cmd/kubeadm/app/phases/certs, constants.go) writes under ``/etc/kubernetes/pki``: three
CAs (``ca``, ``front-proxy-ca``, ``etcd/ca``, shared by every master), the API server's serving
certificate and its three client certificates (``apiserver-kubelet-client``,
``apiserver-etcd-client``, ``front-proxy-client``), etcd's ``server``, ``peer`` and
``healthcheck-client``; and kubeconfigs with an embedded client certificate (``admin.conf``,
``super-admin.conf``, ``controller-manager.conf``, ``scheduler.conf``). ``kubelet.conf`` names a
file instead (``/var/lib/kubelet/pki/kubelet-client-current.pem``, rotated by the kubelet).

:func:`renew_all` does what ``kubeadm certs renew all`` does: a new key and certificate for every
leaf signed by the CAs and for every kubeconfig but ``kubelet.conf``; the CAs stay. Nothing that
runs notices: a simulated component keeps the certificate it loaded when it started
(:func:`server_context`), which is what lets ``cpctl certs`` be tested end to end.

Keys are ECDSA P-256 (kubeadm's ``encryptionAlgorithm: ECDSA-P256``): quick to make in tests.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Key = ec.EllipticCurvePrivateKey
CA_DAYS = 3650
LEAF_DAYS = 365
CAS = ("ca", "front-proxy-ca", "etcd/ca")


@dataclass(frozen=True)
class Leaf:
    """One kubeadm leaf certificate: its file (without .crt/.key), CA, subject and usages."""

    name: str
    ca: str
    cn: str
    orgs: tuple[str, ...] = ()
    server: bool = False
    client: bool = True


@dataclass(frozen=True)
class Conf:
    """One kubeadm kubeconfig with a client certificate."""

    name: str
    cn: str
    orgs: tuple[str, ...] = ()
    embedded: bool = True


def leaves(node: str) -> tuple[Leaf, ...]:
    """The leaf certificates kubeadm makes on a control-plane node named ``node``."""
    return (
        Leaf("apiserver", "ca", "kube-apiserver", server=True, client=False),
        Leaf("apiserver-kubelet-client", "ca", "kube-apiserver-kubelet-client", ("kubeadm:cluster-admins",)),
        Leaf("apiserver-etcd-client", "etcd/ca", "kube-apiserver-etcd-client"),
        Leaf("front-proxy-client", "front-proxy-ca", "front-proxy-client"),
        Leaf("etcd/server", "etcd/ca", node, server=True),
        Leaf("etcd/peer", "etcd/ca", node, server=True),
        Leaf("etcd/healthcheck-client", "etcd/ca", "kube-etcd-healthcheck-client"),
    )


def confs(node: str, init_node: bool) -> tuple[Conf, ...]:
    """The kubeconfigs with client certificates (``super-admin.conf`` only on the ``kubeadm init`` node)."""
    out = [Conf("admin.conf", "kubernetes-admin", ("kubeadm:cluster-admins",))]
    if init_node:
        out.append(Conf("super-admin.conf", "kubernetes-super-admin", ("system:masters",)))
    out += [Conf("controller-manager.conf", "system:kube-controller-manager"),
            Conf("scheduler.conf", "system:kube-scheduler"),
            Conf("kubelet.conf", f"system:node:{node}", ("system:nodes",), embedded=False)]
    return tuple(out)


def new_key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
                     + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@dataclass
class Issued:
    """A certificate and its key."""

    cert: x509.Certificate
    key: Key

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return key_pem(self.key)


def key_pem(key: Key) -> bytes:
    """A private key as unencrypted PEM (kubeadm's files are not encrypted)."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


@dataclass
class SANs:
    """The subject alternative names of a serving certificate."""

    dns: list[str] = field(default_factory=list)
    ips: list[str] = field(default_factory=list)

    def extension(self) -> x509.SubjectAlternativeName:
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in self.dns]
        names += [x509.IPAddress(ipaddress.ip_address(i)) for i in self.ips]
        return x509.SubjectAlternativeName(names)


def make_ca(cn: str, days: int = CA_DAYS) -> Issued:
    """A self-signed CA (kubeadm: ``kubernetes``, ``front-proxy-ca``, ``etcd-ca``)."""
    key = new_key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, True, False, False, True, False, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return Issued(cert, key)


def issue(ca: Issued, cn: str, orgs: tuple[str, ...] = (), server: bool = False, client: bool = True,
          sans: Optional[SANs] = None, not_before: Optional[datetime.datetime] = None,
          days: float = LEAF_DAYS) -> Issued:
    """A new key and a certificate for it signed by ``ca`` (``not_before``/``days``: tests make
    expired ones)."""
    key = new_key()
    start = not_before or datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    builder = (x509.CertificateBuilder().subject_name(_name(cn, orgs)).issuer_name(ca.cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False))
    if sans is not None and (sans.dns or sans.ips):
        builder = builder.add_extension(sans.extension(), critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` atomically (a temp file in the same dir, then rename), as kubeadm writes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_pair(pki: Path, name: str, issued: Issued) -> None:
    """``pki/NAME.crt`` (0644) and ``pki/NAME.key`` (0600)."""
    _write(pki / f"{name}.key", issued.key_pem(), 0o600)
    _write(pki / f"{name}.crt", issued.cert_pem(), 0o644)


def load_pair(pki: Path, name: str) -> Issued:
    """The certificate and key kubeadm left at ``pki/NAME.{crt,key}``."""
    cert = x509.load_pem_x509_certificate((pki / f"{name}.crt").read_bytes())
    key = serialization.load_pem_private_key((pki / f"{name}.key").read_bytes(), None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{name}.key is not an ECDSA key")
    return Issued(cert, key)


@dataclass(frozen=True)
class NodeInfo:
    """What the certificates of one master name: its node name, address and API servers."""

    node: str
    address: str
    servers: dict[str, str]
    init_node: bool
    #: The node's /var/lib/kubelet/pki (kubelet.conf names the client certificate there).
    kubelet_pki: Path


def serving_sans(info: NodeInfo, leaf: Leaf) -> SANs:
    """kubeadm's SANs: the API server's service names and addresses, etcd's node name and loopback."""
    loop = ["127.0.0.1", "::1"]
    ips = [info.address] + [i for i in loop if i != info.address]
    if leaf.name == "apiserver":
        return SANs([info.node, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                     "kubernetes.default.svc.cluster.local", "localhost"], ["10.96.0.1"] + ips)
    return SANs([info.node, "localhost"], ips)


def write_node_pki(etc: Path, info: NodeInfo, cas: Optional[dict[str, Issued]] = None) -> dict[str, Issued]:
    """Every certificate and kubeconfig of one master under ``etc`` (its /etc/kubernetes); the CAs
    are made unless given (``cas`` of the first master: every master shares them). The CAs used."""
    pki = etc / "pki"
    if cas is None:
        cas = {"ca": make_ca("kubernetes"), "front-proxy-ca": make_ca("front-proxy-ca"), "etcd/ca": make_ca("etcd-ca")}
    for name, ca in cas.items():
        write_pair(pki, name, ca)
    write_leaves(etc, info, cas)
    for conf in confs(info.node, info.init_node):
        write_conf(etc, info, conf, cas["ca"])
    return cas


def write_leaves(etc: Path, info: NodeInfo, cas: dict[str, Issued]) -> None:
    """A fresh key and certificate for every leaf of ``pki/``."""
    for leaf in leaves(info.node):
        sans = serving_sans(info, leaf) if leaf.server else None
        write_pair(etc / "pki", leaf.name, issue(cas[leaf.ca], leaf.cn, leaf.orgs, leaf.server, leaf.client, sans))


def write_conf(etc: Path, info: NodeInfo, conf: Conf, ca: Issued) -> None:
    """A kubeadm kubeconfig with a new client certificate, embedded or (kubelet.conf) in a file."""
    issued = issue(ca, conf.cn, conf.orgs)
    if conf.embedded:
        user: dict[str, str] = {"client-certificate-data": _b64(issued.cert_pem()),
                                "client-key-data": _b64(issued.key_pem())}
        user.update(_token_for(conf.cn))
    else:
        # as the kubelet keeps it: kubelet-client-<time>.pem and the symlink kubelet-client-current.pem
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d-%H-%M-%S")
        real = info.kubelet_pki / f"kubelet-client-{stamp}.pem"
        _write(real, issued.cert_pem() + issued.key_pem(), 0o600)
        pem = info.kubelet_pki / "kubelet-client-current.pem"
        link = info.kubelet_pki / ".kubelet-client-current.pem.tmp"
        link.unlink(missing_ok=True)
        link.symlink_to(real.name)
        os.replace(link, pem)
        user = {"client-certificate": str(pem), "client-key": str(pem)}
    server = info.servers["lb"] if conf.name in ("admin.conf", "super-admin.conf") else (
        info.servers["kubelet"] if conf.name == "kubelet.conf" else info.servers["local"])
    _write(etc / conf.name, kubeconfig_text(server, conf.cn, ca.cert_pem(), user).encode(), 0o600)


def _token_for(cn: str) -> dict[str, str]:
    """A component's bearer token (rbac.component_token): on the lab's plain-HTTP API it stands for
    the client certificate next to it, so the API server can tell who a request is."""
    from .rbac import COMPONENT_USERS, component_token
    return {"token": component_token(cn)} if cn in COMPONENT_USERS.values() else {}


def kubeconfig_text(server: str, user: str, ca_pem: bytes, credentials: dict[str, str],
                    cluster: str = "kubernetes") -> str:
    """A kubeadm-style kubeconfig for ``user`` at ``server`` with ``credentials``."""
    import yaml
    context = f"{user}@{cluster}"
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"certificate-authority-data": _b64(ca_pem), "server": server}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
        "preferences": {},
        "users": [{"name": user, "user": credentials}],
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def _b64(data: bytes) -> str:
    import base64
    return base64.b64encode(data).decode("ascii")


#: What ``kubeadm upgrade`` renews for a component it moves (phases/upgrade/staticpods.go
#: renewCertsByComponent): leaf certificates and kubeconfigs, by component.
BY_COMPONENT = {
    "etcd": ("etcd/server", "etcd/peer", "etcd/healthcheck-client"),
    "kube-apiserver": ("apiserver", "apiserver-kubelet-client", "apiserver-etcd-client", "front-proxy-client"),
    "kube-controller-manager": ("controller-manager.conf",),
    "kube-scheduler": ("scheduler.conf",),
}


def renew_all(etc: Path, node: str, only: Optional[tuple[str, ...]] = None) -> list[str]:
    """``kubeadm certs renew all`` on the master whose /etc/kubernetes is ``etc``: every leaf of
    ``pki/`` and the client certificate of every kubeconfig but kubelet.conf (the kubelet rotates
    its own), each with a new key, signed by the CA on disk (``only``: those leaves and kubeconfigs
    by name). The files renewed."""
    import yaml
    pki = etc / "pki"
    cas = {name: load_pair(pki, name) for name in CAS}
    done = []
    for leaf in leaves(node):
        if only is not None and leaf.name not in only:
            continue
        old = x509.load_pem_x509_certificate((pki / f"{leaf.name}.crt").read_bytes())
        try:
            sans: Optional[SANs] = _sans_of(old)
        except x509.ExtensionNotFound:
            sans = None
        write_pair(pki, leaf.name, issue(cas[leaf.ca], leaf.cn, leaf.orgs, leaf.server, leaf.client, sans))
        done.append(f"pki/{leaf.name}.crt")
    for conf in confs(node, (etc / "super-admin.conf").exists()):
        path = etc / conf.name
        if not conf.embedded or not path.exists() or (only is not None and conf.name not in only):
            continue
        cfg = yaml.safe_load(path.read_text())
        issued = issue(cas["ca"], conf.cn, conf.orgs)
        for entry in cfg.get("users") or []:
            entry["user"] = {"client-certificate-data": _b64(issued.cert_pem()),
                             "client-key-data": _b64(issued.key_pem()), **_token_for(conf.cn)}
        _write(path, yaml.safe_dump(cfg, sort_keys=False).encode(), 0o600)
        done.append(conf.name)
    return done


def _sans_of(cert: x509.Certificate) -> SANs:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return SANs([str(d) for d in ext.get_values_for_type(x509.DNSName)],
                [str(i) for i in ext.get_values_for_type(x509.IPAddress)])


def server_context(cert: Union[str, Path], key: Union[str, Path]) -> ssl.SSLContext:
    """A TLS server context with the certificate and key as the files are NOW (a component loads
    them once, when it starts; later changes to the files do not reach it)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


class ServedCert:
    """The certificate a component serves on one port, re-read from its files as its binary does.

    ``reread`` None: read once, when the component starts (a renewal never reaches it); 0: read
    again at each handshake (etcd: ``tls.Config.GetCertificate`` loads the files each time, so a
    missing or broken pair fails that handshake); N seconds: the API server's dynamiccertificates
    (file watch plus a re-read every minute), which the lab plays at its slowest: the first
    handshake at least N seconds after the files last changed serves them, and a pair that does not
    load (a cert renewed before its key) keeps the old one, as the real controller does.
    """

    def __init__(self, cert: Union[str, Path], key: Union[str, Path], reread: Optional[float],
                 client_ca: Optional[Union[str, Path]] = None) -> None:
        self.cert, self.key, self.reread = Path(cert), Path(key), reread
        self.client_ca = client_ca
        self._stamp = self._stat()
        self._ctx = self._make()

    def _make(self) -> ssl.SSLContext:
        """A context for the files as they are now; with ``client_ca`` (etcd's --client-cert-auth and
        --trusted-ca-file) every client must present a certificate that CA signed (etcd
        embed/config.go: ClientCertAuth -> tls.RequireAndVerifyClientCert)."""
        ctx = server_context(self.cert, self.key)
        if self.client_ca is not None:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(str(self.client_ca))
        return ctx

    def _stat(self) -> tuple[tuple[int, int, int], ...]:
        return tuple((st.st_mtime_ns, st.st_size, st.st_ino) for st in (self.cert.stat(), self.key.stat()))

    def context(self) -> ssl.SSLContext:
        """The TLS context of the next handshake (OSError: this handshake fails)."""
        if self.reread is None:
            return self._ctx
        try:
            stamp = self._stat()
        except OSError:
            if self.reread == 0:
                raise
            return self._ctx
        if stamp == self._stamp:
            return self._ctx
        if self.reread > 0 and time.time() - max(s[0] for s in stamp) / 1e9 < self.reread:
            return self._ctx
        try:
            ctx = self._make()
        except (OSError, ValueError):
            if self.reread == 0:
                raise
            return self._ctx
        self._ctx, self._stamp = ctx, stamp
        return ctx

