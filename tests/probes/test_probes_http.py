"""Issue #13/#16: ``cpctl.agent.httpops.http`` - the one HTTP client of every probe, here and on masters.

A request has a TOTAL deadline (connect, TLS, send, status, headers, body: a server dripping one
byte at a time cannot stretch it), a bounded body, IPv6 literals, and errors that are always an
``OSError`` in cpctl's own words: never a header value (a token), a server's text or TLS material.
Raw-socket servers on 127.0.0.1/::1 play each hostile peer; the agent (``SubprocessAgentHost``,
the SSH protocol over a pipe) must behave the same.
"""

from __future__ import annotations

import errno
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Callable, Optional

import pytest

from cpctl.agent import httpops
from cpctl.host.agent import SubprocessAgentHost
from cpctl.host.local import LocalHost

SECRET = "s3cr3t-t0ken-value"
SLACK = 0.6   # what a deadline may be overrun by on a loaded 2-core machine (measured: < 0.05 s)

Handler = Callable[[socket.socket], None]


class RawServer:
    """Accepts connections on loopback and hands each to ``handler`` in its own thread."""

    def __init__(self, handler: Handler, family: int = socket.AF_INET,
                 tls: Optional[ssl.SSLContext] = None) -> None:
        self.handler = handler
        self.tls = tls
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests: list = []
        self.stopping = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, path: str = "/", scheme: str = "http") -> str:
        host = "[::1]" if self.sock.family == socket.AF_INET6 else "127.0.0.1"
        return "%s://%s:%d%s" % (scheme, host, self.port, path)

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            self.handler(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stopping.set()
        self.sock.close()


def read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    servers: list = []

    def start(handler: Handler, **kw: object) -> RawServer:
        server = RawServer(handler, **kw)  # type: ignore[arg-type]
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def answer(body: bytes = b"ok", status: str = "200 OK", extra: bytes = b"") -> Handler:
    def handler(conn: socket.socket) -> None:
        while True:
            request = read_request(conn)
            if not request:
                return
            conn.sendall(b"HTTP/1.1 %s\r\nContent-Length: %d\r\n%s\r\n" % (status.encode(), len(body), extra) + body)
    return handler


def timed(call: Callable[[], object]) -> tuple:
    """(exception or None, seconds)."""
    started = time.monotonic()
    try:
        call()
    except OSError as exc:
        return exc, time.monotonic() - started
    return None, time.monotonic() - started


# --- the total deadline ------------------------------------------------------------------------------
def drip(response: bytes, interval: float) -> Handler:
    def handler(conn: socket.socket) -> None:
        read_request(conn)
        for byte in response:
            conn.sendall(bytes([byte]))
            time.sleep(interval)
    return handler


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_drip_ends_at_the_deadline(serve, where):
    # one byte every 0.1 s: each read is quick, only a total deadline can end it (the old per-read
    # socket timeout let it run for the whole response, here 30+ s)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 300\r\n\r\n"
    server = serve(drip(head + b"x" * 300, 0.1) if where == "headers" else _head_then_drip(head, b"x" * 300, 0.1))
    exc, took = timed(lambda: httpops.http("GET", server.url("/slow"), timeout=1.0))
    assert isinstance(exc, TimeoutError) and exc.errno == errno.ETIMEDOUT, exc
    assert exc.strerror == "no complete answer within 1s"
    assert 0.9 <= took < 1.0 + SLACK, took


def _head_then_drip(head: bytes, body: bytes, interval: float) -> Handler:
    def handler(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(head)
        for byte in body:
            conn.sendall(bytes([byte]))
            time.sleep(interval)
    return handler


def test_silent_server_and_silent_tls_handshake_end_at_the_deadline(serve):
    def silent(conn: socket.socket) -> None:
        time.sleep(5)

    server = serve(silent)
    for scheme in ("http", "https"):   # https: accepts TCP, never answers the TLS ClientHello
        exc, took = timed(lambda scheme=scheme: httpops.http("GET", server.url("/", scheme), timeout=0.5,
                                                         tls={"insecure": True}))
        assert isinstance(exc, TimeoutError), (scheme, exc)
        assert 0.45 <= took < 0.5 + SLACK, (scheme, took)


def test_the_deadline_holds_through_the_agent(serve):
    # on a master the request runs in the agent: the same deadline, the same OSError
    server = serve(drip(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"y" * 100, 0.1))
    agent = SubprocessAgentHost()
    try:
        exc, took = timed(lambda: agent.http("GET", server.url("/"), timeout=0.8))
        assert isinstance(exc, OSError) and exc.errno == errno.ETIMEDOUT, exc
        assert took < 0.8 + SLACK
        # the agent survives and serves the next request
        ok = serve(answer(b"fine"))
        assert agent.http("GET", ok.url("/"), timeout=2)["body"] == b"fine"
    finally:
        agent.close()


# --- the body limit ----------------------------------------------------------------------------------
def test_answers_over_the_limit_are_errors_not_memory(serve):
    declared = serve(answer(b"z" * 5000))
    exc, _ = timed(lambda: httpops.http("GET", declared.url("/"), limit=1000))
    assert exc is not None and exc.errno == errno.EFBIG and "over the limit of 1000 bytes" in exc.strerror

    def chunked(conn: socket.socket) -> None:   # no Content-Length: counted while read
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(100):
            conn.sendall(b"100\r\n" + b"c" * 256 + b"\r\n")
        conn.sendall(b"0\r\n\r\n")

    streamed = serve(chunked)
    exc, _ = timed(lambda: httpops.http("GET", streamed.url("/"), limit=4096))
    assert exc is not None and exc.errno == errno.EFBIG and "larger than the limit of 4096 bytes" in exc.strerror
    assert len(httpops.http("GET", streamed.url("/"), limit=25600)["body"]) == 25600
    assert httpops.http("GET", declared.url("/"))["body"] == b"z" * 5000   # the default limit is generous


# --- IPv6, keep-alive, refused ---------------------------------------------------------------------------
def test_ipv6_literals(serve):
    server = serve(answer(b"six"), family=socket.AF_INET6)
    assert server.url("/readyz").startswith("http://[::1]:")
    assert httpops.http("GET", server.url("/readyz"))["body"] == b"six"
    exc, _ = timed(lambda: httpops.http("GET", "http://::1:%d/readyz" % server.port))
    assert exc is not None and exc.errno == errno.EINVAL and "brackets" in exc.strerror


def test_keep_alive_reuse_and_connection_close(serve):
    connections: list = []

    def counting(conn: socket.socket) -> None:
        connections.append(conn)
        answer(b"again")(conn)

    server = serve(counting)
    for _ in range(3):
        assert httpops.http("GET", server.url("/"))["body"] == b"again"
    assert len(connections) == 1
    closing = serve(answer(b"bye", extra=b"Connection: close\r\n"))
    assert [httpops.http("GET", closing.url("/"))["body"] for _ in range(2)] == [b"bye", b"bye"]


def test_refused_is_a_connection_refused_error():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))   # bound, never listening: connections to it are refused
    port = probe.getsockname()[1]
    try:
        exc, _ = timed(lambda: httpops.http("GET", "http://127.0.0.1:%d/" % port, timeout=2))
    finally:
        probe.close()
    assert isinstance(exc, ConnectionRefusedError), exc   # what "nothing listens" checks rely on


