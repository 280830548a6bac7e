"""Helpers (no tests) for issue 46's rolling defragmentation on the lab's ``ha`` profile (3 masters
whose kubelets run the real etcd from their manifests), used by the test in
tests/fleet/test_etcd_defrag_fleet.py (a few MiB of garbage) and by benchmarks/etcddefrag.py (the
issue's ~150 MB).

* :class:`LabEtcd` reaches each lab member's client URL with its master's etcd healthcheck-client
  pair, in the shape ``tests.etcdnodes``' load helpers (``garbage``, ``statuses``, ``Writer``) use;
* :class:`DefragSampler` watches every member beside a defragmentation and says when two were
  being defragmented at once (see its docstring for what counts);
* :func:`run_rolling_defrag` is the whole scenario: live data, garbage, a writer, the sampler,
  ``cpctl -i INV etcd defrag --all``, and what each observer saw.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from tests import etcdnodes as en
from tests.realetcd import READY_WAIT, gateway_call
from tests.remoteutil import Cli, clean_env, lab_vars, write_inventory

#: The sampler asks each member's status back to back, this far apart: fine enough that a
#: defragmentation of a few MiB (~0.1 s) is seen, coarse enough to add little load.
SAMPLE_PAUSE = 0.02
#: One status call may wait this long: a member blocks every request (status too, measured on
#: 3.5.1) while it defragments, and answers at its end; only a member that does not answer at all
#: within it is "not answering" (on 2 busy cores a defragmentation of 150 MiB takes seconds).
SAMPLE_WAIT = 60.0


@dataclass
class LabMember:
    """One lab master's etcd member: its client URL and its master's etcd client pair."""

    name: str
    master: int
    client_url: str
    pair: Tuple[str, str, str]
    running: bool = True
    learner: bool = False


class LabEtcd:
    """The lab's real etcd, asked from the test process (what ``tests.realetcd.RealEtcd`` offers
    the load helpers: ``members``, ``gateway``, ``put``, ``wait_for``)."""

    def __init__(self, lab: Any) -> None:
        self.lab = lab
        self.members: Dict[str, LabMember] = {}
        host = "[::1]" if (lab.info.get("profile") or {}).get("ip_family") == "ipv6" else "127.0.0.1"
        for index, master in enumerate(lab.info["masters"], start=1):
            pki = Path(master["root_dir"]) / "etc/kubernetes/pki/etcd"
            self.members[lab.node_name(index)] = LabMember(
                lab.node_name(index), index, "https://%s:%d" % (host, lab.ports(index)["etcd-client"]),
                (str(pki / "ca.crt"), str(pki / "healthcheck-client.crt"), str(pki / "healthcheck-client.key")))
        for entry in self.member_list():
            if entry.get("name") in self.members:
                self.members[entry["name"]].learner = bool(entry.get("isLearner"))

    def gateway(self, name: str, path: str, body: Any, timeout: float = 10.0) -> Tuple[int, Any]:
        member = self.members[name]
        return gateway_call(member.client_url, member.pair, path, body, timeout)

    def put(self, key: bytes, value: bytes, name: Optional[str] = None) -> Tuple[int, Any]:
        body = {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()}
        return self.gateway(name or self._running_name(), "/v3/kv/put", body)

    def member_list(self) -> List[Dict[str, Any]]:
        status, doc = self.gateway(next(iter(self.members)), "/v3/cluster/member/list", {})
        assert status == 200, doc
        return list(doc["members"])

    def leader(self) -> str:
        """The member every running member names as leader (asserted to be one)."""
        ids = {s["leader"] for s in en.statuses(self).values()}
        assert len(ids) == 1, ids
        names = {int(m["ID"]): m.get("name", "") for m in self.member_list()}
        return str(names[ids.pop()])

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = READY_WAIT,
                 every: float = 0.1) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
            time.sleep(every)

    def _running_name(self) -> str:
        return next(n for n, m in self.members.items() if m.running and not m.learner)


class KeptClient:
    """One kept-alive HTTPS connection to a member's gateway: a status call costs a round trip, not
    a TLS handshake, so the sampler's windows are barely wider than the defragmentation."""

    def __init__(self, member: LabMember) -> None:
        ca, cert, key = member.pair
        self.context = ssl.create_default_context(cafile=ca)
        self.context.load_cert_chain(cert, key)
        self.netloc = member.client_url.split("://", 1)[1]
        self.conn: Optional[http.client.HTTPSConnection] = None

    def post(self, path: str, body: Any, timeout: float) -> Tuple[int, Any]:
        if self.conn is None:
            self.conn = http.client.HTTPSConnection(self.netloc, timeout=timeout, context=self.context)
        self.conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        reply = self.conn.getresponse()
        return reply.status, json.loads(reply.read(1 << 20) or b"null")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass
