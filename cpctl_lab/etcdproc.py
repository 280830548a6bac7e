"""The real etcd in the lab (issue 45): one ``etcd`` process per running etcd container, started from
that container's command line as the kubelet would run it, and a small client for etcd's v3 JSON
gateway (the grpc-gateway in front of ``api/etcdserverpb/rpc.proto``: ``POST /v3/kv/range``,
``/v3/kv/txn``, ``/v3/cluster/member/list`` and ``/member/add``, over TLS with a client certificate).

What the lab changes on the way from the manifest to the process, and why:

* every path flag (``--data-dir``, ``--cert-file``, ...) is the container's path: it is resolved
  through the pod's hostPath mounts to the node's directory in the lab (a data dir no hostPath mounts
  is the container's own, empty at every start: a new member, as on a node);
* ``--unsafe-no-fsync`` is added (speed: the lab's data is scratch);
* the etcd 3.6 names kubeadm 1.34 writes (``--feature-gates=InitialCorruptCheck=true``,
  ``--watch-progress-notify-interval``) are given to an older binary under their 3.5 names: the lab
  runs one installed etcd for every image tag;
* a member whose manifest says ``--initial-cluster-state=existing`` and whose data dir is empty is
  first added to the running cluster through another member (what ``kubeadm join`` does before it
  writes the manifest); etcd then starts and joins.

The process gets its ports from the manifest (the lab picked them in its range), logs to a file in
the lab dir that ``crictl logs`` shows, dies with the lab (``PR_SET_PDEATHSIG``), and is asked for
its health on its metrics URL (``/health?serializable=true`` and ``/health?exclude=NOSPACE``, as
kubeadm's probes): the kubelet's probes and the lab's idea of quorum are those answers, cached by one
poller thread per member. The process listens for /health on a port of its own; the lab serves the
manifest's metrics URL in front of it (:meth:`Member.proxy`): every answer is the process's, except
that etcd 3.5.1 has no ``/livez``/``/readyz`` (they came in later 3.5 patch releases, which the
manifests' images are), so those two paths, when the binary answers 404, are answered from the
``/health`` query they stand for.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import http.client
import json
import os
import signal
import ssl
import subprocess
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from .etcdbin import EtcdInstall

#: Flags whose value is a path inside the container (resolved to the node's file in the lab).
PATH_FLAGS = ("data-dir", "wal-dir", "cert-file", "key-file", "trusted-ca-file", "peer-cert-file",
              "peer-key-file", "peer-trusted-ca-file", "client-crl-file", "peer-crl-file")
#: etcd 3.6 flag -> its etcd 3.5 name (kubeadm 1.34 renamed them with etcd 3.6).
RENAMED_36 = {"watch-progress-notify-interval": "experimental-watch-progress-notify-interval"}
FEATURE_GATES_35 = {"InitialCorruptCheck": "experimental-initial-corrupt-check"}
#: What a probe path that etcd 3.5.1 does not serve (404) stands for.
HEALTH_FOR = {"/livez": "/health?serializable=true&exclude=NOSPACE", "/readyz": "/health?exclude=NOSPACE"}
ALIVE = "/health?serializable=true"
QUORUM = "/health?exclude=NOSPACE"
POLL = 0.4
HEALTH_TIMEOUT = 2.0
Answer = tuple[int, str, str]


class EtcdError(Exception):
    """A gateway call failed: no answer, or etcd's error (``message`` is etcd's text)."""


# --------------------------------------------------------------------------- command line


def split_flags(argv: list[str]) -> list[tuple[str, Optional[str]]]:
    """``--name=value`` / ``--name value`` / ``--bool`` items of an etcd command line, in order."""
    out: list[tuple[str, Optional[str]]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-"):
            name = arg.lstrip("-")
            if "=" in name:
                key, value = name.split("=", 1)
                out.append((key, value))
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                out.append((name, argv[i + 1]))
                i += 1
            else:
                out.append((name, None))
        i += 1
    return out


def process_argv(install: EtcdInstall, argv: list[str], resolve: Callable[[str, str], str]) -> list[str]:
    """The real etcd's argv for the container command ``argv`` (without the binary): path flags
    through ``resolve(flag, path)``, 3.6 names renamed for an older binary, ``--unsafe-no-fsync``."""
    old = install.major_minor < (3, 6)
    out = [install.etcd]
    for name, value in split_flags(argv):
        if old and name in RENAMED_36:
            name = RENAMED_36[name]
        if old and name == "feature-gates" and value:
            for gate in value.split(","):
                gate_name, _, on = gate.partition("=")
                if gate_name.strip() in FEATURE_GATES_35:
                    out.append(f"--{FEATURE_GATES_35[gate_name.strip()]}={on or 'true'}")
            continue
        if name in PATH_FLAGS and value:
            value = resolve(name, value)
        out.append(f"--{name}" if value is None else f"--{name}={value}")
    if not any(a.startswith("--unsafe-no-fsync") for a in out) and install.major_minor >= (3, 5):
        out.append("--unsafe-no-fsync")
    return out


def flag_values(argv: list[str]) -> dict[str, str]:
    """The last value of each flag of ``argv`` (a bare boolean flag is "true")."""
    return {name: ("true" if value is None else value) for name, value in split_flags(argv)}


# --------------------------------------------------------------------------- gateway client


def client_context(ca: str, cert: str, key: str) -> ssl.SSLContext:
    """TLS for etcd's client port with a client pair (etcd 3.5 caps TLS at 1.2; the default context
    negotiates it)."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    return ctx


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(text: str) -> str:
    return base64.b64decode(text).decode()


