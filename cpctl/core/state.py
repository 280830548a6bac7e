"""cpctl's state dir on a node: parked manifests, their metadata, journal, history and lock.

Layout (all 0700/0600, owned by the user running cpctl, normally root)::

    STATE/parked/<file>        the parked manifest, original bytes, mode and owner
    STATE/meta/<file>.json     who parked it, when, why, until when, checksum
    STATE/journal.json         the one operation in flight (write-ahead), absent when idle
    STATE/history.jsonl        append-only record of every change
    STATE/lock                 flock target; its content names the holder
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from typing import Iterator, Optional

from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host, LockBusy

JOURNAL = "journal.json"
HISTORY = "history.jsonl"
LOCK = "lock"
MAX_STATE_FILE = 64 << 20


def iso(ts: Optional[float] = None) -> str:
    """UTC timestamp as RFC 3339 with seconds, the format of every record cpctl writes."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if ts is None else ts))


def parse_iso(text: str) -> float:
    import calendar
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def _json_bytes(value: dict) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")


class StateDir:
    """Typed access to the state dir through a ``Host`` (local or remote)."""

    def __init__(self, host: Host, path: str) -> None:
        self.host = host
        self.path = path.rstrip("/") or "/"
        self.parked_dir = self._join("parked")
        self.meta_dir = self._join("meta")

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
        for sub in (self.parked_dir, self.meta_dir):
            sub_info = self.host.lstat(sub)
            if sub_info is None:
                if not create:
                    continue
                self.host.makedirs(sub, 0o700)
                sub_info = self.host.lstat(sub)
            self._check_dir(sub, sub_info)
        return True

    def _check_dir(self, path: str, info: Optional[dict]) -> None:
        if info is None:
            raise CpctlError("state dir %s vanished" % path, ExitCode.ENVIRONMENT)
        if info["kind"] == "symlink":
            raise CpctlError("state dir %s is a symlink: refusing (use the real path)" % path, ExitCode.REFUSED)
        if info["kind"] != "dir":
            raise CpctlError("state dir %s is not a directory" % path, ExitCode.ENVIRONMENT)
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

    def view_reads(self) -> list:
        """The state dir reads of every view (``ensure``, the journal check, ``parked_files``,
        ``read_metas``), for ``Host.prefetched``."""
        return [("lstat", {"path": self.path}), ("lstat", {"path": self.parked_dir}),
                ("lstat", {"path": self.meta_dir}), ("listdir", {"path": self.path}),
                ("listdir", {"path": self.parked_dir}),
                ("scan_dir", {"path": self.meta_dir, "limit": MAX_STATE_FILE})]

    @staticmethod
    def read_call(path: str) -> tuple:
        """The host call that reads a state file (``read_json``, ``read_history``), for
        ``Host.prefetched``."""
        return ("read_file", {"path": path, "limit": MAX_STATE_FILE})

    # --- json records -----------------------------------------------------------------------
    def read_json(self, path: str, repair: str = "inspect it by hand") -> Optional[dict]:
        """A JSON object cpctl wrote, None when absent; unreadable or corrupt is one clear error."""
        try:
            data = self.host.read_file(**self.read_call(path)[1])
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CpctlError("cannot read %s: %s" % (path, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
        return self._parse_json(path, data, repair)

    @staticmethod
    def _parse_json(path: str, data: bytes, repair: str) -> dict:
        try:
            value = json.loads(data.decode("utf-8"))
        except ValueError:
            raise CpctlError("%s is corrupt (not JSON): %s" % (path, repair), ExitCode.ENVIRONMENT) from None
        if not isinstance(value, dict):
            raise CpctlError("%s is corrupt (not an object): %s" % (path, repair), ExitCode.ENVIRONMENT)
        return value

    def read_meta(self, filename: str) -> Optional[dict]:
        return self.read_json(self.meta_path(filename))

    def read_metas(self, filenames: list) -> dict:
        """``read_meta`` for many parked files in one read of the meta dir (one round trip
        over SSH, however many components are parked): file name -> meta, None when absent."""
        wanted = {name + ".json": name for name in filenames}
        found: dict = {name: None for name in filenames}
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
            found[name] = self._parse_json(path, entry["data"], "inspect it by hand")
        return found

    def write_meta(self, filename: str, meta: dict) -> None:
        self.host.write_atomic(self.meta_path(filename), _json_bytes(meta))

    def remove_meta(self, filename: str) -> None:
        self.host.unlink(self.meta_path(filename))

    def parked_files(self) -> list:
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

    def write_journal(self, entry: dict) -> None:
        self.host.write_atomic(self.journal_path, _json_bytes(entry))

    def clear_journal(self) -> None:
        self.host.unlink(self.journal_path)

    # --- history ----------------------------------------------------------------------------
    def append_history(self, record: dict) -> None:
        line = json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
        self.host.append(self.history_path, line.encode("utf-8"))

    @property
    def history_path(self) -> str:
        return self._join(HISTORY)

    def read_history(self) -> list:
        try:
            data = self.host.read_file(**self.read_call(self.history_path)[1])
        except FileNotFoundError:
            return []
        records = []
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a torn last line after a crash: the record before it stands
        return records

    # --- lock -------------------------------------------------------------------------------
    @contextmanager
    def locked(self, timeout: float, what: str) -> Iterator[None]:
        """Hold the node lock; a second cpctl waits ``timeout`` s, then fails naming the holder."""
        who = self.host.info()
        holder = "pid %d since %s (%s by %s@%s)" % (who["pid"], iso(), what, who.get("sudo_user") or who["user"],
                                                   who["hostname"])
        path = self._join(LOCK)
        try:
            self.host.lock(path, timeout, holder)
        except LockBusy as exc:
            raise CpctlError("locked by %s" % exc.holder, ExitCode.LOCKED,
                             hint="wait for it, or raise --lock-timeout") from None
        except OSError as exc:
            raise CpctlError("cannot lock %s: %s" % (path, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
        try:
            yield
        finally:
            self.host.unlock(path)


def user_label(host: Host) -> str:
    who = host.info()
    return who.get("sudo_user") or who["user"]

