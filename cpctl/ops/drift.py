"""Drift between what a control-plane node should run and what its manifests dir holds.

A *baseline* (``STATE/baseline.json``) records the expected manifests with their content, so a
later ``check`` can show a unified diff of an out-of-band edit instead of a bare checksum
mismatch. ``check`` then looks for everything that silently breaks a control plane: a parked
manifest nobody restored, a manifest that vanished, a backup copy the kubelet runs as a second
apiserver, an interrupted cpctl operation, a state dir others can write to, and (with a probe
that can describe pods) mirror pods that do not match the files.

Every finding carries ``fix``: the command (or the step) that repairs it, in text and JSON.

``fix`` repairs only what is safe and reversible: restoring parks past their own deadline (via
``Node.start`` inside a session, so lock, journal and history apply), finishing an interrupted
journal entry, and - only when asked - moving strays into ``STATE/strays/<timestamp>/`` and
writing a vanished manifest back from the baseline's copy (``--restore-missing``, a journaled
``restore-missing`` change). Nothing is ever deleted. No click here: the command layer lives in
``cpctl.cli.commands.drift``.
"""

from __future__ import annotations

import difflib
import json
import time
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    AbstractSet,
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    TypedDict,
)

from cpctl.catalogue import ETCD
from cpctl.core import flags, journal, manifests, outside
from cpctl.core import kubeadmconfig as kc
from cpctl.core.manifests import DirScan
from cpctl.core.node import Node
from cpctl.core.podspec import shown
from cpctl.core.settings import command_hint_here
from cpctl.core.state import BASELINE as BASELINE_FILE
from cpctl.core.state import user_label
from cpctl.errors import Corrupt, CpctlError, ExitCode
from cpctl.probes.base import PodTarget, Waiter, WaitResult
from cpctl.timeutil import format_duration, iso, parse_iso, stamp

if TYPE_CHECKING:           # ops.certs imports cryptography lazily; a check on a node without pki never does
    from cpctl.ops.certs import Report as CertsReport
    from cpctl.ops.etcdcare import AlarmsSeen

BASELINE = BASELINE_FILE
STRAYS = "strays"
MOVE_STRAY = "move-stray"
RESTORE_MISSING = "restore-missing"
BASELINE_VERSION = 1
MAX_DIFF_LINES = 200

CRITICAL, WARNING, INFO = "critical", "warning", "info"

# Every finding kind, so metrics can export zeros (an absent series cannot be alerted on).
KINDS = {
    "overdue_park": "parked past its --for deadline or longer than --max-parked",
    "missing": "baseline manifest neither in the manifests dir nor parked by cpctl",
    "changed": "manifest content differs from the baseline (edited out of band)",
    "unexpected": "valid manifest that is not in the baseline",
    "stray": "loadable file that is a backup/editor leftover or not a valid Pod",
    "duplicate": "several files define the same pod (the kubelet runs only one)",
    "mirror_not_ready": "manifest present but its mirror pod is missing or not Ready",
    "mirror_of_parked": "component parked but its mirror pod still exists",
    "interrupted": "a cpctl operation was interrupted (STATE/journal.json present)",
    "unverified": "a manifest change whose new pod was never verified (cpctl stopped during its wait)",
    "unconfirmed": "a change made with --confirm-within awaits confirmation: the node reverts it at its deadline",
    "unknown": "a present manifest whose pod check could not judge: no probe could look at it, or only the API's "
               "stale view of this node could",
    "permissions": "state dir is a symlink, group/world accessible or owned by someone else",
    "editor_swap": "an editor swap file: someone is editing a manifest or an editor crashed",
    "no_baseline": "no baseline recorded: missing/changed/unexpected checks skipped",
    "check_skipped": "mirror pod checks skipped: no probe that can describe pods",
    "lost_change": "flags cpctl set are gone: a writer other than cpctl (kubeadm upgrade) replaced the manifest",
    "upgrade_in_flight": "a kubeadm upgrade is in flight (fresh manifests in /etc/kubernetes/tmp): changes refused",
    "kubeadm_drops": "check --kubeadm: flags or hostPath volumes the next kubeadm upgrade drops (not in the "
                     "ClusterConfiguration nor in a patch file)",
    "kubeadm_adds": "check --kubeadm: flags or hostPath volumes the next kubeadm upgrade adds or changes (in the "
                    "ClusterConfiguration or a patch file, not running: an undone kept flag, someone else's edit)",
    "kubeadm_data_dir": "check --kubeadm: the next kubeadm upgrade points etcd away from the data it runs on",
    "kubeadm_patch_fails": "check --kubeadm: a kubeadm patch file does not apply to what the next upgrade renders",
    "kubeadm_patch_unchecked": "check --kubeadm: a strategic or merge patch file cpctl does not evaluate",
    "upgrade_failed": "a kubeadm upgrade failed and rolled back: its leftovers are in /etc/kubernetes/tmp",
    "cert_expiring": "a kubeadm certificate expires within --cert-warn, or has expired",
    "cert_stale": "a running component still uses an old certificate (cpctl restart --stale-certs)",
    "etcd_alarm": "an etcd alarm is active (NOSPACE: the cluster refuses writes; CORRUPT: members' data differ)",
    "etcd_alarm_unknown": "the etcd alarms could not be read from this node's etcd URLs",
}



class Finding:
    """One problem (or info note) found by ``check``, with ``fix``: how to repair it."""

    def __init__(self, kind: str, severity: str, message: str, file: Optional[str] = None,
                 component: Optional[str] = None, diff: Optional[str] = None, fix: Optional[str] = None,
                 **extra: object) -> None:
        assert kind in KINDS, kind
        self.kind = kind
        self.severity = severity
        self.message = message
        self.file = file
        self.component = component
        self.diff = diff
        self.extra: Dict[str, object] = extra       # kind-specific JSON fields (deadline, lost, files...)
        self.given_fix = fix                        # else ``how_to_fix``, for the node (``Report.add``)
        self.fix = fix or how_to_fix(kind, file, component, extra)

    def to_dict(self) -> Dict[str, object]:
        data: Dict[str, object] = {"kind": self.kind, "severity": self.severity, "file": self.file,
                                   "component": self.component, "message": self.message, "diff": self.diff,
                                   "fix": self.fix}
        data.update(self.extra)
        return data