class Window:
    """A time (monotonic) during which a member may have been defragmenting, and what showed it."""

    member: str
    start: float
    end: float
    why: str


class DefragSampler:
    """One thread per member asking its ``/v3/maintenance/status`` back to back (``SAMPLE_PAUSE``
    apart, on a kept connection), beside a defragmentation. etcd answers no request of a member while
    it defragments - status included: the call waits and answers at the end, with the smaller size
    (measured on 3.5.1). So a member counts as defragmenting

    * for a call that did not answer (an error, or nothing in ``SAMPLE_WAIT``): from asked to given up;
    * for a call whose answer has a smaller ``dbSize`` than the answer before (only a
      defragmentation shrinks the file): from asked to answered - the member did not answer while
      it finished one.

    Two windows of different members that overlap are "two members defragmenting at once". Two
    defragmentations that overlap by more than a pause and a round trip (~25 ms) are always caught:
    each member's call waits through the common part. One shorter than a pause may fall between two
    calls; its window is then the short call that saw the drop (it is still counted, and
    ``cpctl``'s gap between two members, a fresh survey through its agent, is ~50 ms and more).
    The test runs ``etcdctl defrag --cluster`` (every member at once) under the same sampler to show
    it catches what it is for."""

    def __init__(self, cluster: LabEtcd) -> None:
        self.cluster = cluster
        self.windows: List[Window] = []
        self.calls: Dict[str, int] = {name: 0 for name in cluster.members}
        self.slowest: Dict[str, float] = {name: 0.0 for name in cluster.members}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._watch, args=(name,), daemon=True) for name in cluster.members]

    def start(self) -> "DefragSampler":
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(SAMPLE_WAIT + 10)

    def _watch(self, name: str) -> None:
        previous: Optional[int] = None        # the dbSize of the last answer
        client = KeptClient(self.cluster.members[name])
        while not self._stop.is_set():
            asked = time.monotonic()
            try:
                status, doc = client.post("/v3/maintenance/status", {}, SAMPLE_WAIT)
                size = int(doc.get("dbSize", 0)) if status == 200 and isinstance(doc, dict) else -1
                why = "HTTP %d" % status
            except (OSError, http.client.HTTPException, ValueError) as exc:
                size, why = -1, "no answer (%s)" % exc
                client.close()
            answered = time.monotonic()
            with self._lock:
                self.calls[name] += 1
                self.slowest[name] = max(self.slowest[name], answered - asked)
                if size < 0:
                    self.windows.append(Window(name, asked, answered, why))
                    previous = None
                elif previous is not None and size < previous:
                    self.windows.append(Window(name, asked, answered, "dbSize %d -> %d" % (previous, size)))
                if size >= 0:
                    previous = size
            self._stop.wait(SAMPLE_PAUSE)

    def overlaps(self) -> List[Tuple[Window, Window]]:
        """Pairs of windows of two different members that overlap in time."""
        return overlapping_pairs(self.windows)

    def order(self) -> List[str]:
        """The members in the order their windows began."""
        return [w.member for w in sorted(self.windows, key=lambda w: w.start)]

    def gaps(self) -> List[float]:
        """Seconds between one member's window end and the next member's window start."""
        ordered = sorted(self.windows, key=lambda w: w.start)
        return [round(b.start - a.end, 3) for a, b in zip(ordered, ordered[1:]) if a.member != b.member]


