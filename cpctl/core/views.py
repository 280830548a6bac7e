"""Read-only views of a node: ``status`` and ``history``.

A view reads everything it needs in one prefetched batch (one round trip over SSH). It takes the
node lock only to finish a change a killed cpctl left in the journal, so that what it shows is
never a half-done change.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, TypedDict, cast

from cpctl import catalogue
from cpctl.agent import fileops
from cpctl.core import manifests
from cpctl.core.manifests import DirScan, Manifest
from cpctl.core.node import Node
from cpctl.core.state import JOURNAL
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import HttpRequest
from cpctl.probes.base import PodTarget
from cpctl.timeutil import parse_iso


class Row(TypedDict, total=False):
    """One component of ``status`` (``-o json``: an item of ``components``). ``state`` is the
    file's (present, invalid, parked, missing), ``pod_state`` its pod's (``pod_state``). Every row
    of the answer has every field (``ROW_FIELDS``): null where its state has no value for it."""

    component: str
    namespace: Optional[str]
    file: str
    state: str
    checksum: Optional[str]
    error: Optional[str]
    pod: Optional[str]
    pod_state: Optional[str]
    observed: Optional[Mapping[str, object]]
    since: Optional[str]
    by: Optional[str]
    reason: Optional[str]
    until: Optional[str]
    overdue: Optional[bool]
    fix: Optional[str]
    unconfirmed: Optional[Dict[str, object]]   # a change awaiting cpctl confirm: its deadline, by, action, revision
    last_change: Optional[Dict[str, object]]   # the newest history record of it: action, time, user, reason, automatic


#: The fields of every status row (docs/json.md): one shape whatever the file's state.
ROW_FIELDS = ("component", "namespace", "file", "state", "checksum", "error", "pod", "pod_state", "observed",
              "since", "by", "reason", "until", "overdue", "fix", "unconfirmed", "last_change")
#: The fields of a row's ``last_change`` (null when the history holds none for it).
CHANGE_FIELDS = ("action", "time", "user", "reason", "automatic")


# How much of the history's end ``status`` reads for each component's last change (a few hundred
# records): one bounded read in the view's batch, never the whole history.
RECENT_HISTORY_BYTES = 64 << 10


class _Report(TypedDict):
    node: str
    manifests_dir: str
    state_dir: str
    components: List[Row]
    warnings: List[str]
    recovered: List[str]


class Report(_Report, total=False):
    """What ``status`` shows of one node (``-o json``)."""

    identity: Dict[str, object]
    unrecovered: str
    etcd_alarms: Dict[str, object]      # cpctl.ops.etcdcare.AlarmsSeen, added by the status command


def status(node: Node, wanted: Optional[List[str]] = None,
           also: Optional[Callable[[Report], None]] = None,
           also_ahead: Optional[Callable[[], List[HttpRequest]]] = None) -> Report:
    """Per component: file, running/parked/invalid, parking details, checksum, pod state; ``also``
    adds to the report (the etcd alarms) while the node's files are still the view's snapshot, and
    ``also_ahead`` says which HTTP requests from the node it will make.

    Over SSH the whole view is two round trips: one batch of file reads (the state dir, the manifests,
    the kubeconfig the API probe reads), then every HTTP request from the node its probes and ``also``
    make, asked together (``Host.http_ahead``: the API server's /healthz, the node's pods, etcd's members
    and alarms), each within its own timeout and used once, where it would have been asked. A GET from
    the node changes none of its files, so the snapshot holds across them."""
    from cpctl.probes.kubeapi import kubeconfig_reads
    recent = ("read_tail", {"path": node.state.history_path, "limit": RECENT_HISTORY_BYTES})
    reads = node.view_reads() + [node.state.read_call(node.state.baseline_path), recent]
    with node.host.prefetched(reads + kubeconfig_reads(node.kubeconfig)):
        data = _status(node, wanted, also_ahead)
        if also is not None:
            also(data)
    return data


def _status(node: Node, wanted: Optional[List[str]], also_ahead: Optional[Callable[[], List[HttpRequest]]]
            ) -> Report:
    """``status`` within its snapshot."""
    stuck: List[str] = []
    if node.state.ensure(create=False) and (journal_pending(node) or kept_to_settle(node)):
        try:
            node.finish_interrupted("cpctl status")
        except CpctlError as exc:
            if exc.code != ExitCode.ENVIRONMENT:
                raise
            stuck.append(exc.full_message)   # a view still shows the node; changes refuse until fixed
    scan, parked = node.scan(), node.parked()
    missing = _missing_rows(node, scan, parked)
    known = node.identity                      # read in the same round trip when deferred
    never = node.unverified(held=False)[1]     # one prefetched lstat when nothing is pending
    rows = [_present_row(m) for m in scan.manifests] + [_parked_row(f, meta) for f, meta in parked.items()]
    rows += missing
    unconfirmed = _unconfirmed(node, rows)
    _last_changes(node, rows)
    if wanted:
        rows = _filter_rows(node, rows, wanted, scan, parked)
    # every request from the node that follows, in one round trip (the pods list as if the view is current:
    # when /healthz says it is not, the list goes unused and the runtime is asked, as before)
    node.host.http_ahead(node.api_view_ahead(parked) + node.waiter.describe_ahead(_targets(node, rows, False))
                         + (also_ahead() if also_ahead is not None else []))
    stale = bool(node.api_view_stale(parked))      # the one rule (check and the waits share it)
    targets = _targets(node, rows, stale)
    node.waiter.prepare_describe(targets)               # one API list for the pods, not a GET each
    for row, target in zip([r for r in rows if r["state"] == "present" and r.get("namespace")], targets):
        observed = node.waiter.describe(target)
        row["observed"], row["pod_state"] = observed, pod_state(observed)
    for row in rows:
        for field in ROW_FIELDS:
            cast(Dict[str, object], row).setdefault(field, None)
    found = stuck + never + unconfirmed + warnings(scan) + (["kubelet configuration: %s" % p for p in known.problems]
                                              if known else [])
    data: Report = {"node": node.node_name, "manifests_dir": node.manifests_dir, "state_dir": node.state.path,
                    "components": rows, "warnings": found, "recovered": list(node.recovered)}
    if known is not None:
        data["identity"] = known.to_dict()
    if stuck:
        data["unrecovered"] = stuck[0]
    return data


def _targets(node: Node, rows: List[Row], stale: bool) -> List[PodTarget]:
    """The pods of the rows with a valid manifest (each row gets its pod's name)."""
    targets: List[PodTarget] = []
    for row in rows:
        namespace = row.get("namespace")
        if namespace and row["state"] != "invalid":
            row["pod"] = "%s-%s" % (row["component"], node.node_name.lower())
        if row["state"] == "present" and namespace:     # a valid manifest: it has a namespace
            targets.append(PodTarget(row["component"], namespace, node.node_name, file=row["file"],
                                     stale_api=stale))
    return targets


def history(node: Node, component: Optional[str] = None, limit: int = 50) -> List[Dict[str, object]]:
    """The change records (oldest first), the newest ``limit``, of one component or all."""
    if component:
        manifests.validate_component_name(component)
    calls = node.state.view_reads() + [("info", {}), node.state.read_call(node.state.history_path)]
    with node.host.prefetched(calls):
        if not node.state.ensure(create=False):
            return []
        return node.state.read_history(limit, keep=_about(component) if component else None)


def _about(component: str) -> Callable[[Dict[str, object]], bool]:
    """Does a history record concern ``component`` (by its name, an alias or its file)?"""
    target = catalogue.canonical(component)

    def keep(record: Dict[str, object]) -> bool:
        names = (record.get("component"), manifests.file_stem(str(record.get("file") or "")))
        return target in names or component in names
    return keep


def journal_pending(node: Node) -> bool:
    """A journal awaits recovery, a kill tore the journal's own write (its dot temp is left), or
    one came before the journal was written (staged bytes no journal refers to)."""
    if any(n == JOURNAL or fileops.is_temp_name(n) for n in node.host.listdir(node.state.path)):
        return True
    return node.host.lstat(node.state.staged_dir) is not None and bool(node.host.listdir(node.state.staged_dir))


def kept_to_settle(node: Node) -> bool:
    """A ``--keep-in kubeadm-config`` change whose manifest holds its previous bytes again (killed
    before its commit): the session's recovery puts its ClusterConfiguration back (``core.keptin``) -
    unless another cpctl holds the lock now (that change may be in flight)."""
    from cpctl.core import keptin
    if keptin.SUBDIR not in node.host.listdir(node.state.path):
        return False
    try:
        records = keptin.read_all(node)
    except CpctlError:
        return False
    if not any(node.checksum_of(node.manifests_dir + "/" + k.file) == k.previous for k in records):
        return False
    return not node.lock_busy()


def pod_state(observed: Optional[Mapping[str, object]]) -> str:
    """One word for what was seen of a present manifest's pod: running (and Ready), not-ready,
    absent, or unknown (nothing could look: no probe, API down, crictl missing)."""
    if observed is None:
        return "unknown"
    if not observed.get("present"):
        return "absent"
    return "running" if observed.get("ready") else "not-ready"


def _unconfirmed(node: Node, rows: List[Row]) -> List[str]:
    """Mark each row whose last change awaits ``cpctl confirm`` (``unconfirmed``: its deadline);
    a confirm record that cannot be read is a warning line, never a dead view."""
    try:
        arms = []
        # the arm module only when there is a confirm dir (the batch's lstat): never used, never loaded
        if node.state.ensure(create=False) and node.host.lstat(node.state.confirm_dir) is not None:
            from cpctl.core import confirmations
            arms = confirmations.read_all(node.host, node.state)
    except CpctlError as exc:
        return [exc.message]
    if not arms:
        return []
    now = confirmations.node_clock(node.host)     # the node's clock decides, not this machine's
    dead = {a.op: confirmations.timer_problem(node.host, a) for a in arms}    # a timer that died reverts nothing
    by_file = {a.file: a for a in arms}
    for row in rows:
        arm = by_file.get(str(row.get("file") or ""))
        if arm is not None and row.get("state") == "present":
            row["unconfirmed"] = {"deadline": arm.deadline, "by": arm.by, "action": arm.action,
                                  "revision": arm.revision, "timer": arm.timer, "overdue": arm.overdue(now),
                                  "failing": arm.failing, "attempts": arm.attempts, "next_try": arm.next_try,
                                  "timer_running": None if dead[arm.op] is None else not dead[arm.op],
                                  "timer_problem": dead[arm.op] or None}
    return ["%s: %s" % (a.component, a.pending_text(now, node.command, dead[a.op] or "")) for a in arms]


def _last_changes(node: Node, rows: List[Row]) -> None:
    """Each row's newest history record (``last_change``), from the history's last bytes; a history
    that cannot be read marks nothing (``cpctl history`` reports it)."""
    try:
        records = node.state.read_history_tail(RECENT_HISTORY_BYTES) if node.state.ensure(create=False) else []
    except CpctlError:
        return
    newest: Dict[str, Dict[str, object]] = {}
    for record in records:
        for key in (record.get("component"), record.get("file")):
            if isinstance(key, str) and key:
                newest[key] = record
    for row in rows:
        record = newest.get(row["file"]) or newest.get(row["component"]) or {}
        if record:
            row["last_change"] = {key: record.get(key) for key in CHANGE_FIELDS}
    _replaced_outside(node, rows, records)


def _replaced_outside(node: Node, rows: List[Row], records: List[Dict[str, object]]) -> None:
    """A present manifest that no longer holds what cpctl last wrote to it was replaced by another writer
    since: its ``last_change`` says so (action ``outside``, the reason ``revisions`` gives it: "kubeadm
    upgrade v1.30.4 -> v1.31.12" when kubeadm's backup dir holds cpctl's bytes, else "replaced outside
    cpctl"). Only such a file costs the look into kubeadm's backup dirs."""
    from cpctl.core import outside
    for row in rows:
        if row["state"] != "present":
            continue
        found = outside.detect(node, row["file"], row.get("checksum"), records)
        if found is not None:
            row["last_change"] = {"action": outside.OUTSIDE_ACTION, "time": None, "user": None,
                                  "reason": found.note, "automatic": None}


def _present_row(m: Manifest) -> Row:
    """A manifest in the dir: ``state`` is the file's (present/invalid), ``pod_state`` the pod's."""
    if m.valid and m.pod_name:
        return {"component": m.pod_name, "namespace": m.namespace, "file": m.file, "state": "present",
                "checksum": m.checksum}
    return {"component": manifests.file_stem(m.file), "file": m.file, "state": "invalid", "error": m.error,
            "checksum": m.checksum, "pod": None, "pod_state": None}


def _parked_row(filename: str, meta: Mapping[str, object]) -> Row:
    """A parked manifest, from its metadata (``state.check_meta`` checked its text fields)."""
    import time

    def text(key: str) -> Optional[str]:
        value = meta.get(key)
        return value if isinstance(value, str) else None
    row: Row = {"component": text("component") or manifests.file_stem(filename),
                "namespace": text("namespace"), "file": filename, "state": "parked",
                "since": text("parked_at"), "by": text("parked_by"), "reason": text("reason"),
                "until": text("until"), "checksum": text("checksum"), "pod_state": None}
    until = row["until"]
    if until:
        row["overdue"] = parse_iso(until) < time.time()
    return row


def _missing_rows(node: Node, scan: DirScan, parked: Mapping[str, Mapping[str, object]]) -> List[Row]:
    """A row (state ``missing``) for each manifest the drift baseline expects that is neither in the
    manifests dir nor parked: it vanished. No baseline, or one that cannot be read: no rows (status
    is a view; ``cpctl check`` reports a corrupt baseline)."""
    try:
        baseline = node.state.read_json(node.state.baseline_path) if node.state.ensure(create=False) else None
    except CpctlError:
        return []
    entries = (baseline or {}).get("manifests")
    if not isinstance(entries, dict):
        return []
    here = {m.file for m in scan.manifests} | set(parked)
    rows: List[Row] = []
    for filename, entry in sorted(entries.items()):
        if filename in here or not isinstance(entry, dict):
            continue
        namespace, checksum = entry.get("namespace"), entry.get("checksum")
        rows.append({"component": str(entry.get("pod") or manifests.file_stem(filename)),
                     "namespace": namespace if isinstance(namespace, str) else None, "file": filename,
                     "state": "missing", "checksum": checksum if isinstance(checksum, str) else None,
                     "pod_state": None, "fix": node.command("check", "--fix", "--restore-missing")})
    return rows


def _filter_rows(node: Node, rows: List[Row], wanted: List[str], scan: DirScan,
                 parked: Dict[str, Dict[str, object]]) -> List[Row]:
    keep: List[Row] = []
    for name in wanted:
        present, parked_hits = node.resolve(name, scan, parked)
        files = {m.file for m in present} | set(parked_hits)
        if not files:
            target = manifests.ALIASES.get(name, name)
            files = {r["file"] for r in rows if r["state"] == "missing"
                     and (target in (r["component"], manifests.file_stem(r["file"])) or name == r["file"])}
        if not files:
            raise node.not_found(name)
        keep.extend(r for r in rows if r["file"] in files and r not in keep)
    return keep


def warnings(scan: DirScan) -> List[str]:
    """What the kubelet does with this dir that an operator would not expect."""
    found = []
    for (namespace, name), files in scan.duplicates().items():
        found.append("pod %s/%s is defined by several files (%s): the kubelet runs only one"
                     % (namespace, name, ", ".join(files)))
    for m in scan.manifests:
        if m.kind == "symlink":
            found.append("%s is a symlink: the kubelet follows it, cpctl will not move it" % m.file)
        elif not m.valid:
            found.append("%s is not a valid Pod manifest (%s): the kubelet skips it" % (m.file, m.error))
    return found