def how_to_fix(kind: str, file: Optional[str], component: Optional[str], extra: Mapping[str, object],
               command: Callable[..., str] = command_hint_here) -> str:
    """The command (or step) that repairs a finding of ``kind``: every finding says how to act on it.
    ``command``: how a cpctl command line is written for the node checked (``Node.command``: with the
    ``-H``/``-i`` that reach it)."""
    name = component or manifests.file_stem(file or "") or "COMPONENT"
    if kind == "overdue_park":
        return command("start", name) + (" (or %s)" % command("check", "--fix") if extra.get("deadline") else "")
    if kind == "stray":
        return command("check", "--fix", "--remove-strays", *(["--allow-restart"] if extra.get("runs_pod") else []))
    if kind == "unconfirmed":
        if extra.get("timer_problem"):      # nothing reverts it by itself: the one command that does
            return "%s reverts it now (its revert timer is not running; the next cpctl change on this node " \
                   "restarts the timer)" % command("revert-unconfirmed", name)
        if extra.get("overdue"):
            return ("nothing: the node's revert timer reverts it (overdue since its deadline); %s reverts it now"
                    % command("revert-unconfirmed", name))
        return "%s (keeps the change), or let it revert at its deadline" % command("confirm", name)
    fixes = {
        "missing": "%s (writes it back from the baseline's copy)" % command("check", "--fix", "--restore-missing"),
        "changed": "%s (if the change is intended; otherwise put the baseline content shown in the diff back with "
                   "%s)" % (command("baseline", "--accept"), command("apply", name, "-f", "FILE")),
        "unexpected": "%s (if it is intended; otherwise %s parks it)" % (command("baseline", "--accept"),
                                                                         command("stop", name)),
        "duplicate": command("check", "--fix", "--remove-strays", "--allow-restart"),
        "mirror_not_ready": "%s (why it does not run), then %s or fix the manifest" % (
            command("logs", name, "--previous"), command("rollback", name)),
        "mirror_of_parked": "wait for the kubelet to drop it, else check the kubelet (journalctl -u kubelet)",
        "interrupted": command("check", "--fix"),
        "unknown": "%s (what the runtime and the health endpoint show; install crictl or fix what the finding "
                   "names, then check again)" % command("status", name),
        "unverified": "%s (waits for the pod and confirms the change) or %s" % (command("start", name),
                                                                                 command("rollback", name)),
        "permissions": "chown root: %s && chmod 700 %s (a symlink: replace it with a directory)" % (file, file),
        "editor_swap": "finish the edit, or remove %s if the editor crashed" % file,
        "no_baseline": command("baseline"),
        "check_skipped": "%s (or --probe crictl)" % command("check", "--probe", "api"),
        "lost_change": "set them again, kept where the next upgrade looks: %s %s --keep-in kubeadm-config (%s shows "
                       "the version they were in)" % (command("flags", name), set_args(extra.get("lost")),
                                                      command("revisions", name)),
        "upgrade_in_flight": "let kubeadm upgrade finish (or clean up after a failed one), then retry",
        "kubeadm_drops": "%s %s --keep-in kubeadm-config" % (command("flags", name), set_args(extra.get("flags"))),
        "kubeadm_adds": "if it should not run, remove it from the ClusterConfiguration (kubectl -n kube-system edit cm "
                        "kubeadm-config); if it should, %s %s" % (command("flags", name), set_args(extra.get("flags"))),
        "kubeadm_data_dir": "%s (sets etcd.local.dataDir)" % command("flags", ETCD, "--set", "data-dir=DIR",
                                                                     "--keep-in", "kubeadm-config"),
        "kubeadm_patch_fails": "fix or remove the patch file; keep flags with --keep-in kubeadm-config instead",
        "kubeadm_patch_unchecked": "compare by hand: kubeadm upgrade diff (or kubeadm upgrade apply --dry-run "
                                   "--patches DIR) shows what it renders",
        "upgrade_failed": "read kubeadm's output, fix the cause, run kubeadm upgrade again; remove the leftover "
                          "kubeadm-upgraded-manifests dir once done",
        "cert_expiring": "kubeadm certs renew all on this master, then %s" % command("restart", "--stale-certs"),
        "cert_stale": "%s (%s shows why)" % (command("restart", "--stale-certs"), command("certs")),
        "etcd_alarm": "%s (compacts, defragments, disarms NOSPACE); CORRUPT: find the bad member in etcd's logs "
                      "and replace it (docs/etcd.md, \"CORRUPT\")" % command(ETCD, "recover-space"),
        "etcd_alarm_unknown": "%s (which members answer and why not)" % command(ETCD, "status"),
    }
    return fixes[kind]


def set_args(items: object) -> str:
    """``--set name=value`` for each ``--name=value`` of ``items`` (a bare ``--name``: ``=true``), the
    value shell-quoted; a secret's value is not repeated (``--set token=VALUE``: type it yourself)."""
    import shlex

    from cpctl.redaction import is_secret_name
    words = []
    for item in items if isinstance(items, list) else []:
        name, sep, value = str(item)[2:].partition("=")
        shown = "VALUE" if is_secret_name(name) or "<redacted>" in value else shlex.quote(value if sep else "true")
        words.append("--set %s=%s" % (name, shown))
    return " ".join(words) or "--set NAME=VALUE"


