"""HTTP(S) from the node without ``http.client`` or ``socket`` imported at start: one kept-alive
connection per endpoint, bounded status lines, headers and bodies; ``http_many``; a peer's certificate.

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

import binascii
import errno
import os
import sys
import time
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple, Union

from cpctl.agent.shapes import HttpManyAnswer, HttpReply, HttpRequest, PeerCert, TlsOptions

if TYPE_CHECKING:
    import _socket
    import ssl

#: (scheme, host, port, path with query) of a URL
Target = Tuple[str, str, int, str]
#: What tells kept-alive connections apart: (scheme, host, port, the TLS material as sorted pairs)
PoolKey = Tuple[str, str, int, Tuple[Tuple[str, object], ...]]


def _ssl_context(tls: TlsOptions) -> "ssl.SSLContext":
    """The TLS context for kubeconfig material ``tls`` (see ``cpctl.probes.kubeapi``).

    Errors are ``_HttpError`` texts that name the kind of material, never its bytes. A client key
    protected by a passphrase is refused: OpenSSL would otherwise prompt for it on the terminal (or
    hang an agent that has none).
    """
    import ssl
    import tempfile
    try:
        if tls.get("insecure"):
            # No CA bundle to load when nothing is verified (health endpoints use self-signed
            # certificates); create_default_context() would spend ~40 ms loading system CAs.
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif tls.get("ca_data"):
            ctx = ssl.create_default_context(cadata=tls["ca_data"].decode("ascii", "replace"))
        else:
            ctx = ssl.create_default_context(cafile=tls.get("ca_file"))
    except (ssl.SSLError, ValueError, UnicodeError):
        raise _HttpError(errno.EINVAL, "certificate authority: not a valid PEM certificate") from None
    except OSError as exc:
        raise _HttpError(exc.errno, "certificate authority %s: %s" % (tls.get("ca_file"), exc.strerror)) from None
    asked: List[bool] = []

    def no_passphrase() -> bytes:
        asked.append(True)
        return b""

    try:
        if tls.get("cert_data") or tls.get("key_data"):
            # ssl wants files: write the inline credentials to a private temp file, then drop it.
            with tempfile.NamedTemporaryFile(prefix=".cpctl-cred-", suffix=".pem") as handle:
                os.chmod(handle.name, 0o600)
                handle.write(tls.get("cert_data") or b"")
                handle.write(b"\n")
                handle.write(tls.get("key_data") or b"")
                handle.flush()
                ctx.load_cert_chain(handle.name, password=no_passphrase)
        elif tls.get("cert_file"):
            ctx.load_cert_chain(tls["cert_file"], tls.get("key_file"), password=no_passphrase)
    except OSError as exc:
        if not isinstance(exc, ssl.SSLError):
            raise _HttpError(exc.errno, "client certificate %s or key %s: %s" % (
                tls.get("cert_file"), tls.get("key_file"), exc.strerror)) from None
        if asked:
            raise _HttpError(errno.EINVAL, "client key: protected by a passphrase (not supported)") from None
        raise _HttpError(errno.EINVAL, "client certificate/key: not valid PEM, or the key does not "
                                        "match the certificate") from None
    except (ValueError, UnicodeError):
        raise _HttpError(errno.EINVAL, "client certificate/key: not valid PEM") from None
    return ctx


class _HttpError(OSError):
    """An ``http`` failure raised by cpctl's own code, with cpctl's own words: it never quotes a
    header, a body, a server's words or TLS material (tokens, passwords and keys must not reach a
    message). ``http`` re-raises it as a plain ``OSError`` with the same errno and text."""


class _NoAnswer(_HttpError):
    """The connection ended before the first byte of an answer (a kept-alive one the server
    closed while it was idle: the request is sent again, once, on a new connection)."""


HTTP_BODY_LIMIT = 32 << 20   # default cap on an answer's body (callers pass their own ``limit``)
HTTP_LINE_LIMIT = 64 << 10   # a status, header or chunk-size line (http.client's bound)
HTTP_HEADER_LIMIT = 100      # header (or trailer) lines in one answer (http.client's bound)
_CONNECTIONS: Dict[PoolKey, "_HttpConnection"] = {}


class _HttpConnection(object):
    """One HTTP/1.1 connection over a connected (TLS) socket, with the bytes read past what was
    consumed. Every send and receive ends by ``deadline`` (``time.monotonic()``): each call gets
    the time that is left as its timeout, so a server that drips one byte a second cannot stretch
    a request past its deadline.

    The answer is read here rather than by ``http.client``: that module imports the ``email``
    parser (and ``ssl`` even for plain HTTP), ~8 ms of every ``status`` that asks an API server.
    """

    def __init__(self, sock: "_socket.socket") -> None:
        self.sock: Optional[_socket.socket] = sock
        self.deadline = 0.0
        self.buffer = bytearray()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _open(self) -> "_socket.socket":
        """The socket, with what is left of the deadline as its timeout; closed: an error."""
        if self.sock is None:
            raise _HttpError(errno.ENOTCONN, "connection closed")
        self.sock.settimeout(_time_left(self.deadline))
        return self.sock

    def send(self, data: bytes) -> None:
        self._open().sendall(data)

    def _fill(self) -> bool:
        """Receive more bytes into the buffer; False at the end of the stream."""
        data = self._open().recv(1 << 16)
        self.buffer += data
        return bool(data)

    def readline(self) -> Optional[bytes]:
        """The next line without its CRLF (or LF); None when the stream ended before any byte of
        it. A line longer than ``HTTP_LINE_LIMIT`` is refused before it is read whole."""
        start = 0
        while True:
            end = self.buffer.find(b"\n", start)
            if end >= 0:
                break
            start = len(self.buffer)
            if start > HTTP_LINE_LIMIT:
                raise _HttpError(errno.EPROTO, "malformed HTTP answer (a line too long)")
            if not self._fill():
                if self.buffer:
                    raise _HttpError(errno.EPROTO, "answer cut short (in a line of its head)")
                return None
        if end > HTTP_LINE_LIMIT:
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (a line too long)")
        line = bytes(self.buffer[:end])
        del self.buffer[:end + 1]
        return line[:-1] if line.endswith(b"\r") else line

    def read(self, size: int) -> bytes:
        """At most ``size`` (> 0) bytes; b"" at the end of the stream."""
        if not self.buffer and not self._fill():
            return b""
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data


def _time_left(deadline: float) -> float:
    """Seconds until ``deadline``; a timeout error once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise _HttpError(errno.ETIMEDOUT, "deadline reached")
    return left


