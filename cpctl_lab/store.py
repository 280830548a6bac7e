"""In-memory object storage for the lab's simulated API server (the "etcd" of the simulator).

It keeps Kubernetes semantics that cpctl and kubectl rely on: one global, monotonically
increasing resourceVersion, uid/creationTimestamp stamped on create, optimistic concurrency on
update, an event history for ``?watch=1`` with label/field selector filtering (an object that
stops matching a selector is reported as DELETED, as the real watch cache does), and errors that
render as ``kind: Status`` objects with the real reasons and codes.
"""

from __future__ import annotations

import builtins
import collections
import copy
import datetime as _dt
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

Obj = dict[str, Any]


def now_rfc3339(ts: Optional[float] = None) -> str:
    """Second-precision UTC timestamp, the format of metadata.creationTimestamp."""
    t = _dt.datetime.fromtimestamp(time.time() if ts is None else ts, _dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro(ts: Optional[float] = None) -> str:
    """Microsecond UTC timestamp, the format of MicroTime fields (Lease renewTime, config.seen)."""
    t = _dt.datetime.fromtimestamp(time.time() if ts is None else ts, _dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str) -> float:
    """Parse an RFC 3339 timestamp (with or without fraction) to epoch seconds."""
    v = value.rstrip("Z")
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in v else "%Y-%m-%dT%H:%M:%S"
    return _dt.datetime.strptime(v, fmt).replace(tzinfo=_dt.timezone.utc).timestamp()


class ApiError(Exception):
    """An API failure that is sent to the client as a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, details: Optional[Obj] = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


GROUP_OF = {
    "daemonsets": "apps",
    "leases": "coordination.k8s.io",
    "roles": "rbac.authorization.k8s.io",
    "rolebindings": "rbac.authorization.k8s.io",
    "clusterroles": "rbac.authorization.k8s.io",
    "clusterrolebindings": "rbac.authorization.k8s.io",
}


def not_found(kind_plural: str, name: str, group: str = "") -> ApiError:
    group = group or GROUP_OF.get(kind_plural, "")
    res = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(
        404, "NotFound", f'{res} "{name}" not found', {"name": name, "group": group, "kind": kind_plural}
    )


def already_exists(kind_plural: str, name: str, group: str = "") -> ApiError:
    group = group or GROUP_OF.get(kind_plural, "")
    res = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(
        409,
        "AlreadyExists",
        f'{res} "{name}" already exists',
        {"name": name, "group": group, "kind": kind_plural},
    )


def conflict(kind_plural: str, name: str, why: str, group: str = "") -> ApiError:
    group = group or GROUP_OF.get(kind_plural, "")
    res = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {res} "{name}": {why}',
        {"name": name, "group": group, "kind": kind_plural},
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str]], group: str = "") -> ApiError:
    """422 Invalid; causes are (field, message) pairs, rendered like apimachinery does.

    The message names the group-qualified kind (``Role.rbac.authorization.k8s.io "x" is invalid``),
    as ``NewInvalid`` does; core kinds stay bare (``Pod "x" is invalid``)."""
    text = ", ".join(f"{f}: {m}" for f, m in causes)
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(
        422,
        "Invalid",
        f'{qualified} "{name}" is invalid: {text}',
        {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes],
        },
    )


def modified(kind_plural: str, name: str, group: str = "") -> ApiError:
    """409 Conflict of an update whose resourceVersion is not the stored one (apiserver's storage
    ``errors.go`` NewConflict with ``OptimisticLockErrorMsg``)."""
    return conflict(kind_plural, name, "the object has been modified; please apply your changes to the latest "
                                       "version and try again", group)


def precondition_failed(kind_plural: str, ns: str, name: str, detail: str, group: str = "") -> ApiError:
    """409 for a failed UID/resourceVersion precondition, worded as etcd3's storage error comes back
    through ``InterpretUpdateError``/``InterpretDeleteError`` (``NewConflict`` wrapping a StorageError)."""
    key = "/".join(p for p in ("/registry", kind_plural, ns, name) if p)
    return conflict(
        kind_plural,
        name,
        f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: {detail}",
        group,
    )


# --------------------------------------------------------------------------- selectors


def _split_top(text: str) -> list[str]:
    """Split a selector on commas that are not inside ``in (...)`` parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r"^([^\s!=()]+)\s+(in|notin)\s+\(([^)]*)\)$")


LabelTest = Callable[[dict[str, str]], bool]


def _label_test(op: str, key: str, values: frozenset[str]) -> LabelTest:
    """One compiled label requirement (typed closures, so mypy can check them)."""
    if op == "in":
        return lambda labels: labels.get(key) in values
    if op == "notin":
        return lambda labels: labels.get(key) not in values
    if op == "!=":
        return lambda labels: labels.get(key) not in values
    if op == "=":
        return lambda labels: labels.get(key) in values
    if op == "!":
        return lambda labels: key not in labels
    return lambda labels: key in labels


