"""cpctl's state dir on a node: parked manifests, their metadata, journal, history and lock.

Layout (all 0700/0600, owned by the user running cpctl, normally root)::

    STATE/parked/<file>          the parked manifest, original bytes, mode and owner
    STATE/meta/<file>.json       who parked it, when, why, until when, checksum
    STATE/staged/<op>.<n>.*      bytes a change in flight writes, replaces or removes (see journal)
    STATE/journal.json           the one change in flight (write-ahead), absent when idle
    STATE/journal.key            the node's key that seals each journal entry (agent.journalseal.journal_key)
    STATE/pending.json           manifest changes whose new pod was never judged (see core.pending)
    STATE/keepin/<file>.<op>.json  a --keep-in kubeadm-config change's ClusterConfiguration before/after (core.keptin)
    STATE/history.jsonl          the newest change records, one JSON object a line
    STATE/history.<time>.jsonl.gz  older records (rotated at HISTORY_ROTATE_BYTES, HISTORY_SEGMENTS kept)
    STATE/lock                   flock target; its content names the holder

Everything read from here is treated as untrusted input: a file that is not what cpctl writes is
one clear error (exit 7), never a crash, and paths found in it are checked before any use.
"""

from __future__ import annotations

import errno
import json
from contextlib import contextmanager
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from cpctl.agent import journalseal
from cpctl.core.manifests import require_directory
from cpctl.errors import Corrupt, CpctlError, ExitCode
from cpctl.host.base import HistoryBounds, Host, LockBusy, Stat
from cpctl.redaction import redact
from cpctl.timeutil import iso, parse_iso

JOURNAL = "journal.json"
BASELINE = "baseline.json"          # the drift baseline (cpctl.ops.drift); status reads it for "missing"
PENDING = "pending.json"              # see cpctl.core.pending
CONFIRM = "confirm"                   # STATE/confirm/<file>.json: armed changes (see cpctl.core.confirmations)
MAX_ARM_BYTES = 64 << 10              # one arm record (a view reads them in its batch)
HISTORY = journalseal.HISTORY
LOCK = "lock"
MAX_STATE_FILE = 64 << 20
# the history's bounds (``cpctl.agent``: the agent's transaction writes the history too); sent with each change
HISTORY_ROTATE_BYTES = journalseal.HISTORY_ROTATE_BYTES   # the current history file never grows past this
HISTORY_SEGMENTS = journalseal.HISTORY_SEGMENTS           # compressed older segments kept (about 80 MiB of records)
HISTORY_TAIL_BYTES = journalseal.HISTORY_TAIL_BYTES       # what recovery reads to find a record it may have written
MAX_SEGMENT_BYTES = 16 << 20          # a decompressed segment larger than this is not cpctl's
SUBDIRS = ("parked", "meta", "staged", "revisions")
META_TEXT = ("file", "component", "namespace", "checksum", "parked_at", "parked_by", "host", "reason",
             "until", "manifests_dir", "node", "content")   # content: the bytes cpctl parked (or last wrote)
META_NUMBERS = ("mode", "uid", "gid")


def _json_bytes(value: Mapping[str, object]) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")


def check_meta(path: str, value: Dict[str, object]) -> Dict[str, object]:
    """A parked manifest's metadata as cpctl writes it; anything else is a corrupt-file error."""
    problem = None
    for key in META_TEXT:
        if value.get(key) is not None and not isinstance(value[key], str):
            problem = "%s is not text" % key
    for key in META_NUMBERS:
        number = value.get(key)
        if number is not None and (not isinstance(number, int) or isinstance(number, bool) or number < 0):
            problem = "%s is not a number" % key
    for key in ("parked_at", "until"):
        when = value.get(key)
        if problem is None and isinstance(when, str):
            try:
                parse_iso(when)
            except ValueError:
                problem = "%s is not a time like 2026-01-31T12:00:00Z" % key
    if problem:
        raise CpctlError("%s is corrupt (%s): inspect it by hand" % (path, problem), ExitCode.ENVIRONMENT)
    return value