def http(method: str, url: str, headers: Optional[Mapping[str, Union[str, bytes]]] = None, body: Optional[bytes] = None,
         timeout: float = 5.0, tls: Optional[TlsOptions] = None, limit: Optional[int] = None) -> HttpReply:
    """One HTTP(S) request with a kept-alive connection per (scheme, host, port, TLS material).

    ``timeout`` bounds the whole request - connect, TLS handshake, send, status, headers and
    body - not each socket operation; ``limit`` (default ``HTTP_BODY_LIMIT``) bounds the body: a
    larger answer is an EFBIG error, never read into memory. Returns status, headers and body.
    Every failure is an ``OSError`` (refused, reset, timed out, TLS, a malformed answer) so that
    callers can tell "no usable answer" from an HTTP error status; its text never quotes a header,
    a body or TLS material. An IPv6 literal needs brackets: ``http://[::1]:2381/readyz``.
    """
    deadline = time.monotonic() + timeout
    try:
        target = _http_target(url)
        lines = _http_headers(headers)
        return _http_exchange(method, target, lines, body, tls, deadline,
                              HTTP_BODY_LIMIT if limit is None else limit)
    except Exception as exc:  # noqa: BLE001 - every failure leaves as an OSError with cpctl's own text
        raise _http_failure(exc, timeout) from None


def _http_target(url: str) -> Target:
    """(scheme, host, port, path with query) of ``url``; EINVAL for anything but http(s)://host."""
    simple = split_url(url)
    if simple is not None:
        scheme, host, port, path = simple
        return scheme, host, port or (443 if scheme == "https" else 80), path
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _HttpError(errno.EINVAL, "not an http(s) URL with a host (an IPv6 address needs brackets)")
    try:
        port = parts.port
    except ValueError:
        raise _HttpError(errno.EINVAL, "invalid port in URL (an IPv6 address needs brackets: "
                                        "http://[::1]:2381/)") from None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path


_URL_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")


