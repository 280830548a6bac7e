"""``cpctl certs``: kubeadm's certificates, and whether each running component USES the files.

After ``kubeadm certs renew`` the files are new, but a running process keeps what it loaded when
it started (kubernetes/kubeadm#2306, #1784, #2409). ``kubeadm certs check-expiration`` reads the
files only; this module also asks the running components:

Not every binary needs a restart: which one re-reads which file by itself is the catalogue's
``CERT_RELOADS`` table (etcd at each handshake, the API server within a minute, the
controller-manager and scheduler never for the certificates embedded in their kubeconfigs).

* a **serving** certificate (API server ``--tls-cert-file`` on ``--secure-port``, etcd
  ``--cert-file`` on its client URL and ``--peer-cert-file`` on its peer URL, scheduler and
  controller-manager when they name a ``--tls-cert-file``) is compared byte for byte with the leaf
  a TLS handshake made on the node itself returns (``Host.peer_cert``); a binary that reloads it
  and still serves the old one while the file changed less than its reload window ago (by the
  node's clock at the handshake) "reloads by itself, not yet";
* a **client** certificate the binary reloads (``--etcd-certfile``, ``--kubelet-client-certificate``,
  ``--proxy-client-cert-file``, a kubeconfig naming a certificate FILE) is not judged: nothing
  outside shows it, and the binary picks up the new file by itself;
* a **client** certificate it does not reload (the one embedded in the kubeconfigs ``--kubeconfig``
  and friends name) cannot be seen from outside either: a container that started before the file
  last changed still holds the old one, so its start time (crictl, else the mirror pod's
  ``containerStatuses[].state.running.startedAt``) is compared with the file's modification time.

Verdict per component: ``current``, ``reloading`` (reloads by itself, not yet: no restart),
``STALE`` (restart needed), or ``unknown`` with the reason.
Everything read from a master is untrusted: files are read with a size limit, certificates parsed
with ``cryptography`` on this side (the agent only returns bytes), and any parse error is a
verdict of its own, never a traceback.
"""

from __future__ import annotations

import datetime
import os
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple, TypedDict

from cpctl import catalogue
from cpctl.core.flags import flags_of, pick_container
from cpctl.core.manifests import DirScan, Manifest
from cpctl.core.mounts import host_path_of, under_root
from cpctl.core.node import Node, Outcome
from cpctl.errors import CpctlError
from cpctl.probes.base import PodTarget, ProbeMissing, Unavailable

if TYPE_CHECKING:       # cryptography is imported when a certificate is parsed (not by every check)
    from cryptography.x509 import Certificate

    from cpctl.host.base import TlsOptions

CERT_LIMIT = 256 << 10          # a certificate file (a chain at most) is a few KiB
KUBECONFIG_LIMIT = 4 << 20      # as cpctl.probes.kubeapi reads kubeconfigs
HANDSHAKE_TIMEOUT = 3.0
START_TIMEOUT = 5.0
# kubeadm's certificate files and kubeconfigs, and which flags name each component's serving and
# client certificates: cpctl.catalogue.
PKI_FILES = catalogue.PKI_CERTS
KUBECONFIGS = catalogue.KUBECONFIGS
CURRENT, STALE, UNKNOWN = "current", "STALE", "unknown"
#: A component (or serving evidence) that still serves the old certificate but re-reads the file by
#: itself and the file changed less than its reload window ago: no restart needed.
RELOADING = "reloading"
#: Evidence only: a client certificate the binary re-reads by itself (nothing to judge).
RELOADS = "reloads"
_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n(.{1,200000}?)-----END CERTIFICATE-----", re.S)


# --- what `cpctl certs -o json` prints, per node ------------------------------------------------
class CertData(TypedDict):
    name: str
    path: str
    embedded: Optional[bool]
    subject: str
    issuer: str
    not_after: Optional[str]
    days_left: Optional[float]
    chain: str
    error: str