def label_matcher(selector: str) -> Callable[[dict[str, str]], bool]:
    """Compile a label selector (=, ==, !=, in, notin, exists, !exists)."""
    tests: list[LabelTest] = []
    for req in _split_top(selector or ""):
        m = _SET_RE.match(req)
        if m:
            vals = frozenset(v.strip() for v in m.group(3).split(","))
            tests.append(_label_test(m.group(2), m.group(1), vals))
        elif "!=" in req:
            k, v = (s.strip() for s in req.split("!=", 1))
            tests.append(_label_test("!=", k, frozenset([v])))
        elif "=" in req:
            k, v = (s.strip() for s in req.replace("==", "=").split("=", 1))
            tests.append(_label_test("=", k, frozenset([v])))
        elif req.startswith("!"):
            tests.append(_label_test("!", req[1:].strip(), frozenset()))
        elif re.match(r"^[A-Za-z0-9./_-]+$", req):
            tests.append(_label_test("exists", req, frozenset()))
        else:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {req!r}")
    return lambda labels: all(t(labels) for t in tests)


def field_value(obj: Obj, path: str) -> str:
    """Resolve a dotted field path (metadata.name, spec.nodeName, status.phase, ...) to a string."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    return str(cur).lower() if isinstance(cur, bool) else str(cur)


def field_matcher(selector: str, allowed: Optional[Iterable[str]] = None) -> Callable[[Obj], bool]:
    """Compile a field selector; unsupported fields give 400 like the real API server."""
    tests: list[Callable[[Obj], bool]] = []
    allowed_set = set(allowed) if allowed is not None else None
    for req in _split_top(selector or ""):
        if "!=" in req:
            k, v = req.split("!=", 1)
            neg = True
        elif "=" in req:
            k, v = req.replace("==", "=").split("=", 1)
            neg = False
        else:
            raise ApiError(400, "BadRequest", f"invalid field selector: {req!r}")
        k, v = k.strip(), v.strip()
        if allowed_set is not None and k not in allowed_set:
            raise ApiError(400, "BadRequest", f"field label not supported: {k}")
        tests.append(_field_test(k, v, neg))
    return lambda obj: all(t(obj) for t in tests)


def _field_test(path: str, value: str, negate: bool) -> Callable[[Obj], bool]:
    """One compiled field requirement (``path=value`` or ``path!=value``)."""
    if negate:
        return lambda obj: field_value(obj, path) != value
    return lambda obj: field_value(obj, path) == value


# --------------------------------------------------------------------------- store


@dataclass
class WatchEvent:
    rv: int
    resource: str
    type: str
    obj: Obj
    prev: Optional[Obj] = None


@dataclass
class Store:
    """All objects, keyed by (resource, namespace, name); ``lock`` also guards the whole lab."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    rv: int = 1000
    history: collections.deque = field(default_factory=lambda: collections.deque(maxlen=20000))

    def __post_init__(self) -> None:
        self.cond = threading.Condition(self.lock)

    # -- helpers
    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, resource: str, etype: str, obj: Obj, prev: Optional[Obj] = None) -> None:
        self.history.append(
            WatchEvent(
                self.rv,
                resource,
                etype,
                copy.deepcopy(obj),
                copy.deepcopy(prev) if prev is not None else None,
            )
        )
        self.cond.notify_all()

    def oldest_rv(self) -> int:
        with self.lock:
            return self.history[0].rv if self.history else self.rv

    # -- reads
    def get(self, resource: str, ns: str, name: str) -> Optional[Obj]:
        with self.lock:
            obj = self.objects.get((resource, ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(
        self, resource: str, ns: Optional[str] = None, pred: Optional[Callable[[Obj], bool]] = None
    ) -> list[Obj]:
        with self.lock:
            out = [
                copy.deepcopy(o)
                for (r, n, _), o in sorted(self.objects.items(), key=lambda kv: kv[0])
                if r == resource and (ns is None or n == ns) and (pred is None or pred(o))
            ]
            return out

    # -- the API server's checks, shared with the etcd-backed store (cpctl_lab.etcdstore)
    @staticmethod
    def stamp_new(obj: Obj, ns: str) -> Obj:
        """Give a new object what the server owns (namespace, uid, creationTimestamp); its metadata."""
        meta: Obj = obj.setdefault("metadata", {})
        if ns:
            meta["namespace"] = ns
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        return meta

    def checked_update(self, resource: str, ns: str, obj: Obj, check_rv: bool) -> Obj:
        """The stored object an update of ``obj`` replaces, once the update may go on: the object
        exists (else NotFound), ``obj``'s resourceVersion, when given and ``check_rv``, is the stored
        one (else Conflict); the fields the server owns are copied into ``obj``."""
        meta = obj.setdefault("metadata", {})
        name = meta.get("name", "")
        old = self.objects.get((resource, ns, name))
        if old is None:
            raise not_found(resource, name)
        want = meta.get("resourceVersion")
        if check_rv and want and want != old["metadata"]["resourceVersion"]:
            raise modified(resource, name)
        for key in ("uid", "creationTimestamp"):       # identity fields are owned by the server
            meta[key] = old["metadata"].get(key)
        if ns:
            meta["namespace"] = ns
        return old

    def checked_delete(self, resource: str, ns: str, name: str, uid: Optional[str]) -> Obj:
        """The stored object a delete removes, once it may: it exists (else NotFound) and has the
        precondition's uid, when one is given (else Conflict)."""
        old = self.objects.get((resource, ns, name))
        if old is None:
            raise not_found(resource, name)
        if uid and old["metadata"].get("uid") != uid:
            raise conflict(resource, name, f"Precondition failed: UID in precondition: {uid}, "
                                           f"UID in object meta: {old['metadata'].get('uid')}")
        return old

    # -- CRUD
    def create(self, resource: str, ns: str, obj: Obj) -> Obj:
        with self.lock:
            name = obj.setdefault("metadata", {}).get("name", "")
            if (resource, ns, name) in self.objects:
                raise already_exists(resource, name)
            meta = self.stamp_new(obj, ns)
            meta["resourceVersion"] = self._bump()
            self.objects[(resource, ns, name)] = copy.deepcopy(obj)
            self._emit(resource, "ADDED", obj)
            return copy.deepcopy(obj)

    def update(self, resource: str, ns: str, obj: Obj, check_rv: bool = True) -> Obj:
        with self.lock:
            old = self.checked_update(resource, ns, obj, check_rv)
            if obj == old:
                return copy.deepcopy(old)
            obj["metadata"]["resourceVersion"] = self._bump()
            self.objects[(resource, ns, obj["metadata"].get("name", ""))] = copy.deepcopy(obj)
            self._emit(resource, "MODIFIED", obj, old)
            return copy.deepcopy(obj)

    def delete(self, resource: str, ns: str, name: str, uid: Optional[str] = None) -> Obj:
        with self.lock:
            old = self.checked_delete(resource, ns, name, uid)
            del self.objects[(resource, ns, name)]
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = self._bump()
            self._emit(resource, "DELETED", gone)
            return gone

    def events_since(self, since: int, timeout: float) -> tuple[builtins.list[WatchEvent], bool]:
        """Events with rv > since; waits up to timeout for one. Returns (events, too_old)."""
        with self.lock:
            if self.history and since < self.history[0].rv - 1 and since < self.rv:
                return [], True
            deadline = time.monotonic() + timeout
            while True:
                evs = [e for e in self.history if e.rv > since]
                if evs:
                    return evs, False
                left = deadline - time.monotonic()
                if left <= 0:
                    return [], False
                self.cond.wait(left)


def selector_pred(
    label_sel: str, field_sel: str, allowed_fields: Optional[Iterable[str]]
) -> Callable[[Obj], bool]:
    lm = label_matcher(label_sel)
    fm = field_matcher(field_sel, allowed_fields)
    return lambda o: lm(o.get("metadata", {}).get("labels") or {}) and fm(o)


# --------------------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; also used for strategic merge patches (lists are replaced)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k == "$patch" or k.startswith("$setElementOrder") or k.startswith("$retainKeys"):
            continue
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _ptr(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def json_patch(target: Obj, ops: list[Obj]) -> Obj:
    """RFC 6902 JSON patch (add, remove, replace, test); enough for kubectl patch --type=json."""
    doc = copy.deepcopy(target)
    for op in ops:
        parts = _ptr(op.get("path", ""))
        parent: Any = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        last = parts[-1] if parts else ""
        kind = op.get("op")
        try:
            if kind in ("add", "replace"):
                if isinstance(parent, list):
                    idx = len(parent) if last == "-" else int(last)
                    if kind == "add":
                        parent.insert(idx, op.get("value"))
                    else:
                        parent[idx] = op.get("value")
                else:
                    parent[last] = op.get("value")
            elif kind == "remove":
                if isinstance(parent, list):
                    parent.pop(int(last))
                else:
                    del parent[last]
            elif kind == "test":
                cur = parent[int(last)] if isinstance(parent, list) else parent.get(last)
                if cur != op.get("value"):
                    raise ApiError(422, "Invalid", f"test operation failed at {op.get('path')}")
            else:
                raise ApiError(400, "BadRequest", f"unsupported JSON patch op {kind!r}")
        except (KeyError, IndexError, ValueError) as exc:
            raise ApiError(
                422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
            ) from None
    return doc