class Report:
    """Findings of one check plus the parked inventory the metrics need."""

    def __init__(self, node_name: str, now: float) -> None:
        self.node = node_name
        self.time = now
        self.findings: List[Finding] = []
        self.components: Dict[str, float] = {}     # component -> seconds parked (0 when not parked)
        self.missing: Set[str] = set()      # components whose baselined manifest is neither present nor parked
        self.certs: Optional[CertsReport] = None   # cpctl certs' report, when the check looked at certificates
        self.parked_since: Dict[str, float] = {}    # component -> Unix time it was parked (when known)
        self.parked_until: Dict[str, float] = {}    # component -> Unix time its --for deadline ends
        #: (component, manifest file, Unix time the node reverts it) of each change awaiting cpctl confirm
        self.unconfirmed: List[Tuple[str, str, float]] = []
        self.command: Callable[..., str] = command_hint_here     # ``Node.command`` of the node checked
        self.revert_failing: List[Tuple[str, str, int]] = []      # (component, file, failed attempts)
        self.api_stale = ""             # why the API's view of this node is stale ("" it is not: Node.api_view_stale)
        #: (component, file, 1/0) whether the node-side timer of each arm still runs (unknown: absent)
        self.timer_running: List[Tuple[str, str, int]] = []
        #: the etcd cluster's alarms as this node reads them (None: no etcd to ask from this node)
        self.etcd_alarms: Optional[AlarmsSeen] = None

    def add(self, finding: Finding) -> None:
        if not finding.given_fix:         # its command lines with the -H/-i that reach this node
            finding.fix = how_to_fix(finding.kind, finding.file, finding.component, finding.extra, self.command)
        self.findings.append(finding)

    @property
    def problems(self) -> List[Finding]:
        return [f for f in self.findings if f.severity != INFO]

    @property
    def drift(self) -> bool:
        return bool(self.problems)

    def counts(self) -> Dict[str, int]:
        counts = dict.fromkeys(KINDS, 0)
        for f in self.findings:
            counts[f.kind] += 1
        return counts

    def of_kind(self, kind: str) -> List[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def to_dict(self) -> Dict[str, object]:
        return {"node": self.node, "time": iso(self.time), "drift": self.drift,
                "findings": [f.to_dict() for f in self.findings],
                "parked": {c: round(s, 3) for c, s in sorted(self.components.items()) if s}}


@dataclass
class FixAction:
    """One thing ``fix`` did (or refused, or - in a dry run - would do) about a finding; ``plan``:
    in a dry run, the steps of the changes it would apply (``{"move": [src, dst]}``, ...)."""

    action: str
    file: Optional[str]
    component: Optional[str]
    ok: bool
    message: str
    plan: Optional[List[Dict[str, object]]] = None

    def to_dict(self) -> Dict[str, object]:
        """The action for the output: ``plan`` only in a dry run."""
        data: Dict[str, object] = {"action": self.action, "file": self.file, "component": self.component,
                                   "ok": self.ok, "message": self.message}
        if self.plan is not None:
            data["plan"] = self.plan
        return data


# --- baseline ---------------------------------------------------------------------------------

def baseline_path(node: Node) -> str:
    return node.state.baseline_path


def read_baseline(node: Node) -> Optional[Dict[str, object]]:
    """The recorded baseline, None when there is none; a corrupt file is an environment error."""
    path = baseline_path(node)
    repair = "inspect it, or replace it with %s" % node.command("baseline", "--accept")
    value = node.state.read_json(path, repair)
    if value is None:
        return None
    entries = value.get("manifests")
    if not isinstance(entries, dict):
        raise Corrupt("%s is corrupt (no manifests): %s" % (path, repair))
    for filename, entry in entries.items():
        problem = _entry_problem(entry)
        if problem:
            raise Corrupt("%s is corrupt (the entry of %s %s): %s" % (path, shown(filename), problem, repair))
    return value


def _entry_problem(entry: object) -> str:
    """What is wrong with one baseline entry as ``_entry`` writes it ('' when nothing): an object
    whose pod and checksum are text, and whose content and state, when there, are text too."""
    if not isinstance(entry, dict):
        return "is not an object"
    for key in ("pod", "checksum"):
        if not isinstance(entry.get(key), str):
            return "has no text %s" % key
    for key in ("content", "state", "namespace"):
        if key in entry and not isinstance(entry[key], str):
            return "has a %s that is not text" % key
    return ""


def write_baseline(node: Node, baseline: Mapping[str, object]) -> None:
    data = (json.dumps(baseline, indent=2, sort_keys=True) + "\n").encode("utf-8")
    node.host.write_atomic(baseline_path(node), data, 0o600)


def _entries(baseline: Optional[Mapping[str, object]]) -> Dict[str, Dict[str, object]]:
    """The baseline's manifests, file name -> entry ({} without a baseline). ``read_baseline``
    checked that they form a JSON object; each entry is taken as one (cpctl wrote them)."""
    entries = (baseline or {}).get("manifests", {})
    return entries if isinstance(entries, dict) else {}


def _text(value: object) -> Optional[str]:
    """``value`` when it is a string (a field of a state file: input like any other), else None."""
    return value if isinstance(value, str) else None


def _entry(pod: Mapping[str, object], data: bytes, state: str) -> Dict[str, object]:
    meta = pod["metadata"]
    assert isinstance(meta, dict), "parse_pod checks metadata"
    return {"pod": meta["name"], "namespace": meta.get("namespace") or "default",
            "checksum": manifests.checksum(data), "content": data.decode("utf-8"), "state": state}


def _read_parked(node: Node, filename: str) -> Optional[bytes]:
    path = node.state.parked_path(filename)
    info = node.host.lstat(path)
    if info is None or info["kind"] != "file" or info["size"] > manifests.MAX_MANIFEST_BYTES:
        return None
    return node.host.read_file(path, manifests.MAX_MANIFEST_BYTES)


def snapshot(node: Node) -> Dict[str, object]:
    """The current manifests (running and parked by cpctl) as a baseline.

    Refuses when the dir holds strays or duplicates: blessing a backup copy as "expected" would
    hide exactly the trap the baseline exists to catch.
    """
    scan, parked = node.scan(), node.parked()
    report = Report(node.node_name, time.time())
    report.command = node.command
    _check_strays(report, scan, None, parked)
    if report.problems:
        listed = "; ".join("%s: %s" % (f.file, f.message) for f in report.problems)
        raise CpctlError("refusing to record a baseline while the manifests dir has strays (%s)" % listed,
                         ExitCode.REFUSED, hint="move them away first (%s)" % node.command("check", "--fix",
                                                                                          "--remove-strays"))
    entries: Dict[str, Dict[str, object]] = {m.file: _entry(m.pod, m.data, "present") for m in scan.valid}
    for filename in parked:
        data = _read_parked(node, filename)
        if data is None or filename in entries:
            continue
        try:
            entries[filename] = _entry(manifests.parse_pod(data), data, "parked")
        except manifests.InvalidManifest:
            continue
    now = iso()
    return {"version": BASELINE_VERSION, "created": now, "updated": now, "by": user_label(node.host),
            "node": node.node_name, "manifests_dir": node.manifests_dir, "manifests": entries}


def compare(old: Optional[Mapping[str, object]], new: Mapping[str, object]) -> List[str]:
    """Human lines saying how ``new`` differs from ``old`` (added, removed, changed files)."""
    before = _entries(old)
    after = _entries(new)
    lines = ["added %s (pod %s)" % (f, after[f]["pod"]) for f in sorted(set(after) - set(before))]
    lines += ["removed %s (pod %s)" % (f, before[f].get("pod")) for f in sorted(set(before) - set(after))]
    lines += ["changed %s" % f for f in sorted(set(before) & set(after))
              if before[f].get("checksum") != after[f]["checksum"]]
    return lines


class BaselineRecorded(TypedDict, total=False):
    """``check --record-baseline``'s answer: ``replaced`` only when it was recorded."""

    recorded: bool
    replaced: bool
    path: str
    baseline: Dict[str, object]
    differences: List[str]


def record(node: Node, accept: bool) -> BaselineRecorded:
    """Record the baseline (first time, or with ``accept`` to replace it); under the node lock."""
    with node.session("cpctl baseline"):
        corrupt = ""
        try:
            old = read_baseline(node)
        except Corrupt as exc:      # what --accept is for: replaced as a whole, said in its answer
            if not accept:
                raise
            old, corrupt = None, exc.message
        new = snapshot(node)
        changes = compare(old, new) + (["replaced a corrupt baseline: %s" % corrupt] if corrupt else [])
        if old is not None and not accept:
            return {"recorded": False, "path": baseline_path(node), "baseline": _summary(old),
                    "differences": changes}
        if old is not None:
            new["created"] = old.get("created", new["created"])
        write_baseline(node, new)
        return {"recorded": True, "replaced": old is not None or bool(corrupt), "path": baseline_path(node),
                "baseline": _summary(new), "differences": changes}


def _summary(baseline: Mapping[str, object]) -> Dict[str, object]:
    return {"created": baseline.get("created"), "updated": baseline.get("updated"), "by": baseline.get("by"),
            "manifests": {f: {"pod": e.get("pod"), "state": e.get("state"), "checksum": e.get("checksum")}
                          for f, e in sorted(_entries(baseline).items())}}


# What each kind of change cpctl records means for the baseline's entry of that file.
BASELINE_EFFECT = {"stop": "parked", "start": "present", "scheduler-add": "content", "apply": "content",
                   "edit": "content", "flags": "content", "rollback": "content", "scheduler-remove": "forget",
                   RESTORE_MISSING: "present"}


def note_change(node: Node, action: str, filename: str, checksum: Optional[str]) -> None:
    """Keep the baseline current after cpctl itself changed a manifest: what cpctl did through its
    journal is expected, not drift. A no-op (one read) without a baseline.

    A change listener (see ``cpctl.ops.wiring``): it never raises - the change already happened and
    is recorded; a stale baseline only produces a finding later, which is better than failing it.
    """
    effect = BASELINE_EFFECT.get(action)
    if effect is None:
        return
    try:
        baseline = read_baseline(node)
        if baseline is None:
            return
        if _apply_change(node, baseline, effect, filename, checksum):
            baseline["updated"] = iso()
            write_baseline(node, baseline)
    except (CpctlError, OSError, ValueError, UnicodeDecodeError) as exc:
        node.log("baseline not updated after %s of %s: %s" % (action, filename, getattr(exc, "message", exc)))


def _apply_change(node: Node, baseline: Dict[str, object], effect: str, filename: str,
                  checksum: Optional[str]) -> bool:
    entries = _entries(baseline)
    if effect == "forget":
        return entries.pop(filename, None) is not None
    state = "parked" if effect == "parked" else "present"
    if effect == "content" and node.host.lstat(node.manifests_dir + "/" + filename) is None \
            and node.host.lstat(node.state.parked_path(filename)) is not None:
        state = "parked"                  # flags/apply/edit --parked changed the parked copy
    entry = entries.get(filename)
    if entry is not None and (effect != "content" or entry.get("checksum") == checksum):
        changed = entry.get("state") != state
        entry["state"] = state
        return changed
    # New content, or a manifest the baseline does not know: cpctl made it so, so it is expected.
    path = node.state.parked_path(filename) if state == "parked" else node.manifests_dir + "/" + filename
    data = node.host.read_file(path, manifests.MAX_MANIFEST_BYTES)
    if checksum and manifests.checksum(data) != checksum:
        return False
    entries[filename] = _entry(manifests.parse_pod(data), data, state)
    return True


# --- check ------------------------------------------------------------------------------------

def can_describe(waiter: Waiter) -> bool:
    """True when the waiter overrides ``describe`` (NoWait and friends cannot tell pod state)."""
    return type(waiter).describe is not Waiter.describe


def check(node: Node, max_parked: Optional[float] = None, now: Optional[float] = None, kubeadm: bool = False,
          cert_warn: Optional[float] = None) -> Report:
    """Look for every kind of drift; read-only (takes no lock, creates nothing). ``kubeadm``: also
    the flags the next ``kubeadm upgrade`` would drop (reads the ClusterConfiguration from the API).
    With ``cert_warn`` (seconds) also certificates that expire within it and stale components."""
    now = time.time() if now is None else now
    reads = node.view_reads() + [node.state.read_call(p) for p in (node.state.journal_path, baseline_path(node))]
    with node.host.prefetched(reads + outside.view_reads(node)):
        report = Report(node.node_name, now)     # read-only: an overdue arm is reported, never reverted
        report.command = node.command
        _check_permissions(report, node)
        _check_journal(report, node)
        scan, parked = node.scan(), node.parked()
        baseline = read_baseline(node)
        _check_outside(report, node, scan, now)
        _check_unverified(report, node)        # one prefetched lstat when nothing is pending
        _check_unconfirmed(report, node, now)
        # the rule status and the waits judge by too; its kubelet.conf read is in the batch
        report.api_stale = node.api_view_stale(parked)
        _check_etcd_alarms(report, node)       # its manifest and state reads are in the batch too
    _check_parked(report, parked, now, max_parked)
    _check_strays(report, scan, baseline, parked)
    if baseline is None:
        report.add(Finding("no_baseline", INFO, "no baseline recorded: run %s to enable the "
                           "missing/changed/unexpected checks" % node.command("baseline")))
    else:
        _check_baseline(report, node, scan, parked, baseline)
    _check_mirrors(report, node, scan, parked)
    if kubeadm:
        _check_kubeadm(report, node, scan)
    _inventory(report, scan, parked, baseline, now)
    if cert_warn is not None:
        _check_certs(report, node, cert_warn, now)
    return report


def _check_etcd_alarms(report: Report, node: Node) -> None:
    """The etcd cluster's active alarms, one finding per kind: CORRUPT and NOSPACE critical (members'
    data differ / the whole cluster refuses writes), NOSPACE's fix ``cpctl etcd recover-space``;
    alarms that cannot be read are an info finding (the metric is then absent, not 0)."""
    from cpctl.ops import etcdcare
    report.etcd_alarms = seen = etcdcare.alarms_seen(node)
    if seen is None:
        return
    if seen.error:
        report.add(Finding("etcd_alarm_unknown", INFO, "the etcd alarms could not be read: %s" % seen.error))
        return
    for kind, members in seen.kinds().items():
        fix = node.command(ETCD, "recover-space") if kind == "NOSPACE" else None
        report.add(Finding("etcd_alarm", CRITICAL if kind in etcdcare.ALARM_KINDS else WARNING,
                           "etcd alarm %s active (raised by %s): %s" % (
                               kind, ", ".join(members), etcdcare.ALARM_MEANING.get(kind, "see etcd's logs")),
                           component=ETCD, fix=fix, alarm=kind, members=members))


def _check_outside(report: Report, node: Node, scan: DirScan, now: float) -> None:
    """Flags cpctl set that a writer other than cpctl dropped, and a kubeadm upgrade in flight."""
    staging = outside.in_flight(node, now)
    if staging:
        report.add(Finding("upgrade_in_flight", WARNING, "a kubeadm upgrade is in flight (new manifests in %s): "
                           "cpctl refuses changes until it is done (or --force)" % staging, file=staging))
    failed = outside.failed_upgrade(node)
    if failed is not None:
        report.add(Finding("upgrade_failed", WARNING, failed.message(), file=failed.staging,
                           components=failed.rolled_back))
    try:
        records = outside.history(node)
    except CpctlError:
        return                      # an unreadable or unsafe state dir is reported by _check_permissions
    for m in scan.manifests:
        if m.pod is None:
            continue
        found = outside.detect(node, m.file, m.checksum, records)
        if found is None:
            continue
        containers = (m.pod.get("spec") or {}).get("containers") or [{}]
        lost = outside.lost_flags(node, m.file, containers[0] if isinstance(containers[0], dict) else {}, records)
        if lost:
            report.add(Finding("lost_change", WARNING, "%s was replaced outside cpctl (%s): flags cpctl set are gone: "
                               "%s" % (m.file, found.note, " ".join(flags.redact(x) for x in lost)), file=m.file,
                               component=m.pod_name, lost=lost, replaced=found.to_dict()))


def _check_kubeadm(report: Report, node: Node, scan: DirScan) -> None:
    """``check --kubeadm``: per kubeadm component, what the next ``kubeadm upgrade`` renders
    (:func:`cpctl.core.kubeadmconfig.next_upgrade_drops`: the ClusterConfiguration's extraArgs,
    extraVolumes and etcd dataDir, then the JSON patch files in the default patches dir) compared
    with what runs; each finding's fix is the command that keeps the change whole."""
    from cpctl.ops import keepin
    config = keepin.read_cluster_config(node)
    try:
        records = outside.history(node)
    except CpctlError:
        records = []
    for m in scan.manifests:
        if m.pod is None or m.pod_name not in kc.SECTIONS:
            continue
        containers = (m.pod.get("spec") or {}).get("containers") or [{}]
        index = next((i for i, c in enumerate(containers) if isinstance(c, dict) and c.get("name") == m.pod_name), 0)
        changed = list(outside.flags_set_by_cpctl(node, m.file, records))
        unchecked: List[str] = []
        patches = keepin.patch_files(node, m.pod_name, unchecked=unchecked)
        if unchecked:
            report.add(Finding("kubeadm_patch_unchecked", INFO, "%s: the patch files %s are strategic or merge "
                               "patches, which cpctl does not evaluate: what follows ignores them"
                               % (m.file, ", ".join(unchecked)), file=m.file, component=m.pod_name,
                               patches=unchecked))
        for drop in kc.next_upgrade_drops(m.pod, index, config, m.pod_name, changed, patches, node.command):
            shown = " ".join(flags.redact(i) for i in drop.items) if drop.kind == "flags" else ""
            text = flags.redact(drop.text)
            if drop.kind in ("flags", "volumes"):
                report.add(Finding("kubeadm_drops", WARNING, "%s: the next kubeadm upgrade %s (not in the "
                                   "ClusterConfiguration's %s%s)" % (m.file, text, kc.SECTIONS[m.pod_name],
                                                                     " nor a patch file" if patches else ""),
                                   file=m.file, component=m.pod_name, fix=flags.redact(drop.fix) or None,
                                   flags=drop.items if drop.kind == "flags" else [],
                                   volumes=drop.items if drop.kind == "volumes" else [], shown=shown or None))
            elif drop.kind == "adds":
                report.add(Finding("kubeadm_adds", WARNING, "%s: the next kubeadm upgrade %s" % (m.file, text),
                                   file=m.file, component=m.pod_name, fix=flags.redact(drop.fix) or None,
                                   flags=[i for i in drop.items if i.startswith("--")],
                                   volumes=[i for i in drop.items if not i.startswith("--")],
                                   shown=" ".join(flags.redact(i) for i in drop.items if i.startswith("--")) or None))
            elif drop.kind == "data_dir":
                report.add(Finding("kubeadm_data_dir", CRITICAL, "%s: the next kubeadm upgrade %s" % (m.file, text),
                                   file=m.file, component=m.pod_name, fix=drop.fix, data_dir=drop.items[0]))
            else:
                report.add(Finding("kubeadm_patch_fails", WARNING, "%s: %s" % (m.file, text), file=m.file,
                                   component=m.pod_name, fix=drop.fix))


def _check_certs(report: Report, node: Node, warn: float, now: float) -> None:
    """Certificates expiring within ``warn`` seconds (critical once expired) and components that
    still run on an old certificate (``cpctl certs``: unknown verdicts are no finding)."""
    from cpctl.ops import certs
    report.certs = data = certs.report(node)
    for cert in data["certificates"]:
        left = cert.get("days_left")
        if left is None or left * 86400 > warn:
            continue
        what = "expired %s" % cert["not_after"] if left < 0 else "expires %s (%.0f days left)" % (
            cert["not_after"], left)
        report.add(Finding("cert_expiring", CRITICAL if left < 0 else WARNING, "%s (%s) %s"
                           % (cert["name"], cert["subject"], what), file=cert["name"]))
    for comp in data["components"]:
        if comp["verdict"] == certs.STALE:
            report.add(Finding("cert_stale", WARNING, "%s %s" % (comp["component"], comp["why"]),
                               component=comp["component"]))


def _check_permissions(report: Report, node: Node) -> None:
    """What ``StateDir.ensure`` would refuse, reported as findings instead of raised."""
    euid = node.host.info()["euid"]
    for path in (node.state.path, node.state.parked_dir, node.state.meta_dir):
        info = node.host.lstat(path)
        if info is None:
            continue
        problem = None
        if info["kind"] == "symlink":
            problem = "is a symlink (cpctl refuses to use it)"
        elif info["kind"] != "dir":
            problem = "is not a directory"
        elif info["mode"] & 0o077:
            problem = "has loose permissions %04o (cpctl refuses to use it): run chmod 700 %s" % (info["mode"], path)
        elif info["uid"] != euid:
            problem = "is owned by uid %d, not by uid %d running cpctl" % (info["uid"], euid)
        if problem:
            report.add(Finding("permissions", CRITICAL if info["kind"] == "symlink" else WARNING,
                               "state dir %s %s" % (path, problem), file=path))


def _check_journal(report: Report, node: Node) -> None:
    try:
        entry = node.state.read_journal()
    except CpctlError as exc:
        report.add(Finding("interrupted", CRITICAL, exc.message, file=node.state.journal_path))
        return
    if entry is None:
        return
    try:
        problem = node.state.seal_problem(entry)
    except CpctlError as exc:
        problem = exc.message
    if problem:                                  # never recovered: the operator's to inspect (core.journal)
        report.add(Finding("interrupted", CRITICAL, "%s is not a journal cpctl wrote on this node (%s): nothing of "
                           "it runs; inspect it, then remove it by hand" % (node.state.journal_path, problem),
                           file=node.state.journal_path))
        return
    report.add(Finding("interrupted", CRITICAL,
                       "interrupted %s of %s (%s): the next cpctl command completes or rolls it back; %s does "
                       "it now" % (entry.get("action"), entry.get("component"), journal.started_text(entry),
                                   node.command("check", "--fix")),
                       file=entry.get("file"), component=entry.get("component")))


def _check_unconfirmed(report: Report, node: Node, now: float) -> None:
    """Changes armed with --confirm-within (``ops.confirm``): an info finding each, with the deadline
    (the textfile metrics count them as ``kind="unconfirmed"``); a warning once overdue - reported, not
    reverted: that is the node's timer's job, or ``revert-unconfirmed``'s."""
    from cpctl.core import confirmations
    if node.host.lstat(confirmations.directory(node.state)) is None:
        return
    try:
        arms = confirmations.read_all(node.host, node.state)
    except CpctlError as exc:
        report.add(Finding("unconfirmed", WARNING, exc.message))
        return
    clock = confirmations.node_clock(node.host) if arms else now      # the node's clock decides
    for arm in arms:
        try:
            report.unconfirmed.append((arm.component, arm.file, arm.deadline_epoch()))
        except (TypeError, ValueError):     # a deadline that is no time: the finding still names it
            pass
        overdue = arm.overdue(clock)
        dead = confirmations.timer_problem(node.host, arm)     # a timer that died reverts nothing
        if dead is not None:
            report.timer_running.append((arm.component, arm.file, 0 if dead else 1))
        found = Finding("unconfirmed", WARNING if overdue or arm.failing or dead else INFO, "%s: %s (%s by %s)" % (
            arm.component, arm.pending_text(clock, node.command, dead or ""), arm.action, arm.by), file=arm.file,
            component=arm.component, deadline=arm.deadline, overdue=overdue, timer_running=None if dead is None
            else not dead, **({"timer_problem": dead} if dead else {}))
        if arm.failing:     # the node's revert met an environment error: it keeps the arm and retries
            report.revert_failing.append((arm.component, arm.file, arm.attempts))
            found.extra.update(failing=arm.failing, attempts=arm.attempts, next_try=arm.next_try)
        report.add(found)


def _check_unverified(report: Report, node: Node) -> None:
    """A change whose new pod nobody judged (cpctl killed in its wait): the version in place may be
    crash-looping while nothing else says so."""
    entries, lines = node.unverified(held=False)
    if len(lines) > len(entries):
        report.add(Finding("unverified", WARNING, lines[0]))
        lines = lines[1:]
    for entry, line in zip(entries, lines):
        report.add(Finding("unverified", WARNING, line, file=entry.file, component=entry.component))


def _parked_since(meta: Mapping[str, object]) -> Optional[float]:
    try:
        return parse_iso(meta["parked_at"])
    except (KeyError, TypeError, ValueError):
        return None


def _check_parked(report: Report, parked: Mapping[str, Mapping[str, object]], now: float,
                  max_parked: Optional[float]) -> None:
    for filename, meta in sorted(parked.items()):
        component = _text(meta.get("component")) or manifests.file_stem(filename)
        since = _parked_since(meta)
        who = "parked %s by %s%s" % (meta.get("parked_at", "at an unknown time"), meta.get("parked_by", "?"),
                                     ": %s" % meta["reason"] if meta.get("reason") else "")
        until = meta.get("until")
        if until:
            report.parked_until[component] = parse_iso(until)
        if until and parse_iso(until) < now:
            report.add(Finding("overdue_park", CRITICAL, "%s is past its deadline %s (%s)" % (component, until, who),
                               file=filename, component=component, deadline=True))
        elif max_parked and since is not None and now - since > max_parked:
            report.add(Finding("overdue_park", WARNING, "%s parked for %s, longer than --max-parked (%s)"
                               % (component, format_duration(now - since), who),
                               file=filename, component=component, deadline=False))


def stray_reason(name: str, known_files: AbstractSet[str]) -> Optional[str]:
    """Why a loadable file name looks like a leftover copy (None: it looks like a real manifest)."""
    kind = manifests.leftover_kind(name)
    if kind:
        return "%s %s" % (kind, name) if name == manifests.VIM_WRITE_TEST else kind
    for other in known_files:
        if other != name and name.startswith(other) and len(name) > len(other):
            return "a copy of %s" % other
    return None


def _check_strays(report: Report, scan: DirScan, baseline: Optional[Mapping[str, object]],
                  parked: Mapping[str, Mapping[str, object]]) -> None:
    """Strays: copies and leftovers by name, invalid files, and unknown duplicates of known pods."""
    expected = set(_entries(baseline))
    known = {m.file for m in scan.valid} | set(parked) | expected
    strays: Set[str] = set()
    for m in scan.manifests:
        reason = None if m.valid else "not a valid Pod (%s)" % m.error
        reason = reason or stray_reason(m.file, known - {m.file})
        if reason:
            strays.add(m.file)
            _add_stray(report, m, reason)
    for (namespace, name), files in sorted(scan.duplicates().items()):
        extra = [f for f in files if f not in expected] if expected else []
        for f in extra:
            if f not in strays and len(extra) < len(files):
                strays.add(f)
                m = next(x for x in scan.manifests if x.file == f)
                _add_stray(report, m, "a second definition of pod %s/%s, not in the baseline" % (namespace, name))
        report.add(Finding("duplicate", CRITICAL, "pod %s/%s is defined by %s: the kubelet runs only one of them"
                           % (namespace, name, " and ".join(files)), file=files[-1], component=name, files=files))
    for name in scan.ignored:
        edited = manifests.swap_file_of(name)
        if edited:
            report.add(Finding("editor_swap", INFO, "%s: vim swap file for %s (being edited, or the editor crashed)"
                               % (name, edited), file=name))


def _add_stray(report: Report, m: manifests.Manifest, reason: str) -> None:
    if m.valid:
        severity = CRITICAL
        effect = "the kubelet RUNS it as pod %s/%s" % (m.namespace, m.pod_name)
    else:
        severity = WARNING
        effect = "the kubelet skips it and logs an error on every resync"
    report.add(Finding("stray", severity, "%s is %s: %s" % (m.file, reason, effect), file=m.file,
                       component=m.pod_name, removable=True, runs_pod=m.valid))


def _check_baseline(report: Report, node: Node, scan: DirScan, parked: Mapping[str, Mapping[str, object]],
                    baseline: Mapping[str, object]) -> None:
    present = {m.file: m for m in scan.manifests}
    stray_files = {f.file for f in report.of_kind("stray")}
    expected = _entries(baseline)
    for filename, entry in sorted(expected.items()):
        m = present.get(filename)
        if m is not None:
            if m.data is not None and m.checksum != entry.get("checksum"):
                _add_changed(report, filename, entry, m.data, m.path)
        elif filename in parked:
            data = _read_parked(node, filename)
            if data is not None and manifests.checksum(data) != entry.get("checksum"):
                _add_changed(report, filename, entry, data, node.state.parked_path(filename))
        else:
            report.add(Finding("missing", CRITICAL, "%s (pod %s) is in the baseline but neither in %s nor parked "
                               "by cpctl" % (filename, entry.get("pod"), node.manifests_dir),
                               file=filename, component=_text(entry.get("pod"))))
    for m in scan.valid:
        if m.file not in expected and m.file not in stray_files:
            report.add(Finding("unexpected", WARNING, "%s (pod %s) is not in the baseline: if it is intended, run "
                               "%s" % (m.file, m.pod_name, report.command("baseline", "--accept")), file=m.file,
                               component=m.pod_name))


def unified_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    lines = list(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                      old_name, new_name))
    if len(lines) > MAX_DIFF_LINES:
        lines = lines[:MAX_DIFF_LINES] + ["... (%d more diff lines)\n" % (len(lines) - MAX_DIFF_LINES)]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _add_changed(report: Report, filename: str, entry: Mapping[str, object], data: bytes, path: str) -> None:
    """A manifest edited out of band; only an info note when the kubelet decodes the same pod from
    it (comments, blank lines, key order, quoting, API defaults written out: same config hash, the
    pod keeps running; ``manifests.same_pod``)."""
    text = data.decode("utf-8", "replace")
    expected = _text(entry.get("content", "")) or ""
    diff = unified_diff(expected, text, "baseline/" + filename, path)
    if manifests.same_pod(expected.encode("utf-8"), data):
        report.add(Finding("changed", INFO, "%s differs from the baseline only in comments, formatting or API "
                           "defaults: the kubelet runs the same pod (%s records it)" % (
                               path, report.command("baseline", "--accept")),
                           file=filename,
                           component=_text(entry.get("pod")), diff=diff))
        return
    report.add(Finding("changed", WARNING, "%s differs from the baseline (changed out of band; %s makes it the new "
                       "truth)" % (path, report.command("baseline", "--accept")), file=filename,
                       component=_text(entry.get("pod")), diff=diff))


