"""Issue #22 item 5: an agent's replies are untrusted (a compromised master writes them).

Each reply line is bounded before it is parsed, then type-checked against the request: a line
that is too long, not JSON, nested too deeply, not an object, missing its keys or of the wrong
types is that host's error (``BadReply``, exit 8), never an exception that would end the run in
exit 70 and never a line read whole into memory. The hostile agent here is a real byte stream (a
pipe pair) answering what a compromised agent would; the CLI-level runs over a real sshd are in
``tests/host/test_remote_hostile.py``.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable, Iterator, List

import pytest

from cpctl.errors import CpctlError, ExitCode, failure_of
from cpctl.host import replies
from cpctl.host.agent import AgentHost
from cpctl.host.replies import MAX_REPLY_BYTES, BadReply

pytestmark = pytest.mark.timeout(120)

READY = b'{"ready": true, "pid": 1}\n'


class HostileAgent:
    """A pipe pair whose far end reads each request line and writes ``answer(request)`` back."""

    def __init__(self, answer: Callable[[dict], Iterator[bytes]]) -> None:
        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        self.reader = os.fdopen(self._rep_r, "rb")
        self.writer = os.fdopen(self._req_w, "wb")
        self._thread = threading.Thread(target=self._serve, args=(req_r, rep_w, answer), daemon=True)
        self._thread.start()

    @staticmethod
    def _serve(req_r: int, rep_w: int, answer: Callable[[dict], Iterator[bytes]]) -> None:
        with os.fdopen(req_r, "rb") as requests, os.fdopen(rep_w, "wb") as out:
            try:
                out.write(READY)
                out.flush()
                for line in requests:
                    for chunk in answer(json.loads(line)):
                        if not chunk:           # b"": hang up (the line stays cut off)
                            return
                        out.write(chunk)
                        out.flush()
            except (BrokenPipeError, ValueError, OSError):
                return

    def host(self) -> AgentHost:
        return AgentHost("evil-master", self.reader, self.writer)

    def close(self) -> None:
        for stream in (self.writer, self.reader):
            try:
                stream.close()
            except OSError:
                pass


def _endless(request: dict) -> Iterator[bytes]:
    """A line that never ends: 1 MiB chunks, far beyond MAX_REPLY_BYTES (stops when nobody reads)."""
    yield b'{"ok": true, "result": "'
    chunk = b"A" * (1 << 20)
    for _ in range((MAX_REPLY_BYTES >> 20) + 64):
        yield chunk


def _fixed(line: bytes) -> Callable[[dict], Iterator[bytes]]:
    """The same answer to every request; an answer without its newline is followed by a hang-up."""
    return lambda request: iter([line] if line.endswith(b"\n") else [line, b""])


HOSTILE: List[Any] = [
    ("not JSON", b"hello there\n"),
    ("a list", b"[1, 2, 3]\n"),
    ("a string", b'"ok"\n'),
    ("deep nesting", b"[" * 200000 + b"]" * 200000 + b"\n"),
    ("deep object", b'{"ok": true, "result": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}\n"),
    ("no ok", b'{"result": {}}\n'),
    ("no result", b'{"ok": true}\n'),
    ("ok not bool", b'{"ok": "yes", "result": null}\n'),
    ("unknown error kind", b'{"ok": false, "kind": "boom"}\n'),
    ("os error of wrong types", b'{"ok": false, "kind": "os", "errno": "2", "strerror": 5}\n'),
    ("lock without holder", b'{"ok": false, "kind": "lock"}\n'),
    ("bad base64", b'{"ok": true, "result": {"b64": "@@@"}}\n'),
    ("base64 of a number", b'{"ok": true, "result": {"b64": 5}}\n'),
    ("cut off at EOF", b'{"ok": true, "result": '),
    ("invalid UTF-8", b'{"ok": true, "result": "\xff\xfe"}\n'),
]


@pytest.mark.parametrize("what,line", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_malformed_reply_is_that_hosts_error(what: str, line: bytes) -> None:
    agent = HostileAgent(_fixed(line))
    try:
        host = agent.host()
        with pytest.raises(CpctlError) as caught:
            host.info()
        failure = failure_of(caught.value)
        assert failure.code is ExitCode.UNREACHABLE, (what, failure)
        assert failure.message.startswith("evil-master: ") and "\n" not in failure.message
        # The stream is out of step now: every later request fails the same way, without reading.
        with pytest.raises(CpctlError):
            host.lstat("/")
    finally:
        agent.close()


WRONG_RESULTS: List[Any] = [
    ("info", {}, {"hostname": 5, "user": "u", "python": "3", "pid": 1, "euid": 0}),
    ("info", {}, [1, 2]),
    ("info", {}, {"hostname": "h", "user": "u", "python": "3", "pid": "1", "euid": 0}),
    ("lstat", {"path": "/"}, {"kind": "file", "mode": 420}),
    ("lstat", {"path": "/"}, {"kind": "bomb", "mode": 420, "uid": 0, "gid": 0, "size": 1, "mtime": 1, "dev": 1}),
    ("lstat", {"path": "/"}, {"kind": "file", "mode": 420, "uid": 0, "gid": 0, "size": -1, "mtime": 1, "dev": 1}),
    ("listdir", {"path": "/"}, ["ok.yaml", "../../etc/profile.d/x"]),
    ("listdir", {"path": "/"}, ["a", 5]),
    ("listdir", {"path": "/"}, ".."),
    ("scan_dir", {"path": "/", "limit": 10},
     [{"kind": "file", "mode": 420, "uid": 0, "gid": 0, "size": 1, "mtime": 1, "dev": 1, "name": "a/b"}]),
    ("scan_dir", {"path": "/", "limit": 10},
     [{"kind": "file", "mode": 420, "uid": 0, "gid": 0, "size": 1, "mtime": 1, "dev": 1, "name": "a",
       "data": {"b64": "QUFBQUFBQUFBQUFBQUFBQQ=="}}]),
    ("read_file", {"path": "/x", "limit": 4}, {"b64": "QUFBQUFBQUE="}),
    ("read_file", {"path": "/x", "limit": 4}, "text"),
    ("move", {"src": "/a", "dst": "/b"}, "teleport"),
    ("unlink", {"path": "/a", "missing_ok": True}, "yes"),
    ("run", {"argv": ["crictl"], "timeout": 1.0, "stdin": b"", "env": None}, {"rc": 0, "stdout": "x", "stderr": ""}),
    ("http", {"method": "GET", "url": "http://x/"}, {"status": 200, "headers": {"a": 5}, "body": {"b64": ""}}),
    ("etcd_snapshot", {"url": "https://x/", "path": "/s.db"}, {"size": 1, "sha256": "zz" * 32, "revision": 1,
                                                              "keys": 1, "total_size": 1}),
    ("etcd_snapshot", {"url": "https://x/", "path": "/s.db"}, {"size": "1", "sha256": "ab" * 32, "revision": 1,
                                                              "keys": 1, "total_size": 1}),
    ("etcd_snapshot", {"url": "https://x/", "path": "/s.db"}, {"size": 1, "sha256": "ab" * 32, "keys": 1,
                                                              "total_size": 1}),
]


@pytest.mark.parametrize("op,args,result", WRONG_RESULTS,
                         ids=["%s-%d" % (w[0], i) for i, w in enumerate(WRONG_RESULTS)])
def test_a_result_of_the_wrong_shape_is_refused(op: str, args: dict, result: Any) -> None:
    line = json.dumps({"ok": True, "result": result}).encode() + b"\n"
    with pytest.raises(BadReply):
        replies.checked("evil-master", op, args, line)


def test_a_batch_checks_each_answer_against_its_own_request() -> None:
    requests = [{"op": "info", "args": {}}, {"op": "listdir", "args": {"path": "/"}}]
    good_info = {"ok": True, "result": {"hostname": "h", "user": "u", "python": "3", "pid": 1, "euid": 0}}
    good = json.dumps({"ok": True, "result": [good_info, {"ok": True, "result": ["a.yaml"]}]}).encode() + b"\n"
    assert replies.checked("m", "batch", {"requests": requests}, good)["ok"] is True
    for answers in ([good_info], [good_info, {"ok": True, "result": ["../x"]}], [good_info, "no"]):
        line = json.dumps({"ok": True, "result": answers}).encode() + b"\n"
        with pytest.raises(BadReply):
            replies.checked("m", "batch", {"requests": requests}, line)


def test_an_endless_line_is_cut_at_the_bound_never_read_whole() -> None:
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    agent = HostileAgent(_endless)
    try:
        host = agent.host()
        with pytest.raises(BadReply) as caught:
            host.info()
        assert "longer than %d bytes" % MAX_REPLY_BYTES in caught.value.message
    finally:
        agent.close()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    # The line is 192 MiB and never ends: what it may cost is the bound and one copy of it.
    assert grown_mib < 2.5 * (MAX_REPLY_BYTES >> 20), grown_mib


def test_an_error_reply_from_the_agent_is_never_exit_70() -> None:
    line = b'{"ok": false, "kind": "error", "message": "TypeError: \\u001b[2Jboom"}\n'
    agent = HostileAgent(_fixed(line))
    try:
        with pytest.raises(CpctlError) as caught:
            agent.host().info()
        assert failure_of(caught.value).code is ExitCode.ENVIRONMENT
    finally:
        agent.close()