def split_url(url: str) -> Optional[Tuple[str, str, Optional[int], str]]:
    """(scheme, host, port, path with query) of a plain http(s) URL - ``scheme://host[:port]``,
    then a ``/path`` and a ``?query`` - exactly as ``urllib.parse.urlsplit`` reads it (scheme and
    host in lower case, port None when not given, "/" for no path, no "?" for an empty query), but
    without importing urllib.parse and ipaddress (~1.5 ms of every status); None for any other URL
    (user info, an IPv6 literal, a fragment, a character outside printable ASCII, a port out of
    range...): callers hand those to urllib.parse, whose reading and checks they keep."""
    head, sep, rest = url.partition("://")
    scheme = head.lower()
    if not sep or scheme not in ("http", "https"):
        return None
    cut = len(rest)
    for mark in ("/", "?"):
        found = rest.find(mark)
        if 0 <= found < cut:
            cut = found
    host, colon, port_text = rest[:cut].partition(":")
    host = host.lower()
    if not host or not set(host) <= _URL_HOST_CHARS:
        return None
    port = None
    if colon:
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5) or int(port_text) > 65535:
            return None
        port = int(port_text)
    target = rest[cut:]
    if "#" in target or not all("!" <= c <= "~" for c in target):
        return None
    path, _mark, query = target.partition("?")
    return scheme, host, port, (path or "/") + ("?" + query if query else "")


def packed_address(text: str) -> Optional[bytes]:
    """The packed bytes of an IPv4 or IPv6 address (``inet_pton``: strict, no leading zeros), None
    for anything else, a host name included; ``ipaddress`` costs ~1 ms to import."""
    import _socket
    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            return _socket.inet_pton(family, text)
        except (OSError, ValueError):
            continue
    return None


_HEADER_NAME_CHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def _http_headers(headers: Optional[Mapping[str, Union[str, bytes]]]) -> Dict[str, bytes]:
    """``headers`` with UTF-8 values, checked as Go's net/http checks them (no control character
    but tab): an invalid one is refused by NAME, its value (a token?) is never quoted."""
    checked: Dict[str, bytes] = {}
    for name, value in (headers or {}).items():
        if not name or not set(name.encode("ascii", "replace")) <= _HEADER_NAME_CHARS:
            raise _HttpError(errno.EINVAL, "invalid HTTP header name")
        data = value if isinstance(value, bytes) else str(value).encode("utf-8", "replace")
        if any((byte < 0x20 and byte != 0x09) or byte == 0x7F for byte in bytearray(data)):
            raise _HttpError(errno.EINVAL, "HTTP header %s: its value has a control character (not sent)" % name)
        checked[name] = data
    return checked


def _http_exchange(method: str, target: Target, headers: Dict[str, bytes], body: Optional[bytes],
                   tls: Optional[TlsOptions], deadline: float, limit: int) -> HttpReply:
    """Send on a kept-alive connection (checked out of the pool while in use); a reused one the
    server closed meanwhile is replaced once, within the same deadline."""
    scheme, host, port, path = target
    # TLS material tells connections apart only for HTTPS (a plain one serves any request to it)
    key = (scheme, host, port, _tls_pool_key(tls) if scheme == "https" else ())
    request = _http_request(method, path, _host_header(scheme, host, port), headers, body)   # before any connection
    for attempt in (0, 1):
        pooled = _CONNECTIONS.pop(key, None)
        reused = pooled is not None and pooled.sock is not None
        if pooled is not None and not reused:
            pooled.close()
        conn = pooled if pooled is not None and reused else _http_connect(scheme, host, port, tls, deadline)
        try:
            conn.deadline = deadline
            conn.send(request)
            status, fields, framing, will_close = _http_head(conn, method)
            data = _http_body(conn, framing, limit)
        except Exception as exc:
            conn.close()
            if attempt == 0 and reused and _closed_while_idle(exc) and deadline > time.monotonic():
                continue
            raise
        if will_close or conn.buffer:   # bytes beyond the answer: nothing more is read on it
            conn.close()
        else:
            old = _CONNECTIONS.pop(key, None)
            if old is not None:
                old.close()
            _CONNECTIONS[key] = conn
        return {"status": status, "headers": fields, "body": data}
    raise _HttpError(errno.ECONNRESET, "connection closed without an answer")


