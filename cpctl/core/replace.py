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
from typing import Any, Dict, Optional, Sequence, Tuple

from cpctl.core import journal, manifests, outside, pending
from cpctl.core.companions import MAX_COMPANION_BYTES, MODE, Companion
from cpctl.core.flags import redact
from cpctl.core.manifests import Manifest
from cpctl.core.node import NAME_MAX, Node
from cpctl.core.revisions import Keeping, RevisionStore
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
    """(the change, the revision that holds the bytes it replaces) that writes ``new`` over ``manifest``
    (and each companion file: see :func:`replace_plan`)."""
    change, kept = replace_plan(node, manifest, new, action, reason, keep, record, replaced_failed, companions,
                                awaits)
    return change, kept.previous


def replace_plan(node: Node, manifest: Manifest, new: bytes, action: str, reason: Optional[str], keep: int,
                 record: Optional[Dict[str, Any]] = None, replaced_failed: bool = False,
                 companions: Sequence[Companion] = (), awaits: bool = False,
                 found_now: Optional[Sequence[Optional[bytes]]] = None) -> Tuple[journal.Change, Keeping]:
    """(the change, what it does to the revisions) that writes ``new`` over ``manifest``: the bytes
    replaced and the bytes written are each kept once as a revision (``replaced_failed``: the bytes
    replaced are a version that did not become healthy, marked failed). Each companion file is
    written too (mode 0600, before the manifest: the new pod finds it); the revision of the bytes
    replaced records the companions' previous bytes, the revision of the bytes written their new ones.

    ``awaits``: a new pod will be waited for, so the change also records "verification pending"
    for the file (:mod:`cpctl.core.pending`) before its commit step; the verdict clears it.
    ``found_now``: each companion file's bytes now (None: absent) as the caller read them for its plan
    (``ops.edits.build``); read here when not given."""
    if action not in ACTIONS:
        raise ValueError("unknown replace action %r" % action)
    assert manifest.data is not None and manifest.pod_name is not None
    store = revisions_of(node)
    old, new_sum = manifest.data, manifests.checksum(new)
    op = secrets.token_hex(8)
    meta = {"saved_at": iso(), "saved_by": user_label(node.host), "host": str(node.host.info()["hostname"]),
            "action": action, "reason": reason, "op": op}
    found = outside.detect(node, manifest.file, manifest.checksum)
    previous = [(c.path, was) for c, was in zip(companions, found_now)] if found_now is not None else \
        [(c.path, companion_now(node, c.path)) for c in companions]
    kept = store.plan_keep(manifest.file, old, manifest.mode, meta, keep, store.list(manifest.file), new=new,
                           mark_failed=replaced_failed,
                           outside_writer=(found.previous, found.note) if found is not None else None,
                           companions=[(c.path, was, c.data) for c, (_, was) in zip(companions, previous)])
    before, data = list(kept.before), dict(kept.data)
    for companion, (_, was) in zip(companions, previous):
        if companion.data is not None and companion.data != was:
            data[len(before)] = companion.data
            before.append(journal.write(companion.path, manifests.checksum(companion.data), mode=MODE,
                                        before=manifests.checksum(was) if was is not None else ""))
        elif companion.data is None and was is not None:
            before.append(journal.remove(companion.path))
    if awaits:
        who = node.host.info()          # what node.who() holds of the host: hostname, pid
        mark, mark_bytes = pending.mark_step(node.host, node.state, pending.Pending(
            op, action, manifest.pod_name, manifest.file, new_sum, manifests.checksum(old), iso(),
            user_label(node.host), str(who.get("hostname")), node.node_name, int(who.get("pid") or 0), kept.previous))
        data[len(before)] = mark_bytes
        before.append(mark)
    write = journal.write(manifest.path, new_sum, mode=manifest.mode, before=manifests.checksum(old))
    write.uid, write.gid = manifest.uid, manifest.gid
    data[len(before)] = new
    history = dict(record or {}, reason=reason, revision=kept.previous, new_revision=kept.current,
                   previous=manifests.checksum(old), diff=text_diff(old, new, manifest.file, DIFF_LINES))
    if companions:
        history["companions"] = [c.to_dict() for c in companions]
    change = journal.Change(action, manifest.pod_name, manifest.file, new_sum, before + [write] + kept.after,
                            commit=len(before), record=history, data=data, op=op,
                            companions=[c.path for c in companions])
    return change, kept


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




def displaced_change(node: Node, filename: str, component: str, ours: bytes, mode: int, theirs: str,
                     applied_by: str) -> Tuple[Optional[journal.Change], int]:
    """(the change, the revision holding ``ours``) that labels ``ours`` - bytes cpctl wrote that another
    writer has since replaced with ``theirs`` (a checksum) - as ``displaced``, so that both versions
    stay: theirs in place, cpctl's on record, never picked by a plain rollback. No change (None) when
    the revision holding them is the original, whose label stays."""
    store = revisions_of(node)
    op = secrets.token_hex(8)
    label = {"saved_at": iso(), "saved_by": user_label(node.host), "host": str(node.host.info()["hostname"]),
             "action": "displaced", "reason": "replaced by another writer while cpctl waited (%s)" % applied_by,
             "op": op}
    kept = store.plan_label(filename, ours, mode, label, store.list(filename))
    if not kept.before:
        return None, kept.current
    change = journal.Change("displaced", component, filename, manifests.checksum(ours), kept.before + kept.after,
                            commit=len(kept.before) - 1, data=kept.data, op=op,
                            record={"reason": label["reason"], "revision": kept.current, "in_place": theirs})
    return change, kept.current
