"""A ThreadingHTTPServer that can be closed and reopened at will, for the lab's listeners.

The lab closes the API listener when no kube-apiserver static pod runs (clients then get
"connection refused", as on a real node) and opens health listeners only while the component
runs. ``serve_forever`` normally notices ``shutdown()`` only at its next poll tick; to keep idle
CPU near zero we use a long poll interval and wake the loop with a throw-away connection.
Open connections (watch streams) are cut too, as they would be when the real process dies.
"""

from __future__ import annotations

import os
import random
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional, Union

#: What a listener serves TLS with: one context, or a function giving the context of each handshake
#: (a component that re-reads its certificate files: ``pki.ServedCert.context``).
TlsSource = Union[ssl.SSLContext, Callable[[], ssl.SSLContext]]


class LabHTTPServer(ThreadingHTTPServer):
    """Threaded HTTP(S) server with prompt, clean stop and tracking of live connections."""

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(
        self,
        addr: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        tls: Optional[TlsSource] = None,
        context: Any = None,
    ) -> None:
        # Instance attribute read by TCPServer.__init__: an IPv6 literal needs an AF_INET6 socket.
        self.address_family = family_of(addr[0])
        super().__init__(addr, handler)
        self.tls = tls
        self.context = context
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self.stopping = False

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        # Go's net package sets TCP_NODELAY on every TCP connection (the API server, etcd, the
        # components' health endpoints). Without it a response written as headers, then body waits
        # for the client's delayed ACK: ~40 ms a request that no real node has.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            # Handshake happens in the handler thread (finish_request), never in the accept loop.
            try:
                ctx = self.tls if isinstance(self.tls, ssl.SSLContext) else self.tls()
            except OSError:            # the component cannot load its certificate for this handshake
                sock.close()
                raise
            sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            self._conns.add(request)
        try:
            if isinstance(request, ssl.SSLSocket):
                request.settimeout(5)
                request.do_handshake()
                request.settimeout(None)
            super().finish_request(request, client_address)
        except (OSError, ssl.SSLError):
            pass
        finally:
            with self._conns_lock:
                self._conns.discard(request)

    def handle_error(self, request: Any, client_address: Any) -> None:  # noqa: ARG002
        """Client hang-ups are normal (watch streams, probes); do not print tracebacks."""

    def start(self) -> "LabHTTPServer":
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 30.0},
            name=f"http-{self.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, close the listening socket and cut live connections."""
        if self.stopping:
            return
        self.stopping = True
        t = threading.Thread(target=self.shutdown, daemon=True)
        t.start()
        try:  # wake the select() in serve_forever
            with socket.create_connection((str(self.server_address[0]), self.server_address[1]), timeout=0.5):
                pass
        except OSError:
            pass
        t.join(2)
        self.server_close()
        with self._conns_lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def family_of(host: str) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 literal such as ``::1``, else AF_INET."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def serve(
    host: str,
    port: int,
    handler: type[BaseHTTPRequestHandler],
    tls: Optional[TlsSource] = None,
    context: Any = None,
) -> LabHTTPServer:
    """Bind and start a server in a daemon thread (raises OSError if the port is taken)."""
    return LabHTTPServer((host, port), handler, tls=tls, context=context).start()


_HANDED_OUT: set[int] = set()
_LOWEST = 10000


def free_port(address: str = "127.0.0.1") -> int:
    """A currently free TCP port on ``address`` (IPv4 or IPv6), below the kernel's ephemeral port range.

    The lab chooses its ports well before it binds them (the API port when the apiserver pod
    starts). A port from the ephemeral range can meanwhile become the local port of some
    outgoing connection, and a long-lived one (an SSH connection, a keeper's) holds it: the
    bind then fails for good. Ports below that range are never handed out that way. A port is
    handed out once per process, so the ports of one lab differ.

    ``CPCTL_LAB_PORTS=LOW-HIGH`` confines the choice to that range (both ends included), so labs
    run side by side (parallel test workers) never pick a port another one is about to bind.
    """
    low, ceiling = _port_range()
    rng = random.SystemRandom()
    if ceiling - low <= 400:
        candidates = rng.sample(range(low, ceiling), ceiling - low)
    else:
        candidates = [rng.randrange(low, ceiling) for _ in range(200)]
    for port in candidates:
        if port in _HANDED_OUT:
            continue
        with socket.socket(family_of(address)) as s:
            try:
                s.bind((address, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    if os.environ.get("CPCTL_LAB_PORTS"):
        raise OSError("no free port left in CPCTL_LAB_PORTS=%s" % os.environ["CPCTL_LAB_PORTS"])
    with socket.socket(family_of(address)) as s:       # an unusual ephemeral range: let the kernel choose
        s.bind((address, 0))
        return int(s.getsockname()[1])


def _port_range() -> tuple[int, int]:
    """[low, ceiling) to choose lab ports from: ``CPCTL_LAB_PORTS`` or 10000 up to the ephemeral range."""
    spec = os.environ.get("CPCTL_LAB_PORTS", "")
    if spec:
        try:
            low, high = (int(part) for part in spec.split("-", 1))
        except ValueError:
            raise ValueError("CPCTL_LAB_PORTS must be LOW-HIGH, got %r" % spec) from None
        if not 1024 <= low <= high <= 65535:
            raise ValueError("CPCTL_LAB_PORTS must lie within 1024-65535, got %r" % spec)
        return low, high + 1
    return _LOWEST, _ephemeral_low()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux default 32768)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