class EvidenceData(TypedDict):
    kind: str
    file: str
    port: Optional[int]
    verdict: str
    detail: str


class ComponentData(TypedDict):
    component: str
    verdict: str
    why: str
    started: Optional[str]
    started_source: str
    evidence: List[EvidenceData]


class Report(TypedDict):
    node: str
    kube_dir: str
    certificates: List[CertData]
    components: List[ComponentData]
    stale: List[str]


class LeftAlone(TypedDict):
    """``restart --stale-certs``: a component it does not restart, and why."""

    component: str
    verdict: str
    why: str


#: A container of a pod manifest, as parsed from YAML.
Container = Dict[str, object]
ReadCall = Tuple[str, Dict[str, object]]


# --- certificates ------------------------------------------------------------------------------
@dataclass
class Cert:
    """One certificate as read from a master: its file and what it says (or why it says nothing)."""

    name: str                      # pki/apiserver.crt, admin.conf, ...
    path: str                      # where it lives on the node
    embedded: Optional[bool] = None   # kubeconfigs: in the file, or in the file it names
    subject: str = ""
    issuer: str = ""
    not_after: Optional[float] = None
    chain: str = ""                # "ok", "self-signed CA", or what is wrong
    mtime: Optional[float] = None  # newest modification time of the file(s) holding it
    error: str = ""
    der: bytes = field(default=b"", repr=False)

    def days_left(self, now: Optional[float] = None) -> Optional[float]:
        if self.not_after is None:
            return None
        return (self.not_after - (time.time() if now is None else now)) / 86400.0

    def to_dict(self) -> CertData:
        left = self.days_left()
        return {"name": self.name, "path": self.path, "embedded": self.embedded, "subject": self.subject,
                "issuer": self.issuer, "not_after": _iso(self.not_after),
                "days_left": None if left is None else round(left, 1), "chain": self.chain, "error": self.error}


def _iso(stamp: Optional[float]) -> Optional[str]:
    if stamp is None:
        return None
    return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def first_der(data: bytes) -> bytes:
    """The DER bytes of the first CERTIFICATE block of PEM ``data`` (a key may follow, as in
    kubelet-client-current.pem); ValueError when there is none."""
    import binascii
    match = _PEM_CERT.search(data)
    if match is None:
        raise ValueError("no PEM certificate in it")
    try:
        return binascii.a2b_base64(b"".join(match.group(1).split()))
    except binascii.Error:
        raise ValueError("its PEM certificate is not valid base64") from None


def describe(cert: Cert, der: bytes) -> "Optional[Certificate]":
    """Fill ``cert`` from DER bytes; the parsed certificate, or None (``cert.error`` says why)."""
    from cryptography import x509
    cert.der = der
    try:
        parsed = x509.load_der_x509_certificate(der)
        cert.subject = _printable(parsed.subject.rfc4514_string())
        cert.issuer = _printable(parsed.issuer.rfc4514_string())
        cert.not_after = parsed.not_valid_after_utc.timestamp()
    except Exception as exc:  # noqa: BLE001 - any malformed certificate is a verdict, never a traceback
        cert.error = "not a valid X.509 certificate (%s)" % type(exc).__name__
        return None
    return parsed


def _printable(text: str, limit: int = 200) -> str:
    """At most ``limit`` printable characters of text from a certificate (untrusted)."""
    return "".join(c if c.isprintable() else "?" for c in text)[:limit]


def chain_word(parsed: "Certificate", ca: "Optional[Certificate]", ca_name: str) -> str:
    """"ok" when ``ca`` signed ``parsed``, "self-signed CA" for the CA itself, else what is wrong."""
    if ca is None:
        return "unknown (%s not readable)" % ca_name
    if parsed.subject == parsed.issuer and parsed.public_key() == ca.public_key():
        return "self-signed CA"
    try:
        parsed.verify_directly_issued_by(ca)
    except Exception:  # noqa: BLE001 - a wrong issuer, a bad signature, an odd key type: all "not signed"
        return "NOT signed by %s" % ca_name
    return "ok"