def _host_name(host: str) -> bytes:
    """The host name as ASCII bytes, for the resolver, TLS and the Host header (as text, each of
    them would load the ``idna`` codec for nothing)."""
    try:
        return host.encode("ascii")
    except UnicodeError:
        return host.encode("idna")


def _host_header(scheme: str, host: str, port: int) -> bytes:
    name = _host_name(host)
    shown = b"[" + name + b"]" if b":" in name else name
    if port != (443 if scheme == "https" else 80):
        shown += b":%d" % port
    return shown


def _http_connect(scheme: str, host: str, port: int, tls: Optional[TlsOptions], deadline: float) -> "_HttpConnection":
    """A new connection whose connect and TLS handshake end by ``deadline``."""
    name = _host_name(host)
    sock = _tcp_connect(name, port, deadline)
    try:
        if scheme == "https":
            import socket
            context = _ssl_context(tls or {})
            sock = socket.socket(sock.family, sock.type, sock.proto, fileno=sock.detach())
            sock.settimeout(_time_left(deadline))   # CPython bounds the whole handshake by it
            sock = context.wrap_socket(sock, server_hostname=name)   # ASCII bytes: no idna codec either
    except BaseException:
        sock.close()
        raise
    return _HttpConnection(sock)


def _tcp_connect(name: bytes, port: int, deadline: float) -> "_socket.socket":
    """A TCP connection (no Nagle delay) to the first address of ``name`` that takes one, each
    attempt within what is left of ``deadline``: ``socket.create_connection`` made with the C
    module ``_socket``, as ``socket`` (its enums, ``selectors``) costs ~2 ms to import and a plain
    HTTP request needs none of it."""
    import _socket
    error: Optional[OSError] = None
    for family, kind, proto, _canonical, address in _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(_time_left(deadline))
            sock.connect(address)
            sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            sock.close()
            if isinstance(exc, _HttpError):   # the deadline has passed
                raise
            error = exc
    if error is None:
        raise _HttpError(errno.EHOSTUNREACH, "host name not resolved")
    raise error


_CHUNKED, _UNTIL_CLOSE = -2, -1   # an answer's framing when it is not a Content-Length
_METHOD_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _http_request(method: str, path: str, host_header: bytes, headers: Dict[str, bytes],
                  body: Optional[bytes]) -> bytes:
    """The request's bytes: its line, Host, Accept-Encoding: identity (no compressed answer), a
    Content-Length for a body (or for a POST, PUT or PATCH without one), then ``headers``."""
    verb = method.encode("ascii", "replace")
    target = path.encode("utf-8", "replace")
    if not verb or not set(verb) <= _METHOD_CHARS:
        raise _HttpError(errno.EINVAL, "invalid HTTP method")
    if any(byte <= 0x20 or byte == 0x7F for byte in bytearray(target)):
        raise _HttpError(errno.EINVAL, "invalid URL (a control character or space in it?)")
    given = set(name.lower() for name in headers)
    lines = [b"%s %s HTTP/1.1" % (verb, target)]
    if "host" not in given:
        lines.append(b"Host: " + host_header)
    if "accept-encoding" not in given:
        lines.append(b"Accept-Encoding: identity")
    if "content-length" not in given and (body is not None or method in ("POST", "PUT", "PATCH")):
        lines.append(b"Content-Length: %d" % len(body or b""))
    for name, value in headers.items():
        lines.append(name.encode("ascii") + b": " + value)
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def _http_head(conn: _HttpConnection, method: str) -> Tuple[int, Dict[str, str], int, bool]:
    """(status, headers, framing, will_close) of the answer: interim (1xx) answers are skipped;
    ``framing`` is the body's length, ``_CHUNKED`` or ``_UNTIL_CLOSE`` (the server closes)."""
    while True:
        line = conn.readline()
        if line is None:
            raise _NoAnswer(errno.ECONNRESET, "connection closed without an answer")
        parts = line.split(None, 2)
        if (len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or len(parts[1]) != 3
                or not parts[1].isdigit() or parts[1][:1] == b"0"):
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (its status line)")
        status = int(parts[1])
        fields = _http_fields(conn)
        if status >= 200 or status == 101:
            break
    if status == 101:
        raise _HttpError(errno.EPROTO, "malformed HTTP answer (a protocol switch that was not asked for)")
    found: Dict[str, List[str]] = {}
    for name, value in fields:
        found.setdefault(name.lower(), []).append(value)
    tokens = set(t.strip().lower() for v in found.get("connection", []) for t in v.split(","))
    will_close = "close" in tokens or (parts[0] == b"HTTP/1.0" and "keep-alive" not in tokens)
    if method == "HEAD" or status in (204, 304):
        framing = 0
    elif "transfer-encoding" in found:
        codings = [t.strip().lower() for v in found["transfer-encoding"] for t in v.split(",")]
        if codings[-1] != "chunked":
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (a transfer coding other than chunked)")
        framing = _CHUNKED
    elif "content-length" in found:
        sizes = set(t.strip() for v in found["content-length"] for t in v.split(","))
        size = sizes.pop() if len(sizes) == 1 else ""
        if not size.isdigit() or len(size) > 18:
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (its Content-Length)")
        framing = int(size)
    else:
        framing = _UNTIL_CLOSE
    if framing == _UNTIL_CLOSE:
        will_close = True
    return status, dict(fields), framing, will_close