class StateDir:
    """Typed access to the state dir through a ``Host`` (local or remote)."""

    def __init__(self, host: Host, path: str) -> None:
        self.host = host
        self.path = path.rstrip("/") or "/"
        self.parked_dir = self._join("parked")
        self.meta_dir = self._join("meta")
        self.staged_dir = self._join("staged")
        self._key: Optional[bytes] = None

    def _join(self, *parts: str) -> str:
        return "/".join([self.path] + list(parts))

    # --- safety ---------------------------------------------------------------------------
    def ensure(self, create: bool = True) -> bool:
        """Check (and create, 0700) the state dir; refuse symlinks and loose permissions.

        Returns False when it does not exist and ``create`` is off (read-only commands).
        """
        info = self.host.lstat(self.path)
        if info is None:
            if not create:
                return False
            try:
                self.host.makedirs(self.path, 0o700)
            except OSError as exc:
                raise CpctlError("cannot create state dir %s: %s" % (self.path, exc.strerror or exc),
                                 ExitCode.ENVIRONMENT) from None
            info = self.host.lstat(self.path)
        self._check_dir(self.path, info)
        for sub in (self._join(name) for name in SUBDIRS):
            sub_info = self.host.lstat(sub)
            if sub_info is None:
                if not create:
                    continue
                self.host.makedirs(sub, 0o700)
                sub_info = self.host.lstat(sub)
            self._check_dir(sub, sub_info)
        return True

    def _check_dir(self, path: str, info: Optional[Stat]) -> None:
        require_directory(info, "state dir", path, missing="vanished")
        assert info is not None
        if info["mode"] & 0o077:
            raise CpctlError("state dir %s has loose permissions %04o: run chmod 700 %s"
                             % (path, info["mode"], path), ExitCode.REFUSED)
        euid = self.host.info()["euid"]
        if info["uid"] != euid:
            raise CpctlError("state dir %s is owned by uid %d, not by the user running cpctl (uid %d)"
                             % (path, info["uid"], euid), ExitCode.REFUSED)

    # --- paths ----------------------------------------------------------------------------
    def parked_path(self, filename: str) -> str:
        return self._join("parked", filename)

    def meta_path(self, filename: str) -> str:
        return self._join("meta", filename + ".json")

    def staged_path(self, name: str) -> str:
        return self._join("staged", name)

    def view_reads(self) -> List[Tuple[str, Dict[str, object]]]:
        """The state dir reads of every view (``ensure``, the journal check, ``parked_files``,
        ``read_metas``), for ``Host.prefetched``."""
        reads: List[Tuple[str, Dict[str, object]]] = [("lstat", {"path": self.path})]
        return reads + [("lstat", {"path": self._join(name)}) for name in SUBDIRS] + [
                ("listdir", {"path": self.path}),
                ("listdir", {"path": self.parked_dir}), ("listdir", {"path": self.staged_dir}),
                ("listdir", {"path": self._join("revisions")}), ("lstat", {"path": self._join(PENDING)}),
                ("scan_dir", {"path": self.meta_dir, "limit": MAX_STATE_FILE})]

    @staticmethod
    def read_call(path: str) -> Tuple[str, Dict[str, object]]:
        """The host call that reads a state file (``read_json``, ``read_history``), for
        ``Host.prefetched``."""
        return ("read_file", {"path": path, "limit": MAX_STATE_FILE})

    # --- json records -----------------------------------------------------------------------
    def read_json(self, path: str, repair: str = "inspect it by hand") -> Optional[dict]:
        """A JSON object cpctl wrote, None when absent; unreadable or corrupt is one clear error."""
        try:
            data = self.host.read_file(path, MAX_STATE_FILE)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CpctlError("cannot read %s: %s" % (path, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
        return self._parse_json(path, data, repair)

    @staticmethod
    def _parse_json(path: str, data: bytes, repair: str) -> Dict[str, object]:
        try:
            value = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError):
            raise Corrupt("%s is corrupt (not JSON, or nested too deeply): %s" % (path, repair)) from None
        if not isinstance(value, dict):
            raise Corrupt("%s is corrupt (not an object): %s" % (path, repair))
        return value

    def read_metas(self, filenames: Iterable[str]) -> Dict[str, Optional[Dict[str, object]]]:
        """The metadata of many parked files in one read of the meta dir (one round trip
        over SSH, however many components are parked): file name -> meta, None when absent."""
        wanted = {name + ".json": name for name in filenames}
        found: Dict[str, Optional[Dict[str, object]]] = {name: None for name in filenames}
        if not wanted:
            return found
        try:
            entries = self.host.scan_dir(self.meta_dir, MAX_STATE_FILE)
        except FileNotFoundError:
            return found
        except OSError as exc:
            raise CpctlError("cannot read %s: %s" % (self.meta_dir, exc.strerror or exc),
                             ExitCode.ENVIRONMENT) from None
        for entry in entries:
            name = wanted.get(entry["name"])
            if name is None:
                continue
            path = self.meta_path(name)
            if "data" not in entry:
                why = entry.get("error") or ("a %s" % entry["kind"] if entry["kind"] != "file" else "too large")
                raise CpctlError("cannot read %s: %s" % (path, why), ExitCode.ENVIRONMENT)
            found[name] = check_meta(path, self._parse_json(path, entry["data"], "inspect it by hand"))
        return found

    @staticmethod
    def meta_bytes(meta: Mapping[str, object]) -> bytes:
        """The exact bytes of a metadata file (the change path writes and checks them)."""
        return _json_bytes(meta)

    def parked_files(self) -> List[str]:
        """Names of parked manifests (dot temp files from interrupted copies excluded)."""
        if self.host.lstat(self.parked_dir) is None:
            return []
        return [n for n in self.host.listdir(self.parked_dir) if not n.startswith(".")]

    # --- journal ----------------------------------------------------------------------------
    @property
    def journal_path(self) -> str:
        return self._join(JOURNAL)

    def read_journal(self) -> Optional[dict]:
        return self.read_json(self.journal_path)

    def journal_key(self, create: bool = False) -> Optional[bytes]:
        """This node's journal key (``journalseal.journal_key``: STATE/journal.key, created on first use
        with ``create``); a key file that is not cpctl's, or one that cannot be made, is exit 7."""
        if self._key is None:
            try:
                self._key = journalseal.journal_key(self.path, self.host, create=create)
            except journalseal.JournalKeyError as exc:
                raise self.key_error(str(exc)) from None
            except OSError as exc:
                raise self.key_error("", create, exc.strerror or str(exc)) from None
        return self._key

    def key_error(self, problem: str, create: bool = True, strerror: str = "") -> CpctlError:
        """The error of a journal key that is not cpctl's (``problem``), or that cannot be read or
        made (``strerror``): exit 7."""
        if problem:
            return CpctlError("%s: inspect it; cpctl creates a new key when none is there (a journal pending "
                              "now is then refused)" % problem, ExitCode.ENVIRONMENT)
        return CpctlError("cannot %s %s/%s: %s" % ("create" if create else "read", self.path, journalseal.JOURNAL_KEY,
                                                  strerror), ExitCode.ENVIRONMENT)

    def seal_problem(self, entry: Mapping[str, object]) -> str:
        """Why the journal ``entry`` was not written by cpctl on this node ("" when it was): its seal
        (``journalseal.seal_problem``), checked before anything of it is used."""
        return journalseal.seal_problem(entry, self.journal_key())

    @property
    def baseline_path(self) -> str:
        return self._join(BASELINE)

    @property
    def confirm_dir(self) -> str:
        """The armed changes' records (``cpctl.core.confirmations.directory``; a view looks for it first)."""
        return self.path.rstrip("/") + "/" + CONFIRM

    @property
    def pending_path(self) -> str:
        """Changes never verified (read and written by ``cpctl.core.pending``)."""
        return self._join(PENDING)

    # --- history ----------------------------------------------------------------------------
    @property
    def history_path(self) -> str:
        return self._join(HISTORY)

    def append_history(self, record: Mapping[str, object]) -> None:
        """Append one record durably (secret values redacted: the history leaves cpctl, to whoever
        reads the state dir or runs ``cpctl history``), rotating the file at its bound: the agent's
        one rule (``journalseal.append_history``), which its transaction follows for a change's record."""
        journalseal.append_history(self.host, self.path, journalseal.history_line(redact(record)), HISTORY_ROTATE_BYTES,
                               HISTORY_SEGMENTS)

    @staticmethod
    def history_bounds() -> HistoryBounds:
        """The history's bounds now, for a transaction that writes a record on the node."""
        return {"rotate": HISTORY_ROTATE_BYTES, "keep": HISTORY_SEGMENTS, "tail": HISTORY_TAIL_BYTES}

    def history_segments(self) -> List[str]:
        """Names of the older history files, oldest first (time-stamped names sort in order)."""
        return journalseal.history_segments(self.host, self.path)

    def read_history_tail(self, limit: int = HISTORY_TAIL_BYTES) -> List[Dict[str, object]]:
        """The newest records only, from the last ``limit`` bytes (recovery looks for one it may
        have written just before; ``status`` for each component's last change)."""
        try:
            return journalseal.tail_records(self.host, self.history_path, limit)
        except OSError as exc:
            raise CpctlError("cannot read %s: %s" % (self.history_path, exc.strerror or exc),
                             ExitCode.ENVIRONMENT) from None

    def read_history(self, limit: int = 0,
                     keep: Optional[Callable[[Dict[str, object]], bool]] = None) -> List[Dict[str, object]]:
        """Records oldest first that ``keep`` accepts: the newest ``limit`` of them (0: all), older
        segments read only as far as needed."""
        def wanted(records: List[Dict[str, object]]) -> List[Dict[str, object]]:
            return [r for r in records if keep is None or keep(r)]
        records = wanted(self._read_records(self.history_path, compressed=False))
        for name in reversed(self.history_segments() if self.host.lstat(self.path) else []):
            if limit and len(records) >= limit:
                break
            records = wanted(self._read_records(self._join(name), compressed=name.endswith(".gz"))) + records
        return records[-limit:] if limit else records

    def _read_records(self, path: str, compressed: bool) -> List[Dict[str, object]]:
        try:
            data = self.host.read_file(path, MAX_STATE_FILE)
        except FileNotFoundError:
            return []
        except OSError as exc:
            if exc.errno == errno.EFBIG and not compressed:
                return self._tail_records(path)
            raise CpctlError("cannot read %s: %s" % (path, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
        if compressed:
            data = _gunzip(path, data)
        return parse_records(data)

    def _tail_records(self, path: str) -> List[Dict[str, object]]:
        """The records of the last MAX_STATE_FILE bytes of a history file grown past that bound
        (its first, cut line dropped): ``history`` shows the newest instead of failing."""
        try:
            data = self.host.read_tail(path, MAX_STATE_FILE)
        except OSError as exc:
            raise CpctlError("cannot read %s: %s" % (path, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
        return parse_records(data[data.find(b"\n") + 1:])

    # --- lock -------------------------------------------------------------------------------
    @contextmanager
    def locked(self, timeout: float, what: str, manifests_dir: str) -> Iterator[None]:
        """Hold the node lock: this state dir's lock file, then the manifests dir itself (another
        cpctl run with another --state-dir must not change the same manifests dir at the same
        time). A second cpctl waits ``timeout`` s, then fails naming the holder."""
        who = self.host.info()
        holder = "pid %d since %s (%s by %s@%s)" % (who["pid"], iso(), what, who.get("sudo_user") or who["user"],
                                                   who["hostname"])
        path = self._join(LOCK)
        self._take(lambda: self.host.lock(path, timeout, holder), path)
        try:
            self._take(lambda: self.host.lock_dir(manifests_dir, timeout), manifests_dir)
        except BaseException:
            self.host.unlock(path)
            raise
        try:
            yield
        finally:
            self.host.unlock(manifests_dir)
            self.host.unlock(path)

    @staticmethod
    def _take(lock: Callable[[], None], path: str) -> None:
        try:
            lock()
        except LockBusy as exc:
            raise CpctlError("locked by %s" % exc.holder, ExitCode.LOCKED,
                             hint="wait for it, or raise --lock-timeout") from None
        except OSError as exc:
            raise CpctlError("cannot lock %s: %s" % (path, exc.strerror or exc), ExitCode.ENVIRONMENT) from None


def user_label(host: Host) -> str:
    who = host.info()
    return who.get("sudo_user") or who["user"]


def parse_records(data: bytes) -> List[Dict[str, object]]:
    """History lines as records; a torn or foreign line is skipped (``journalseal.parse_records``)."""
    return journalseal.parse_records(data)


def _gunzip(path: str, data: bytes) -> bytes:
    """Decompress a history segment, refusing anything that inflates past MAX_SEGMENT_BYTES."""
    import zlib
    unpacker = zlib.decompressobj(31)
    try:
        out = unpacker.decompress(data, MAX_SEGMENT_BYTES + 1)
    except zlib.error:
        raise CpctlError("%s is corrupt (not gzip): inspect it by hand" % path, ExitCode.ENVIRONMENT) from None
    if len(out) > MAX_SEGMENT_BYTES:
        raise CpctlError("%s is corrupt (decompresses past %d bytes)" % (path, MAX_SEGMENT_BYTES),
                         ExitCode.ENVIRONMENT)
    return out