def ca_of(name: str) -> str:
    """The CA file that signs the kubeadm certificate ``name`` (pki/etcd/server.crt -> pki/etcd/ca.crt)."""
    if name.startswith("pki/etcd/") or name == "pki/apiserver-etcd-client.crt":
        return "pki/etcd/ca.crt"
    if name.startswith("pki/front-proxy-"):
        return "pki/front-proxy-ca.crt"
    return "pki/ca.crt"


class Catalogue:
    """Every kubeadm certificate and kubeconfig client certificate of one node, read once."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.kube_dir = os.path.dirname(node.manifests_dir.rstrip("/")) or "/"
        self.certs: Dict[str, Cert] = {}       # node path -> certificate
        self._parsed: Dict[str, Optional[Certificate]] = {}

    def reads(self) -> List[ReadCall]:
        """The reads ``load`` makes, for one prefetched round trip."""
        calls: List[ReadCall] = []
        for rel in ["pki/%s.crt" % n for n in PKI_FILES]:
            path = os.path.join(self.kube_dir, rel)
            calls += [("read_file", {"path": path, "limit": CERT_LIMIT, "follow": True}), ("lstat", {"path": path})]
        for conf in KUBECONFIGS:
            path = os.path.join(self.kube_dir, conf)
            calls += [("read_file", {"path": path, "limit": KUBECONFIG_LIMIT}), ("lstat", {"path": path})]
        return calls

    def load(self) -> None:
        for name in PKI_FILES:
            self.file_cert("pki/%s.crt" % name, os.path.join(self.kube_dir, "pki/%s.crt" % name), required=True)
        for conf in KUBECONFIGS:
            path = os.path.join(self.kube_dir, conf)
            if self.node.host.lstat(path) is not None:
                self.kubeconfig_cert(conf, path)
        for path, cert in self.certs.items():
            parsed = self._parsed.get(path)
            if parsed is not None:
                ca_name = ca_of(cert.name)
                cert.chain = chain_word(parsed, self._parsed.get(os.path.join(self.kube_dir, ca_name)), ca_name)

    def file_cert(self, name: str, path: str, required: bool = False) -> Cert:
        """The certificate in the PEM file ``path`` (read once)."""
        if path in self.certs:
            return self.certs[path]
        cert = self.certs[path] = Cert(name, path)
        try:
            info = self.node.host.lstat(path)
            if info is None:
                cert.error = "missing" if required else "missing (named by a flag)"
                return cert
            cert.mtime = info["mtime"]
            data = self.node.host.read_file(path, CERT_LIMIT, follow=True)
            self._parsed[path] = describe(cert, first_der(data))
        except OSError as exc:
            cert.error = "cannot read: %s" % (exc.strerror or exc)
        except ValueError as exc:
            cert.error = str(exc)
        return cert

    def kubeconfig_cert(self, name: str, path: str) -> Cert:
        """The client certificate of a kubeconfig: embedded, or in the file it names."""
        if path in self.certs:
            return self.certs[path]
        from cpctl.probes.kubeapi import load_kubeconfig
        cert = self.certs[path] = Cert(name, path)
        try:
            info = self.node.host.lstat(path)
            cert.mtime = info["mtime"] if info else None
            tls = load_kubeconfig(self.node.host, path).tls
            if tls.get("cert_data"):
                cert.embedded = True
                data = tls["cert_data"]
            elif tls.get("cert_file"):
                cert.embedded = False
                cert.path = "%s -> %s" % (path, tls["cert_file"])
                ref = self.node.host.lstat(tls["cert_file"])
                if ref is None:
                    cert.error = "names a certificate file that is missing"
                    return cert
                cert.mtime = max(cert.mtime or 0.0, ref["mtime"])
                data = self.node.host.read_file(tls["cert_file"], CERT_LIMIT, follow=True)
            else:
                cert.error = "no client certificate in it"
                return cert
            self._parsed[path] = describe(cert, first_der(data))
        except CpctlError as exc:
            cert.error = exc.message
        except OSError as exc:
            cert.error = "cannot read: %s" % (exc.strerror or exc)
        except ValueError as exc:
            cert.error = str(exc)
        return cert


# --- components --------------------------------------------------------------------------------
@dataclass
class Evidence:
    """One reason for a component's verdict: a serving port or a client certificate file."""

    kind: str           # "serving" or "client"
    file: str
    verdict: str
    detail: str
    port: Optional[int] = None

    def to_dict(self) -> EvidenceData:
        return {"kind": self.kind, "file": self.file, "port": self.port, "verdict": self.verdict,
                "detail": self.detail}