def prefix_end(prefix: str) -> str:
    """etcd's range_end for every key under ``prefix`` (the last byte plus one)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class Gateway:
    """Calls to one etcd client URL's JSON gateway, on one kept-alive connection (not thread-safe:
    one per thread of use)."""

    def __init__(self, url: str, tls: ssl.SSLContext, timeout: float = 3.0) -> None:
        parts = urllib.parse.urlsplit(url)
        self.url, self.host, self.port = url, parts.hostname or "127.0.0.1", parts.port or 2379
        self.tls, self.timeout = tls, timeout
        self._conn: Optional[http.client.HTTPSConnection] = None

    def call(self, path: str, body: dict[str, Any], timeout: Optional[float] = None) -> dict[str, Any]:
        """POST ``body`` to ``path``; etcd's JSON answer, or EtcdError with etcd's message."""
        data = json.dumps(body).encode()
        for attempt in (1, 2):         # a kept-alive connection the server closed: once more, fresh
            reused = self._conn is not None
            conn = self._connection(timeout)
            try:
                conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                raw = resp.read(64 << 20)
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if attempt == 2 or not reused or isinstance(exc, (TimeoutError, ConnectionRefusedError)):
                    raise EtcdError(f"{self.url}: {exc or type(exc).__name__}") from None
                continue
            try:
                answer = json.loads(raw or b"{}")
            except ValueError:
                raise EtcdError(f"{self.url}{path}: not JSON (HTTP {resp.status})") from None
            if resp.status != 200 or not isinstance(answer, dict):
                message = answer.get("message") or answer.get("error") if isinstance(answer, dict) else ""
                raise EtcdError(str(message or f"HTTP {resp.status}"))
            return answer
        raise EtcdError(f"{self.url}: no answer")

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPSConnection:
        wanted = self.timeout if timeout is None else timeout
        if self._conn is None:
            self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=wanted, context=self.tls)
        elif self._conn.sock is not None:
            self._conn.sock.settimeout(wanted)
        self._conn.timeout = wanted
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def get_health(url: str, timeout: float = HEALTH_TIMEOUT) -> Optional[Answer]:
    """GET a metrics URL's health path: (code, body, content type), None when nothing answers."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout)
    try:
        conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""))
        resp = conn.getresponse()
        body = resp.read(1 << 16).decode(errors="replace")
        return resp.status, body, resp.getheader("Content-Type") or "text/plain; charset=utf-8"
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


# --------------------------------------------------------------------------- the process


