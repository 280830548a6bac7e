"""The runtime's view of a static pod: ONE reading of crictl's JSON, for ``probes.crictl`` and the
node-side revert's verification.

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

import errno
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from cpctl.agent.fileops import run
from cpctl.agent.httpops import http
from cpctl.agent.shapes import CrictlPod, PlanVerify, PodIdentity

#: How crictl is run where the pod is: ``run(argv, timeout, limit)`` -> (rc, stdout, stderr)
Runner = Callable[[List[str], float, int], Tuple[int, bytes, bytes]]

# --- the runtime's view of a static pod: ONE reading of crictl's JSON, for cpctl's crictl probe
# (``cpctl.probes.crictl``, through a Host) and for the node-side revert's verification (here) ----------
CRICTL_JSON_LIMIT = 8 << 20    # bytes of one crictl JSON answer read: kilobytes in practice


class PodLookError(Exception):
    """crictl could not tell (busy or refused socket, a timeout, output that is not its JSON);
    ``missing``: it is not installed - it will not appear later in the run."""

    def __init__(self, message: str, missing: bool = False) -> None:
        Exception.__init__(self, message)
        self.message = message
        self.missing = missing


def _one_line(data: bytes) -> str:
    """A program's stderr as one printable line of at most 200 characters."""
    text = data.decode("utf-8", "replace")
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:200]


