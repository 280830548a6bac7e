"""Every fact cpctl relies on about kubeadm's control-plane components, one entry per component.

kubeadm keeps the same facts in its ``constants`` package and writes them into the manifests it
generates (cmd/kubeadm/app/constants/constants.go; phases/controlplane/manifests.go;
phases/etcd/local.go; see shared reference "kubeadm manifests by version"). Every layer reads
them from here; a test fails when a component's name, port or rule is written anywhere else.
A manifest's own probes and flags always win over these defaults: they are what cpctl falls back
on when a manifest does not say.
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Tuple

ETCD = "etcd"
KUBE_APISERVER = "kube-apiserver"
KUBE_CONTROLLER_MANAGER = "kube-controller-manager"
KUBE_SCHEDULER = "kube-scheduler"
DEFAULT_SCHEDULER_NAME = "default-scheduler"     # a pod's spec.schedulerName when none is set


# The entries are NamedTuples: immutable values like a frozen dataclass, which every cpctl run
# (this module is on the path of ``status``) would pay ~0.5 ms each to define.


class Health(NamedTuple):
    """Where kubeadm's probes look when a manifest does not say: scheme, port, path."""

    scheme: str
    port: int
    path: str


class ServingCert(NamedTuple):
    """An endpoint the component serves with a certificate FILE (cpctl certs compares the two):
    the flag that sets the port (a number, or a URL list whose first URL counts), the flag that
    names the certificate, and kubeadm's port when the manifest does not say."""

    port_flag: str
    cert_flag: str
    default_port: int


class Component(NamedTuple):
    """One kubeadm control-plane component.

    ``name`` is its pod name, file stem and binary (``kube-scheduler``); ``alias`` the short
    name accepted on the command line. ``start_rank``: kubeadm brings components up in this
    order (etcd first), stops go the other way. ``health``: kubeadm's probe endpoint.
    ``port_flag``: the flag that moves the serving port (None: etcd's ports are URLs).
    ``leader_elected``: takes a Lease in kube-system (``--leader-elect``, on by default).
    ``carries_api``: the API itself depends on it (the API server, its stacked etcd): while
    it is down the API cannot watch it go and come back, and the node's API view is stale.
    ``quorum_rule``: the fleet guard's rule for it (None: stopping it on every master is
    allowed). ``kubeadm_section``: where kubeadm's ClusterConfiguration holds its ``extraArgs``
    (dotted: ``etcd.local``), which ``kubeadm upgrade`` renders the manifest from.
    ``serving_certs``: where it serves a certificate file, when its flags name one (kubeadm runs
    the scheduler and controller-manager with an in-memory one: no ``--tls-cert-file``);
    ``client_certs``: the flags naming a client certificate or a kubeconfig that holds one (it
    loads them when it starts)."""

    name: str
    alias: str
    start_rank: int
    health: Health
    port_flag: Optional[str]
    leader_elected: bool
    carries_api: bool
    quorum_rule: Optional[str]
    kubeadm_section: str
    serving_certs: Tuple[ServingCert, ...] = ()
    client_certs: Tuple[str, ...] = ()


#: kubeadm's certificates under /etc/kubernetes/pki, without ``.crt`` (cmd/kubeadm/app/constants/
#: constants.go), CAs first; and its kubeconfigs with a client certificate (super-admin.conf on the
#: ``kubeadm init`` node only, since v1.29; kubelet.conf names a file the kubelet rotates).
PKI_CERTS = ("ca", "front-proxy-ca", "etcd/ca", "apiserver", "apiserver-kubelet-client", "apiserver-etcd-client",
             "front-proxy-client", "etcd/server", "etcd/peer", "etcd/healthcheck-client")
KUBECONFIGS = ("admin.conf", "super-admin.conf", "controller-manager.conf", "scheduler.conf", "kubelet.conf")

#: The kubeconfig flags of the controller-manager and the scheduler (each holds a client certificate).
KUBECONFIG_FLAGS = ("kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig")

COMPONENTS: Tuple[Component, ...] = (
    Component(ETCD, "etcd", 0, Health("http", 2381, "/readyz"), None, False, True,
              "etcd keeps quorum only while a majority of its members run", "etcd.local",
              (ServingCert("listen-client-urls", "cert-file", 2379),
               ServingCert("listen-peer-urls", "peer-cert-file", 2380))),
    Component(KUBE_APISERVER, "apiserver", 1, Health("https", 6443, "/readyz"), "secure-port", False, True,
              "at least one API server must keep serving (an API server whose stacked etcd is down is not "
              "serving)", "apiServer", (ServingCert("secure-port", "tls-cert-file", 6443),),
              ("etcd-certfile", "kubelet-client-certificate", "proxy-client-cert-file")),
    Component(KUBE_CONTROLLER_MANAGER, "controller-manager", 2, Health("https", 10257, "/healthz"), "secure-port",
              True, False, None, "controllerManager", (ServingCert("secure-port", "tls-cert-file", 10257),),
              KUBECONFIG_FLAGS),
    Component(KUBE_SCHEDULER, "scheduler", 3, Health("https", 10259, "/healthz"), "secure-port", True, False, None,
              "scheduler", (ServingCert("secure-port", "tls-cert-file", 10259),), KUBECONFIG_FLAGS),
)