def overlapping_pairs(windows: List[Window]) -> List[Tuple[Window, Window]]:
    """Pairs of ``windows`` of two different members that overlap in time (a sampler's, or etcd's log's)."""
    out = []
    ordered = sorted(windows, key=lambda w: w.start)
    for index, first in enumerate(ordered):
        for second in ordered[index + 1:]:
            if second.start >= first.end:
                break
            if second.member != first.member:
                out.append((first, second))
    return out


@dataclass
class DefragRun:
    """What ``run_rolling_defrag`` saw: cpctl's answer, each observer's account, the timings."""

    answer: Dict[str, Any]
    leader_before: str
    leader_after: str
    before: Dict[str, Dict[str, Any]]
    after: Dict[str, Dict[str, Any]]
    sampler: DefragSampler
    writer: en.Writer
    max_gap: float
    seconds: float
    loaded_seconds: float
    logged: Dict[str, List[List[float]]] = field(default_factory=dict)


def over_ssh(lab: Any, ssh_config: str, known_hosts: str, workdir: str, *args: str) -> Callable[[], Dict[str, Any]]:
    """``cpctl -i INV etcd defrag --all ARGS`` through real sshd (``ssh_config`` names master1..3),
    with an inventory of the lab's masters: a call that returns its JSON answer."""
    cli = Cli(ssh_config, known_hosts, clean_env(os.path.join(workdir, "home")))
    count = len(lab.info["masters"])
    hosts = {"master%d" % m: dict(host="master%d" % m, **lab_vars(lab, m)) for m in range(1, count + 1)}
    inventory = write_inventory(os.path.join(workdir, "inv.yaml"), hosts)
    return lambda: dict(cli.json("-i", inventory, "etcd", "defrag", "--all", *args, timeout=en.RUN_TIMEOUT))


def load(cluster: LabEtcd, garbage_mb: int, live_mb: int = 8) -> None:
    """``live_mb`` MiB that stay (then "in use" is data, not metadata) and ``garbage_mb`` MiB of
    values written and deleted on every member, compacted: each DB keeps the pages."""
    live = os.urandom(256 << 10)
    for index in range(live_mb * 4):
        assert cluster.put(b"/live/%04d" % index, live)[0] == 200
    en.garbage(cluster, garbage_mb)


def run_rolling_defrag(cluster: LabEtcd, defrag: Callable[[], Dict[str, Any]], garbage_mb: int) -> DefragRun:
    """Load every member, then run ``defrag`` (``cpctl -i INV etcd defrag --all``, its JSON answer)
    with a writer (a put every 100 ms through the cluster) and the sampler beside it."""
    started = time.monotonic()
    load(cluster, garbage_mb)
    loaded = time.monotonic() - started
    before = en.statuses(cluster)
    leader = cluster.leader()
    writer = en.Writer(cluster).start()          # typed for RealEtcd; LabEtcd offers the same calls
    sampler = DefragSampler(cluster).start()
    time.sleep(0.5)                              # both observers running before the first member
    began = time.monotonic()
    try:
        answer = defrag()
    finally:
        seconds = time.monotonic() - began
        time.sleep(0.5)
        sampler.stop()
        max_gap = writer.stop()
    return DefragRun(answer, leader, cluster.leader(), before, en.statuses(cluster), sampler, writer, max_gap,
                     seconds, loaded)


