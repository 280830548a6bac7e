"""Every fact cpctl relies on about kubeadm's control-plane components, one entry per component.

kubeadm keeps the same facts in its ``constants`` package and writes them into the manifests it
generates (cmd/kubeadm/app/constants/constants.go; phases/controlplane/manifests.go;
phases/etcd/local.go; see shared reference "kubeadm manifests by version"). Every layer reads
them from here; a test fails when a component's name, port or rule is written anywhere else.
A manifest's own probes and flags always win over these defaults: they are what cpctl falls back
on when a manifest does not say.
"""

from __future__ import annotations

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

#: Ports kubeadm's control plane and the node's agents listen on even when no manifest spells them
#: out (flag defaults): etcd client 2379 and peer 2380, the kubelet 10250, kube-proxy's health 10256,
#: and every component's health port. A new port of cpctl's own (a second scheduler) avoids them.
WELL_KNOWN_PORTS = frozenset({2379, 2380, 10250, 10256} | {c.health.port for c in COMPONENTS})

BY_NAME: Dict[str, Component] = {c.name: c for c in COMPONENTS}
#: Command-line short names -> pod names (``etcd`` is its own alias).
ALIASES: Dict[str, str] = {c.alias: c.name for c in COMPONENTS}
#: kubeadm's order for bringing a control plane up; stopping goes the other way.
START_ORDER: List[str] = [c.name for c in sorted(COMPONENTS, key=lambda c: c.start_rank)]


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