# --- no secret in any error --------------------------------------------------------------------------------
def test_a_header_with_a_control_character_is_refused_by_name(serve):
    seen: list = []

    def record(conn: socket.socket) -> None:
        seen.append(read_request(conn))

    server = serve(record)
    for host in (LocalHost(), SubprocessAgentHost()):
        try:
            with pytest.raises(OSError) as excinfo:
                host.http("GET", server.url("/"), headers={"Authorization": "Bearer %s\n" % SECRET})
        finally:
            host.close()
        assert excinfo.value.errno == errno.EINVAL
        assert "Authorization" in str(excinfo.value) and SECRET not in str(excinfo.value)
    assert seen == []   # nothing was sent


def test_malformed_answers_are_described_not_quoted(serve):
    echo = ("HTTP/1.1 %s is what you sent\r\n\r\n" % SECRET).encode()

    def bad_status(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(echo)

    def cut(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + SECRET.encode())

    def reset(conn: socket.socket) -> None:
        read_request(conn)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")

    for handler, words in ((bad_status, "malformed HTTP answer"), (cut, "answer cut short"),
                           (reset, "Connection reset by peer")):
        exc, _ = timed(lambda handler=handler: httpops.http("GET", serve(handler).url("/"), timeout=2))
        assert exc is not None and words in str(exc), (words, exc)
        assert SECRET not in str(exc)


def _tls_material(directory, passphrase: Optional[bytes] = None) -> tuple:
    """(cert path, key path) of a new self-signed certificate for 127.0.0.1, in ``directory``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    crypt = serialization.BestAvailableEncryption(passphrase) if passphrase else serialization.NoEncryption()
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "c.pem", directory / "k.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, crypt))
    return str(cert_path), str(key_path)


def test_tls_failures_name_the_material_never_its_bytes(serve, tmp_path):
    cert, key = _tls_material(tmp_path / "server")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    server = serve(answer(b"tls"), tls=server_ctx)
    url = server.url("/", "https")
    assert httpops.http("GET", url, tls={"ca_file": cert})["body"] == b"tls"
    exc, _ = timed(lambda: httpops.http("GET", url, tls={"ca_data": b"-----BEGIN CERTIFICATE-----\nnope\n"}))
    assert exc is not None and exc.strerror == "certificate authority: not a valid PEM certificate"
    other_cert, _other_key = _tls_material(tmp_path / "other")
    exc, _ = timed(lambda: httpops.http("GET", url, tls={"ca_file": other_cert}))
    assert exc is not None and "TLS: server certificate not accepted" in exc.strerror
    # a passphrase-protected client key: refused, never prompted for (a prompt would hang an agent)
    locked_cert, locked_key = _tls_material(tmp_path / "locked", SECRET.encode())
    with open(locked_cert, "rb") as cert_file, open(locked_key, "rb") as key_file:
        material = {"insecure": True, "cert_data": cert_file.read(), "key_data": key_file.read()}
    exc, _ = timed(lambda: httpops.http("GET", url, tls=material))
    assert exc is not None and exc.strerror == "client key: protected by a passphrase (not supported)"
    exc, _ = timed(lambda: httpops.http("GET", url, tls={"insecure": True, "cert_data": b"junk", "key_data": b"junk"}))
    assert exc is not None and "client certificate/key: not valid PEM" in exc.strerror
    assert b"junk" not in str(exc).encode() and SECRET not in str(exc)


# --- the answer's framing (cpctl reads HTTP/1.1 itself: no http.client, no email parser) ------------
def test_requests_carry_host_and_identity_encoding(serve):
    seen: list = []

    def record(conn: socket.socket) -> None:
        head = read_request(conn)
        seen.append(head)
        size = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0]) if b"ength: " in head else 0
        body = head.split(b"\r\n\r\n", 1)[1]
        while len(body) < size:
            body += conn.recv(4096)
        seen.append(body)
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")

    for family in (socket.AF_INET, socket.AF_INET6):
        server = serve(record, family=family)
        reply = httpops.http("POST", server.url("/api/v1/x?dryRun=All"), headers={"Content-Type": "application/json"},
                         body=b'{"a": 1}')
        assert reply["status"] == 201 and reply["body"] == b""
        head, body = seen[-2:]
        lines = head.split(b"\r\n")
        assert lines[0] == b"POST /api/v1/x?dryRun=All HTTP/1.1"
        shown = b"[::1]" if family == socket.AF_INET6 else b"127.0.0.1"
        assert b"Host: %s:%d" % (shown, server.port) in lines
        assert b"Accept-Encoding: identity" in lines and b"Content-Type: application/json" in lines
        assert b"Content-Length: 8" in lines and body == b'{"a": 1}'


def _scripted(*answers: bytes) -> Handler:
    """Answers each request on the connection with the next of ``answers``, then hangs up."""
    def handler(conn: socket.socket) -> None:
        for data in answers:
            if not read_request(conn):
                return
            conn.sendall(data)
    return handler


def test_chunked_interim_and_until_close_answers(serve):
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Folded: one\r\n two\r\n\r\n"
               b"5;name=value\r\nhello\r\nA\r\n, world!!!\r\n0\r\nX-Trailer: t\r\n\r\n")
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" \
              b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    connections: list = []

    def counting(conn: socket.socket) -> None:
        connections.append(conn)
        _scripted(chunked, interim, chunked)(conn)

    server = serve(counting)
    first = httpops.http("GET", server.url("/"))
    assert first["body"] == b"hello, world!!!" and first["headers"]["X-Folded"] == "one two"
    assert httpops.http("GET", server.url("/"))["body"] == b"ok"
    assert httpops.http("GET", server.url("/"))["body"] == b"hello, world!!!"
    assert len(connections) == 1   # all three on one kept-alive connection

    until_close = serve(_scripted(b"HTTP/1.0 200 OK\r\n\r\n" + b"u" * 3000))
    assert httpops.http("GET", until_close.url("/"))["body"] == b"u" * 3000
    exc, _ = timed(lambda: httpops.http("GET", until_close.url("/"), limit=1000))
    assert exc is not None and exc.errno == errno.EFBIG
    head_only = serve(_scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n"))
    assert httpops.http("HEAD", head_only.url("/"))["body"] == b""


SECRET_BYTES = SECRET.encode()


@pytest.mark.parametrize("data, words", [
    (b"HTTP/1.1 200 OK\r\nX-%s\r\n\r\n" % SECRET_BYTES, "malformed HTTP answer (a header line)"),
    (b"HTTP/1.1 200 OK\r\n %s: folded first\r\n\r\n" % SECRET_BYTES, "malformed HTTP answer (a header line)"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", "malformed HTTP answer (over 100 header lines)"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n", "malformed HTTP answer (a line too long)"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000, "malformed HTTP answer (a line too long)"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nokk", "its Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nok", "its Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx", "a transfer coding other than chunked"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed HTTP answer (a chunk size)"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokk\r\n0\r\n\r\n", "a chunk longer than its size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort", "answer cut short (11 bytes"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n", "its chunked body unfinished"),
    (b"HTTP/1.1 200 OK\r\nContent-Le", "answer cut short (in a line of its head)"),
    (b"HTTP/1.1 200 OK\r\nServer: x\r\n", "answer cut short (in its head)"),
    (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "a protocol switch that was not asked for"),
    (b"HTTP/2 200\r\n\r\n", "malformed HTTP answer (its status line)"),
    (b"HTTP/1.1 20 OK\r\n\r\n", "malformed HTTP answer (its status line)"),
    (b"ICY 200 OK\r\n\r\n", "malformed HTTP answer (its status line)"),
])
def test_malformed_framing_is_refused_in_cpctls_words(serve, data, words):
    server = serve(_scripted(data))
    exc, _ = timed(lambda: httpops.http("GET", server.url("/"), timeout=3))
    assert exc is not None and exc.errno in (errno.EPROTO, errno.EFBIG) and words in exc.strerror, exc
    assert SECRET not in str(exc)


def test_a_request_line_with_a_space_or_control_character_is_not_sent(serve):
    seen: list = []
    server = serve(lambda conn: seen.append(read_request(conn)))
    for path in ("/a b", "/a\r\nX-Injected: 1", "/\x7f"):
        exc, _ = timed(lambda path=path: httpops.http("GET", server.url(path)))
        assert exc is not None and exc.errno == errno.EINVAL and "control character or space" in exc.strerror
    exc, _ = timed(lambda: httpops.http("GET /x HTTP/1.1\r\n", server.url("/")))
    assert exc is not None and exc.errno == errno.EINVAL
    assert seen == []


def test_plain_http_reuses_one_connection_whatever_the_tls_options(serve):
    # the local-API check asks with {"insecure": True}, the API client with its kubeconfig's
    # material: over plain HTTP neither is used, so both share the kept-alive connection
    connections: list = []

    def counting(conn: socket.socket) -> None:
        connections.append(conn)
        answer(b"same")(conn)

    server = serve(counting)
    for tls in (None, {"insecure": True}, {"ca_data": b"x"}):
        assert httpops.http("GET", server.url("/"), tls=tls)["body"] == b"same"
    assert len(connections) == 1
