"""Fault injection on chosen API requests, for tests of clients facing a hostile or broken API server.

Rules are set at run time through the lab's control channel (``POST /faults`` with a JSON list,
``GET /faults``, ``DELETE /faults``; :class:`cpctl_lab.control.LabHandle` wraps them) and apply to
every API listener of the lab, before authentication, routing or etcd checks. A rule::

    {"method": "GET",                  # optional, any method when absent
     "path": "^/api/v1/namespaces/kube-system/pods",   # regex, searched in the URL path
     "query": "watch=(1|true)",        # optional regex, searched in the raw query string
     "times": 2,                       # optional: only the first N matching requests
     "delay": 0.5,                     # optional: seconds to wait before acting (not for hang)
     "action": "status", ...}          # what to do, with the action's own fields:

``status``  ``code`` (default 500), ``reason``, ``message``, ``retry_after`` (sets Retry-After and
            ``details.retryAfterSeconds``): a real ``kind: Status`` body.
``html``    ``code`` (default 200) and ``body`` (default: a proxy's sign-in page), text/html.
``body``    ``code`` (default 200), ``content_type`` (default application/json) and one source:
            ``body`` (a string, sent as is), ``json`` (any JSON value: a list, a string...),
            ``nested`` (depth N: ``[[[...]]]``), ``size`` (a valid JSON document of exactly N
            bytes) or none (the real response's body); then optionally ``truncate`` (keep the
            first N bytes, Content-Length honest) and ``hangup`` (announce the full length, send the
            truncated part, close the connection).
``hang``    Accept and read the request, answer nothing until the rule is cleared (then the request
            is served normally) or the listener stops (then the connection is cut).
``drip``    Send the real response one byte every ``interval`` seconds (default 1.0); once the
            rule is cleared the rest goes at once.
``reset``   Close the connection with a TCP reset, no response.

Every rule counts the requests it was applied to (``hits``) so a test can assert it was met.
Only clients on the listeners meet faults: the lab's own components (kubelets, scheduler, leases)
reach the simulated API server in-process, as if the fault sat between the client and the server.
"""

from __future__ import annotations

import io
import json
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Optional

ACTIONS = ("status", "html", "body", "hang", "drip", "reset")
BODY_SOURCES = ("body", "json", "nested", "size")
RULE_FIELDS = {
    "action", "method", "path", "query", "times", "delay", "code", "reason", "message", "retry_after",
    "body", "json", "nested", "size", "truncate", "hangup", "content_type", "interval",
}
MAX_GENERATED = 256 * 1024 * 1024
POLL = 0.25

#: StatusReason and the apimachinery wording for the codes a test is likely to inject.
STATUS_TEXT = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "forbidden: the server does not allow access to the requested resource"),
    404: ("NotFound", "the server could not find the requested resource"),
    405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
    409: ("Conflict", "the server reported a conflict"),
    410: ("Expired", "the resource version is too old"),
    413: ("RequestEntityTooLarge", "the request is too large"),
    422: ("Invalid", "the server rejected our request due to an error in our request"),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "Timeout: the server was unable to return a response in the time allotted"),
}
SIGN_IN_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>Sign in - Corporate Web Proxy</title></head>\n"
    "<body><h1>Authentication required</h1>\n<p>Please sign in to continue to the requested site.</p>\n"
    '<form method="post" action="/login"><input name="user"><input name="password" type="password">'
    "<button>Sign in</button></form></body></html>\n"
)


class FaultSpecError(ValueError):
    """A rule the control channel was given is malformed (answered with 400)."""


def _number(spec: dict[str, Any], key: str, kind: type, minimum: float) -> Any:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise FaultSpecError(f"{key} must be a{'n integer' if kind is int else ' number'}")
    if value < minimum:
        raise FaultSpecError(f"{key} must be >= {minimum}")
    return kind(value)