def _nanos(value: object) -> int:
    """A crictl ``createdAt`` (nanoseconds, a string in JSON; 0 when it is not a number)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def _crictl_restarts(containers: Sequence[Mapping[str, object]]) -> Optional[int]:
    """Restarts of the running containers: the kubelet's restartCount annotation, else the CRI
    attempt number (the kubelet counts attempts from 0 in each sandbox); None when neither says."""
    total, known = 0, False
    for c in containers:
        notes, meta = c.get("annotations"), c.get("metadata")
        note = notes.get("io.kubernetes.container.restartCount") if isinstance(notes, dict) else None
        attempt = meta.get("attempt") if isinstance(meta, dict) else None
        if isinstance(note, str) and note.isdigit():
            total, known = total + int(note), True
        elif isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0:
            total, known = total + attempt, True
    return total if known else None


def crictl_json(run: Runner, crictl: str, args: Sequence[str], deadline: float, least: float) -> Dict[str, object]:
    """``crictl ARGS -o json`` as an object, within ``deadline`` (time.monotonic()); ``run(argv,
    timeout, limit)`` -> (rc, stdout, stderr) runs it where the pod is."""
    import json
    timeout = max(least, deadline - time.monotonic())
    try:
        rc, out, err = run([crictl] + list(args) + ["-o", "json"], timeout, CRICTL_JSON_LIMIT + 1)
    except OSError as exc:   # e.g. EACCES: the binary is not executable
        if exc.errno == errno.ENOENT:
            raise PodLookError("%s not found" % crictl, missing=True) from None
        raise PodLookError("cannot run %s: %s" % (crictl, exc.strerror or exc)) from None
    if rc == 127:
        raise PodLookError("%s not found" % crictl, missing=True)
    if rc == 124 and err.strip() == b"timed out":
        raise PodLookError("crictl %s timed out after %.1fs" % (args[0], timeout))
    if rc != 0:
        raise PodLookError("crictl %s failed (exit %d): %s" % (args[0], rc, _one_line(err)))
    if len(out) > CRICTL_JSON_LIMIT:
        raise PodLookError("crictl %s printed more than %d bytes" % (args[0], CRICTL_JSON_LIMIT))
    try:
        value = json.loads(out.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise PodLookError("crictl %s printed no JSON" % args[0]) from None
    if not isinstance(value, dict):
        raise PodLookError("crictl %s printed JSON that is not an object" % args[0])
    return value


def _crictl_list(value: Mapping[str, object], key: str, what: str) -> List[Dict[str, object]]:
    """``value[key]``: a list of objects (crictl's JSON, untrusted), else PodLookError."""
    if key not in value:
        raise PodLookError("crictl %s printed no %s list" % (what, key))
    items = value[key]
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise PodLookError("crictl printed malformed JSON: %s.%s is not a list of objects" % (what, key))
    return items


def _crictl_text(value: Mapping[str, object], key: str, what: str) -> str:
    found = value.get(key, "")
    if found is None:
        return ""
    if not isinstance(found, str):
        raise PodLookError("crictl printed malformed JSON: %s.%s is not text" % (what, key))
    return found


def crictl_pod(run: Runner, crictl: str, name: str, namespace: str, timeout: float,
               least: float = 0.2) -> CrictlPod:
    """The static pod ``namespace/name`` as the runtime sees it: its newest ready sandbox and the
    containers running in it - a dict with ``present``, ``ready`` (every container of the sandbox
    running), ``phase``, ``uid`` (the sandbox's pod uid), ``containers`` (running IDs), ``started``
    (newest container start, epoch seconds), ``created`` (the sandbox's) and ``restarts``. The one
    reading of crictl's output: cpctl's crictl probe and the node-side revert's check both use it.
    PodLookError when crictl cannot tell."""
    import re
    deadline = time.monotonic() + timeout
    # --name/--namespace are regexes: anchor them, or kube-apiserver would match more.
    listing = crictl_json(run, crictl, ("pods", "--name", "^%s$" % re.escape(name), "--namespace",
                                         "^%s$" % re.escape(namespace)), deadline, least)
    live = [s for s in _crictl_list(listing, "items", "pods") if _crictl_text(s, "state", "sandbox") == "SANDBOX_READY"]
    if not live:
        return {"present": False, "ready": False, "phase": "", "uid": "", "containers": [], "started": None,
                "created": None, "restarts": None}
    sandbox = max(live, key=lambda s: _nanos(s.get("createdAt")))
    sandbox_id = _crictl_text(sandbox, "id", "sandbox")
    if not sandbox_id:
        raise PodLookError("crictl pods printed a sandbox without an id")
    meta = sandbox.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise PodLookError("crictl printed malformed JSON: sandbox.metadata is not an object")
    found = crictl_json(run, crictl, ("ps", "--pod", sandbox_id), deadline, least)
    containers = _crictl_list(found, "containers", "ps")
    running = [c for c in containers if _crictl_text(c, "state", "container") == "CONTAINER_RUNNING"]
    created = [_nanos(c.get("createdAt")) / 1e9 for c in running]
    return {"present": True, "ready": bool(running) and len(running) == len(containers),
            "phase": "Running" if running else "Pending", "uid": _crictl_text(meta or {}, "uid", "sandbox.metadata"),
            "containers": [_crictl_text(c, "id", "container") for c in running],
            "started": max(created) if created else None, "created": _nanos(sandbox.get("createdAt")) / 1e9,
            "restarts": _crictl_restarts(running)}


def is_new_since(now: PodIdentity, before: Optional[PodIdentity]) -> bool:
    """True when the pod seen ``now`` cannot be the one seen ``before`` (dicts as ``crictl_pod``
    gives; ``before`` None or not present: anything is new): another pod uid, no container in
    common, or a later container start. cpctl's waiter (``PodState.is_new_since``) and the
    node-side revert's check judge "new" with this one rule."""
    if not before or not before.get("present"):
        return True
    if now.get("uid") and before.get("uid") and now["uid"] != before["uid"]:
        return True
    if now.get("containers") and before.get("containers") and not set(now["containers"]) & set(before["containers"]):
        return True
    started, earlier = now.get("started"), before.get("started")
    return bool(started and earlier and started > earlier)


def _run_here(argv: List[str], timeout: float, limit: int) -> Tuple[int, bytes, bytes]:
    """``run`` on this node as ``crictl_pod`` calls it: (rc, stdout, stderr)."""
    done = run(argv, timeout=timeout, limit=limit)
    return done["rc"], done["stdout"], done["stderr"]


def _plan_verify(check: PlanVerify) -> Tuple[bool, str]:
    """The reverted version runs, judged as cpctl's waiter judges it when it looks through crictl and
    the health endpoint: the pod as ``crictl_pod`` reads it (cpctl's crictl probe's reading),
    Ready and new since the one seen at arm time (``is_new_since``, the waiter's rule; no crictl on
    the node: the endpoint alone), and the version's own health endpoint answering 200 - still so
    ``settle`` seconds later. (ok, why)."""
    deadline = time.time() + check["timeout"]
    before = check["before"]
    healthy_since: Optional[float] = None
    why = "not seen yet"
    seen_why = ""        # the last reading crictl gave: a last look cut short by the deadline does not hide it
    while time.time() < deadline:
        fresh = True
        if check["crictl"]:
            try:
                seen = crictl_pod(_run_here, check["crictl"], check["pod"], check["namespace"],
                                  min(10.0, max(0.2, deadline - time.time())))
            except PodLookError as exc:
                fresh = False
                why = "crictl: %s%s" % (seen_why + "; then " if seen_why else "", exc.message)
            else:
                fresh = seen["present"] and seen["ready"] and is_new_since(seen, before)
                seen_why = ("not yet created" if not seen["present"] else
                            "not Ready" if not seen["ready"] else "still the old pod" if not fresh else "new")
                why = "crictl: %s" % seen_why
        ok = fresh
        if fresh and check["url"]:
            try:
                ok = http("GET", check["url"], timeout=3.0, tls={"insecure": True}, limit=1 << 16)["status"] == 200
            except Exception as exc:  # noqa: BLE001 - not answering yet
                ok = False
                why = "%s: %s" % (check["url"], getattr(exc, "strerror", None) or exc)
            else:
                why = why if ok else "%s does not answer 200" % check["url"]
        if ok:
            healthy_since = healthy_since or time.time()
            if time.time() - healthy_since >= check["settle"]:
                return True, "a new %s pod runs%s" % (check["pod"], " and %s answers 200" % check["url"]
                                                     if check["url"] else " (crictl)")
        else:
            healthy_since = None
        time.sleep(1)
    return False, "no new healthy pod within %ds (%s)" % (check["timeout"], why)
