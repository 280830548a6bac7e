"""Numbered revisions of a manifest: each version of its bytes, kept once, in the state dir.

Each revision is one *version* of a manifest and is labelled with its OWN change: ``original`` for
the first bytes cpctl saw (kept for good: never pruned), ``apply``/``edit``/``flags`` for bytes a
cpctl change wrote (with that change's reason, time and user), ``outside`` for bytes cpctl found
in place that it had not written (changed by hand). ``STATE/revisions/<file>.<N>`` holds the bytes
(mode 0600), ``STATE/revisions/<file>.<N>.json`` the label. A change keeps the bytes it replaces
(when no revision holds them yet) and the bytes it writes (when no revision holds them yet):
identical versions are kept once, so a rollback adds no revision, it points back at one. A
version that was applied and did not become healthy is marked ``failed`` by the change that puts
the previous bytes back. Beyond ``keep`` revisions the oldest are removed, never the original,
the version replaced or the version written.

Every file is written by the same journaled change that writes the manifest, before its commit
step, so after a SIGKILL either the change rolled back (no new revision) or it completed.

The state dir is input like any file: a revision's metadata is type-checked, its number must
match its name, and its bytes must match its checksum before anything uses them. Stores written by
cpctl before this layout (*legacy*: each record labelled with the change that REPLACED its bytes)
are read as they are and relabelled in memory: a record takes the label of the record before it
when that one was replaced by its bytes; revision 1 is the original.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict

from cpctl.core import journal, manifests
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import DirEntry, Host
from cpctl.timeutil import parse_iso

SUBDIR = "revisions"
DEFAULT_KEEP = 10
MAX_KEEP = 100
MAX_META_BYTES = 64 << 10
# Revisions are numbered 1, 2, ... per manifest; names hold up to 9 digits. A number above
# MAX_NUMBER was not cpctl's (a hundred million changes of one manifest): it is not listed, so that
# a crafted 999999999 cannot push the next number past what a name can hold.
MAX_NUMBER = 99_999_999
FREE_TRIES = 1000
_NAME = re.compile(r"^(?P<file>.+)\.(?P<number>[1-9][0-9]{0,8})(?P<meta>\.json)?$")
_TEXT = ("file", "checksum", "saved_at", "saved_by", "host", "action", "reason", "replaced_by", "op")
FORMAT = 2                       # metadata written by this layout carry "format": 2; legacy ones none
ORIGINAL, OUTSIDE = "original", "outside"
_LABEL = ("action", "reason", "saved_at", "saved_by", "host")


class CompanionRecord(TypedDict):
    """A companion file a revision's change wrote: its node path, the sha256 of its bytes before
    (None: absent) and where those bytes are kept."""

    path: str
    checksum: Optional[str]
    kept: str


@dataclass
class Revision:
    """One kept version of a manifest: its bytes are at ``path``."""

    number: int
    file: str
    checksum: str
    size: int
    mode: int
    saved_at: str                    # when this version was written (original, outside: first seen)
    saved_by: str
    host: str
    action: str                      # the change that made this version: original, apply, edit, flags, outside
    reason: Optional[str]            # that change's reason
    replaced_by: str                 # legacy records: checksum of the bytes that replaced them ("" now)
    failed: bool                     # these bytes were applied and did not become healthy
    op: str                          # the change (history record) that kept them
    path: str = ""
    original: bool = False           # the first version cpctl saw: never pruned
    legacy: bool = False             # read from a store of the older layout (relabelled in memory)
    meta_checksum: str = ""          # sha256 of the metadata file as read (to rewrite it in a change)
    replacer: Optional[Dict[str, Optional[str]]] = None   # legacy: the label it had (the change that replaced it)
    companions: List["CompanionRecord"] = field(default_factory=list)   # {path, checksum|None, kept}: the
    # companion files as they were while this version was in place (None: absent); ``kept`` holds their bytes

    def companion_path(self, index: int) -> str:
        return "%s.f%d" % (self.path, index)

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        for private in ("path", "legacy", "meta_checksum", "replacer"):
            data.pop(private)
        data["companions"] = [{"path": c["path"], "checksum": c["checksum"]} for c in self.companions]
        return data


@dataclass
class Keeping:
    """What one change does to the revisions of a manifest: steps before its commit (their bytes
    by index in ``data``), steps after it, the revision of the bytes replaced and of those written."""

    before: List[journal.Step] = field(default_factory=list)
    data: Dict[int, bytes] = field(default_factory=dict)
    after: List[journal.Step] = field(default_factory=list)
    previous: int = 0
    current: int = 0
    failed: List[int] = field(default_factory=list)


class RevisionStore:
    """The revisions of every manifest of one node, in ``<state dir>/revisions``."""

    def __init__(self, host: Host, state_dir: str) -> None:
        self.host = host
        self.path = state_dir.rstrip("/") + "/" + SUBDIR

    def bytes_path(self, filename: str, number: int) -> str:
        return "%s/%s.%d" % (self.path, filename, number)

    def meta_path(self, filename: str, number: int) -> str:
        return self.bytes_path(filename, number) + ".json"

    # --- reading --------------------------------------------------------------------------
    def list(self, filename: str) -> List[Revision]:
        """The revisions of ``filename``, oldest first (one read of the revisions dir)."""
        try:
            entries = self.host.scan_dir(self.path, MAX_META_BYTES)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CpctlError("cannot read %s: %s" % (self.path, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
        found = []
        for entry in entries:
            match = _NAME.match(entry["name"])
            if match is None or match.group("file") != filename or not match.group("meta"):
                continue
            if int(match.group("number")) > MAX_NUMBER:
                continue            # not cpctl's (see MAX_NUMBER): its successor could not be named
            found.append(self._revision(entry, filename, int(match.group("number"))))
        return relabel_legacy(sorted(found, key=lambda r: r.number))

    def _revision(self, entry: DirEntry, filename: str, number: int) -> Revision:
        path = self.meta_path(filename, number)
        if entry.get("kind") != "file" or "data" not in entry:
            why = entry.get("error") or "not a regular file of at most 64 KiB"
            raise CpctlError("cannot read %s: %s" % (path, why), ExitCode.ENVIRONMENT)
        try:
            value = json.loads(entry["data"].decode("utf-8"))
        except (ValueError, RecursionError):
            raise CpctlError("%s is corrupt (not JSON, or nested too deeply): inspect it by hand" % path,
                             ExitCode.ENVIRONMENT) from None
        problem = _meta_problem(value, filename, number)
        if problem:
            raise CpctlError("%s is corrupt (%s): inspect it by hand" % (path, problem), ExitCode.ENVIRONMENT)
        fields = {k: value.get(k) for k in Revision.__dataclass_fields__
                  if k not in ("path", "original", "legacy", "meta_checksum", "replacer", "companions")}
        legacy = value.get("format") != FORMAT
        replacer = {k: value.get(k) for k in _LABEL} if legacy else None
        path = self.bytes_path(filename, number)
        companions: List[CompanionRecord] = [{"path": c["path"], "checksum": c.get("checksum"),
                                              "kept": "%s.f%d" % (path, i)}
                                             for i, c in enumerate(value.get("companions") or [])]
        return Revision(**fields, path=path, original=value.get("original") is True, legacy=legacy,
                        meta_checksum=manifests.checksum(entry["data"]), replacer=replacer, companions=companions)

    def read(self, revision: Revision) -> bytes:
        """The bytes of ``revision``, refused unless they match its recorded checksum."""
        try:
            data = self.host.read_file(revision.path, manifests.MAX_MANIFEST_BYTES)
        except OSError as exc:
            raise CpctlError("cannot read revision %d of %s (%s): %s" % (
                revision.number, revision.file, revision.path, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
        if manifests.checksum(data) != revision.checksum:
            raise CpctlError("revision %d of %s (%s) does not match its recorded checksum: it was changed outside "
                             "cpctl; not using it" % (revision.number, revision.file, revision.path), ExitCode.REFUSED)
        return data

    def _free_number(self, filename: str, number: int) -> int:
        """``number``, or the next one whose files do not exist yet: a file cpctl does not list (a
        crafted number, a stray copy) never makes every later change of the manifest fail. (The first
        two numbers are asked in one round trip: a change keeps two revisions, the next two numbers.)"""
        self.host.read_ahead([("lstat", {"path": path}) for candidate in (number, number + 1)
                              for path in (self.bytes_path(filename, candidate), self.meta_path(filename, candidate))])
        for candidate in range(number, number + FREE_TRIES):
            if self.host.lstat(self.bytes_path(filename, candidate)) is None and \
                    self.host.lstat(self.meta_path(filename, candidate)) is None:
                return candidate
        raise CpctlError("%s: revisions %d to %d of %s all exist already: inspect it by hand"
                         % (self.path, number, number + FREE_TRIES - 1, filename), ExitCode.ENVIRONMENT)

    def read_companion(self, revision: Revision, index: int) -> Optional[bytes]:
        """The bytes companion ``index`` of ``revision`` had before (None: it was absent), refused
        unless they match the recorded checksum."""
        entry = revision.companions[index]
        if entry["checksum"] is None:
            return None
        try:
            data = self.host.read_file(entry["kept"], manifests.MAX_MANIFEST_BYTES)
        except OSError as exc:
            raise CpctlError("cannot read %s kept with revision %d of %s: %s" % (
                entry["path"], revision.number, revision.file, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
        if manifests.checksum(data) != entry["checksum"]:
            raise CpctlError("the copy of %s kept with revision %d of %s (%s) does not match its recorded checksum: "
                             "not using it" % (entry["path"], revision.number, revision.file, entry["kept"]),
                             ExitCode.REFUSED)
        return data

    def find(self, revisions: Sequence[Revision], number: int, component: str) -> Revision:
        """Revision ``number`` of ``revisions``; not found (exit 3) names the numbers there are."""
        chosen = next((r for r in revisions if r.number == number), None)
        if chosen is None:
            numbers = ", ".join(str(r.number) for r in revisions) or "none"
            raise CpctlError("%s has no revision %d (it has %s)" % (component, number, numbers), ExitCode.NOT_FOUND)
        return chosen

    # --- the steps of a change that keeps revisions ---------------------------------------
    def plan_keep(self, filename: str, old: bytes, mode: int, meta: Mapping[str, object], keep: int,
                  existing: List[Revision], new: Optional[bytes] = None, mark_failed: bool = False,
                  outside_writer: Optional[Tuple[Optional[bytes], str]] = None,
                  companions: Sequence[Tuple[str, Optional[bytes], Optional[bytes]]] = ()) -> Keeping:
        """What a change from ``old`` to ``new`` does to the revisions of ``filename``: keep ``old``
        unless a revision holds it (labelled original, or outside: cpctl did not write it), keep
        ``new`` labelled with ``meta`` (the change's action, reason, time, user) unless a revision
        holds it, mark the revision of ``old`` failed with ``mark_failed`` (a rollback of a version
        that did not become healthy), then drop the oldest beyond ``keep`` (never the original, the
        version replaced or the version written). ``outside_writer``: (cpctl's bytes it replaced, as
        kubeadm's backup holds them, or None; a note like "kubeadm upgrade v1.30.4 -> v1.31.12") when
        a writer other than cpctl put ``old`` in place: cpctl's bytes are kept first (unless held),
        ``old`` is labelled ``outside`` with the note. ``companions``: (node path, bytes before, bytes
        after; None: absent) of each companion file the change writes: the revision of ``old`` records
        the bytes before (added to it when it is kept already), the revision of ``new`` the bytes after
        -- each version with the companion files as they were while it was in place."""
        plan = Keeping()
        kept = list(existing)
        old_sum = manifests.checksum(old)
        if outside_writer is not None and outside_writer[0] is not None:
            ours = outside_writer[0]
            if _holding(kept, manifests.checksum(ours)) is None:
                self._add(plan, kept, filename, ours, mode, _unkept_label(kept, manifests.checksum(ours), meta))
        previous = _holding(kept, old_sum)
        if previous is None:
            label = _unkept_label(kept, old_sum, meta)
            if outside_writer is not None:
                label = dict(label, action=OUTSIDE, reason=outside_writer[1], saved_by="not cpctl", original=False)
            previous = self._add(plan, kept, filename, old, mode, label, [(p, b) for p, b, _ in companions])
        else:
            self._relabel(plan, previous, mark_failed, [(p, b) for p, b, _ in companions])
        if mark_failed:
            plan.failed.append(previous.number)
        plan.previous = plan.current = previous.number
        if new is not None and new != old:
            written = _holding(kept, manifests.checksum(new))
            if written is None:
                label = dict(meta, failed=False, original=False, replaced_by="")
                written = self._add(plan, kept, filename, new, mode, label, [(p, a) for p, _, a in companions])
            else:
                self._relabel(plan, written, False, [(p, a) for p, _, a in companions])
            plan.current = written.number
        protected = {previous.number, plan.current}
        prunable = [r for r in kept if not r.original and r.number not in protected]
        for gone in prunable[:max(0, len(kept) - sum(1 for r in kept if r.original) - keep)]:
            plan.after += [journal.remove(self.meta_path(filename, gone.number)),
                           journal.remove(self.bytes_path(filename, gone.number))]
            plan.after += [journal.remove(c["kept"]) for c in gone.companions if c["checksum"] is not None]
        return plan

    def plan_label(self, filename: str, data: bytes, mode: int, label: Mapping[str, object],
                   existing: List[Revision]) -> Keeping:
        """Steps that label the version ``data`` of ``filename`` with ``label`` (action, reason, time,
        user): its revision's metadata rewritten, or a new revision when none holds it. The original's
        label stays (no steps). ``previous`` and ``current`` are that revision's number."""
        plan = Keeping()
        kept = list(existing)
        held = _holding(kept, manifests.checksum(data))
        if held is None:
            held = self._add(plan, kept, filename, data, mode, dict(label, failed=False, original=False,
                                                                     replaced_by=""))
        elif not held.original:
            reason = label.get("reason")
            updated = replace(held, action=str(label.get("action") or ""),
                              reason=None if reason is None else str(reason))
            meta_bytes = _encode(dict(updated.to_dict(), format=FORMAT))
            plan.data[len(plan.before)] = meta_bytes
            plan.before.append(journal.write(self.meta_path(filename, held.number), manifests.checksum(meta_bytes),
                                             before=held.meta_checksum))
        plan.previous = plan.current = held.number
        return plan

    def keep_steps(self, filename: str, old: bytes, mode: int, meta: Dict[str, Any], keep: int,
                   existing: List[Revision], new: Optional[bytes] = None, mark_failed: bool = False
                   ) -> Tuple[List[journal.Step], Dict[int, bytes], List[journal.Step], int]:
        """:meth:`plan_keep` as (steps before the commit, their data by index, steps after it, the
        revision of the replaced bytes) -- the shape callers of the older layout expect."""
        plan = self.plan_keep(filename, old, mode, meta, keep, existing, new, mark_failed)
        return plan.before, plan.data, plan.after, plan.previous

    def _add(self, plan: Keeping, kept: List[Revision], filename: str, data: bytes, mode: int,
             label: Mapping[str, object], companions: Sequence[Tuple[str, Optional[bytes]]] = ()) -> Revision:
        """Steps writing ``data`` and ``label`` as the next revision, with the bytes of each companion
        file (node path, bytes or None when absent) as they are while this version is in place; the
        revision, appended to ``kept``."""
        number = self._free_number(filename, max((r.number for r in kept), default=0) + 1)

        def text(key: str) -> str:
            return str(label.get(key) or "")
        reason = label.get("reason")
        revision = Revision(number, filename, manifests.checksum(data), len(data), mode, text("saved_at"),
                            text("saved_by"), text("host"), text("action"), None if reason is None else str(reason),
                            text("replaced_by"), bool(label.get("failed")), text("op"),
                            path=self.bytes_path(filename, number), original=bool(label.get("original")))
        revision.companions = [{"path": path, "checksum": None if content is None else manifests.checksum(content),
                                "kept": revision.companion_path(index)}
                               for index, (path, content) in enumerate(companions)]
        meta_bytes = _encode(dict(revision.to_dict(), format=FORMAT))
        revision.meta_checksum = manifests.checksum(meta_bytes)
        plan.data[len(plan.before)] = data
        plan.before.append(journal.write(self.bytes_path(filename, number), revision.checksum))
        for (_, content), entry in zip(companions, revision.companions):
            if content is not None and entry["checksum"] is not None:
                plan.data[len(plan.before)] = content
                plan.before.append(journal.write(entry["kept"], entry["checksum"]))
        plan.data[len(plan.before)] = meta_bytes
        plan.before.append(journal.write(self.meta_path(filename, number), manifests.checksum(meta_bytes)))
        kept.append(revision)
        return revision

    def _relabel(self, plan: Keeping, revision: Revision, mark_failed: bool,
                 companions: Sequence[Tuple[str, Optional[bytes]]]) -> None:
        """Steps rewriting a kept ``revision``'s metadata (in the new layout) when the change marks it
        failed or finds companion files it has no record of (or other bytes than it records): their
        bytes now are how they are while this version is in place, kept as its ``.f<i>`` files."""
        records: List[CompanionRecord] = [{"path": c["path"], "checksum": c["checksum"], "kept": c["kept"]}
                                          for c in revision.companions]
        steps: List[Tuple[journal.Step, Optional[bytes]]] = []
        added = False              # a path it has no record of: recorded, "absent" included (issue 33 item 2)
        for path, content in companions:
            checksum = None if content is None else manifests.checksum(content)
            index = next((i for i, c in enumerate(records) if c["path"] == path), len(records))
            if index == len(records):
                records.append({"path": path, "checksum": None, "kept": revision.companion_path(index)})
                added = True
            was = records[index]["checksum"]
            if was == checksum:
                continue
            records[index]["checksum"] = checksum
            if checksum is None:
                steps.append((journal.remove(revision.companion_path(index)), None))
            else:
                steps.append((journal.write(revision.companion_path(index), checksum, before=was or ""), content))
        if not steps and not added and (revision.failed or not mark_failed):
            return
        for step, content in steps:
            if content is not None:
                plan.data[len(plan.before)] = content
            plan.before.append(step)
        updated = replace(revision, failed=revision.failed or mark_failed, companions=records)
        meta_bytes = _encode(dict(updated.to_dict(), format=FORMAT))
        plan.data[len(plan.before)] = meta_bytes
        plan.before.append(journal.write(self.meta_path(revision.file, revision.number),
                                         manifests.checksum(meta_bytes), before=revision.meta_checksum))


def _encode(record: Mapping[str, object]) -> bytes:
    return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _holding(revisions: Sequence[Revision], checksum: str) -> Optional[Revision]:
    """The newest revision holding the bytes with ``checksum`` (None if none does)."""
    return next((r for r in reversed(revisions) if r.checksum == checksum), None)


def _unkept_label(revisions: Sequence[Revision], checksum: str, meta: Mapping[str, object]) -> Dict[str, object]:
    """The label of bytes found in the manifests dir that no revision holds: the original when
    nothing is kept yet; the change a legacy record says replaced its bytes with these; else
    changed outside cpctl (``meta`` gives the time and user of the change that found them)."""
    base = {k: meta.get(k) for k in ("saved_at", "saved_by", "host", "op")}
    if not revisions:
        return dict(base, action=ORIGINAL, reason=None, original=True)
    maker = next((r for r in reversed(revisions) if r.replacer and r.replaced_by == checksum), None)
    if maker is not None and maker.replacer is not None:
        return dict(base, **maker.replacer)
    return dict(base, action=OUTSIDE, reason=None)


def relabel_legacy(revisions: List[Revision]) -> List[Revision]:
    """Legacy records (labelled with the change that replaced their bytes) labelled with their own
    change instead: revision 1 is the original; revision N took the label of revision N-1 when
    that one was replaced by N's bytes; else nothing is known (``outside``). Memory only."""
    by_number = {r.number: r for r in revisions}
    out = []
    for revision in revisions:
        if not revision.legacy:
            out.append(revision)
            continue
        before = by_number.get(revision.number - 1)
        if revision.number == 1:
            out.append(replace(revision, action=ORIGINAL, reason=None, original=True))
        elif before is not None and before.replacer and before.replaced_by == revision.checksum:
            label = before.replacer
            out.append(replace(revision, action=str(label.get("action") or ""), reason=label.get("reason"),
                               saved_at=str(label.get("saved_at") or ""), saved_by=str(label.get("saved_by") or ""),
                               host=str(label.get("host") or "")))
        else:
            out.append(replace(revision, action=OUTSIDE, reason=None))
    return out


def _companions_ok(value: object) -> bool:
    """``companions`` is absent, or a list of {path: absolute text, checksum: sha256 or null}."""
    if value is None:
        return True
    if not isinstance(value, list):
        return False
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str) or not item["path"].startswith("/"):
            return False
        if item.get("checksum") is not None and not re.fullmatch(r"[0-9a-f]{64}", str(item["checksum"])):
            return False
    return True


def _meta_problem(value: Any, filename: str, number: int) -> str:
    """Why ``value`` is not revision metadata cpctl wrote for ``filename`` #``number`` ("" if it is)."""
    if not isinstance(value, dict):
        return "not an object"
    for key in _TEXT:
        if not isinstance(value.get(key), str) and (key != "reason" or value.get(key) is not None):
            return "%s is not text" % key
    for key in ("number", "size", "mode"):
        if not isinstance(value.get(key), int) or isinstance(value.get(key), bool) or value[key] < 0:
            return "%s is not a number" % key
    if not _companions_ok(value.get("companions")):
        return "companions is not a list of {path, checksum}"
    for key in ("failed", "original"):
        if not isinstance(value.get(key, False), bool) or (key == "failed" and key not in value):
            return "%s is not true or false" % key
    if "format" in value and value["format"] != FORMAT:
        return "format %r is not one this cpctl reads" % (value["format"],)
    if value["number"] != number or value.get("file") != filename:
        return "it names revision %s of %s" % (value["number"], value.get("file"))
    if not re.fullmatch(r"[0-9a-f]{64}", str(value.get("checksum"))):
        return "checksum is not a sha256"
    try:
        parse_iso(str(value.get("saved_at")))
    except ValueError:
        return "saved_at is not a time like 2026-01-31T12:00:00Z"
    return ""
