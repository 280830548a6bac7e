"""Replacing a manifest's content: the one ``Change`` behind apply, edit, flags and rollback.

The change keeps the bytes it replaces as the next revision (:mod:`cpctl.core.revisions`), then
writes the new bytes over the manifest -- a dot-temp file in the manifests dir, fsynced, renamed
over the old name, with the old file's mode and owner -- and last drops revisions beyond the kept
count. The manifest write is the commit step and checks that the file still holds the bytes the
caller read (a concurrent edit makes it a conflict, nothing changed). After a SIGKILL anywhere,
the next command completes it (the new bytes and the revision stand) or rolls it back (the old
bytes stand, no revision was added): the manifests dir never holds a partial file.
"""

from __future__ import annotations

import difflib
import secrets
from typing import Any, Dict, List, Optional, Sequence, Tuple

from cpctl.core import journal, manifests, outside, pending
from cpctl.core.companions import MAX_COMPANION_BYTES, Companion
from cpctl.core.flags import redact
from cpctl.core.manifests import Manifest
from cpctl.core.node import NAME_MAX, Node
from cpctl.core.revisions import MAX_KEEP, Revision, RevisionStore
from cpctl.core.state import user_label
from cpctl.errors import CpctlError, ExitCode
from cpctl.timeutil import iso

DIFF_LINES = 200            # a history record's diff is cut here (the revision keeps the whole file)
ACTIONS = ("apply", "edit", "flags", "rollback")


def revisions_of(node: Node) -> RevisionStore:
    return RevisionStore(node.host, node.state.path)


def check_revisable(filename: str) -> None:
    """Refuse, before anything changes, a manifest name too long to keep revisions for."""
    longest = len(filename.encode("utf-8", "surrogateescape")) + len(".999999999.json")
    if longest > NAME_MAX:
        raise CpctlError("%s: file name too long for cpctl to keep its revisions (rename it first)"
                         % (filename[:60] + "..."), ExitCode.REFUSED)


def text_diff(old: bytes, new: bytes, filename: str, limit: int = 0) -> str:
    """A unified diff of the two versions (credentials in flags redacted), ``limit`` lines at most."""
    lines = list(difflib.unified_diff(old.decode("utf-8", "replace").splitlines(),
                                      new.decode("utf-8", "replace").splitlines(),
                                      "a/" + filename, "b/" + filename, lineterm=""))
    if limit and len(lines) > limit:
        lines = lines[:limit] + ["... (%d more lines)" % (len(lines) - limit)]
    return redact("\n".join(lines))


def replace_change(node: Node, manifest: Manifest, new: bytes, action: str, reason: Optional[str], keep: int,
                   record: Optional[Dict[str, Any]] = None, replaced_failed: bool = False,
                   companions: Sequence[Companion] = (), awaits: bool = False) -> Tuple[journal.Change, int]:
    """(the change, the number of the revision it keeps) that writes ``new`` over ``manifest``, and
    each companion file (mode 0600, before the manifest: the new pod finds it), their previous bytes
    kept with the same revision.

    ``awaits``: a new pod will be waited for, so the change also records "verification pending"
    for the file (:mod:`cpctl.core.pending`) before its commit step; the verdict clears it."""
    if action not in ACTIONS:
        raise ValueError("unknown replace action %r" % action)
    assert manifest.data is not None and manifest.pod_name is not None
    store = revisions_of(node)
    old, new_sum = manifest.data, manifests.checksum(new)
    op = secrets.token_hex(8)
    meta = {"saved_at": iso(), "saved_by": user_label(node.host), "host": str(node.host.info()["hostname"]),
            "action": action, "reason": reason, "replaced_by": new_sum, "failed": replaced_failed, "op": op}
    existing = store.list(manifest.file)
    pre, pre_data, existing = _outside_revision(node, manifest, meta, store, existing)
    previous = [(c.path, companion_now(node, c.path)) for c in companions]
    before, data, after, number = store.keep_steps(manifest.file, old, manifest.mode, meta, keep, existing, previous)
    before, data = pre + before, {**pre_data, **{i + len(pre): d for i, d in data.items()}}
    for companion, (_, was) in zip(companions, previous):
        if companion.data is not None and companion.data != was:
            data[len(before)] = companion.data
            before.append(journal.write(companion.path, manifests.checksum(companion.data), mode=0o600,
                                        before=manifests.checksum(was) if was is not None else ""))
        elif companion.data is None and was is not None:
            before.append(journal.remove(companion.path))
    if awaits:
        who = node.who()
        mark, mark_bytes = pending.mark_step(node.host, node.state, pending.Pending(
            op, action, manifest.pod_name, manifest.file, new_sum, manifests.checksum(old), iso(),
            user_label(node.host), str(who.get("hostname")), node.node_name, int(who.get("pid") or 0), number))
        data[len(before)] = mark_bytes
        before.append(mark)
    write = journal.write(manifest.path, new_sum, mode=manifest.mode, before=manifests.checksum(old))
    write.uid, write.gid = manifest.uid, manifest.gid
    data[len(before)] = new
    history = dict(record or {}, reason=reason, revision=number, previous=manifests.checksum(old),
                   diff=text_diff(old, new, manifest.file, DIFF_LINES))
    if companions:
        history["companions"] = [c.to_dict() for c in companions]
    change = journal.Change(action, manifest.pod_name, manifest.file, new_sum, before + [write] + after,
                            commit=len(before), record=history, data=data, op=op,
                            companions=[c.path for c in companions])
    return change, number


