"""etcd's data dir in the lab: what a starting etcd reads, and ``etcdctl snapshot save|restore``.

The lab's etcd keeps no keys, but its data dir is real: a starting etcd opens
``<data-dir>/member/snap/db`` on the node (through the pod's hostPath volume) and logs the cluster
ID it holds, like etcd's "starting local member" line; an empty data dir becomes a new member with a
fresh cluster ID. ``snapshot restore`` (``cpctl lab etcdctl snapshot restore``) writes a NEW data
dir the way etcdctl/etcdutl do: refused when the dir exists and is not empty, and the cluster ID is
derived from ``--initial-cluster`` and ``--initial-cluster-token``, so every member of an HA
cluster restored with the same values agrees on it (and it differs from the old cluster's). So an
etcd restore drill shows whether the restored dir is the one etcd really runs on.

The keys: ``snapshot save`` asks the running lab (its control channel) for the API objects of
:data:`DATA_RESOURCES` and the store's revision, as etcdctl reads them from a serving member;
``snapshot restore`` puts them in the new data dir, its revision raised by ``--bump-revision`` and
marked compacted with ``--mark-compacted`` (etcdutl, etcd-io/etcd#16028). When etcd starts on such
a dir the lab's API serves those objects again (:meth:`cpctl_lab.cluster.Lab.restore_keys`):
objects created after the snapshot are gone, and without ``--bump-revision`` the revision goes
back to the snapshot's, under the resourceVersions that watchers already hold.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from pathlib import Path
from typing import Any, Optional

DB = ("member", "snap", "db")
WAL = ("member", "wal")
DEFAULT_CLUSTER_TOKEN = "etcd-cluster"
#: The API objects a lab snapshot holds (what the lab itself keeps up - nodes, pods, leases, events -
#: is written again by the kubelets and components once they run).
DATA_RESOURCES = ("configmaps", "roles", "rolebindings", "clusterroles", "clusterrolebindings", "daemonsets")


class EtcdDataError(Exception):
    """What etcdctl would refuse (the text is its message)."""


def db_path(data_dir: Path) -> Path:
    return data_dir.joinpath(*DB)


def read_db(data_dir: Path) -> dict[str, Any]:
    """The db a member of ``data_dir`` holds; EtcdDataError when there is none."""
    try:
        value = json.loads(db_path(data_dir).read_text())
    except (OSError, ValueError) as exc:
        raise EtcdDataError(f"no etcd db in {data_dir}: {exc}") from None
    if not isinstance(value, dict) or not isinstance(value.get("cluster_id"), str):
        raise EtcdDataError(f"{db_path(data_dir)} is not an etcd db")
    return value


def open_member(data_dir: Path, name: str) -> tuple[str, dict[str, Any]]:
    """What a starting etcd finds in ``data_dir`` (on the node): ("opened", db) for an existing
    member, ("new", db) after writing a new member's db into an empty or absent dir."""
    try:
        return "opened", read_db(data_dir)
    except EtcdDataError:
        pass
    db = {"cluster_id": secrets.token_hex(8), "member": name, "origin": "new member", "created": _now()}
    _write_db(data_dir, db)
    return "new", db