def _http_fields(conn: _HttpConnection) -> List[Tuple[str, str]]:
    """The header (or trailer) lines up to the empty line, as (name, value) text pairs."""
    fields: List[Tuple[str, str]] = []
    while True:
        line = conn.readline()
        if line is None:
            raise _HttpError(errno.EPROTO, "answer cut short (in its head)")
        if not line:
            return fields
        if len(fields) >= HTTP_HEADER_LIMIT:
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (over %d header lines)" % HTTP_HEADER_LIMIT)
        if line[:1] in (b" ", b"\t"):
            if not fields:    # an obsolete folded line continues the previous one
                raise _HttpError(errno.EPROTO, "malformed HTTP answer (a header line)")
            name, value = fields.pop()
            fields.append((name, (value + " " + line.strip(b" \t").decode("latin-1")).strip()))
            continue
        raw_name, colon, raw_value = line.partition(b":")
        if not colon or not raw_name or not set(raw_name) <= _HEADER_NAME_CHARS:
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (a header line)")
        fields.append((raw_name.decode("ascii"), raw_value.strip(b" \t").decode("latin-1")))


def _http_body(conn: _HttpConnection, framing: int, limit: int) -> bytes:
    """The whole body, refused (EFBIG) as soon as it is known to be over ``limit`` bytes."""
    if framing == _CHUNKED:
        return _http_chunked(conn, limit)
    until_close = framing == _UNTIL_CLOSE
    if not until_close and framing > limit:
        raise _HttpError(errno.EFBIG, "answer of %d bytes is over the limit of %d bytes" % (framing, limit))
    chunks: List[bytes] = []
    total = 0
    while until_close or total < framing:
        chunk = conn.read(min(1 << 16, (limit + 1 if until_close else framing) - total))
        if not chunk:
            if not until_close:
                raise _HttpError(errno.EPROTO, "answer cut short (%d bytes of its body missing)" % (framing - total))
            break
        total += len(chunk)
        if total > limit:
            raise _HttpError(errno.EFBIG, "answer larger than the limit of %d bytes" % limit)
        chunks.append(chunk)
    return b"".join(chunks)


_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


def _http_chunked(conn: _HttpConnection, limit: int) -> bytes:
    """A chunked body (RFC 9112 7.1), its chunk extensions and trailers read and dropped."""
    chunks: List[bytes] = []
    total = 0
    while True:
        size = _http_chunk_size(conn)
        if size == 0:
            return b"".join(chunks)
        if total + size > limit:
            raise _HttpError(errno.EFBIG, "answer larger than the limit of %d bytes" % limit)
        left = size
        while left:
            chunk = conn.read(min(1 << 16, left))
            if not chunk:
                raise _HttpError(errno.EPROTO, "answer cut short (%d bytes of its body missing)" % left)
            chunks.append(chunk)
            left -= len(chunk)
        total += size
        _http_chunk_end(conn)


def _http_chunk_size(conn: _HttpConnection) -> int:
    """The size of a chunked body's next chunk, its extensions dropped; after the last one (0) its
    trailers are read and dropped too. Shared by every reader of a chunked body."""
    line = conn.readline()
    if line is None:
        raise _HttpError(errno.EPROTO, "answer cut short (its chunked body unfinished)")
    digits = line.split(b";", 1)[0].strip(b" \t")
    if not digits or len(digits) > 15 or not set(digits) <= _HEX_DIGITS:
        raise _HttpError(errno.EPROTO, "malformed HTTP answer (a chunk size)")
    size = int(digits, 16)
    if size == 0:
        _http_fields(conn)
    return size


