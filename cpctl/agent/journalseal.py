"""The journal's seal (HMAC under the node's key) and the state dir's history file: ONE format and ONE
rotation, for ``core.journal``/``core.state`` and for the agent.

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

import binascii
import errno
import os
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from cpctl.agent.fileops import (
    append,
    chmod,
    compress,
    info,
    listdir,
    lstat,
    move,
    read_file,
    read_tail,
    unlink,
    write_atomic,
)
from cpctl.agent.shapes import JournalStep, NodeFs


class NodeFiles(object):
    """This node's own primitives (``fileops``) as a ``NodeFs``: what a journaled change and the history
    run on in the agent, where no ``Host`` is. Each is looked up when one is made (a test may wrap them)."""

    def __init__(self) -> None:
        self.lstat, self.listdir, self.read_file, self.read_tail = lstat, listdir, read_file, read_tail
        self.compress, self.write_atomic, self.move, self.unlink = compress, write_atomic, move, unlink
        self.chmod, self.append, self.info = chmod, append, info

# --- the journal's seal: ONE rule for cpctl's journal (``core.journal``) and the node-side revert ----------
# A journal names files to write, move and remove; only a journal cpctl wrote on this node may be acted
# on, with exactly the paths its change recorded when it was made. Each entry carries ``seal``: an
# HMAC-SHA256, under this node's key (STATE/journal.key: 32 random bytes as hex, 0600, created on first
# use, never replaced), of the entry's canonical JSON without ``seal``. A journal whose seal is missing
# or wrong (crafted, copied from another node, edited) is refused before any of it is read as steps.
JOURNAL_KEY = "journal.key"


class JournalKeyError(Exception):
    """STATE/journal.key is not a key cpctl wrote (the text says why)."""


def journal_key(state_dir: str, fs: Optional[NodeFs] = None, create: bool = False) -> Optional[bytes]:
    """This node's journal key (bytes) from STATE/journal.key, None when there is none (and not
    ``create``). ``fs`` offers ``lstat``, ``read_file``, ``write_atomic`` (a ``Host``; this module's by
    default). A key that is not a 0600 regular file holding 64 hex digits: ``JournalKeyError``."""
    fs = fs or NodeFiles()
    path = state_dir.rstrip("/") + "/" + JOURNAL_KEY
    info = fs.lstat(path)
    if info is None and create:
        try:
            fs.write_atomic(path, binascii.hexlify(os.urandom(32)) + b"\n", mode=0o600, expect="absent")
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
        info = fs.lstat(path)
    if info is None:
        return None
    if info["kind"] != "file" or info["mode"] & 0o077:
        raise JournalKeyError("%s is not a regular file of mode 0600" % path)
    text = fs.read_file(path, 256).strip()
    try:
        key = binascii.unhexlify(text)
    except (binascii.Error, TypeError, ValueError):
        key = b""
    if len(key) != 32:
        raise JournalKeyError("%s does not hold a key cpctl wrote" % path)
    return key


def journal_seal(entry: Mapping[str, object], key: bytes) -> str:
    """The seal of journal ``entry`` (a dict) under ``key``: HMAC-SHA256 of its canonical JSON
    (sorted keys, no spaces, ASCII) without the ``seal`` field itself."""
    import hashlib
    import hmac
    import json
    body = dict((name, value) for name, value in entry.items() if name != "seal")
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def sealed(entry: Mapping[str, object], key: bytes) -> Dict[str, object]:
    """``entry`` with its seal, as it is written to the journal."""
    return dict(entry, seal=journal_seal(entry, key))


def seal_problem(entry: object, key: Optional[bytes]) -> str:
    """Why journal ``entry`` may not be acted on on this node ("" when its seal is this node's)."""
    import hmac
    if not isinstance(entry, dict):
        return "it is not a JSON object"
    seal = entry.get("seal")
    if not isinstance(seal, str) or not seal:
        return "it carries no seal"
    if key is None:
        return "this node has no journal key (%s), so no journal here was written by cpctl" % JOURNAL_KEY
    if not hmac.compare_digest(seal.encode("utf-8"), journal_seal(entry, key).encode("utf-8")):
        return "its seal does not match this node's key: written elsewhere, or edited"
    return ""


# --- the state dir's history file: ONE format and ONE rotation, for ``core.state.StateDir`` and the agent ----
HISTORY = "history.jsonl"
HISTORY_SEGMENT_PREFIX = "history."
HISTORY_ROTATE_BYTES = 4 << 20        # the current history file never grows past this
HISTORY_SEGMENTS = 20                 # compressed older segments kept (about 80 MiB of records)
HISTORY_TAIL_BYTES = 256 << 10        # what recovery reads to find a record it may have written


def history_line(record: object) -> bytes:
    """One history record as it is written: canonical JSON (sorted keys, no spaces) and a newline."""
    import json
    return (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")


def journal_bytes(entry: Mapping[str, object]) -> bytes:
    """A journal entry as it is written (``STATE/journal.json``)."""
    import json
    return (json.dumps(entry, indent=2, sort_keys=True) + "\n").encode("utf-8")


def history_segments(fs: NodeFs, state_dir: str) -> List[str]:
    """Names of the older history files in ``state_dir``, oldest first (time-stamped names sort in order)."""
    return sorted(n for n in fs.listdir(state_dir)
                  if n.startswith(HISTORY_SEGMENT_PREFIX) and n.endswith((".jsonl.gz", ".jsonl")) and n != HISTORY)


def append_history(fs: NodeFs, state_dir: str, line: bytes, rotate: int = HISTORY_ROTATE_BYTES,
                   keep: int = HISTORY_SEGMENTS) -> None:
    """Append one record line durably to ``state_dir``'s history; first, when it would grow past
    ``rotate`` bytes, move the file aside (one no-replace rename), compress it, keep the newest
    ``keep`` segments - each step leaves every record complete somewhere. ``fs``: a ``Host``, or this
    module's functions (``_node_fs``)."""
    path = state_dir.rstrip("/") + "/" + HISTORY
    info = fs.lstat(path)
    if info is not None and info["size"] + len(line) > rotate:
        segment = "%s/%s%s.jsonl" % (state_dir.rstrip("/"), HISTORY_SEGMENT_PREFIX,
                                     time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        if fs.lstat(segment) is not None:
            segment = segment[:-len(".jsonl")] + "-%d.jsonl" % fs.info()["pid"]
        fs.move(path, segment)
        fs.compress(segment, segment + ".gz")
        fs.unlink(segment)
        for old in history_segments(fs, state_dir)[:-keep]:
            fs.unlink(state_dir.rstrip("/") + "/" + old)
    fs.append(path, line)


def parse_records(data: bytes) -> List[Dict[str, object]]:
    """History lines as records; a torn or foreign line is skipped (the records around it stand)."""
    import json
    records: List[Dict[str, object]] = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def tail_records(fs: NodeFs, path: str, limit: int = HISTORY_TAIL_BYTES) -> List[Dict[str, object]]:
    """The records of the last ``limit`` bytes of the history file ``path`` (its first, cut line
    dropped when the file is longer); [] when there is none."""
    try:
        data = fs.read_tail(path, limit)
    except FileNotFoundError:
        return []
    return parse_records(data)[1:] if len(data) == limit else parse_records(data)


def step_words(steps: Sequence[JournalStep], failures: Sequence[Tuple[int, BaseException]],
               suffix: str = "") -> List[str]:
    """A runner's [(step index, error)] as text: "<what the step does><suffix>: <why>"."""
    words: List[str] = []
    for index, exc in failures:
        step = steps[index]
        what = "move %s to %s" % (step["src"], step["path"]) if step["kind"] == "move" else \
            "%s %s" % (step["kind"], step["path"])
        why = getattr(exc, "message", None) or (getattr(exc, "strerror", None) if isinstance(exc, OSError) else None)
        words.append("%s%s: %s" % (what, suffix, why or str(exc)))
    return words