def _check_mirrors(report: Report, node: Node, scan: DirScan, parked: Dict[str, Dict[str, Any]]) -> None:
    """Mirror pods must follow the files; needs a waiter that can describe pods."""
    if not can_describe(node.waiter):
        report.add(Finding("check_skipped", INFO, "mirror pod checks skipped: probe %r cannot describe pods "
                           "(use --probe api or crictl)" % getattr(node.waiter, "name", "none")))
        return
    dupes = {f for files in scan.duplicates().values() for f in files}
    for m in scan.valid:
        if m.file in dupes:
            continue
        target = node.target_for(m.pod, m.file, parked, waiting=False)
        state = node.waiter.describe(target)
        if state is None or state.get("stale"):        # never "OK" about a pod nobody could see
            _unknown(report, node, target, state)
            continue
        if not (state.get("present") and state.get("ready")):
            what = "missing" if not state.get("present") else "not Ready (phase %s)" % state.get("phase")
            report.add(Finding("mirror_not_ready", CRITICAL, "%s: mirror pod %s-%s is %s"
                               % (m.file, m.pod_name, node.node_name, what), file=m.file, component=m.pod_name))
    for filename, meta in sorted(parked.items()):
        component = meta.get("component") or manifests.file_stem(filename)
        target = PodTarget(component, meta.get("namespace") or "kube-system", node.node_name, file=filename)
        state = node.waiter.describe(target)
        if state is not None and state.get("present"):
            report.add(Finding("mirror_of_parked", WARNING, "%s is parked but mirror pod %s still exists (phase %s)"
                               % (component, target.mirror_name, state.get("phase")), file=filename,
                               component=component))


