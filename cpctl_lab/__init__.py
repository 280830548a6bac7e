"""cpctl lab -- a SIMULATOR of a kubeadm control plane, for newcomers, tests and CI. Not a cluster.

One process plays N kubeadm masters (``lab-master1..N``) plus one worker (``lab-worker1``) on
127.0.0.1 only. It is an independent counterpart of the real kubelet and API server: it never
imports the rest of cpctl, so cpctl's core can be tested against it.

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
  * API availability follows the static pods: no running kube-apiserver -> the API port refuses
    connections; no etcd quorum -> ``etcdserver: request timed out`` (500) and failing /readyz.
  * Health endpoints at the ports/paths/schemes of each running component's probes (HTTPS with a
    self-signed certificate made once per lab dir by ``openssl``; plain HTTP if openssl is missing).
  * A scheduler that binds pods only while a kube-scheduler static pod runs and holds its Lease,
    honouring ``spec.schedulerName`` and ``--config`` KubeSchedulerConfiguration profiles;
    leader Leases renewed every ``--lease-renew`` s; a ``crictl`` shim in ``DIR/bin``.

Deviations from the real thing (on purpose): no authentication/RBAC, no admission beyond pod
defaults, all nodes share 127.0.0.1, config.hash is sha256-based (not FNV-128a), no containers
really run, strategic merge patch is applied as JSON merge patch (lists replaced), ``limit`` and
``continue`` are ignored on lists.

Python API: ``start_lab(dir, masters=1, **lags) -> LabHandle`` (see :mod:`cpctl_lab.control`).
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