@dataclass
class FaultRule:
    """One installed rule and its hit count; ``released`` is set when it is cleared or replaced."""

    ident: int
    action: str
    path: str
    method: str = ""
    query: str = ""
    times: Optional[int] = None
    delay: float = 0.0
    code: Optional[int] = None
    reason: str = ""
    message: str = ""
    retry_after: Optional[int] = None
    source: str = ""
    source_value: Any = None
    truncate: Optional[int] = None
    hangup: bool = False
    content_type: str = ""
    interval: float = 1.0
    hits: int = 0
    released: bool = False
    _path_re: re.Pattern = field(default=re.compile(""), repr=False)
    _query_re: Optional[re.Pattern] = field(default=None, repr=False)

    @classmethod
    def from_spec(cls, ident: int, spec: Any) -> "FaultRule":
        """Validate one JSON rule; raise FaultSpecError with the reason."""
        if not isinstance(spec, dict):
            raise FaultSpecError("each rule must be a JSON object")
        unknown = sorted(set(spec) - RULE_FIELDS)
        if unknown:
            raise FaultSpecError(f"unknown rule field(s): {', '.join(unknown)}")
        action = spec.get("action")
        if action not in ACTIONS:
            raise FaultSpecError(f"action must be one of {', '.join(ACTIONS)}")
        path = spec.get("path")
        if not isinstance(path, str):
            raise FaultSpecError("path (a regular expression) is required")
        rule = cls(ident=ident, action=str(action), path=path)
        try:
            rule._path_re = re.compile(path)
            rule.query = str(spec.get("query") or "")
            rule._query_re = re.compile(rule.query) if rule.query else None
        except re.error as exc:
            raise FaultSpecError(f"bad regular expression: {exc}") from None
        rule.method = str(spec.get("method") or "").upper()
        rule.times = _number(spec, "times", int, 1)
        rule.delay = _number(spec, "delay", float, 0) or 0.0
        rule.code = _number(spec, "code", int, 100)
        if rule.code is not None and rule.code > 599:
            raise FaultSpecError("code must be an HTTP status code")
        rule.reason, rule.message = str(spec.get("reason") or ""), str(spec.get("message") or "")
        rule.retry_after = _number(spec, "retry_after", int, 0)
        rule.truncate = _number(spec, "truncate", int, 0)
        rule.hangup = bool(spec.get("hangup"))
        rule.content_type = str(spec.get("content_type") or "")
        interval = _number(spec, "interval", float, 0)
        rule.interval = 1.0 if interval is None else interval
        rule._set_source(spec)
        return rule

    def _set_source(self, spec: dict[str, Any]) -> None:
        given = [k for k in BODY_SOURCES if k in spec]
        if len(given) > 1:
            raise FaultSpecError(f"give at most one of {', '.join(BODY_SOURCES)}")
        if not given:
            return
        self.source, self.source_value = given[0], spec[given[0]]
        if self.source == "body" and not isinstance(self.source_value, str):
            raise FaultSpecError("body must be a string (use json for other JSON values)")
        if self.source in ("nested", "size"):
            self.source_value = _number(spec, self.source, int, 0)
            if self.source_value * (2 if self.source == "nested" else 1) > MAX_GENERATED:
                raise FaultSpecError(f"{self.source} is too large")

    def matches(self, method: str, path: str, query: str) -> bool:
        if self.method and self.method != method:
            return False
        if not self._path_re.search(path):
            return False
        return self._query_re is None or bool(self._query_re.search(query))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.ident, "action": self.action, "path": self.path, "hits": self.hits}
        optional = {
            "method": self.method, "query": self.query, "times": self.times, "delay": self.delay or None,
            "code": self.code, "reason": self.reason, "message": self.message, "retry_after": self.retry_after,
            "truncate": self.truncate, "hangup": self.hangup or None, "content_type": self.content_type,
        }
        out.update({k: v for k, v in optional.items() if v not in (None, "")})
        if self.action == "drip":
            out["interval"] = self.interval
        if self.source:
            out[self.source] = self.source_value
        return out

    def generated_body(self) -> Optional[bytes]:
        """The body the rule itself supplies, or None to use the real response's."""
        if self.action == "html":
            return (self.source_value if self.source == "body" else SIGN_IN_PAGE).encode()
        if self.source == "body":
            return str(self.source_value).encode()
        if self.source == "json":
            return json.dumps(self.source_value).encode()
        if self.source == "nested":
            depth = int(self.source_value)
            return b"[" * depth + b"]" * depth
        if self.source == "size":
            return _json_of_size(int(self.source_value))
        return None