def _unknown(report: Report, node: Node, target: PodTarget, state: Optional[Dict[str, Any]]) -> None:
    """A present manifest whose pod no probe could see (``describe`` None), or seen only through the
    API's stale view of this node (a frozen mirror pod says nothing): a warning, never "OK"."""
    why = node.waiter.blind_reason(target) or "no probe could look at it"
    if state is not None:
        why = "only the API's stale view of this node shows it (%s: %s)" % (
            report.api_stale or "its mirror pod is frozen", "present and Ready" if state.get("present")
            and state.get("ready") else "absent" if not state.get("present") else "not Ready")
    elif report.api_stale:
        why = "%s; the API's view of this node is stale: %s" % (why, report.api_stale)
    report.add(Finding("unknown", WARNING, "%s: pod %s could not be judged: %s" % (target.file, target.mirror_name,
                                                                                  why),
                       file=target.file, component=target.component, why=why))


def _inventory(report: Report, scan: DirScan, parked: Mapping[str, Mapping[str, object]],
               baseline: Optional[Mapping[str, object]], now: float) -> None:
    for entry in _entries(baseline).values():
        report.components.setdefault(_text(entry.get("pod")) or "?", 0.0)
    for m in scan.valid:
        report.components[m.pod_name] = 0.0
    for filename, meta in parked.items():
        since = _parked_since(meta)
        component = _text(meta.get("component")) or manifests.file_stem(filename)
        report.components[component] = max(now - since, 1e-3) if since is not None else 1e-3
        if since is not None:
            report.parked_since[component] = since
    report.missing = {f.component or manifests.file_stem(f.file or "") for f in report.of_kind("missing")}


