"""Numbered revisions of a manifest: the bytes each ``apply`` replaced, kept in the state dir.

Every change of a manifest's content (``apply``, ``edit``, ``flags``, ``rollback``) first keeps the
bytes it replaces as the next revision: ``STATE/revisions/<file>.<N>`` holds them (mode 0600),
``STATE/revisions/<file>.<N>.json`` says when, by whom, why and with which checksum they were
replaced. Both are written by the same journaled change that writes the manifest, before its commit
step, so after a SIGKILL either the change rolled back (no new revision) or it completed (the
revision is there). The newest ``keep`` revisions of each file stay; older ones are removed by the
change that adds a new one.

The state dir is input like any file: a revision's metadata is type-checked, its number must
match its name, and its bytes must match its checksum before anything uses them.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypedDict

from cpctl.core import journal, manifests
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host
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
    saved_at: str                    # when a change replaced these bytes
    saved_by: str
    host: str
    action: str                      # what replaced them: apply, edit, flags, rollback
    reason: Optional[str]
    replaced_by: str                 # checksum of the bytes that replaced them
    failed: bool                     # these bytes were applied and did not become healthy
    op: str                          # the change (history record) that kept them
    path: str = ""
    companions: List["CompanionRecord"] = field(default_factory=list)   # {path, checksum|None, kept}: files
    # changed with the manifest and their bytes before (None: absent); ``kept`` is where those bytes are

    def companion_path(self, index: int) -> str:
        return "%s.f%d" % (self.path, index)

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data.pop("path")
        data["companions"] = [{"path": c["path"], "checksum": c["checksum"]} for c in self.companions]
        return data


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
        return sorted(found, key=lambda r: r.number)

    def _revision(self, entry: Dict[str, Any], filename: str, number: int) -> Revision:
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
        fields = {k: value.get(k) for k in Revision.__dataclass_fields__ if k not in ("path", "companions")}
        path = self.bytes_path(filename, number)
        companions: List[CompanionRecord] = [{"path": c["path"], "checksum": c.get("checksum"),
                                              "kept": "%s.f%d" % (path, i)}
                                             for i, c in enumerate(value.get("companions") or [])]
        return Revision(**fields, path=path, companions=companions)

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
        crafted number, a stray copy) never makes every later change of the manifest fail."""
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

    # --- the steps of a change that keeps a new revision ----------------------------------
    def keep_steps(self, filename: str, old: bytes, mode: int, meta: Dict[str, Any], keep: int,
                   existing: List[Revision], companions: Sequence[Tuple[str, Optional[bytes]]] = ()
                   ) -> Tuple[List[journal.Step], Dict[int, bytes], List[journal.Step], int]:
        """(steps before the commit, their data by index, steps after it, the new number): write the
        replaced bytes and their metadata as the next revision -- with the previous bytes of each
        companion file (path, bytes or None when absent) -- then drop the oldest beyond ``keep``."""
        number = self._free_number(filename, (existing[-1].number + 1) if existing else 1)
        listed = [{"path": path, "checksum": manifests.checksum(data) if data is not None else None}
                  for path, data in companions]
        record = dict(meta, number=number, file=filename, checksum=manifests.checksum(old), size=len(old), mode=mode)
        if listed:
            record["companions"] = listed
        meta_bytes = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8")
        before = [journal.write(self.bytes_path(filename, number), record["checksum"])]
        data_of: Dict[int, bytes] = {0: old}
        for index, (_, previous) in enumerate(companions):
            if previous is not None:
                data_of[len(before)] = previous
                before.append(journal.write("%s.f%d" % (self.bytes_path(filename, number), index),
                                            manifests.checksum(previous)))
        data_of[len(before)] = meta_bytes
        before.append(journal.write(self.meta_path(filename, number), manifests.checksum(meta_bytes)))
        after = []
        for old_revision in existing[:max(0, len(existing) + 1 - keep)]:
            after += [journal.remove(self.meta_path(filename, old_revision.number)),
                      journal.remove(self.bytes_path(filename, old_revision.number))]
            after += [journal.remove(c["kept"]) for c in old_revision.companions if c["checksum"] is not None]
        return before, data_of, after, number


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
    if not isinstance(value.get("failed"), bool):
        return "failed is not true or false"
    if value["number"] != number or value.get("file") != filename:
        return "it names revision %s of %s" % (value["number"], value.get("file"))
    if not re.fullmatch(r"[0-9a-f]{64}", str(value.get("checksum"))):
        return "checksum is not a sha256"
    try:
        parse_iso(str(value.get("saved_at")))
    except ValueError:
        return "saved_at is not a time like 2026-01-31T12:00:00Z"
    return ""