@dataclass
class ComponentCerts:
    """Whether one running component uses the certificate files on disk."""

    component: str
    verdict: str = UNKNOWN
    why: str = ""
    started: Optional[float] = None
    started_source: str = ""
    evidence: List[Evidence] = field(default_factory=list)

    def decide(self) -> None:
        """STALE if any evidence is; unknown if any is (and none is STALE); reloading if any
        serving certificate is still the old one inside its reload window; else current."""
        verdicts = [e.verdict for e in self.evidence]
        if STALE in verdicts:
            self.verdict = STALE
            old = list(dict.fromkeys(e.file for e in self.evidence if e.verdict == STALE))
            self.why = "holds the old %s: restart needed" % ", ".join(old)
        elif not verdicts:
            self.verdict, self.why = UNKNOWN, self.why or "no certificate file named by its flags"
        elif UNKNOWN in verdicts:
            self.verdict = UNKNOWN
            self.why = "; ".join(e.detail for e in self.evidence if e.verdict == UNKNOWN)
        elif RELOADING in verdicts:
            self.verdict = RELOADING
            self.why = "; ".join(e.detail for e in self.evidence if e.verdict == RELOADING)
        else:
            reloaded = [e.file for e in self.evidence if e.verdict == RELOADS]
            self.verdict = CURRENT
            self.why = "uses the files on disk" + ("; re-reads %s by itself" % ", ".join(reloaded) if reloaded else "")

    def to_dict(self) -> ComponentData:
        return {"component": self.component, "verdict": self.verdict, "why": self.why,
                "started": _iso(self.started), "started_source": self.started_source,
                "evidence": [e.to_dict() for e in self.evidence]}


def _flag_values(container: Container) -> Dict[str, str]:
    """name -> value of the container's --name=value flags (the last one wins, as in the binaries)."""
    return {f.name: f.value for f in flags_of(container) if f.value is not None}


def _endpoint(value: str, default: int, flags: Dict[str, str], container: Container) -> Tuple[str, int]:
    """(host, port) a serving flag names: a URL list's first URL, or a port number bound where the
    component's own probes look (kubeadm: 127.0.0.1 or the advertise address)."""
    from urllib.parse import urlsplit
    if "://" in value:
        parts = urlsplit(value.split(",")[0].strip())
        named = parts.hostname or "127.0.0.1"
        return ("127.0.0.1" if named in ("0.0.0.0", "::") else named), parts.port or default
    port = int(value) if value.isdigit() else default
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        spec = container.get(probe)
        get = spec.get("httpGet") if isinstance(spec, dict) else None
        host = get.get("host") if isinstance(get, dict) else None
        if isinstance(get, dict) and str(get.get("port")) == str(port) and isinstance(host, str):
            return host, port
    bind = flags.get("bind-address", "")
    if bind and bind not in ("0.0.0.0", "::"):
        return bind, port
    return "127.0.0.1", port


