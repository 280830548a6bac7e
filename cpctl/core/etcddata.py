"""Refuse to start etcd on a data dir that holds no member (issue 45).

etcd started on a missing or empty data dir does not fail: it starts as a new member with no data
(its log says "new member, empty data dir"), and on a single master that is a brand-new, empty
cluster under the API server - Ready, healthy, and every object gone. So a change that would start
etcd (``start``, ``restart``, ``apply``/``edit``/``flags``/``rollback`` of the running manifest)
looks first, on the node, at the dir the manifest gives etcd: ``--data-dir`` through its hostPath
volume, and ``--wal-dir`` when set (a dir on no hostPath volume is a fresh dir in every new
container: ``checks.review`` refuses writing such a manifest; nothing on the node to look at
here). It must hold etcd's ``member`` dir (``catalogue.ETCD_MEMBER_DIR``); the WAL dir must not be
empty. Otherwise the change is refused before anything moves, unless the run says ``--new-member``:
that is the intent only for a member added to a running cluster (``etcdctl member add``, then
``--initial-cluster-state=existing``) or an etcd restored from a snapshot on purpose
(docs/etcd-restore.md), and only then does the hint name it.
"""

from __future__ import annotations

import posixpath
from typing import Mapping, Optional

from cpctl import catalogue
from cpctl.core.flags import flags_of
from cpctl.core.mounts import host_path_of, under_root
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host


def is_etcd(pod: Mapping[str, object]) -> bool:
    meta = pod.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return isinstance(name, str) and catalogue.canonical(name) == catalogue.ETCD


def refuse_empty(host: Host, pod: Mapping[str, object], node_root: str, what: str, new_member: bool,
                 command: str) -> None:
    """REFUSED (exit 4, nothing changed) when ``pod`` is etcd and would start on a data dir that holds
    no member, unless ``new_member``; ``what`` names the change, ``command`` is the change again with
    ``--new-member`` (named in the hint only when the manifest says the member joins an existing
    cluster)."""
    if new_member or not is_etcd(pod):
        return
    why = empty_data_dir(host, pod, node_root)
    if not why:
        return
    joining = _flag(pod, "initial-cluster-state") == "existing"
    hint = ("a member added to the cluster (etcdctl member add; --initial-cluster-state=existing) starts empty by "
            "design: %s" % command) if joining else \
        "point etcd at the data dir that holds this member (or restore a snapshot into the new dir first: " \
        "docs/etcd-restore.md)"
    raise CpctlError("%s refused: %s: etcd would start there as a NEW member with no data (on a single master a "
                     "new, empty cluster under the API server); nothing changed" % (what, why), ExitCode.REFUSED,
                     hint=hint)


def empty_data_dir(host: Host, pod: Mapping[str, object], node_root: str) -> str:
    """Why etcd's data dir in ``pod`` holds no member ("" when it does, or when the pod does not say)."""
    data_dir = _flag(pod, catalogue.ETCD_DATA_DIR_FLAG)
    if not data_dir:
        return ""                       # etcd's default (<name>.etcd in its working dir): not a kubeadm manifest
    where = _node_dir(pod, data_dir)
    if where is None:
        return ""     # no node dir to look at; a change that writes this is refused by checks.review
    problem = _missing_or_empty(host, under_root(node_root, where), catalogue.ETCD_MEMBER_DIR)
    if problem:
        return "its data dir %s (--%s=%s) %s" % (where, catalogue.ETCD_DATA_DIR_FLAG, data_dir, problem)
    wal_dir = _flag(pod, catalogue.ETCD_WAL_DIR_FLAG)
    wal_where = _node_dir(pod, wal_dir) if wal_dir else ""
    problem = _missing_or_empty(host, under_root(node_root, wal_where), "") if wal_where else ""
    return "its WAL dir %s (--%s=%s) %s" % (wal_where, catalogue.ETCD_WAL_DIR_FLAG, wal_dir, problem) \
        if problem else ""


def _missing_or_empty(host: Host, path: str, needed: str) -> str:
    """"does not exist", "is empty", "holds no member/" ... or "" (on the node, through ``host``)."""
    info = host.lstat(path)
    if info is None:
        return "does not exist"
    if info["kind"] != "dir":
        return "is not a directory"
    try:
        names = host.listdir(path)
    except OSError as exc:
        return "cannot be read (%s)" % (exc.strerror or exc)
    if not names:
        return "is empty"
    if needed and needed not in names:
        return "holds no %s/ dir" % needed
    if needed:
        inner = host.lstat(posixpath.join(path, needed))
        if inner is None or inner["kind"] != "dir":
            return "holds no %s/ dir" % needed
    return ""


def _node_dir(pod: Mapping[str, object], path: str) -> Optional[str]:
    """The node path of the container path ``path`` (the etcd container's hostPath), None when none."""
    for container in _containers(pod):
        found = host_path_of(pod, container, path)
        if found is not None:
            return found
    return None


def _flag(pod: Mapping[str, object], name: str) -> str:
    for container in _containers(pod):
        for flag in flags_of(container):
            if flag.name == name and flag.value:
                return flag.value
    return ""


def _containers(pod: Mapping[str, object]) -> list:
    spec = pod.get("spec")
    items = spec.get("containers") if isinstance(spec, Mapping) else None
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, list) else []