def _http_chunk_end(conn: _HttpConnection) -> None:
    """The line end after a chunk's data: anything else means the chunk was longer than its size."""
    end = conn.readline()
    if end is None:
        raise _HttpError(errno.EPROTO, "answer cut short (its chunked body unfinished)")
    if end:
        raise _HttpError(errno.EPROTO, "malformed HTTP answer (a chunk longer than its size)")


def _closed_while_idle(exc: BaseException) -> bool:
    """True for the failures of a kept-alive connection the server had closed while it was idle."""
    return isinstance(exc, (_NoAnswer, ConnectionResetError, BrokenPipeError, ConnectionAbortedError))


def _http_failure(exc: BaseException, timeout: float) -> OSError:
    """``exc`` as a plain ``OSError`` (of the errno's subclass: ConnectionRefusedError...) with
    cpctl's own words or the system's errno text (see ``_HttpError``)."""
    socket = sys.modules.get("_socket")   # neither is imported before a connection is made
    ssl = sys.modules.get("ssl")
    if isinstance(exc, TimeoutError) or (socket is not None and isinstance(exc, socket.timeout)) \
            or getattr(exc, "errno", None) == errno.ETIMEDOUT:
        return OSError(errno.ETIMEDOUT, "no complete answer within %.3gs" % timeout)
    if isinstance(exc, _HttpError):
        return OSError(exc.errno, exc.strerror)
    if ssl is not None and isinstance(exc, ssl.SSLCertVerificationError):
        return OSError(errno.EPROTO, "TLS: server certificate not accepted (%s)"
                       % _printable(getattr(exc, "verify_message", "") or "verification failed"))
    if ssl is not None and isinstance(exc, ssl.SSLError):
        return OSError(errno.EPROTO, "TLS error (%s)" % _printable(getattr(exc, "reason", "") or "handshake"))
    if socket is not None and isinstance(exc, socket.gaierror):
        return OSError(errno.EHOSTUNREACH, "host name not resolved")
    if isinstance(exc, OSError) and exc.errno:
        return OSError(exc.errno, os.strerror(exc.errno))
    return OSError(errno.EPROTO, "HTTP request failed (%s)" % type(exc).__name__)


PEER_CERT_LIMIT = 64 << 10   # a leaf certificate is a few KiB; more is refused, never returned


def peer_cert(host: str, port: int, timeout: float = 3.0, limit: int = PEER_CERT_LIMIT,
              tls: Optional[TlsOptions] = None) -> PeerCert:
    """The DER bytes of the certificate the TLS server at ``host``:``port`` presents, from a
    handshake made here on the node (serving certificates often bind to 127.0.0.1). Nothing is
    verified - the caller compares the bytes with a file - and nothing is sent after the
    handshake. ``timeout`` bounds connect and handshake together; every failure (refused, timed
    out, not TLS, no certificate, larger than ``limit``) is an ``OSError`` with cpctl's own words.
    ``time``: this node's clock when the handshake was made (its files' mtimes are on that clock).

    ``tls``: a client certificate to present (``cert_file``/``key_file``): etcd 3.5 caps TLS at 1.2
    and, with ``--client-cert-auth=true``, ends a handshake without one before a TLS 1.2 client has
    seen its certificate (real-node-facts.md "etcd, measured"). TLS 1.2 and 1.3 are both offered."""
    import socket
    import ssl
    deadline = time.monotonic() + timeout
    try:
        if tls:
            ctx = _ssl_context(_client_files(tls))
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        sock = socket.create_connection((host, int(port)), _time_left(deadline))
        try:
            sock.settimeout(_time_left(deadline))   # CPython bounds the whole handshake by it
            named = None if (":" in host or host.replace(".", "").isdigit()) else host
            with ctx.wrap_socket(sock, server_hostname=named) as secured:
                der = secured.getpeercert(binary_form=True)
        finally:
            sock.close()
    except Exception as exc:  # noqa: BLE001 - every failure leaves as an OSError with cpctl's own text
        raise _http_failure(exc, timeout) from None
    if not der:
        raise OSError(errno.EPROTO, "the server presented no certificate")
    if len(der) > limit:
        raise OSError(errno.EFBIG, "certificate of %d bytes is over the limit of %d bytes" % (len(der), limit))
    return {"der": der, "time": time.time()}