class CertReload(NamedTuple):
    """Whether a running binary picks up a renewed certificate file without a restart.

    ``component`` and ``flag``: the binary and the flag naming the file (a kubeconfig flag: the
    client certificate in that kubeconfig). ``reloads``: True when the binary re-reads it by itself.
    ``how``: when. ``window``: seconds after the file changed by which it has certainly re-read it
    (cpctl's "reloads by itself, not yet" lasts this long; 0 for files it never re-reads).
    ``since``: the release from which it reloads, where that changed (every release cpctl knows,
    v1.30 on, reloads what this table says). ``source``: where the upstream code says so."""

    component: str
    flag: str
    reloads: bool
    how: str
    window: float
    since: str
    source: str


_DYNAMIC = "k8s.io/apiserver pkg/server/dynamiccertificates"
_SERVING_HOW = "file watch (fsnotify) plus a re-read every minute"
_SERVING_SOURCE = _DYNAMIC + " (DynamicCertKeyPairContent, FileRefreshDuration = 1m), pkg/server/options/serving.go"
_CA_SOURCE = _DYNAMIC + " (DynamicFileCAContent); client-CA reload fixed in kubernetes#90360"
_ETCD_SERVING_SOURCE = "etcd client/pkg/transport/listener.go (tls.Config.GetCertificate reads the files again)"
_EMBEDDED_HOW = ("never: the client certificate is embedded in the kubeconfig, read once at start "
                 "(client-go re-reads only a client-certificate FILE)")
_EMBEDDED_SOURCE = "client-go transport (cert_rotation.go rotates file-based client certificates only)"
#: A minute of re-read period plus time for its work queue; a handshake at once, a little slack.
_MINUTE_WINDOW = 90.0
_HANDSHAKE_WINDOW = 10.0
#: client-go re-reads a client-certificate file every CertCallbackRefreshDuration (5 minutes).
_CLIENT_GO_WINDOW = 330.0

#: Per certificate flag: does the binary reload it (kubeadm certs renew rewrites the file, the CAs
#: excepted)? ``cpctl certs`` judges a reloading serving certificate by its handshake only, a
#: reloading client certificate not at all (nothing outside shows it), and a non-reloading one by the
#: container's start time against the file. Sources: real-node-facts.md, "Which certificates a
#: running binary reloads".
CERT_RELOADS: Tuple[CertReload, ...] = (
    CertReload(ETCD, "cert-file", True, "at each TLS handshake", _HANDSHAKE_WINDOW, "etcd v3.2",
               _ETCD_SERVING_SOURCE),
    CertReload(ETCD, "peer-cert-file", True, "at each TLS handshake", _HANDSHAKE_WINDOW, "etcd v3.2",
               _ETCD_SERVING_SOURCE),
    CertReload(ETCD, "trusted-ca-file", False, "never: the CA pool is built once at start", 0.0, "",
               "etcd client/pkg/transport/listener.go (ClientCAs/RootCAs from TrustedCAFile at start)"),
    CertReload(KUBE_APISERVER, "tls-cert-file", True, _SERVING_HOW, _MINUTE_WINDOW, "v1.17", _SERVING_SOURCE),
    CertReload(KUBE_APISERVER, "client-ca-file", True, _SERVING_HOW, _MINUTE_WINDOW, "v1.17", _CA_SOURCE),
    CertReload(KUBE_APISERVER, "requestheader-client-ca-file", True, _SERVING_HOW, _MINUTE_WINDOW, "v1.17",
               _CA_SOURCE),
    CertReload(KUBE_APISERVER, "proxy-client-cert-file", True, _SERVING_HOW, _MINUTE_WINDOW, "",
               "kube-aggregator (NewDynamicServingContentFromFiles for the proxy client certificate)"),
    CertReload(KUBE_APISERVER, "kubelet-client-certificate", True, "client-go's rotating dialer re-reads it "
               "(ReloadTLSFiles) every 5 minutes and closes the old connections", _CLIENT_GO_WINDOW, "",
               "pkg/kubelet/client/kubelet_client.go (ReloadTLSFiles), client-go transport/cert_rotation.go"),
    CertReload(KUBE_APISERVER, "etcd-certfile", True, "at each new connection to etcd", _HANDSHAKE_WINDOW,
               "", "etcd client/pkg/transport/listener.go (tls.Config.GetClientCertificate reads the files "
               "again)"),
) + tuple(
    entry for name in (KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER) for entry in (
        CertReload(name, "tls-cert-file", True, _SERVING_HOW, _MINUTE_WINDOW, "v1.17", _SERVING_SOURCE),
        CertReload(name, "client-ca-file", True, _SERVING_HOW, _MINUTE_WINDOW, "v1.17", _CA_SOURCE),
        CertReload(name, "kubeconfig", False, _EMBEDDED_HOW, 0.0, "", _EMBEDDED_SOURCE),
        CertReload(name, "authentication-kubeconfig", False, _EMBEDDED_HOW, 0.0, "", _EMBEDDED_SOURCE),
        CertReload(name, "authorization-kubeconfig", False, _EMBEDDED_HOW, 0.0, "", _EMBEDDED_SOURCE)))

