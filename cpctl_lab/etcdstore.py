"""The lab's API objects kept in the real etcd (issue 45), as kube-apiserver keeps them.

Each object is one key, ``/registry/<resource>/<namespace>/<name>`` (cluster-scoped:
``/registry/<resource>/<name>``; Nodes under ``minions``, as kube-apiserver names them), its value the
object's JSON without ``resourceVersion``; an object's resourceVersion is its key's ``mod_revision``,
a list's is etcd's revision. Writes are transactions that compare what the write read, as
``GuaranteedUpdate`` does: a create compares ``create_revision == 0`` (else AlreadyExists), an update
or a delete ``mod_revision`` (else Conflict; a server-side update without a precondition reads the key
again and retries).

Reads are served from an in-memory copy (kube-apiserver's watch cache) that every write updates with
the revision etcd gave it; a watch is served from that copy's event history. The copy follows etcd:
:meth:`EtcdStore.sync` compares etcd's revision with the copy's and, when etcd moved without the lab
(a snapshot restore, a member started on another data dir, ``etcdctl put/del``), lists every key again
and starts a new history (older resourceVersions are "too old": 410, as after a compaction).

All calls happen under the lab's lock (``Store.lock``) with a short timeout: the lab asks etcd's
``/health`` first and refuses requests while it has no quorum (:meth:`cpctl_lab.cluster.Lab.etcd_ok`),
so a lost quorum is an answer in milliseconds, not a 7 s stall of the whole simulator.
"""

from __future__ import annotations

import copy
import json
import ssl
from typing import Any, Callable, Optional

from .etcdproc import EtcdError, Gateway, b64, prefix_end, unb64
from .store import ApiError, Obj, Store, already_exists, modified, not_found

PREFIX = "/registry/"
KEY_NAMES = {"nodes": "minions"}
RESOURCE_OF = {v: k for k, v in KEY_NAMES.items()}
WRITE_TIMEOUT = 3.0


def key_of(resource: str, ns: str, name: str) -> str:
    parts = [KEY_NAMES.get(resource, resource)] + ([ns] if ns else []) + [name]
    return PREFIX + "/".join(parts)


def parse_key(key: str) -> Optional[tuple[str, str, str]]:
    """(resource, namespace, name) of a /registry key, None for another key."""
    if not key.startswith(PREFIX):
        return None
    parts = key[len(PREFIX):].split("/")
    if len(parts) == 2:
        return RESOURCE_OF.get(parts[0], parts[0]), "", parts[1]
    if len(parts) == 3:
        return RESOURCE_OF.get(parts[0], parts[0]), parts[1], parts[2]
    return None


def storage_error(exc: EtcdError) -> ApiError:
    """An etcd failure as the API server answers it (the error text as etcd gave it)."""
    text = str(exc)
    if "deadline" in text or "timed out" in text.lower() or "timeout" in text.lower():
        return ApiError(504, "Timeout", f"Timeout: request did not complete within requested timeout - {text}")
    return ApiError(500, "InternalError", f"Internal error occurred: {text}")