def _client_files(tls: TlsOptions) -> TlsOptions:
    """The client certificate files of ``tls`` alone, nothing verified (``peer_cert``)."""
    files: TlsOptions = {"insecure": True}
    cert, key = tls.get("cert_file"), tls.get("key_file")
    if cert is not None:
        files["cert_file"] = cert
    if key is not None:
        files["key_file"] = key
    return files


HTTP_MANY_LIMIT = 512      # requests in one http_many (64 etcd members x 8 client URLs)
HTTP_MANY_THREADS = 32     # asked at once; the rest wait for a free thread, within the same deadline


def http_many(requests: List[HttpRequest], timeout: float = 5.0) -> List[HttpManyAnswer]:
    """Several ``http`` requests at once, all ending by one deadline ``timeout`` seconds from now:
    a census of 64 etcd members whose URLs stay silent costs one ``timeout``, not 64 in a row.

    ``requests``: [{"method", "url", "headers", "body", "tls", "limit", "timeout"}, ...]; a request's own
    ``timeout`` (optional) ends it sooner, as ``http``'s would: several views' requests asked at once
    (``Host.http_ahead``) each keep the time they would have had alone. One answer per request, in
    order: {"reply": <http's answer>} or {"errno": n, "error": cpctl's own text} (a request still
    unanswered at its deadline: ETIMEDOUT)."""
    import threading
    if not isinstance(requests, list) or len(requests) > HTTP_MANY_LIMIT:
        raise OSError(errno.EINVAL, "http_many takes a list of at most %d requests" % HTTP_MANY_LIMIT)
    start = time.monotonic()
    deadline = start + timeout
    answers: List[Optional[HttpManyAnswer]] = [None] * len(requests)
    pending = list(enumerate(requests))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                index, request = pending.pop(0)
            answers[index] = _one_of_many(request, _own_deadline(request, start, deadline))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(HTTP_MANY_THREADS, len(requests)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()) + 1.0)
    with lock:
        del pending[:]
    return [a if a is not None else {"errno": errno.ETIMEDOUT, "error": "timed out"} for a in list(answers)]


def _own_deadline(request: HttpRequest, start: float, deadline: float) -> float:
    """When one request of ``http_many`` ends: its own ``timeout`` from ``start``, within ``deadline``."""
    own = request.get("timeout") if isinstance(request, dict) else None
    if isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0:
        return min(deadline, start + own)
    return deadline


def _one_of_many(request: HttpRequest, deadline: float) -> HttpManyAnswer:
    """One request of ``http_many`` within what is left of its deadline."""
    left = deadline - time.monotonic()
    if not isinstance(request, dict) or left <= 0:
        return {"errno": errno.ETIMEDOUT if left <= 0 else errno.EINVAL,
                "error": "timed out" if left <= 0 else "not a request"}
    try:
        return {"reply": http(request.get("method") or "GET", request.get("url") or "", request.get("headers"),
                              request.get("body"), left, request.get("tls"), request.get("limit"))}
    except OSError as exc:
        return {"errno": exc.errno or 0, "error": _printable(exc.strerror or exc)}


def _printable(text: object) -> str:
    """At most 120 printable ASCII characters of ``text`` (OpenSSL's fixed reason words)."""
    return "".join(c if " " <= c <= "~" else "?" for c in str(text))[:120]


def _tls_key(tls: Optional[TlsOptions]) -> Optional[Dict[str, object]]:
    if not tls:
        return None
    return {k: (_b64(v) if isinstance(v, bytes) else v) for k, v in tls.items()}


def _tls_pool_key(tls: Optional[TlsOptions]) -> Tuple[Tuple[str, object], ...]:
    """``tls`` as a hashable pool key (the same material reuses the same connection); without
    ``json``, whose import the agent avoids."""
    return tuple(sorted((_tls_key(tls) or {}).items()))


def _b64(data: bytes) -> str:
    """Standard base64 text of ``data`` (base64.b64encode without importing base64)."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")