# --- fix --------------------------------------------------------------------------------------

def fix(node: Node, report: Report, remove_strays: bool, timeout: float = 60.0, allow_restart: bool = False,
        restore_missing: bool = False) -> List[FixAction]:
    """Repair what is safe; every action is reported as a ``FixAction`` (action, file, component, ok, message).

    A stray that defines a pod the kubelet runs is moved only with ``allow_restart``: moving it
    stops that pod (and, when another file defines the same pod, the kubelet starts it again
    only at its next full re-list - cpctl then makes it re-read that file at once and waits).

    On a node in dry-run mode (``plan_fix``) this is the same code: every refusal the same, each
    change recorded in ``node.planned`` instead of applied, no wait, and each action carries the
    steps it would apply (``plan``) and says what it would do."""
    if report.of_kind("permissions"):
        return [_action("skip", None, None, False, "not fixing anything: the state dir's permissions must be "
                        "repaired by hand first (see the permissions finding)")]
    actions: List[FixAction] = []
    with node.session("cpctl check --fix"):
        actions += [_action("recover", None, None, True, m) for m in node.recovered]
        for finding in report.of_kind("overdue_park"):
            mark = len(node.planned)
            actions.append(_with_plan(node, mark, _restore(node, finding, timeout)))
        strays = [f for f in report.of_kind("stray") if f.file] if remove_strays else []
        if strays:
            target_dir = "%s/%s/%s" % (node.state.path, STRAYS, stamp(report.time))
            if not node.dry_run:
                node.host.makedirs(target_dir, 0o700)
            for finding in strays:
                mark = len(node.planned)
                actions.append(_with_plan(node, mark, _move_stray(node, finding, target_dir, allow_restart, timeout)))
        if restore_missing:
            for finding in report.of_kind("missing"):
                mark = len(node.planned)
                actions.append(_with_plan(node, mark, _restore_missing(node, finding, timeout)))
    return actions


