"""cpctl lab -- a SIMULATOR of a kubeadm control plane, for newcomers, tests and CI. Not a cluster.

One process plays N kubeadm masters (``lab-master1..N``) plus one worker (``lab-worker1``) on
127.0.0.1 (or ::1) only. It is an independent counterpart of the real kubelet and API server: it
never imports the rest of cpctl, so cpctl's core can be tested against it. A *profile* decides what
the nodes look like, so a test can fail where cpctl gets a real node's behaviour wrong.

What it simulates
  * A kube-apiserver subset over plain HTTP that the real kubectl uses through ``DIR/admin.conf``:
    discovery (aggregated and legacy), pods (+binding, +status, watch, selectors, graceful delete,
    UID preconditions), nodes, namespaces, events, leases, daemonsets, configmaps; Table output for
    ``kubectl get``. ``/openapi/v2`` and ``/openapi/v3`` are empty documents, so kubectl skips
    client-side schema validation (``kubectl apply --dry-run=client`` works without flags;
    pass ``--validate=false`` if a kubectl version insists on a schema).
  * A kubelet per master with the real static pod file-source rules (every non-dot regular
    file, inotify plus a re-list every ``--file-check-frequency`` s, last file wins on
    duplicates, config.hash from content+node+path) and mirror pods that exist only through the
    API: while no kube-apiserver (or no etcd quorum) runs, mirrors are neither created nor deleted.
  * The real etcd when one is installed (:mod:`cpctl_lab.etcdbin`, ``--etcd-binary``): the kubelet
    runs the etcd binary from each etcd manifest (:mod:`cpctl_lab.etcdproc`; members join one after
    the other as ``kubeadm join`` adds them), its health is the process's own /health, and the API
    server keeps its objects in it (:mod:`cpctl_lab.etcdstore`: resourceVersion = etcd's revision);
    NodeRestriction for node identities (:mod:`cpctl_lab.noderestriction`). Without a binary, the
    Python imitation of etcd below.
  * API availability follows the static pods: no running kube-apiserver -> the API port refuses
    connections; no etcd quorum -> ``etcdserver: request timed out`` (500) and failing /readyz.
  * Health endpoints at the ports/paths/schemes of each running component's probes. HTTPS ones
    serve the certificate file the component names (``--tls-cert-file``), re-read as the binary
    does: the API server within a minute (scaled) of the file's change; etcd's client and peer
    ports answer TLS with ``--cert-file`` and ``--peer-cert-file`` read again at each handshake.
    A component without such a flag (kubeadm's scheduler and
    controller-manager) serves a self-signed certificate made once per lab dir by ``openssl``
    (plain HTTP if openssl is missing).
  * Real certificates (:mod:`cpctl_lab.pki`, ``cryptography``): three CAs shared by every master,
    kubeadm's ``pki/`` leaves, kubeconfigs with embedded client certificates (``kubelet.conf``
    names ``kubelet-client-current.pem``); ``cpctl lab certs-renew`` rewrites them like
    ``kubeadm certs renew all``: etcd and the API server pick them up by themselves, the
    controller-manager and the scheduler keep their kubeconfigs' old client certificates until
    restarted.
  * A scheduler that binds pods only while a kube-scheduler static pod runs and holds its Lease,
    honouring ``spec.schedulerName`` and ``--config`` KubeSchedulerConfiguration profiles;
    leader Leases renewed every ``--lease-renew`` s; a ``crictl`` shim in ``DIR/bin``
    (``pods``, ``ps``, ``inspect``, ``inspectp``, ``logs``, ``version``).
  * Per master: ``DIR/kubelet-<node>/`` (config.yaml, kubeadm-flags.env), ``DIR/root-<node>/``
    (the node's ``/``: pki, kubeconfigs, mounted dirs, and the manifests dir
    ``etc/kubernetes/manifests``, so each master has its own /etc/kubernetes; every seeded hostPath
    points in here), ``DIR/state-<node>/`` (cpctl's state dir), its own API listener and
    ``DIR/admin-<node>.conf``; ``DIR/admin.conf`` is the load balancer.

Profiles (``start_lab(..., profile=NAME)``, ``cpctl lab up|run --profile NAME``, list with
``cpctl lab profiles``; every setting is also an option of its own, see :mod:`cpctl_lab.profiles`;
lab.json records them under ``"profile"``):
  default        the lab's original behaviour: short node names, IPv4, fixed fast lags, the classic
                 seeds (v1.30.4 images with the v1.31+ etcd probes); CPCTL_NODE_NAME and
                 CPCTL_MANIFESTS_DIR are exported.
  kubeadm-1.30 .. kubeadm-1.34
                 kubeadm's manifests of that release (etcd probes, named probe port, etcd 3.6 flags).
  fqdn           the node name is the host's FQDN (``lab-master1.cpctl.test``; the simulated host
                 name is the same FQDN in mixed case); CPCTL_NODE_NAME/CPCTL_MANIFESTS_DIR not set.
  override       node name != host name, ``--hostname-override`` in kubeadm-flags.env; same env.
  ipv6           single-stack IPv6: advertise ``::1``, probes ``host: ::1``, ``https://[::1]:PORT``.
  ha             3 masters, v1.33, local-mode kubelets, stacked etcd, RBAC.
  realistic      v1.33, RBAC, realistic timing (scale it with ``time_scale``).
  real-master    v1.33, realistic timing with a busy master's boot times: API server 45 s, etcd 7 s.

Facts the lab models, and where they come from: source paths are in kubernetes/kubernetes (or
kubernetes/kubeadm); "real-node-facts" and "kubelet-kubeadm" name the sections of the project's
notes on real nodes that each fact was checked against, which in turn cite those sources:
  * Static pod file source: glob ``[^.]*``, symlinks followed, no extension filter, first YAML
    document only, inotify per file plus a full re-list every fileCheckFrequency (20 s); Remove/Rename
    drops the pod key even if another file defines it, Chmod re-parses; a parse error on an event
    leaves the pod, the re-list drops it; last file in sorted order wins
    (pkg/kubelet/config/file.go, file_linux.go, common.go; real-node-facts "What the kubelet loads").
  * A hostile file is one invalid manifest, never a stuck kubelet: an anchor that contains itself or
    aliases expanding past 400,000 nodes are refused as go-yaml refuses them (yaml.v2 decode.go
    ``allowedAliasRatio``); nesting is capped at libyaml's 1000 levels (go-yaml allows 10,000).
  * A static pod removed and added back at once is killed and started again (kubernetes#104847).
  * Static pod UID = hash of the decoded, DEFAULTED pod (API defaults filled in, unknown fields,
    nulls and zero values gone), node and path; ``metadata.uid`` pins it (common.go
    ``applyDefaults``, pkg/apis/core/v1/defaults.go; :mod:`cpctl_lab.decoded`; real-node-facts
    "What the kubelet counts as a change"). Without inotify (``inotify=False``) only re-lists.
  * The API server's own restart: its port (and etcd's) closed until booted; mirror pods frozen
    meanwhile, replaced at the pod worker's next try (10 s) after the API returns, first without
    status (real-node-facts "When the API server itself restarts"). The controller-manager keeps
    its Lease when it stops (no ReleaseOnCancel), the scheduler releases it.
  * Mirror pods: copy of the static pod's annotations plus config.mirror and a Node owner; deleted
    only once the pod finished terminating, by housekeeping every 2 s (pkg/kubelet/kubelet.go,
    pod/mirror_client.go; real-node-facts "Mirror pods and timing").
  * Node identity: full lowercased host name or ``--hostname-override`` (kubeadm buildKubeletArgs);
    Lease holders are ``<kernel host name>_<uuid>`` (real-node-facts "Node identity", "HA").
  * kubeadm manifests by release: probes, ports, etcd flags and images
    (cmd/kubeadm/app/phases/controlplane/manifests.go, phases/etcd/local.go,
    util/staticpod/utils.go, constants/constants.go; kubernetes#110744, #124465, #132776).
  * IPv6 single stack (manifests.go ``GetAPIServerProbeAddress``, local.go ``GetEtcdProbeEndpoint``).
  * HA: ControlPlaneKubeletLocalMode (v1.33 beta, kubernetes#129956), stacked etcd with only the local
    member in --etcd-servers; an apiserver without its etcd fails /readyz (real-node-facts "HA").
  * Timing: startup probes with initialDelaySeconds 10, readiness probes, terminationGracePeriodSeconds
    (30), SIGTERM ignored by a PID 1 without handlers (:mod:`cpctl_lab.timing`).
  * Crash loops: flags each binary knows (:mod:`cpctl_lab.componentflags`), their errors and log
    formats (component-base/cli/run.go, etcdmain/config.go; :mod:`cpctl_lab.componentlogs`),
    CrashLoopBackOff 10 s doubling to 300 s (pkg/kubelet/kubelet.go ``MaxContainerBackOff``).
  * hostPath types: missing ``File``/``Directory`` -> FailedMount, pod stays ContainerCreating;
    ``*OrCreate`` paths are created (pkg/volume/hostpath).

Deviations from the real thing (on purpose): no authentication (RBAC only for the components'
identities, with the ``rbac`` setting), no admission beyond pod defaults, all nodes share one
loopback address, config.hash is sha256-based (not FNV-128a), no containers really run, strategic
merge patch is applied as JSON merge patch (lists replaced), ``limit`` and ``continue`` are ignored
on lists, the API is plain HTTP, kubeconfigs carry no credentials, certificates are fake PEM
blocks, liveness probes never kill a container, the lab only creates files inside its own dir.

Python API: ``start_lab(dir, masters=None, profile=None, **options) -> LabHandle`` (see
:mod:`cpctl_lab.control`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["start_lab", "LabHandle", "LabError"]


def __getattr__(name: str) -> Any:
    """Lazy re-exports, so importing the CLI stays cheap."""
    if name in __all__:
        from . import control

        return getattr(control, name)
    raise AttributeError(name)