def _pdeathsig() -> Optional[Callable[[], None]]:
    """A preexec function that makes the child die with the thread that forks it (PR_SET_PDEATHSIG):
    a SIGKILLed lab leaves no etcd behind. Resolved before the fork, so the child only calls it."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    return lambda: None if prctl(1, signal.SIGKILL, 0, 0, 0) == 0 else None   # 1 = PR_SET_PDEATHSIG


@dataclass
class Member:
    """One real etcd process for one lab container."""

    node: str
    argv: list[str]
    log_path: Path
    metrics_url: str            # http://HOST:PORT the process serves /health and /metrics on
    client_url: str             # https://HOST:PORT of --advertise-client-urls
    #: The manifest's --listen-metrics-urls: the lab serves it in front of ``metrics_url`` (:meth:`proxy`).
    public_metrics_url: str = ""
    probe_paths: tuple[str, ...] = ()
    proc: Optional[subprocess.Popen] = None
    #: Path -> the last answer (None: nothing answered), refreshed by the poller.
    answers: dict[str, Optional[Answer]] = field(default_factory=dict)
    exit_code: Optional[int] = None
    stopping: bool = False
    #: Copies new log lines to the container's logs (set by the lab's poller).
    feed: Callable[[], None] = lambda: None
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def start(self) -> None:
        """Start the process (call it from a long-lived thread: the child dies with that thread)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         preexec_fn=_pdeathsig(), close_fds=True)

    def answer(self, path: str) -> Optional[Answer]:
        """The cached answer for ``path`` (a 404 on /livez or /readyz: that of the /health it stands for)."""
        got = self.answers.get(path)
        base = path.split("?", 1)[0].rstrip("/")
        if (got is None or got[0] == 404) and base in HEALTH_FOR:
            got = self.answers.get(HEALTH_FOR[base])
        return got

    def proxy(self, path: str) -> Optional[Answer]:
        """The answer to GET ``path`` on the manifest's metrics URL: the process's own answer, except
        that /livez and /readyz, which an etcd older than 3.5.11 does not serve (404) while the image
        the manifest names does, are answered by the /health query they stand for."""
        got = get_health(self.metrics_url + path)
        base = path.split("?", 1)[0].rstrip("/")
        if got is not None and got[0] == 404 and base in HEALTH_FOR:
            mapped = get_health(self.metrics_url + HEALTH_FOR[base])
            if mapped is not None:
                text = "text/plain; charset=utf-8"
                if mapped[0] == 200 and '"health":"false"' not in mapped[1]:
                    return 200, "ok", text
                return 503, f"[-]health failed: {mapped[1].strip()}\n{base[1:]} check failed\n", text
        return got

    def ok(self, path: str) -> bool:
        got = self.answer(path)
        return got is not None and got[0] == 200 and '"health":"false"' not in got[1]

    def serving(self) -> bool:
        """It answers on its metrics URL at all (it has booted)."""
        return self.answers.get(ALIVE) is not None

    def poll_paths(self) -> list[str]:
        paths = [ALIVE, QUORUM] + [p for p in self.probe_paths if p not in (ALIVE, QUORUM)]
        return list(dict.fromkeys(paths))

    def poll_once(self) -> bool:
        """Refresh the cached answers; True when one changed."""
        changed = False
        for path in self.poll_paths():
            got = get_health(self.metrics_url + path) if self.proc is not None and self.proc.poll() is None else None
            if got != self.answers.get(path):
                if got is None or self.answers.get(path) is None or got[0] != self.answers[path][0]:  # type: ignore[index]
                    changed = True
                elif got[1] != self.answers[path][1]:  # type: ignore[index]
                    changed = True
                self.answers[path] = got
        return changed

    def stop(self, grace: float) -> None:
        """SIGTERM, SIGKILL after ``grace`` seconds; returns once it has exited (a restarted member
        binds the same ports and locks the same data dir)."""
        self.stopping = True
        self._stop.set()
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=max(0.1, grace))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            except OSError:
                pass
        self.answers = {}

    def kill_now(self, wait: float = 5.0) -> None:
        """Stop it and wait (the lab shutting down)."""
        self.stopping = True
        self._stop.set()
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def run_poller(self, on_change: Callable[[], None], on_exit: Callable[[int, list[str]], None]) -> None:
        """The poller thread: health answers while it runs; its exit code (and last log lines) when
        it exits without being stopped."""
        while not self._stop.is_set():
            if self.proc is not None and self.proc.poll() is not None:
                self.exit_code = self.proc.returncode
                self.answers = {}
                if not self.stopping:
                    on_exit(self.proc.returncode, tail(self.log_path, 20))
                on_change()
                return
            if self.poll_once():
                on_change()
            self._stop.wait(POLL)