#: A kubeconfig whose client certificate is a FILE (``client-certificate:``, as kubelet.conf names
#: kubelet-client-current.pem) rather than embedded data: client-go re-reads that file by itself.
KUBECONFIG_CERT_FILE = CertReload("", "client-certificate", True, "client-go re-reads the file every 5 "
                                  "minutes (CertCallbackRefreshDuration)", _CLIENT_GO_WINDOW, "",
                                  "client-go transport/cert_rotation.go")

_RELOADS: Dict[Tuple[str, str], CertReload] = {(r.component, r.flag): r for r in CERT_RELOADS}


def cert_reload(component: str, flag: str) -> Optional[CertReload]:
    """The ``CERT_RELOADS`` row of ``component``'s ``flag``; None for a flag the table does not know
    (cpctl then assumes the file is read once, at start: a restart too many, never one too few)."""
    return _RELOADS.get((canonical(component), flag))


#: Ports kubeadm's control plane and the node's agents listen on even when no manifest spells them
#: out (flag defaults): etcd client 2379 and peer 2380, the kubelet 10250, kube-proxy's health 10256,
#: and every component's health port. A new port of cpctl's own (a second scheduler) avoids them.
WELL_KNOWN_PORTS = frozenset({2379, 2380, 10250, 10256} | {c.health.port for c in COMPONENTS})

BY_NAME: Dict[str, Component] = {c.name: c for c in COMPONENTS}
#: Command-line short names -> pod names (``etcd`` is its own alias).
ALIASES: Dict[str, str] = {c.alias: c.name for c in COMPONENTS}
#: kubeadm's order for bringing a control plane up; stopping goes the other way.
START_ORDER: List[str] = [c.name for c in sorted(COMPONENTS, key=lambda c: c.start_rank)]


#: A Kubernetes image tag: v1.30.4 (a registry port or a digest elsewhere in the image does not count).
_RELEASE_TAG = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def image_release(image: str) -> Optional[Tuple[int, int]]:
    """(major, minor) of a control-plane image such as ``registry.k8s.io/kube-scheduler:v1.30.4``
    (kubeadm tags each with the release it runs); None when the tag says nothing."""
    ref = image.split("@", 1)[0].rsplit("/", 1)[-1]
    match = _RELEASE_TAG.match(ref.split(":", 1)[1] if ":" in ref else "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def canonical(name: str) -> str:
    """The pod name a command-line name stands for (``scheduler`` -> ``kube-scheduler``)."""
    return ALIASES.get(name, name)


def get(name: str) -> Optional[Component]:
    """The catalogue entry of a pod name or alias; None for any other static pod."""
    return BY_NAME.get(canonical(name))


def carries_api(name: str) -> bool:
    """True for the API server and etcd (see ``Component.carries_api``)."""
    entry = get(name)
    return entry is not None and entry.carries_api


def leader_elected(name: str) -> bool:
    entry = get(name)
    return entry is not None and entry.leader_elected


def quorum_guarded(name: str) -> bool:
    """True for the components the fleet guard protects (etcd, the API server)."""
    entry = get(name)
    return entry is not None and entry.quorum_rule is not None

#: etcd's data dir (etcd server/etcdserver bootstrap, 3.4-3.6): ``--data-dir`` holds the member in
#: ``member/`` (``member/snap/db`` and, unless ``--wal-dir`` puts it elsewhere, ``member/wal``). A
#: starting etcd that finds no WAL there starts a NEW member ("new member, empty data dir"): with
#: ``--initial-cluster-state=new`` (kubeadm's first master) a brand-new empty cluster. Only a member
#: added to a running cluster (``--initial-cluster-state=existing``) starts from an empty dir by design.
ETCD_DATA_DIR_FLAG = "data-dir"
ETCD_WAL_DIR_FLAG = "wal-dir"
ETCD_MEMBER_DIR = "member"