def _json_of_size(size: int) -> bytes:
    """A valid JSON document of exactly ``size`` bytes (a one-string list), for oversized answers."""
    if size < 4:
        return b"0" * max(size, 1)
    return b'["' + b"x" * (size - 4) + b'"]'


class FaultInjector:
    """The installed rules, shared by all API listeners; thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._rules: list[FaultRule] = []
        self._next_id = 1

    def set(self, specs: Any) -> list[dict[str, Any]]:
        """Replace all rules by ``specs`` (a JSON list, or ``{"rules": [...]}``); validates all first."""
        if isinstance(specs, dict) and "rules" in specs:
            specs = specs["rules"]
        if not isinstance(specs, list):
            raise FaultSpecError("expected a JSON list of rules")
        with self._cond:
            rules = [FaultRule.from_spec(self._next_id + i, s) for i, s in enumerate(specs)]
            self._next_id += len(rules)
            self._release_all()
            self._rules = rules
            return [r.to_json() for r in rules]

    def clear(self) -> list[dict[str, Any]]:
        """Remove every rule (hung requests are served, drips finish at once); returns them with hits."""
        with self._cond:
            gone = [r.to_json() for r in self._rules]
            self._release_all()
            self._rules = []
            return gone

    def snapshot(self) -> list[dict[str, Any]]:
        with self._cond:
            return [r.to_json() for r in self._rules]

    def _release_all(self) -> None:
        for rule in self._rules:
            rule.released = True
        self._cond.notify_all()

    def match(self, method: str, path: str, query: str) -> Optional[FaultRule]:
        """The first rule that applies to this request, counted as hit; None when none does."""
        with self._cond:
            for rule in self._rules:
                if rule.times is not None and rule.hits >= rule.times:
                    continue
                if rule.matches(method, path, query):
                    rule.hits += 1
                    return rule
        return None

    def wait(self, rule: FaultRule, seconds: Optional[float], stopping: Callable[[], bool]) -> bool:
        """Sleep up to ``seconds`` (None: forever) or until the rule is released or the listener stops.

        Returns True when the wait ended because the rule was released."""
        deadline = None if seconds is None else time.monotonic() + seconds
        with self._cond:
            while not rule.released and not stopping():
                left = POLL if deadline is None else min(POLL, deadline - time.monotonic())
                if left <= 0:
                    return False
                self._cond.wait(left)
            return rule.released


def control(injector: FaultInjector, method: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """The control channel's ``/faults`` endpoint: (HTTP code, JSON answer)."""
    if method == "GET":
        return 200, {"rules": injector.snapshot()}
    if method == "DELETE":
        return 200, {"rules": injector.clear()}
    if method == "POST":
        try:
            return 200, {"rules": injector.set(json.loads(body or b"null"))}
        except (ValueError, FaultSpecError) as exc:
            return 400, {"error": str(exc)}
    return 405, {"error": f"method {method} not allowed on /faults"}


# --------------------------------------------------------------------------- serving a fault