def snapshot_save(data_dir: Path, out: Path, keys: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """A snapshot of the member in ``data_dir`` written to ``out`` (what ``etcdctl snapshot save`` gets):
    its db and ``keys`` ({"revision", "objects"}) as the serving member answered."""
    db = read_db(data_dir)
    snapshot = {"snapshot_of": db["cluster_id"], "taken": _now(), "db": db, "keys": keys}
    out.write_text(json.dumps(snapshot, indent=2) + "\n")
    return snapshot


def snapshot_restore(snapshot_file: Path, data_dir: Path, name: str, initial_cluster: str,
                     token: str = DEFAULT_CLUSTER_TOKEN, bump_revision: int = 0,
                     mark_compacted: bool = False) -> dict[str, Any]:
    """``etcdctl snapshot restore``: a new data dir holding the snapshot as a new cluster."""
    try:
        snapshot = json.loads(snapshot_file.read_text())
    except (OSError, ValueError) as exc:
        raise EtcdDataError(f"cannot read snapshot {snapshot_file}: {exc}") from None
    if not isinstance(snapshot, dict) or "snapshot_of" not in snapshot:
        raise EtcdDataError(f"{snapshot_file} is not an etcd snapshot")
    if data_dir.exists() and any(data_dir.iterdir()):
        raise EtcdDataError(f'data-dir "{data_dir}" not empty or could not be read')
    cluster_id = hashlib.sha256(f"{initial_cluster}|{token}".encode()).hexdigest()[:16]
    db = {"cluster_id": cluster_id, "member": name, "origin": "restored", "restored_from": snapshot["snapshot_of"],
          "snapshot_taken": snapshot.get("taken"), "initial_cluster": initial_cluster, "created": _now()}
    keys = snapshot.get("keys")
    if isinstance(keys, dict):
        db["keys"] = dict(keys, revision=int(keys.get("revision", 0)) + bump_revision, compacted=mark_compacted)
    _write_db(data_dir, db)
    return db


#: The lab dir's file with the keys of :data:`DATA_RESOURCES` as the lab stopped (``cpctl lab down``):
#: the next ``lab up`` serves them again, so a lab keeps its state across a restart as a real cluster's
#: etcd does (kubeadm-config with a kept flag included). Nodes, pods, leases and events are written
#: again by the kubelets and components. A lab killed with SIGKILL keeps what its last stop wrote.
KEPT_FILE = "etcd-keys.json"


#: What ran as the lab's etcd (``save_kept``'s ``etcd``): the imitation writes its own data dirs (a JSON
#: ``member/snap/db``) that the real etcd cannot open (it panics), and the imitation cannot read a real one.
IMITATION, REAL = "imitation", "real"


def save_kept(lab_dir: Path, objects: list[list[Any]], revision: int, restored_cluster: str, etcd: str) -> None:
    """Write the keys the lab serves now (and the restored cluster they came from, so that its data
    dir's snapshot keys are not served again over them) and which etcd ran (``IMITATION``/``REAL``)
    to ``lab_dir/KEPT_FILE``, atomically."""
    path = lab_dir / KEPT_FILE
    tmp = path.with_name(f".{KEPT_FILE}.tmp")
    tmp.write_text(json.dumps({"revision": revision, "objects": objects, "restored_cluster": restored_cluster,
                               "saved": _now(), "etcd": etcd}) + "\n")
    tmp.replace(path)


def load_kept(lab_dir: Path) -> Optional[dict[str, Any]]:
    """The keys :func:`save_kept` wrote, None when there are none (a new lab) or the file is not
    theirs (only objects of :data:`DATA_RESOURCES` with a name are taken)."""
    try:
        kept = json.loads((lab_dir / KEPT_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or not isinstance(kept.get("objects"), list):
        return None
    objects = [o for o in kept["objects"] if isinstance(o, list) and len(o) == 4 and o[0] in DATA_RESOURCES
               and isinstance(o[1], str) and isinstance(o[2], str) and o[2] and isinstance(o[3], dict)]
    revision = kept.get("revision")
    restored = kept.get("restored_cluster")
    etcd = kept.get("etcd")
    return {"objects": objects, "revision": revision if isinstance(revision, int) else 0,
            "restored_cluster": restored if isinstance(restored, str) else "", "saved": kept.get("saved"),
            "etcd": etcd if etcd in (IMITATION, REAL) else ""}


def _write_db(data_dir: Path, db: dict[str, Any]) -> None:
    data_dir.joinpath(*WAL).mkdir(parents=True, exist_ok=True)
    path = db_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(db, indent=2) + "\n")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