def all_at_once(cluster: LabEtcd, garbage_mb: int, lab: Any, attempts: int = 3) -> DefragSampler:
    """The sampler's control: garbage again, then every member defragmented at the same moment under a
    fresh sampler, which must see it. "At the same moment" is up to the machine: each member's
    connection is opened first and the three requests leave together (a barrier), yet on two busy cores
    a defragmentation of a few MiB (~10 ms) may still end before the next one begins. So etcd's own log
    (``log_intervals``) judges whether they overlapped: an attempt whose logged defragmentations did not
    overlap proves nothing about the sampler and is tried again (at most ``attempts``); the first whose
    did is returned, and the test then asks the sampler to have seen it."""
    for _ in range(attempts - 1):
        before = {name: len(spans) for name, spans in log_intervals(lab).items()}
        sampler = _defragment_together(cluster, garbage_mb)
        logged = [Window(name, start, end, "etcd's log") for name, spans in log_intervals(lab).items()
                  for start, end in spans[before.get(name, 0):]]
        if overlapping_pairs(logged):
            return sampler
    return _defragment_together(cluster, garbage_mb)


def _defragment_together(cluster: LabEtcd, garbage_mb: int) -> DefragSampler:
    """Garbage on every member, then one thread per member sends its defragment request on a
    connection it opened beforehand, all released by one barrier (as ``etcdctl defrag --endpoints=X &``
    for each member would, minus the TLS handshakes), under a fresh sampler."""
    load(cluster, garbage_mb, live_mb=0)
    clients = {name: KeptClient(member) for name, member in cluster.members.items()}
    for client in clients.values():               # connected (TLS done) before the barrier
        assert client.post("/v3/maintenance/status", {}, SAMPLE_WAIT)[0] == 200
    sampler = DefragSampler(cluster).start()
    time.sleep(0.3)
    together = threading.Barrier(len(clients))
    results: Dict[str, int] = {}

    def one(name: str) -> None:
        together.wait(SAMPLE_WAIT)
        results[name] = clients[name].post("/v3/maintenance/defragment", {}, SAMPLE_WAIT)[0]

    threads = [threading.Thread(target=one, args=(name,)) for name in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SAMPLE_WAIT + 10)
    time.sleep(0.3)
    sampler.stop()
    for client in clients.values():
        client.close()
    assert set(results.values()) == {200}, results
    return sampler


def log_intervals(lab: Any) -> Dict[str, List[List[float]]]:
    """Each member's defragmentations as etcd's own log tells them, [[start, end], ...] (Unix time)
    by member name: zap's "defragmenting" and "finished defragmenting directory" lines, in the logs
    of every container the lab's kubelets ran etcd in (a log names its data dir: its master's root)."""
    out: Dict[str, List[List[float]]] = {name: [] for name in lab.info and [m["name"] for m in lab.info["masters"]]}
    roots = {m["name"]: m["root_dir"] for m in lab.info["masters"]}
    for path in sorted(Path(lab.dir, "containers").glob("*/etcd.log")):
        spans: List[List[float]] = []
        owner = ""
        for line in path.read_text(errors="replace").splitlines():
            entry = _json(line)
            msg = entry.get("msg", "")
            if msg == "defragmenting":
                spans.append([en._ts(entry.get("ts")), float("inf")])
                owner = owner or next((n for n, r in roots.items() if str(entry.get("path", "")).startswith(r)), "")
            elif msg == "finished defragmenting directory" and spans:
                spans[-1][1] = en._ts(entry.get("ts"))
        if spans:
            out.setdefault(owner or str(path), []).extend(spans)
    return out


def _json(line: str) -> Dict[str, Any]:
    try:
        entry = json.loads(line) if line.startswith("{") else {}
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}


def summary(run: DefragRun, garbage_mb: int, tool: str = "cpctl etcd defrag --all") -> str:
    """One line of numbers for the test's output and the benchmark's table."""
    return ("%d MiB garbage per member: %s %.1f s (load %.1f s); writer %d puts, longest gap "
            "%.2f s, %d attempts failed; sampler windows %s, gaps between members %s s, slowest status %s" % (
                garbage_mb, tool, run.seconds, run.loaded_seconds, len(run.writer.done), run.max_gap,
                run.writer.failures,
                ["%s %.2f s" % (w.member, w.end - w.start) for w in sorted(run.sampler.windows, key=lambda w: w.start)],
                run.sampler.gaps(), {k: round(v, 2) for k, v in run.sampler.slowest.items()}))