def tail(path: Path, lines: int, limit: int = 1 << 20) -> list[str]:
    """The last ``lines`` lines of a log file (reads at most ``limit`` bytes from its end)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError:
        return []
    return data.decode(errors="replace").splitlines()[-lines:]


def _through_members(members: list[str], tls: ssl.SSLContext, stop: threading.Event, deadline: float,
                     log: Callable[[str], None], what: str,
                     attempt: Callable[[Gateway, str], None]) -> bool:
    """Run ``attempt`` (a gateway to one member, its client URL) against each of ``members`` in turn
    until one call returns without a refusal (True), as kubeadm retries its etcd member calls: a
    refusal (:class:`EtcdError`) is logged once per member and text ("cannot ``what`` through URL
    yet: ...") and the round is tried again after 0.5 s. False when ``stop`` is set or ``deadline``
    (time.monotonic()) passes first. Shared by the learner add and its promotion."""
    said: dict[str, str] = {}
    while not stop.is_set() and time.monotonic() < deadline:
        for url in members:
            gateway = Gateway(url, tls, timeout=3.0)
            try:
                attempt(gateway, url)
                return True
            except EtcdError as exc:
                if said.get(url) != str(exc):
                    said[url] = str(exc)
                    log(f"etcd: cannot {what} through {url} yet: {exc}")
            finally:
                gateway.close()
        stop.wait(0.5)
    return False


def wait_joinable(members: list[str], peer_url: str, before: list[str], tls: ssl.SSLContext,
                  stop: threading.Event, log: Callable[[str], None], deadline: float) -> bool:
    """``kubeadm join``'s etcd step: add ``peer_url`` as a **learner** through one of the running
    members at ``members`` (client URLs), unless the member list has it already - kubeadm's learner
    mode (``EtcdLearnerMode``, on by default since v1.29): the new member votes only once
    :func:`promote_when_caught_up` promoted it. As joins happen one after the other on real nodes
    (each ends with its promotion), it waits until every member named before it (``before``: the
    other peer URLs of its ``--initial-cluster``) has started and is a voter - etcd refuses a start
    whose ``--initial-cluster`` differs from the membership, an add while another added member has
    not started, and a second learner (``--max-learners`` 1). Retried until it works, ``stop`` is
    set or ``deadline`` (time.monotonic()) passes."""

    def add(gateway: Gateway, url: str) -> None:
        listed = gateway.call("/v3/cluster/member/list", {}).get("members") or []
        if any(peer_url in (m.get("peerURLs") or []) for m in listed):
            return
        joined = {u for m in listed if m.get("name") and not m.get("isLearner")
                  for u in m.get("peerURLs") or []}
        waiting = [u for u in before if u not in joined]
        if waiting:
            raise EtcdError(f"waiting for {', '.join(waiting)} to join first (started and promoted)")
        gateway.call("/v3/cluster/member/add", {"peerURLs": [peer_url], "isLearner": True})
        log(f"etcd: added member {peer_url} as a learner through {url} (kubeadm join, learner mode)")

    return _through_members(members, tls, stop, deadline, log, f"add member {peer_url}", add)


def promote_when_caught_up(members: list[str], peer_url: str, tls: ssl.SSLContext, stop: threading.Event,
                           log: Callable[[str], None], deadline: float) -> bool:
    """``kubeadm join``'s last etcd step in learner mode: promote the learner at ``peer_url`` to a
    voting member through one of ``members`` once etcd allows it (it refuses until the learner has
    caught up with the leader's log: "can only promote a learner member which is in sync with
    leader"), retried as kubeadm retries it. True at once when the member votes already (a lab
    started again); False when ``stop`` is set or ``deadline`` passes first."""

    def promote(gateway: Gateway, url: str) -> None:
        listed = gateway.call("/v3/cluster/member/list", {}).get("members") or []
        found = next((m for m in listed if peer_url in (m.get("peerURLs") or [])), None)
        if found is None:
            raise EtcdError("not in the member list")
        if not found.get("isLearner"):
            return
        gateway.call("/v3/cluster/member/promote", {"ID": str(found.get("ID"))})
        log(f"etcd: promoted learner {peer_url} to a voting member through {url} (kubeadm join)")

    return _through_members(members, tls, stop, deadline, log, f"promote learner {peer_url}", promote)


def first_url(value: str) -> str:
    return value.split(",")[0].strip()