def container_started(node: Node, component: str) -> Tuple[Optional[float], str]:
    """(when the component's running container started, from where) - crictl, else the mirror
    pod's containerStatuses - or (None, why nothing could tell)."""
    target = PodTarget(component, "kube-system", node.node_name)
    reasons = []
    for name in ("crictl", "api"):
        probe = node.waiter.probe(name)
        if probe is None:
            continue
        try:
            state = probe.observe(target, timeout=START_TIMEOUT)
        except (Unavailable, ProbeMissing, CpctlError) as exc:
            reasons.append("%s: %s" % (name, exc))
            continue
        if not state.present or not state.containers and name == "crictl":
            return None, "not running (%s)" % name
        if state.started:
            return state.started, name
        reasons.append("%s: no start time" % name)
    return None, "; ".join(reasons) or "no probe can tell its start time"


def judge_serving(cat: Catalogue, file_path: str, host: str, port: int,
                  reload: Optional[catalogue.CertReload] = None, tls: Optional["TlsOptions"] = None) -> Evidence:
    """Compare the leaf served on ``host``:``port`` with the certificate file. ``reload``: the
    catalogue's row for the flag naming it; a binary that re-reads the file by itself and serves the
    old certificate less than its window after the file changed (the node's clock at the handshake
    against the file's mtime) is RELOADING, not STALE. ``tls``: the client certificate the handshake
    presents (etcd's: see ``handshake_tls``)."""
    cert = cat.file_cert(os.path.relpath(file_path, cat.kube_dir), file_path)
    where = "%s:%d" % (host, port)
    if cert.error or not cert.der:
        return Evidence("serving", cert.name, UNKNOWN, "%s: %s" % (cert.name, cert.error or "unreadable"), port)
    try:
        reply = cat.node.host.peer_cert(host, port, HANDSHAKE_TIMEOUT, tls=tls)
    except OSError as exc:
        return Evidence("serving", cert.name, UNKNOWN, "no TLS answer on %s: %s" % (where, exc.strerror or exc),
                        port)
    if reply["der"] == cert.der:
        return Evidence("serving", cert.name, CURRENT, "serves %s on %s" % (cert.name, where), port)
    old = Cert("served", where)
    describe(old, reply["der"])
    what = old.error or "a certificate valid until %s" % _iso(old.not_after)
    age = reply["time"] - cert.mtime if cert.mtime is not None else None
    if reload is not None and reload.reloads and age is not None and age < reload.window:
        return Evidence("serving", cert.name, RELOADING, "reloads by itself, not yet: serves %s on %s, not %s "
                        "(changed %ds ago; %s re-reads it by itself, %s, within %ds)"
                        % (what, where, cert.name, max(0, int(age)), reload.component, reload.how,
                           int(reload.window)), port)
    late = ""
    if reload is not None and reload.reloads and age is not None:
        late = " (%s re-reads it by itself, %s, but the file changed %ds ago)" % (
            reload.component, reload.how, int(age))
    return Evidence("serving", cert.name, STALE, "serves %s on %s, not %s (valid until %s)%s: restart needed"
                    % (what, where, cert.name, _iso(cert.not_after), late), port)


def judge_reloaded(cert: Cert, reload: catalogue.CertReload) -> Evidence:
    """A client certificate the binary re-reads by itself: nothing to judge (nothing outside shows
    it), but said, so the report tells why its start time does not matter."""
    if cert.error:
        return Evidence("client", cert.name, UNKNOWN, "%s: %s" % (cert.name, cert.error))
    return Evidence("client", cert.name, RELOADS, "%s re-reads %s by itself (%s): no restart needed"
                    % (reload.component or "client-go", cert.name, reload.how))


def judge_client(comp: ComponentCerts, cert: Cert) -> Evidence:
    """A container started before its client certificate file changed still holds the old one."""
    if cert.mtime is None:
        return Evidence("client", cert.name, UNKNOWN, "%s: %s" % (cert.name, cert.error or "no modification time"))
    if comp.started is None:
        return Evidence("client", cert.name, UNKNOWN, "start time unknown (%s)" % comp.started_source)
    if comp.started < cert.mtime:
        return Evidence("client", cert.name, STALE, "started %s, before %s changed (%s): restart needed"
                        % (_iso(comp.started), cert.name, _iso(cert.mtime)))
    return Evidence("client", cert.name, CURRENT, "started %s, after %s changed (%s)"
                    % (_iso(comp.started), cert.name, _iso(cert.mtime)))