class EtcdStore(Store):
    """A Store whose objects live in etcd (see the module docstring); ``endpoints`` gives the client
    URLs to use, the serving ones first."""

    def __init__(self, tls: Callable[[], Optional[ssl.SSLContext]], endpoints: Callable[[], list[str]],
                 log: Callable[[str], None]) -> None:
        super().__init__()
        self._tls = tls
        self._endpoints = endpoints
        self._log = log
        self._gateways: dict[str, Gateway] = {}
        #: The copy matches etcd (False until the first sync and after etcd moved under it).
        self.synced = False
        #: Watches from before this revision are too old (the copy was listed again there).
        self.relisted_at = 0
        #: etcd has been reached once: from then on every write goes to etcd (before, the lab's
        #: seeds are kept in memory and written to a new etcd by the first sync).
        self.live = False

    # ------------------------------------------------------------------ the gateway
    def _call(self, path: str, body: dict[str, Any], timeout: float = WRITE_TIMEOUT) -> dict[str, Any]:
        tls = self._tls()
        if tls is None:
            raise EtcdError("no client certificate for etcd")
        last: Optional[EtcdError] = None
        for url in self._endpoints():
            gateway = self._gateways.get(url)
            if gateway is None:
                gateway = self._gateways[url] = Gateway(url, tls)
            try:
                return gateway.call(path, body, timeout)
            except EtcdError as exc:
                last = exc
                if not _unreachable(exc):
                    raise
        raise last or EtcdError("etcdserver: no etcd member serves")

    def revision(self) -> int:
        """etcd's current revision (a serializable=false count-only range of the lab's prefix)."""
        answer = self._call("/v3/kv/range", {"key": b64(PREFIX), "range_end": b64(prefix_end(PREFIX)),
                                             "count_only": True}, timeout=2.0)
        return int((answer.get("header") or {}).get("revision") or 0)

    # ------------------------------------------------------------------ following etcd
    def sync(self) -> str:
        """Make the copy match etcd: "" when it did already, else what happened. Raises EtcdError."""
        with self.lock:
            current = self.revision()
            if self.live and current == self.rv:
                self.synced = True
                return ""
            answer = self._call("/v3/kv/range", {"key": b64(PREFIX), "range_end": b64(prefix_end(PREFIX))},
                                timeout=10.0)
            stored = self._decode_all(answer.get("kvs") or [])
            revision = int((answer.get("header") or {}).get("revision") or current)
            if not stored and not self.synced:
                self._push_all()
                self.synced = self.live = True
                return f"etcd was empty: wrote the lab's {len(self.objects)} objects (revision {self.rv})"
            before = self.rv
            self.objects = stored
            self.rv = revision
            self.history.clear()
            self.relisted_at = revision
            self.synced = self.live = True
            self.cond.notify_all()
            return f"listed {len(stored)} objects from etcd at revision {revision} (the lab's copy was at {before})"

    def _decode_all(self, kvs: list[dict[str, Any]]) -> dict[tuple[str, str, str], Obj]:
        out: dict[tuple[str, str, str], Obj] = {}
        for kv in kvs:
            where = parse_key(unb64(kv.get("key", "")))
            if where is None:
                continue
            try:
                obj = json.loads(unb64(kv.get("value", "")) or "null")
            except ValueError:
                continue
            if isinstance(obj, dict):
                obj.setdefault("metadata", {})["resourceVersion"] = str(kv.get("mod_revision", "0"))
                out[where] = obj
        return out

    def _push_all(self) -> None:
        """A new etcd: write every object the lab made before it ran (seeds, RBAC defaults)."""
        revision = self.revision()
        for (resource, ns, name), obj in sorted(self.objects.items()):
            revision = self._put_if(key_of(resource, ns, name), obj, "CREATE", 0) or revision
            obj["metadata"]["resourceVersion"] = str(revision)
        self.rv = revision          # etcd's revision from now on (below the in-memory one, unseen by anyone)
        self.history.clear()
        self.relisted_at = self.rv

    # ------------------------------------------------------------------ writes
    def _put_if(self, key: str, obj: Obj, target: str, revision: int) -> int:
        """Put ``obj`` at ``key`` when its ``target`` revision is ``revision``; the new revision, or
        0 when the comparison failed."""
        value = dict(obj, metadata={k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"})
        compare = {"key": b64(key), "target": target, "result": "EQUAL",
                   ("create_revision" if target == "CREATE" else "mod_revision"): str(revision)}
        answer = self._call("/v3/kv/txn", {"compare": [compare], "success": [
            {"request_put": {"key": b64(key), "value": b64(json.dumps(value, separators=(",", ":")))}}]})
        return int(answer["header"]["revision"]) if answer.get("succeeded") else 0

    def _delete_if(self, key: str, revision: int) -> int:
        compare = {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}
        answer = self._call("/v3/kv/txn", {"compare": [compare],
                                           "success": [{"request_delete_range": {"key": b64(key)}}]})
        return int(answer["header"]["revision"]) if answer.get("succeeded") else 0

    def _stored_revision(self, key: str) -> int:
        """The key's mod_revision in etcd now (0: not there)."""
        answer = self._call("/v3/kv/range", {"key": b64(key)})
        kvs = answer.get("kvs") or []
        return int(kvs[0].get("mod_revision", 0)) if kvs else 0

    def _ready(self) -> None:
        if not self.synced:
            raise ApiError(500, "InternalError", "Internal error occurred: etcd is not ready yet")

    def create(self, resource: str, ns: str, obj: Obj) -> Obj:
        with self.lock:
            if not self.live:
                return super().create(resource, ns, obj)
            self._ready()
            meta = self.stamp_new(obj, ns)
            name = meta.get("name", "")
            try:
                revision = self._put_if(key_of(resource, ns, name), obj, "CREATE", 0)
            except EtcdError as exc:
                raise storage_error(exc) from None
            if not revision:
                raise already_exists(resource, name)
            meta["resourceVersion"] = str(revision)
            self._applied(revision, resource, ns, name, "ADDED", obj)
            return copy.deepcopy(obj)

    def update(self, resource: str, ns: str, obj: Obj, check_rv: bool = True) -> Obj:
        with self.lock:
            if not self.live:
                return super().update(resource, ns, obj, check_rv)
            self._ready()
            old = self.checked_update(resource, ns, obj, check_rv)
            meta = obj["metadata"]
            name = meta.get("name", "")
            meta["resourceVersion"] = old["metadata"]["resourceVersion"]
            if obj == old:
                return copy.deepcopy(old)
            key = key_of(resource, ns, name)
            try:
                revision = self._put_if(key, obj, "MOD", int(old["metadata"]["resourceVersion"]))
                if not revision and not check_rv:       # GuaranteedUpdate: read again, try once more
                    revision = self._put_if(key, obj, "MOD", self._stored_revision(key))
            except EtcdError as exc:
                raise storage_error(exc) from None
            if not revision:
                raise modified(resource, name)
            meta["resourceVersion"] = str(revision)
            self._applied(revision, resource, ns, name, "MODIFIED", obj, old)
            return copy.deepcopy(obj)

    def delete(self, resource: str, ns: str, name: str, uid: Optional[str] = None) -> Obj:
        with self.lock:
            if not self.live:
                return super().delete(resource, ns, name, uid)
            self._ready()
            old = self.checked_delete(resource, ns, name, uid)
            key = key_of(resource, ns, name)
            try:
                revision = self._delete_if(key, int(old["metadata"]["resourceVersion"]))
                if not revision:
                    stored = self._stored_revision(key)
                    revision = self._delete_if(key, stored) if stored else 0
            except EtcdError as exc:
                raise storage_error(exc) from None
            if not revision:
                raise not_found(resource, name)
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(revision)
            self._applied(revision, resource, ns, name, "DELETED", gone)
            return gone

    def _applied(self, revision: int, resource: str, ns: str, name: str, etype: str, obj: Obj,
                 prev: Optional[Obj] = None) -> None:
        """Record a write etcd accepted at ``revision`` in the copy and its event history."""
        if etype == "DELETED":
            self.objects.pop((resource, ns, name), None)
        else:
            self.objects[(resource, ns, name)] = copy.deepcopy(obj)
        self.rv = max(self.rv, revision)
        self._emit(resource, etype, obj, prev)

    def events_since(self, since: int, timeout: float) -> tuple[list[Any], bool]:
        """As Store.events_since; a resourceVersion from before the copy was last listed is too old."""
        with self.lock:
            if since < self.relisted_at:
                return [], True
        return super().events_since(since, timeout)


def _unreachable(exc: EtcdError) -> bool:
    """The member did not answer (try the next one), as opposed to etcd's own refusal."""
    text = str(exc)
    return text.startswith("https://") or text.startswith("http://")