def status_body(rule: FaultRule) -> dict[str, Any]:
    """The ``kind: Status`` a status rule answers with."""
    code = rule.code or 500
    reason, message = STATUS_TEXT.get(code, ("", f"injected HTTP {code}"))
    details: dict[str, Any] = {}
    if rule.retry_after is not None:
        details["retryAfterSeconds"] = rule.retry_after
    if code == 500 and not rule.message:
        details["causes"] = [{"message": "injected fault"}]
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": rule.message or message,
        "reason": rule.reason or reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def split_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Parse a captured HTTP/1.1 response into (code, headers, body), undoing chunked encoding."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("iso-8859-1").split("\r\n")
    code = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 200
    headers: dict[str, str] = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(body)
    return code, headers, body


def _dechunk(data: bytes) -> bytes:
    stream, out = io.BytesIO(data), bytearray()
    while True:
        size_line = stream.readline().strip()
        if not size_line:
            break
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += stream.read(size)
        stream.readline()
    return bytes(out)


class FaultServer:
    """Applies one matched rule to one request on behalf of the API handler.

    ``replay`` runs the request through the real API and returns the raw HTTP response it would
    have sent; ``serve_normally`` processes the request as if no rule existed."""

    def __init__(
        self,
        handler: BaseHTTPRequestHandler,
        injector: FaultInjector,
        stopping: Callable[[], bool],
        replay: Callable[[], bytes],
        serve_normally: Callable[[], None],
    ) -> None:
        self.handler = handler
        self.injector = injector
        self.stopping = stopping
        self.replay = replay
        self.serve_normally = serve_normally

    def apply(self, rule: FaultRule) -> None:
        if rule.action == "hang":
            self._hang(rule)
            return
        if rule.delay:
            self.injector.wait(rule, rule.delay, self.stopping)
        getattr(self, f"_{rule.action}")(rule)

    def _drain(self) -> None:
        """Read the request body, so the answer does not race an unread upload."""
        length = int(self.handler.headers.get("Content-Length") or 0)
        if length:
            self.handler.rfile.read(length)

    def _write(self, code: int, ctype: str, data: bytes, headers: Optional[dict[str, str]] = None,
               length: Optional[int] = None) -> None:
        h = self.handler
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data) if length is None else length))
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)
            h.wfile.flush()

    def _status(self, rule: FaultRule) -> None:
        self._drain()
        extra = {"Retry-After": str(rule.retry_after)} if rule.retry_after is not None else {}
        self._write(rule.code or 500, "application/json", json.dumps(status_body(rule)).encode(), extra)

    def _html(self, rule: FaultRule) -> None:
        self._drain()
        self._write(rule.code or 200, rule.content_type or "text/html; charset=utf-8", rule.generated_body() or b"")

    def _body(self, rule: FaultRule) -> None:
        data = rule.generated_body()
        code, ctype = rule.code or 200, rule.content_type or "application/json"
        if data is None:
            real_code, headers, data = split_response(self.replay())
            code = rule.code or real_code
            ctype = rule.content_type or headers.get("content-type", ctype)
        else:
            self._drain()
        full = len(data)
        if rule.truncate is not None:
            data = data[: rule.truncate]
        if rule.hangup:
            self._write(code, ctype, data, length=full)
            self.handler.close_connection = True
            return
        self._write(code, ctype, data)

    def _hang(self, rule: FaultRule) -> None:
        if self.injector.wait(rule, None, self.stopping) and not self.stopping():
            self.serve_normally()
        else:
            self.handler.close_connection = True

    def _drip(self, rule: FaultRule) -> None:
        data = self.replay()
        out = self.handler.wfile
        for i in range(len(data)):
            if rule.released or self.stopping():
                out.write(data[i:])
                break
            out.write(data[i : i + 1])
            out.flush()
            if i + 1 < len(data):
                self.injector.wait(rule, rule.interval, self.stopping)
        out.flush()

    def _reset(self, rule: FaultRule) -> None:  # noqa: ARG002 -- same signature as the other actions
        sock = self.handler.connection
        self.handler.close_connection = True
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.handler.rfile.close()
            self.handler.wfile.close()
            sock.close()
        except OSError:
            pass