Endpoint = Tuple[str, str, int, str]     # (certificate file on the node, host, port, the flag naming it)


def _container(manifest: Manifest) -> Optional[Container]:
    """The component's container (the only one, or the one named like the pod); None when the
    manifest has several and none is named like the pod (then nothing can be judged)."""
    try:
        return pick_container(manifest.pod or {}, None)[1]
    except CpctlError:
        return None


def serving_endpoints(manifest: Manifest, root: str = "/") -> List[Endpoint]:
    """Where the component of ``manifest`` serves which certificate file (only the flags that name
    one: the scheduler and controller-manager as kubeadm runs them serve an in-memory one); ``root``:
    the directory holding the node's ``/`` (``--node-root``)."""
    container = _container(manifest)
    if container is None:
        return []
    flags = _flag_values(container)
    found = []
    entry = catalogue.get(manifest.pod_name or "")
    for serving in entry.serving_certs if entry else ():
        if serving.cert_flag in flags:
            host, port = _endpoint(flags.get(serving.port_flag, ""), serving.default_port, flags, container)
            path = flags[serving.cert_flag]
            found.append((under_root(root, host_path_of(manifest.pod or {}, container, path) or path), host, port,
                          serving.cert_flag))
    return found


def handshake_tls(node: Node, manifest: Manifest, scan: DirScan) -> Optional["TlsOptions"]:
    """The client certificate a handshake with ``manifest``'s component presents: for etcd, the
    node's etcd client pair (the API server's --etcd-certfile, else etcd/healthcheck-client). etcd
    3.5 caps TLS at 1.2 and, with kubeadm's --client-cert-auth=true, ends a handshake without a
    client certificate before the client sees its certificate (real-node-facts.md "etcd,
    measured"); its peer port asks for one too (--peer-client-cert-auth). None for the others."""
    if manifest.pod_name != catalogue.ETCD:
        return None
    from cpctl.core.etcdclient import etcd_client_tls
    return etcd_client_tls(node, scan)


def _peer_cert_args(host: str, port: int, tls: Optional["TlsOptions"]) -> Dict[str, object]:
    """``Host.peer_cert``'s arguments as its call passes them (a prefetched answer must match)."""
    args: Dict[str, object] = {"host": host, "port": port, "timeout": HANDSHAKE_TIMEOUT}
    if tls:
        args["tls"] = tls
    return args


def judge_component(cat: Catalogue, manifest: Manifest, endpoints: List[Endpoint],
                    tls: Optional["TlsOptions"] = None) -> ComponentCerts:
    """The verdict for the component of one valid manifest in the manifests dir (``tls``: the client
    certificate its handshakes present)."""
    name = manifest.pod_name or ""
    comp = ComponentCerts(name)
    container = _container(manifest)
    if container is None:
        comp.why = "several containers, none named %s: which one holds the flags is unclear" % name
        comp.decide()
        return comp
    flags = _flag_values(container)
    comp.evidence += [judge_serving(cat, path, host, port, catalogue.cert_reload(name, flag), tls)
                      for path, host, port, flag in endpoints]
    clients: List[Cert] = []
    reloaded: Dict[str, Evidence] = {}
    entry = catalogue.get(name)
    for flag in entry.client_certs if entry else ():
        if flag not in flags:
            continue
        path = under_root(cat.node.node_root, host_path_of(manifest.pod or {}, container, flags[flag]) or flags[flag])
        rel = os.path.relpath(path, cat.kube_dir)
        cert = cat.kubeconfig_cert(rel, path) if flag in catalogue.KUBECONFIG_FLAGS else cat.file_cert(rel, path)
        reload = catalogue.KUBECONFIG_CERT_FILE if cert.embedded is False else catalogue.cert_reload(name, flag)
        if reload is not None and reload.reloads:
            reloaded.setdefault(cert.path, judge_reloaded(cert, reload))
        elif cert not in clients:
            clients.append(cert)
    if any(c.mtime is not None for c in clients):     # no file on disk: no start time to compare with
        comp.started, comp.started_source = container_started(cat.node, name)
    elif not clients:
        comp.started_source = "not needed: no client certificate file it reads once; judged by what it serves"
    comp.evidence += [judge_client(comp, cert) for cert in clients] + list(reloaded.values())
    comp.decide()
    return comp