def plan_fix(node: Node, report: Report, remove_strays: bool, timeout: float = 60.0, allow_restart: bool = False,
             restore_missing: bool = False) -> List[FixAction]:
    """What ``check --fix`` would do (--dry-run): ``fix`` itself on this node in dry-run mode
    (no lock, nothing created or changed)."""
    node.dry_run = True
    return fix(node, report, remove_strays, timeout, allow_restart, restore_missing)


def _with_plan(node: Node, mark: int, action: FixAction) -> FixAction:
    """``action``; in a dry run with the steps of the changes planned since ``node.planned[mark]``."""
    if node.dry_run:
        action.plan = [_step_dict(step) for change in node.planned[mark:] for step in change.steps]
    return action


def _step_dict(step: journal.Step) -> Dict[str, object]:
    """One planned step for the output: ``{"move": [src, dst]}``, ``{"write": path}``, ..."""
    if step.kind == journal.MOVE:
        return {"move": [step.src, step.path]}
    return {step.kind: step.path}


def _action(action: str, file: Optional[str], component: Optional[str], ok: bool, message: str) -> FixAction:
    return FixAction(action, file, component, ok, message)


def _restore(node: Node, finding: Finding, timeout: float) -> FixAction:
    if not finding.extra.get("deadline"):
        return _action("start", finding.file, finding.component, False,
                       "not restored: no --for deadline was set, so it may be parked on purpose (%s)"
                       % node.command("start", str(finding.component)))
    try:
        outcome = node.start(finding.component or manifests.file_stem(finding.file or ""), wait=True,
                             timeout=timeout, reason="its --for deadline passed")
    except CpctlError as exc:
        return _action("start", finding.file, finding.component, False, "not restored: %s" % exc.full_message)
    if node.dry_run:
        return _action("start", finding.file, outcome.component, True,
                       "would restore %s (past its --for deadline)" % outcome.component)
    wait = outcome.extra.get("wait")
    detail = " - %s" % wait.detail if isinstance(wait, WaitResult) and wait.detail else ""
    return _action("start", finding.file, outcome.component, True, "%s%s" % (outcome.message, detail))