def companion_now(node: Node, path: str) -> Optional[bytes]:
    """The bytes of companion file ``path`` on the node now (None: absent); refused when something
    other than a regular file of at most 1 MiB is there."""
    info = node.host.lstat(path)
    if info is None:
        return None
    if info["kind"] != "file" or info["size"] > MAX_COMPANION_BYTES:
        raise CpctlError("%s on %s is not a regular file of at most 1 MiB: cpctl does not replace it; nothing changed"
                         % (path, node.node_name), ExitCode.REFUSED)
    return node.host.read_file(path, MAX_COMPANION_BYTES + 1)


def _outside_revision(node: Node, manifest: Manifest, meta: Dict[str, Any], store: RevisionStore,
                      existing: List[Revision]) -> Tuple[List[journal.Step], Dict[int, bytes], List[Revision]]:
    """When a writer other than cpctl replaced the manifest and kubeadm's backup dir still holds the
    bytes cpctl wrote, keep those as a revision of their own (action ``outside``, the note says
    "kubeadm upgrade OLD -> NEW"), replaced by the bytes in place: (its steps, their data, the
    revisions as they will be, for numbering the next one)."""
    found = outside.detect(node, manifest.file, manifest.checksum)
    if found is None or found.previous is None or any(r.replaced_by == manifest.checksum for r in existing[-1:]):
        return [], {}, existing
    outside_meta = dict(meta, action="outside", reason=found.note, saved_by="not cpctl", failed=False,
                        replaced_by=manifest.checksum, op=meta["op"])
    steps, data, _, number = store.keep_steps(manifest.file, found.previous, manifest.mode, outside_meta,
                                              MAX_KEEP + 1, existing)
    placeholder = Revision(number, manifest.file, manifests.checksum(found.previous), len(found.previous),
                           manifest.mode, meta["saved_at"], "not cpctl", "", "outside", found.note,
                           manifest.checksum or "", False, meta["op"], store.bytes_path(manifest.file, number))
    return steps, data, existing + [placeholder]

def displaced_change(node: Node, filename: str, component: str, ours: bytes, mode: int, theirs: str,
                     applied_by: str, keep: int) -> Tuple[journal.Change, int]:
    """(the change, its revision number) that keeps ``ours`` - bytes cpctl wrote that another writer
    has since replaced with ``theirs`` (a checksum) - as a revision, so that both versions stay:
    theirs in place, cpctl's on record (``action`` "displaced": never picked by a plain rollback)."""
    store = revisions_of(node)
    op = secrets.token_hex(8)
    meta = {"saved_at": iso(), "saved_by": user_label(node.host), "host": str(node.host.info()["hostname"]),
            "action": "displaced", "reason": "replaced by another writer while cpctl waited (%s)" % applied_by,
            "replaced_by": theirs, "failed": False, "op": op}
    before, data, after, number = store.keep_steps(filename, ours, mode, meta, keep, store.list(filename))
    change = journal.Change("displaced", component, filename, manifests.checksum(ours), before + after,
                            commit=len(before) - 1, data=data, op=op,
                            record={"reason": meta["reason"], "revision": number, "in_place": theirs})
    return change, number