def report(node: Node) -> Report:
    """``cpctl certs`` on one node: every certificate, then every running component's verdict.
    Two round trips to a remote master for all its reads: the files and the manifests, then the
    handshakes the manifests call for."""
    cat = Catalogue(node)
    with node.host.prefetched(cat.reads() + node.view_reads()):
        cat.load()
        scan = node.scan()
    found = [(m, serving_endpoints(m, node.node_root), handshake_tls(node, m, scan)) for m in _control_plane(scan)]
    handshakes: List[Tuple[str, Dict[str, object]]] = [
        ("peer_cert", _peer_cert_args(host, port, tls)) for _, endpoints, tls in found
        for _, host, port, _ in endpoints]
    with node.host.prefetched(handshakes):
        comps = [judge_component(cat, m, endpoints, tls) for m, endpoints, tls in found]
    return {"node": node.node_name, "kube_dir": cat.kube_dir,
            "certificates": [c.to_dict() for c in cat.certs.values()],
            "components": [c.to_dict() for c in comps],
            "stale": [c.component for c in comps if c.verdict == STALE]}


def _control_plane(scan: DirScan) -> List[Manifest]:
    """The valid manifests of kubeadm's four components, in kubeadm's start order."""
    found = [m for m in scan.manifests if m.pod is not None and m.pod_name in catalogue.START_ORDER]
    return sorted(found, key=lambda m: catalogue.START_ORDER.index(m.pod_name or ""))


def stale_components(node: Node) -> List[str]:
    """The components whose verdict is STALE on ``node`` (for ``restart --stale-certs``)."""
    return restart_plan(node)[0]


def restart_plan(node: Node) -> Tuple[List[str], List[LeftAlone]]:
    """``restart --stale-certs`` on ``node``: the STALE components (to restart, kubeadm's order)
    and every other running control-plane component with why it is left alone (it uses the files,
    re-reads them by itself, or cpctl cannot tell - a restart is never made on a guess)."""
    data = report(node)
    prefix = {RELOADING: "no restart needed: ",
              UNKNOWN: "cpctl cannot tell, so it does not restart it on a guess (restart it by name if it must "
                       "be): "}
    left: List[LeftAlone] = [{"component": c["component"], "verdict": c["verdict"],
                              "why": prefix.get(c["verdict"], "") + c["why"]}
                             for c in data["components"] if c["verdict"] != STALE]
    return list(data["stale"]), left


def restart_stale(node: Node, names: List[str], reason: Optional[str], timeout: float) -> List[Outcome]:
    """Restart ``names`` (the stale components, in kubeadm's order, verified Ready by the restart
    itself), then prove it: each must now use the files on disk, else exit 7 naming it."""
    from cpctl.errors import ExitCode
    from cpctl.ops import lifecycle
    if not names:
        return []
    outcomes = lifecycle.restart(node, names, reason, timeout)
    after = {c["component"]: c for c in report(node)["components"]}
    still = ["%s (%s)" % (n, after[n]["why"]) for n in names if n in after and after[n]["verdict"] == STALE]
    if still:
        raise CpctlError("restarted, but still not using the certificate files: %s" % "; ".join(still),
                         ExitCode.ENVIRONMENT)
    return list(outcomes)