def _move_stray(node: Node, finding: Finding, target_dir: str, allow_restart: bool, timeout: float) -> FixAction:
    filename = finding.file or ""
    src, dst = node.manifests_dir + "/" + filename, target_dir + "/" + filename
    scan = node.scan()                      # under the lock: the dir as it is now, not as it was checked
    stray = next((m for m in scan.manifests if m.file == filename), None)
    if stray is None or stray.kind != "file":
        what = "it is gone" if stray is None else "it is a %s, not a regular file" % stray.kind
        return _action(MOVE_STRAY, finding.file, finding.component, False, "not moved: %s" % what)
    others = [m for m in scan.valid if m.file != filename and stray.valid
              and (m.namespace, m.pod_name) == (stray.namespace, stray.pod_name)]
    if stray.valid and not allow_restart:
        return _action(MOVE_STRAY, filename, stray.pod_name, False, "not moved: %s" % _stop_effect(node, stray, others))
    try:
        data = stray.data if stray.data is not None else node.host.read_file(src, stray.size + 1)
        digest = manifests.checksum(data)
        target = node.target_for(others[0].pod or {}, filename) if others else \
            node.target_for(stray.pod, filename) if stray.pod else None
        before = node.waiter.before(target) if target is not None and not node.dry_run else None
        node.apply(journal.Change(MOVE_STRAY, stray.pod_name or manifests.file_stem(filename), filename, digest,
                                  [journal.move(src, dst, digest)] + [journal.touch(m.path) for m in others],
                                  commit=0, record={"moved_to": dst, "reason": finding.message}))
        if node.dry_run:
            return _action(MOVE_STRAY, finding.file, finding.component, True, "would move to %s" % dst)
        waited = _wait_after_stray(node, target, before, bool(others), timeout) if target is not None else ""
    except CpctlError as exc:
        return _action(MOVE_STRAY, finding.file, finding.component, False, "not moved: %s" % exc.full_message)
    except OSError as exc:
        return _action(MOVE_STRAY, finding.file, finding.component, False, "not moved: %s" % (exc.strerror or exc))
    return _action(MOVE_STRAY, finding.file, finding.component, True, "moved to %s%s" % (dst, waited))


def _stop_effect(node: Node, stray: manifests.Manifest, others: Sequence[manifests.Manifest]) -> str:
    key = "%s/%s" % (stray.namespace, stray.pod_name)
    if others:
        relist = node.identity.file_check_frequency.value if node.identity else 20.0
        return ("it defines pod %s, which %s also defines: moving it makes the kubelet stop that pod until its "
                "next full re-list (up to %gs); add --allow-restart to move it, make the kubelet re-read %s at "
                "once and wait until the pod is back" % (key, " and ".join(m.file for m in others), relist,
                                                         others[0].file))
    return ("it defines pod %s, which the kubelet runs: moving it stops that pod; add --allow-restart to move it "
            "and wait until the pod is gone" % key)


def _wait_after_stray(node: Node, target: PodTarget, before: object, bounced: bool, timeout: float) -> str:
    """The pod a valid stray defined: back and Ready from the remaining file, or gone."""
    result = node.waiter.wait_started(target, before, timeout) if bounced else \
        node.waiter.wait_stopped(target, before, timeout)
    return " - %s" % result.detail


# --- restore a vanished manifest from the baseline ------------------------------------------------

def _missing_bytes(node: Node, baseline: Mapping[str, object], filename: str) -> Tuple[bytes, PodTarget]:
    """(bytes, its pod on this node) of the baseline's copy of ``filename``, checked: the baseline is
    input like any state file, so its copy must match its own checksum, be a Pod, and not define a pod
    another file in the manifests dir defines already (the kubelet would run only one)."""
    found = _entries(baseline).get(filename)
    entry: Mapping[str, object] = found if isinstance(found, dict) else {}     # (a corrupt entry: no copy)
    content = entry.get("content")
    if not isinstance(content, str):
        raise CpctlError("the baseline holds no copy of %s" % filename, ExitCode.NOT_FOUND)
    data = content.encode("utf-8")
    if manifests.checksum(data) != entry.get("checksum"):
        raise CpctlError("the baseline's copy of %s does not match its recorded checksum (changed outside cpctl)"
                         % filename, ExitCode.REFUSED)
    try:
        pod = manifests.parse_pod(data)
    except manifests.InvalidManifest as exc:
        raise CpctlError("the baseline's copy of %s is not a valid Pod: %s" % (filename, exc),
                         ExitCode.REFUSED) from None
    scan = node.scan()
    key = (pod["metadata"].get("namespace") or "default", pod["metadata"]["name"])
    clash = [m.file for m in scan.valid if (m.namespace, m.pod_name) == key]
    if clash or any(m.file == filename for m in scan.manifests) or filename in node.parked():
        raise CpctlError("%s is back or its pod is defined again (%s): nothing to restore"
                         % (filename, ", ".join(clash) or filename), ExitCode.CONFLICT)
    return data, node.target_for(pod, filename)


def _restore_missing(node: Node, finding: Finding, timeout: float) -> FixAction:
    """Write a vanished manifest back from the baseline's copy (a journaled ``restore-missing``
    change: the write is its commit step, never replacing a file), then wait for its pod."""
    filename = finding.file or ""
    try:
        if "/" in filename or filename in ("", ".", ".."):
            raise CpctlError("the baseline names %r, not a file name" % filename, ExitCode.REFUSED)
        data, target = _missing_bytes(node, read_baseline(node) or {"manifests": {}}, filename)
        digest = manifests.checksum(data)
        before = node.waiter.before(target) if not node.dry_run else None
        path = node.manifests_dir + "/" + filename
        node.apply(journal.Change(RESTORE_MISSING, target.component, filename, digest,
                                  [journal.write(path, digest, mode=0o600)], commit=0,
                                  record={"reason": "restored from the baseline (%s)" % finding.message},
                                  data={0: data}))
        if node.dry_run:
            return _action(RESTORE_MISSING, filename, finding.component, True,
                           "would write %s back from the baseline's copy (%d bytes)" % (path, len(data)))
        result = node.waiter.wait_started(target, before, timeout)
    except CpctlError as exc:
        return _action(RESTORE_MISSING, filename, finding.component, False, "not restored: %s" % exc.full_message)
    except OSError as exc:
        return _action(RESTORE_MISSING, filename, finding.component, False,
                       "not restored: %s" % (exc.strerror or exc))
    return _action(RESTORE_MISSING, filename, finding.component, True,
                   "written back from the baseline - %s" % result.detail)
