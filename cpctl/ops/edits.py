"""Change a static pod's manifest safely: apply, flags, rollback and the revisions they keep.

``replace`` is the one flow behind ``apply``, ``edit``, ``flags`` and ``rollback``, kubeadm's
upgrade recipe for an operator's own change:

1. validate before touching anything (:func:`cpctl.core.checks.review`); identical bytes are
   "unchanged";
2. build the change as one value, a :class:`cpctl.core.plan.Plan` (manifest, companion files, mounts
   added, the ``--keep-in`` part, revisions; its inverse with it: :func:`build`) - what ``--dry-run``
   prints - then write the new bytes through the journaled change path it was built with, keeping
   the old ones as a revision;
3. wait for the **new** pod: a pod that is not the one running before (new config hash, new
   container), Running and Ready, past the component's health gate, and still so after a short
   settle time;
4. when it does not come: say why (container state, exit code, restarts, its last log lines), apply
   the plan's inverse (the previous bytes, each companion file as it was) through the same path,
   wait until the old version is healthy again and fail with ``ROLLED_BACK`` (11) -- or with
   ``ROLLBACK_FAILED`` (12) when even that does not come back, both versions kept. ``--no-rollback``
   leaves the new version and only reports.
   SIGINT/SIGTERM at any point after the write and before the verdict (the wait, the diagnosis,
   the automatic rollback) puts the previous bytes back and waits for them, then exits 130.

Before every verdict and before any rollback the file must still hold the bytes cpctl wrote: when
another writer replaced them meanwhile, cpctl stops with a conflict (exit 10), leaves their version
in place unjudged and untouched, and keeps its own as a revision ("displaced"). Until the verdict
the change is recorded as "verification pending" (:mod:`cpctl.core.pending`): a cpctl killed in
the wait leaves that record, and the next command says so.

What the kubelet counts as a change is its own rule (``manifests.pod_effect``, see
``cpctl.core.podview``): comments, formatting, API defaults written out, unknown fields (also those
the node's release does not have yet: its decoder drops them) give the same pod - the kubelet keeps
the running pod (same config hash), so the change is written, recorded and reported, and not waited
for. A manifest that pins ``metadata.uid`` keeps its pod
and mirror pod; its changed containers restart in place (waited for as new containers).

The new version is judged by the NEW manifest (its health endpoint, its Lease and --leader-elect),
within its own startupProbe budget unless ``--timeout`` says otherwise (``wait_limit``); a
rollback is judged by the old manifest the same way.

``--parked`` (``ApplyOptions.parked``) changes the PARKED copy of a stopped component instead (an
etcd restore needs a new ``--data-dir`` while etcd is stopped): validated the same way, kept as a
revision, written through the same journaled change together with the parked metadata (so that
``start`` can tell cpctl's change from a hand edit), and not waited for: nothing runs it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, NoReturn, Optional, Sequence, Tuple, TypeVar

from cpctl.catalogue import ETCD
from cpctl.core import (
    checks,
    confirmations,
    etcddata,
    flags,
    journal,
    keptin,
    manifests,
    mounts,
    outside,
    pending,
    revisions,
)
from cpctl.core import companions as companion_files
from cpctl.core.companions import Companion, CompanionDict
from cpctl.core.manifests import Manifest
from cpctl.core.node import Node, parked_content
from cpctl.core.plan import FilePart, KeepPlan, Plan, mounts_added
from cpctl.core.podfields import Release
from cpctl.core.replace import (
    check_revisable,
    companion_now,
    displaced_change,
    replace_plan,
    revisions_of,
    text_diff,
)
from cpctl.errors import CpctlError, ExitCode, Interrupted, Terminated, interrupted_by
from cpctl.ops import etcdcare, etcdidentity
from cpctl.probes.base import NoWait, PodState, PodTarget, WaitResult
from cpctl.probes.diagnose import Diagnosis, why_not_running

SETTLE_POLL = 1.0
DEFAULT_TIMEOUT = 120.0     # seconds a wait may take when neither --timeout nor a startupProbe says
KEEPS_MESSAGE = "the kubelet keeps the running pod: nothing to restart"


def startup_budget(pod: Mapping[str, object]) -> Optional[float]:
    """The longest startupProbe budget of the pod's containers - initialDelaySeconds +
    failureThreshold x periodSeconds (API defaults 0, 3, 10): how long the kubelet itself gives
    the pod to start before it kills it (kubeadm's API server: 10 + 24 x 10 = 250 s). None when
    no container has a startupProbe."""
    best: Optional[float] = None
    spec = pod.get("spec")
    for container in (spec.get("containers") if isinstance(spec, dict) else None) or []:
        probe = container.get("startupProbe") if isinstance(container, dict) else None
        if not isinstance(probe, dict):
            continue
        numbers = [probe.get(k) for k in ("initialDelaySeconds", "failureThreshold", "periodSeconds")]
        delay, threshold, period = (n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else d
                                    for n, d in zip(numbers, (0, 3, 10)))
        budget = float(delay + threshold * period)
        best = budget if best is None else max(best, budget)
    return best


def wait_limit(options: "ApplyOptions", pod: Mapping[str, object]) -> float:
    """Seconds a wait for ``pod`` may take: ``--timeout`` when given, else the pod's startupProbe
    budget, else DEFAULT_TIMEOUT."""
    if options.timeout is not None:
        return options.timeout
    return startup_budget(pod) or DEFAULT_TIMEOUT


@dataclass
class ApplyOptions:
    """How a replacement runs (the command line's --timeout, --no-rollback, --dry-run, ...)."""

    timeout: Optional[float] = None     # None: the pod's own startupProbe budget (``wait_limit``)
    rollback: bool = True
    dry_run: bool = False
    reason: Optional[str] = None
    keep: int = revisions.DEFAULT_KEEP
    settle: float = 5.0
    force: bool = False              # go ahead despite flag-sanity doubts, and while a kubeadm upgrade is in flight
    parked: bool = False             # change the parked copy of a stopped component (not waited for)
    # Ctrl-C/SIGTERM in the settle, once the new pod was verified (Running, Ready, its gate): keep it and
    # say so. Off with --confirm-within: the change must not stay without its armed revert.
    keep_verified: bool = True
    keep_on_signal: bool = False     # a revert: SIGINT/SIGTERM after the write leaves the new bytes (``Reverting``)
    config_write: Optional[keptin.ConfigWrite] = None   # --keep-in kubeadm-config: written under the lock, first
    keep_in: Optional[KeepPlan] = None   # --keep-in: the kubeadm part of the change's Plan (built by ops.keepin)
    new_member: bool = False         # etcd: a new member on purpose: its empty data dir is not refused (core.etcddata)
    move_leader: bool = True         # etcd: its member's leadership moves to a healthy voter before the change


@dataclass
class ChangeResult:
    """What apply, edit, flags or rollback (or its dry run) did on one node: the fields of its JSON
    answer (docs/json.md, cpctl/schemas/change.json), typed. ``plan`` is the change as one value
    (``core.plan.Plan``): what the dry run would apply, what the real run applied; None when nothing
    was to change."""

    node: str
    component: str
    file: str
    action: str
    changed: bool
    message: str = ""
    recovered: List[str] = field(default_factory=list)
    dry_run: bool = False
    parked: bool = False
    revision: Optional[int] = None
    new_revision: Optional[int] = None
    checksum: Optional[str] = None
    previous: Optional[str] = None
    warnings: List[str] = field(default_factory=list)
    effect: Optional[str] = None
    wait: Optional[Dict[str, object]] = None
    diff: Optional[str] = None
    companions: Optional[List[CompanionDict]] = None     # --with-file: the files written (or removed)
    flags: Optional[List[str]] = None                    # flags: one line per effect
    keep_in: Optional[Dict[str, object]] = None          # --keep-in: KeepPlan.to_dict()
    keep_in_undone: Optional[List[str]] = None           # the ClusterConfiguration or patch put back
    copy: Optional[str] = None                           # edit answered "no": the private copy
    confirm: Optional[Dict[str, object]] = None          # --confirm-within: the arm (ops.confirm.arm)
    plan: Optional[Plan] = None

    def to_dict(self) -> Dict[str, object]:
        """The JSON answer: the fields every change has, and those of its options when they apply."""
        out: Dict[str, object] = {"node": self.node, "component": self.component, "file": self.file,
                                  "action": self.action, "changed": self.changed, "message": self.message,
                                  "recovered": list(self.recovered), "dry_run": self.dry_run,
                                  "revision": self.revision, "new_revision": self.new_revision,
                                  "checksum": self.checksum, "previous": self.previous,
                                  "warnings": list(self.warnings), "effect": self.effect, "wait": self.wait,
                                  "diff": self.diff, "plan": None if self.plan is None else self.plan.to_dict()}
        if self.parked or self.dry_run:
            out["parked"] = self.parked
        for name in ("companions", "flags", "keep_in", "keep_in_undone", "copy", "confirm"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


class Stale(CpctlError):
    """The manifest changed between the read a new version was made from and the node lock (exit 10,
    nothing changed). A version cpctl computes from the manifest (``flags``) is made again:
    :func:`until_fresh`; a person's edit is not."""


R = TypeVar("R")


def until_fresh(node: Node, attempt: Callable[[], R]) -> R:
    """``attempt()`` - read the manifest, make the new version, replace under the lock - again while it
    finds the manifest changed by another writer meanwhile (another cpctl's change of the same component
    that held the lock first), until ``--lock-timeout`` has passed: concurrent changes queue on the lock
    instead of failing with a conflict."""
    deadline = time.monotonic() + node.lock_timeout
    while True:
        # what an attempt reads before the lock (the manifest, the review's files, the plan's state
        # records): one snapshot, one round trip over SSH; the lock ends it (the session reads again)
        node.host.snapshot(node.session_reads())
        try:
            return attempt()
        except Stale:
            if time.monotonic() >= deadline:
                raise


class Reverting(Interrupted):
    """SIGINT/SIGTERM after a revert's write (``ApplyOptions.keep_on_signal``): its bytes stay in place,
    not verified - a revert is never flipped back to the version it undoes."""


# --- what is there now -------------------------------------------------------------------------
def current(node: Node, component: str, action: str) -> Manifest:
    """The one valid manifest of ``component`` in the manifests dir, one cpctl may rewrite."""
    scan, parked = node.scan(), node.parked()
    present, parked_hits = node.resolve(component, scan, parked)
    if not present:
        if parked_hits:
            raise CpctlError("%s is parked (%s): start it first (%s), then %s it; or %s the parked "
                             "copy: %s" % (component, node.state.parked_path(parked_hits[0]),
                                           node.command("start", component), action, action,
                                           node.command(action, component, "--parked")),
                             ExitCode.REFUSED)
        raise node.not_found(component)
    manifest = node.single(component, present, "it cannot be %s: fix or remove the file by hand" % _done(action))
    manifests.refuse_link(manifest, action)
    return manifest


def _done(action: str) -> str:
    return {"apply": "replaced", "edit": "edited", "flags": "changed", "rollback": "rolled back"}.get(action, action)


def parked_current(node: Node, component: str, action: str) -> Tuple[Manifest, Dict[str, Any]]:
    """The parked copy of ``component`` as a ``Manifest`` (its path in the parked dir), and its
    parking metadata: what ``--parked`` changes. Refused when the component is not parked."""
    scan, parked = node.scan(), node.parked()
    present, parked_hits = node.resolve(component, scan, parked)
    if not parked_hits:
        if present:
            raise CpctlError("%s is not parked (it is in %s): drop --parked to %s the running manifest"
                             % (component, node.manifests_dir, action), ExitCode.REFUSED)
        raise node.not_found(component)
    if len(parked_hits) > 1:
        raise CpctlError("%r matches several parked manifests (%s)" % (component, ", ".join(parked_hits)),
                         ExitCode.REFUSED)
    filename = parked_hits[0]
    path = node.state.parked_path(filename)
    info = node.host.lstat(path)
    if info is None or info["kind"] != "file" or info["size"] > manifests.MAX_MANIFEST_BYTES:
        raise CpctlError("parked manifest %s is not a regular file of at most %d bytes" % (
            path, manifests.MAX_MANIFEST_BYTES), ExitCode.REFUSED)
    data = node.host.read_file(path, manifests.MAX_MANIFEST_BYTES)
    manifest = Manifest(filename, path, {**info, "name": filename, "data": data})
    if not manifest.valid:
        raise CpctlError("parked manifest %s: %s; it cannot be %s: fix it by hand" % (path, manifest.error,
                                                                                      _done(action)),
                         ExitCode.REFUSED)
    return manifest, parked[filename]


def pod_name(node: Node, component: str, action: str, parked: bool = False) -> str:
    """The pod name (``metadata.name``) of ``component``'s manifest (or parked copy): the one name
    JSON output uses."""
    manifest = parked_current(node, component, action)[0] if parked else current(node, component, action)
    return manifest.pod_name or component


def read_current(node: Node, component: str, action: str, parked: bool = False) -> Tuple[str, bytes]:
    """(file name, bytes) of the component's manifest now, or of its parked copy (for edit and flags,
    no lock held)."""
    manifest = parked_current(node, component, action)[0] if parked else current(node, component, action)
    assert manifest.data is not None
    return manifest.file, manifest.data


def read_any(node: Node, component: str) -> Tuple[str, bytes, bool]:
    """(file name, bytes, parked?): the manifest in the dir, else the parked copy (to list flags)."""
    present, parked_hits = node.resolve(component, node.scan(), node.parked())
    if not present and parked_hits:
        return read_current(node, component, "flags", parked=True) + (True,)
    return read_current(node, component, "flags") + (False,)


# --- the flow --------------------------------------------------------------------------------------
def replace(node: Node, component: str, new: bytes, source: str, action: str, options: ApplyOptions,
            record: Optional[Dict[str, Any]] = None, expect: Optional[str] = None,
            companions: Sequence[Companion] = ()) -> ChangeResult:
    """Validate ``new`` for ``component``, then apply, verify and roll back as the module says.

    ``expect`` (edit, flags): the checksum of the bytes the new version was made from; a manifest
    changed since is a conflict (exit 10) and nothing changes. ``companions`` (--with-file): files
    written by the same change, mounted by ``new`` (checked first), rolled back with it."""
    manifests.validate_component_name(component)
    companions = companion_files.on_node(companions, node.node_root)
    companion_files.check_places(node.host, companions, node.manifests_dir, node.state.path)
    if companions and options.parked:
        raise CpctlError("--with-file goes with a change of the running manifest, not with --parked", ExitCode.USAGE)
    if options.dry_run:
        return plan(node, component, new, source, action, options.force, options.parked, companions,
                    options.keep_in, options.keep, options.new_member)
    if options.parked:
        return _replace_parked(node, component, new, source, action, options, record or {}, expect)
    with node.session("cpctl %s %s" % (action, component)):
        manifest = current(node, component, action)
        refuse_now(node, manifest, action, options.force)
        if expect is not None and manifest.checksum != expect:
            raise Stale("%s changed while you prepared the new version (someone else edited it): nothing "
                        "changed; start again from its current content" % manifest.path, ExitCode.CONFLICT)
        return _replace_locked(node, manifest, new, source, action, options, record or {}, companions)


def _replace_locked(node: Node, manifest: Manifest, new: bytes, source: str, action: str, options: ApplyOptions,
                    record: Mapping[str, object], companions: Sequence[Companion] = ()) -> ChangeResult:
    """The replacement under the node lock, then the one undo rule of a kept ClusterConfiguration
    (``keptin.settle``): whatever put the previous manifest back (a failed, interrupted or refused
    change, a rollback, a revert) puts its ClusterConfiguration back too; said in the result or error."""
    try:
        result = _replace_core(node, manifest, new, source, action, options, dict(record), companions)
    except CpctlError as exc:
        settled = _settle_kept(node, manifest.file)
        if settled:
            exc.message += "; " + "; ".join(settled)
        raise
    settled = _settle_kept(node, manifest.file)
    if settled:
        result = dataclasses.replace(result, message="%s; %s" % (result.message, "; ".join(settled)),
                                     keep_in_undone=settled)
    return result


def _settle_kept(node: Node, filename: str) -> List[str]:
    try:
        with node.host.prefetched([("lstat", {"path": node.state.path + "/" + keptin.SUBDIR})]):
            return keptin.settle(node, filename)    # (it looks at the records' dir twice: one round trip)
    except CpctlError as exc:
        return [exc.message]


def refuse_now(node: Node, manifest: Manifest, action: str, force: bool, parked: bool = False) -> None:
    """Every rule that refuses a change of ``manifest`` as the node stands (exit 4, nothing changed), in
    one place: checked under the node lock by the real run (and by its dry run, which decides like it).
    Its last change awaits confirmation (``--confirm-within``: a change under an arm would make the
    revert undo the wrong one; a parked copy is not what an arm reverts); a kubeadm upgrade is in
    flight (unless ``force``)."""
    component = manifest.pod_name or manifest.file
    if not parked:
        confirmations.refuse_armed(node.host, node.state, manifest.file, action, node.command)
    if not force:
        outside.refuse_in_flight(node, "%s of %s%s" % (action, "the parked copy of " if parked else "", component))


def refuse_empty_data(node: Node, manifest: Manifest, new: bytes, action: str, new_member: bool) -> None:
    """etcd's new version would start on a data dir that holds no member: refused (``core.etcddata``)."""
    component = manifest.pod_name or manifest.file
    etcddata.refuse_empty(node.host, manifests.parse_pod(new), node.node_root, "%s of %s" % (action, component),
                          new_member, node.command(action, component, "--new-member"))


def _companions_unchanged(node: Node, manifest: Manifest, new: bytes, companions: Sequence[Companion],
                          action: str) -> bool:
    """True when nothing would change; REFUSED when only companion files would (the running pod would
    not re-read them: change the manifest too, e.g. point the flag at a new file name)."""
    if new != manifest.data:
        return False
    differ = [c.path for c in companions if companion_now(node, c.path) != c.data]
    if differ:
        raise CpctlError("%s of %s: the manifest would not change, only %s: the running pod would not re-read it; "
                         "change the manifest too (e.g. name a new file in the flag); nothing changed"
                         % (action, manifest.pod_name, ", ".join(differ)), ExitCode.REFUSED)
    return True


def review(node: Node, manifest: Manifest, new: bytes, source: str, action: str, force: bool,
           companions: Sequence[Companion] = (), parked: bool = False) -> Optional[checks.Review]:
    """The one decision behind a replacement, its dry run and a change of a parked copy: None when
    nothing would change; else the checks' verdict, after refusing (exit 4) what they find bad (unless
    ``force`` where they allow it), a change of companion files alone, one the new manifest does not
    mount, and a file name too long to keep revisions for."""
    assert manifest.data is not None
    component = manifest.pod_name or manifest.file
    checks.parse_new(new, source)        # what the kubelet cannot decode: one line, its line and column
    if _companions_unchanged(node, manifest, new, companions, action):
        return None
    check_revisable(manifest.file)
    companion_files.check_mounted(new, companions, node.node_root, "%s of %s" % (action, component),
                                  node.command("flags", component))
    verdict = checks.review(node.host, manifest, new, node.scan(), source, node.node_root,
                            _coming(node, companions))
    verdict.refuse_if_bad("%s of %s%s" % (action, "the parked " if parked else "", component), force,
                          edit=node.command("edit", component, *(["--parked"] if parked else [])))
    return verdict


def plan(node: Node, component: str, new: bytes, source: str, action: str, force: bool = False,
         parked: bool = False, companions: Sequence[Companion] = (), keep_in: Optional[KeepPlan] = None,
         keep: int = revisions.DEFAULT_KEEP, new_member: bool = False) -> ChangeResult:
    """What ``replace`` would do, checked the same way, changing nothing (no lock, no state dir): the
    ``Plan`` the real run's own code (``build``) makes of the same inputs."""
    manifest = parked_current(node, component, action)[0] if parked else current(node, component, action)
    assert manifest.data is not None
    refuse_now(node, manifest, action, force, parked)
    result = _result(node, manifest, action, changed=False, dry_run=True, parked=parked)
    if companions:
        result.companions = [c.to_dict() for c in companions]
    verdict = review(node, manifest, new, source, action, force, companions, parked)
    if verdict is None:
        return dataclasses.replace(result, message="unchanged (the %s already holds these bytes)"
                                   % ("parked copy" if parked else "file"))
    if not parked:
        refuse_empty_data(node, manifest, new, action, new_member)
        etcdidentity.accept_new_member(node, new_member)
    effect = _effect_text(node, manifest, new, manifests.pod_effect(manifest.data, new, verdict.release), "would ")
    if parked:
        effect = "it is parked: nothing runs it until %s" % node.command("start", component)
    _, _, planned = build(node, manifest, new, action, None, keep, {}, companions, keep_in, parked,
                          release=verdict.release)
    return dataclasses.replace(result, message="would %s %s: %s" % (action, manifest.path, effect),
                               warnings=verdict.warnings, diff=text_diff(manifest.data, new, manifest.file),
                               plan=planned)


def build(node: Node, manifest: Manifest, new: bytes, action: str, reason: Optional[str], keep: int,
          record: Mapping[str, object], companions: Sequence[Companion] = (), keep_in: Optional[KeepPlan] = None,
          parked: bool = False, awaits: bool = False, replaced_failed: bool = False,
          release: Optional[Release] = None) -> Tuple[journal.Change, revisions.Keeping, Plan]:
    """The change of ``manifest`` to ``new`` as one ``Plan`` - manifest, companion files (each read once
    here: its bytes before, None when absent), the mounts ``new`` adds, the ``--keep-in`` part, the
    revisions it records - and the journaled change that applies exactly it (``replace_plan``); its
    inverse is computed with it. Reads only: the dry run prints the plan, the real run applies the change.
    ``release``: the node's (the review's), whose kubelet drops the pod fields it does not know."""
    assert manifest.data is not None
    before = [companion_now(node, c.path) for c in companions]
    change, kept = replace_plan(node, manifest, new, action, reason, keep, dict(record), replaced_failed, companions,
                                awaits, found_now=before)
    try:
        added = mounts_added(manifest.pod or {}, manifests.parse_pod(new))
    except manifests.InvalidManifest:
        added = []
    planned = Plan(node.node_name, manifest.pod_name or manifest.file, manifest.file, action, change.op,
                   manifests.pod_effect(manifest.data, new, release),
                   FilePart(manifest.path, manifest.mode, manifest.data, new),
                   [FilePart(c.path, companion_files.MODE, was, c.data) for c, was in zip(companions, before)],
                   added, kept.previous, None if parked else kept.current, keep_in, parked)
    return change, kept, planned


def _same_pod_why(old: bytes, new: bytes, release: Optional[Release]) -> str:
    """Why the kubelet sees the same pod in ``new``: what differs is only what any decode ignores, or
    fields the node's release does not know (its decoder drops them; the warnings name them)."""
    if release is not None and not manifests.same_pod(old, new):
        return "what differs are fields Kubernetes 1.%d does not have: its kubelet drops them" % release.minor
    return "comments, formatting, API defaults or fields it ignores"


def _effect_text(node: Node, manifest: Manifest, new: bytes, effect: str, would: str = "") -> str:
    """What the kubelet does with ``new`` in place of ``manifest`` (its own rule: pod_effect)."""
    if effect == manifests.KEEPS:
        return KEEPS_MESSAGE.replace("keeps", would + "keep" if would else "keeps")
    pod = node.target_for(manifest.pod or {}, manifest.file).mirror_name
    if effect == manifests.IN_PLACE:
        return "the kubelet %srestart%s the changed containers of pod %s in place (metadata.uid pinned)" % (
            would, "" if would else "s", pod)
    return "the kubelet %sreplace%s pod %s" % (would, "" if would else "s", pod)


def _result(node: Node, manifest: Manifest, action: str, changed: bool, **extra: Any) -> ChangeResult:
    return ChangeResult(node.node_name, manifest.pod_name or manifest.file, manifest.file, action, changed,
                        recovered=list(node.recovered), **extra)


def _replace_core(node: Node, manifest: Manifest, new: bytes, source: str, action: str, options: ApplyOptions,
                  record: Dict[str, Any], companions: Sequence[Companion] = ()) -> ChangeResult:
    assert manifest.data is not None and manifest.pod is not None
    verdict = review(node, manifest, new, source, action, options.force, companions)
    if verdict is None:
        if options.config_write is not None:
            # the manifest already holds the change: the ClusterConfiguration write is all there is to
            # do (keeping what runs for the next upgrade); no manifest change to undo it with, no record
            options.config_write.write()
        return _result(node, manifest, action, False, message="unchanged (the file already holds these bytes)")
    refuse_empty_data(node, manifest, new, action, options.new_member)
    etcdidentity.accept_new_member(node, options.new_member)
    effect = manifests.pod_effect(manifest.data, new, verdict.release)
    if effect != manifests.KEEPS and manifest.pod_name == ETCD:     # the member goes down: not as the leader
        moved = etcdcare.move_off_before(node, "%s of etcd" % action, options.move_leader)
        if moved:
            node.log(moved)
    target = node.target_for(manifests.parse_pod(new), manifest.file)    # judged by the NEW manifest
    old_target = node.target_for(manifest.pod, manifest.file)
    # the change as one value, its inverse with it; ``change`` is what applies exactly it. Made before the
    # pod is looked at: its reads are the session's snapshot (crictl, a command, ends it), and the look
    # at the pod comes as close to the change as it can
    change, kept, planned = build(node, manifest, new, action, options.reason, options.keep, record, companions,
                                  options.keep_in, awaits=effect != manifests.KEEPS, release=verdict.release)
    older = pending.read(node.host, node.state)[0].get(manifest.file)     # a change killed in its wait before
    before = None if effect == manifests.KEEPS else node.waiter.before(target)
    fail_fast = crash_loop_check(node, target, effect)        # the sandboxes there before the change
    _make_dirs(node, companions)
    number = kept.previous
    done = _result(node, manifest, action, True, revision=number, new_revision=kept.current,
                   checksum=change.checksum, previous=manifests.checksum(manifest.data), warnings=verdict.warnings,
                   effect=effect, plan=planned)
    if companions:
        done.companions = [c.to_dict() for c in companions]
    if options.config_write is not None:     # recorded first: whatever happens next, settle can undo it
        undo = planned.inverse.config
        assert undo is not None, "a ClusterConfiguration write without its part in the plan"
        keptin.write(node, options.config_write, undo)
    if effect == manifests.KEEPS:
        node.apply(change)
        _verify_companions(node, companions)
        return dataclasses.replace(done, message="%s: the kubelet sees the same pod (%s): %s; %s"
                                                 % (_past(action), _same_pod_why(manifest.data, new, verdict.release),
                                                    KEEPS_MESSAGE, _kept_text(done)))
    written = Written(manifest, new, change.checksum or "", number, action, old_target=old_target, plan=planned)
    try:                  # a signal held during the journaled write arrives as it returns: inside this try
        node.apply(change)
        _verify_companions(node, companions)
        return _judge(node, target, before, written, options, done, fail_fast)
    except (KeyboardInterrupt, Terminated) as exc:
        if options.keep_on_signal:
            raise Reverting(interrupted_by(exc), "%s while waiting for %s of %s" % (
                interrupted_by(exc), action, written.component),
                where="its version is in place, not verified") from None
        raise _put_back_now(node, target, before, written, options, exc) from None
    finally:
        pending.clear(node.host, node.state, manifest.file,      # the verdict is in (only SIGKILL skips this)
                      unless=older.op if older else "")


def written_component(manifest: Manifest) -> str:
    return manifest.pod_name or manifest.file


def _kept_text(done: ChangeResult) -> str:
    """Where the two versions of a replacement are kept: "now revision N, previous version kept as revision M"."""
    return "now revision %s, previous version kept as revision %s" % (done.new_revision, done.revision)


Before = Optional[Dict[str, object]]      # Waiter.before's snapshot: {"probe", "state", "gates"}


@dataclass
class Written:
    """What one replacement wrote: the manifest it replaced (``old.data``), the new bytes and their
    checksum, the revision keeping the old bytes; every later step checks the file still holds them."""

    old: Manifest
    new: bytes
    checksum: str
    revision: int
    action: str
    kept: str = ""                 # where cpctl's bytes went once another writer displaced them
    old_target: Optional[PodTarget] = None          # the previous version, judged by its own manifest
    plan: Optional[Plan] = None                      # the change as one value: its inverse undoes it

    @property
    def companions_before(self) -> List[Companion]:
        """The companion files as they were (None: absent): the plan's inverse."""
        if self.plan is None:
            return []
        return [Companion(c.path, c.after, "before %s" % self.action) for c in self.plan.inverse.companions]

    @property
    def component(self) -> str:
        return self.old.pod_name or self.old.file

    @property
    def previous(self) -> bytes:
        assert self.old.data is not None
        return self.old.data


def _judge(node: Node, target: PodTarget, before: Before, written: Written, options: ApplyOptions,
           done: ChangeResult, fail_fast: Optional[Callable[[], Optional[str]]] = None) -> ChangeResult:
    """Wait for the new pod, then the verdict - for the bytes cpctl wrote, if they are still there."""
    action, component = written.action, written.component
    try:
        result = _verify(node, target, before, options, fail_fast, keep_verified=options.keep_verified)
    except CpctlError as exc:
        return _failed(node, target, written, options, exc.message, exc)
    except SettleInterrupted as stop:      # verified before the signal: asking or undoing would only cost
        still_ours(node, written, options, "before its verdict")
        raise InterruptedKept(stop.signal, "%s of %s interrupted after verification (%s; %.0fs of the %.0fs settle "
                          "watched); kept" % (action, component, stop.result.detail, stop.waited, options.settle),
                          where="%s; %s undoes it" % (_kept_text(done), node.command("rollback", component))) from None
    still_ours(node, written, options, "before its verdict")
    if result.verified or isinstance(node.waiter, NoWait):
        return dataclasses.replace(done, wait=dict(result.to_dict()),
                                   message="%s: %s; %s" % (_past(action), result.detail, _kept_text(done)))
    raise CpctlError("%s of %s is in place but NOT verified: %s; not rolled back (nothing showed it failing): check "
                     "with %s, undo with %s" % (action, component, result.detail, node.command("status"),
                                                node.command("rollback", component)), ExitCode.TIMEOUT)


def _replace_parked(node: Node, component: str, new: bytes, source: str, action: str, options: ApplyOptions,
                    record: Dict[str, Any], expect: Optional[str]) -> ChangeResult:
    """``replace`` for the parked copy: validated, the old bytes kept as a revision, the new ones and
    the parked metadata written by one journaled change; no wait (nothing runs a parked manifest)."""
    with node.session("cpctl %s --parked %s" % (action, component)):
        manifest, meta = parked_current(node, component, action)
        assert manifest.data is not None
        refuse_now(node, manifest, action, options.force, parked=True)
        if expect is not None and manifest.checksum != expect:
            raise Stale("%s changed while you prepared the new version (someone else edited it): nothing "
                        "changed; start again from its current content" % manifest.path, ExitCode.CONFLICT)
        verdict = review(node, manifest, new, source, action, options.force, parked=True)
        if verdict is None:
            return _result(node, manifest, action, False, parked=True,
                           message="unchanged (the parked copy already holds these bytes)")
        change, kept, planned = build(node, manifest, new, action, options.reason, options.keep,
                                      dict(record, parked=True), parked=True, release=verdict.release)
        number = kept.previous
        meta_path = node.state.meta_path(manifest.file)
        meta_bytes = node.state.meta_bytes(dict(meta, checksum=change.checksum, content=parked_content(new)))
        change.steps.append(journal.write(meta_path, manifests.checksum(meta_bytes),
                                          before=node.checksum_of(meta_path)))
        change.data[len(change.steps) - 1] = meta_bytes
        node.apply(change)
    return _result(node, manifest, action, True, parked=True, revision=number, checksum=change.checksum,
                   previous=manifests.checksum(manifest.data), warnings=verdict.warnings, plan=planned,
                   message="%s in the parked copy %s (not running: nothing to wait for; %s runs it); "
                           "previous version kept as revision %d" % (_past(action), manifest.path,
                                                                     node.command("start", component), number))


def crash_loop_check(node: Node, target: PodTarget, effect: str) -> Optional[Callable[[], Optional[str]]]:
    """Fail fast: a check the wait asks about once a second - the reason when the NEW pod's container
    already exited with an error and the kubelet restarted it (CrashLoopBackOff, ``Diagnosis.crash_loop``).
    Only for a new pod (its sandbox is not one of those there now) and when crictl can list them."""
    if effect != manifests.NEW_POD or isinstance(node.waiter, NoWait):
        return None
    diagnosis = Diagnosis(node.host, node.crictl)
    old = diagnosis.sandboxes(target)
    if old is None:
        return None
    return lambda: diagnosis.crash_loop(target, old)


def _coming(node: Node, companions: Sequence[Companion]) -> List[str]:
    """Node paths the change writes (the review counts them as there; hostPaths name node paths)."""
    return [mounts.node_path(node.node_root, c.path) for c in companions if c.data is not None]


def _make_dirs(node: Node, companions: Sequence[Companion]) -> None:
    """The directory of each companion file (mode 0700 when cpctl creates it): a directory is no file
    change, so it is made before the journaled change and stays."""
    import posixpath
    for companion in companions:
        if companion.data is None:
            continue
        try:
            node.host.makedirs(posixpath.dirname(companion.path), 0o700)
        except OSError as exc:
            raise CpctlError("cannot create the directory of %s on %s: %s; nothing changed" % (
                companion.path, node.node_name, exc.strerror or exc), ExitCode.ENVIRONMENT) from None


def _verify_companions(node: Node, companions: Sequence[Companion]) -> None:
    """Each companion file on the node holds the bytes read on the operator's side (checksum compared
    after writing: over SSH, on every master)."""
    for companion in companions:
        if companion_now(node, companion.path) != companion.data:
            raise CpctlError("%s on %s does not hold the bytes written (checksum differs): check it by hand" % (
                companion.path, node.node_name), ExitCode.ENVIRONMENT)


def still_ours(node: Node, written: Written, options: ApplyOptions, when: str) -> None:
    """Conflict (exit 10) unless the manifest still holds the bytes cpctl wrote: another writer
    replaced (or removed) them meanwhile. Theirs stay in place, unjudged and untouched; cpctl's are
    kept as a revision, so both versions remain."""
    now = _checksum_now(node, written.old.path)
    if now == written.checksum:
        return
    theirs = "removed it" if now is None else "put other bytes there (sha256 %s)" % now[:12]
    kept = _keep_displaced(node, written, now or "")
    raise CpctlError("%s changed while cpctl waited for the new version of %s: another writer %s; stopped %s: "
                     "their version stays in place, not verified and not rolled back; cpctl's version is %s, the "
                     "one before it revision %d; compare them and decide (%s)"
                     % (written.old.path, written.component, theirs, when, kept, written.revision,
                        node.command("revisions", written.component)), ExitCode.CONFLICT)


def _checksum_now(node: Node, path: str) -> Optional[str]:
    """The sha256 of the regular file at ``path`` now; None when it is gone or not a regular file."""
    try:
        info = node.host.lstat(path)
        if info is None or info["kind"] != "file" or info["size"] > manifests.MAX_MANIFEST_BYTES:
            return None
        return manifests.checksum(node.host.read_file(path, manifests.MAX_MANIFEST_BYTES))
    except OSError:
        return None


def _keep_displaced(node: Node, written: Written, theirs: str) -> str:
    """Keep cpctl's displaced bytes as a revision (through the change path), once; says where they are."""
    if written.kept:
        return written.kept
    try:
        change, number = displaced_change(node, written.old.file, written.component, written.new,
                                          written.old.mode, theirs, written.action)
        if change is not None:
            node.apply(change)
    except CpctlError as exc:
        return "not kept (%s)" % exc.message
    written.kept = "kept as revision %d" % number
    return written.kept


def _past(action: str) -> str:
    return {"apply": "applied", "edit": "edited", "flags": "flags changed", "rollback": "rolled back"}[action]


class InterruptedKept(Interrupted):
    """Interrupted after the new version was verified: it is in place and kept (exit 130)."""


class SettleInterrupted(Exception):
    """Ctrl-C or SIGTERM while the verified new pod settled (``_verify(..., keep_verified=True)``)."""

    def __init__(self, signal: str, result: WaitResult, waited: float) -> None:
        super().__init__(signal)
        self.signal, self.result, self.waited = signal, result, waited


def _verify(node: Node, target: PodTarget, before: Any, options: ApplyOptions,
            fail_fast: Optional[Callable[[], Optional[str]]] = None, keep_verified: bool = False) -> WaitResult:
    """The new pod Running, Ready and past its gate, then still the same and Ready for ``settle``;
    ``fail_fast`` ends the wait early with a verdict (``crash_loop_check``). ``keep_verified``: a
    signal during the settle raises ``SettleInterrupted`` (the pod WAS verified) instead."""
    result = node.waiter.wait_started(target, before, wait_limit(options, target.pod), give_up=fail_fast)
    if not result.verified:
        return result
    if options.settle <= 0:
        return WaitResult(True, result.detail + node.waiter.mirror_note(target), result.elapsed, result.state)
    started = time.monotonic()
    try:
        return _settle(node, target, result, options)
    except (KeyboardInterrupt, Terminated) as stop:
        if not keep_verified:
            raise
        raise SettleInterrupted(interrupted_by(stop), result, time.monotonic() - started) from None


def _settle(node: Node, target: PodTarget, result: WaitResult, options: ApplyOptions) -> WaitResult:
    """The verified pod still the same and Ready for ``options.settle`` seconds."""
    seen = node.waiter.settle_view(target)
    started = time.monotonic()
    deadline = started + options.settle
    show = getattr(node.waiter, "progress", None)        # a verifying waiter's progress line
    while time.monotonic() < deadline:
        if callable(show):
            # no "verified" before the verdict: a pod Ready now may still crash-loop and be rolled back
            show("pod %s Ready; settling before the verdict, %.1fs of %gs" % (
                target.mirror_name, time.monotonic() - started, options.settle))
        time.sleep(min(SETTLE_POLL, max(0.0, deadline - time.monotonic())))
        now = node.waiter.settle_view(target)
        if now is None:
            continue                       # nothing could look this time: the wait already verified
        if not now.get("present") or not now.get("ready"):
            raise CpctlError("pod %s was Ready, then %s within %.0fs (%s)" % (
                target.mirror_name, "gone" if not now.get("present") else "not Ready", options.settle,
                now.get("source") or "seen"), ExitCode.TIMEOUT)
        if _replaced(seen, now):
            raise CpctlError("pod %s was replaced again within %.0fs (%s)" % (
                target.mirror_name, options.settle, now.get("source")), ExitCode.TIMEOUT)
        seen = seen or now
    return WaitResult(True, "%s, stable for %.0fs%s" % (result.detail, options.settle, node.waiter.mirror_note(target)),
                      result.elapsed, result.state)


def _replaced(seen: Optional[Mapping[str, object]], now: Mapping[str, object]) -> bool:
    """Whether two sightings by the SAME probe show different pods (uids of different probes -
    a mirror pod's and a sandbox's - are never compared)."""
    if not seen or seen.get("source") != now.get("source"):
        return False
    return bool(seen.get("uid") and now.get("uid") and seen["uid"] != now["uid"])


# --- when the new version does not come up -------------------------------------------------------------
def _why_failed(node: Node, target: PodTarget, message: str) -> str:
    found = [line for line in why_not_running(node.host, node.crictl, node.kubeconfig, target)
             if line not in message]                  # a fail-fast verdict already quotes the container
    return flags.redact("%s (%s)" % (message, "; ".join(found)) if found else message)


def _failed(node: Node, target: PodTarget, written: Written, options: ApplyOptions, message: str,
            exc: CpctlError) -> NoReturn:
    """The new version (``target``) did not come: report why, and roll back to the previous bytes (and
    each companion file to its previous bytes) unless --no-rollback - only over cpctl's own version;
    the old version is judged by its own manifest (``written.old_target``)."""
    component, number = target.component, written.revision
    old_target = written.old_target or target
    why = _why_failed(node, target, message)
    still_ours(node, written, options, "before rolling back")
    if not options.rollback:
        raise CpctlError("new version of %s did not become healthy: %s; left in place (--no-rollback); the previous "
                         "version is revision %d: %s" % (component, why, number, node.command("rollback", component)),
                         exc.code, hint=exc.hint)
    before = node.waiter.before(old_target)      # the failed pod: what the old one must not be taken for
    failed_number = _restore(node, written, "automatic rollback: %s" % message, options)
    try:
        back = _verify(node, old_target, before, options)
    except (KeyboardInterrupt, Terminated) as stop:
        raise Interrupted(interrupted_by(stop), "rollback of %s interrupted while waiting" % component,
                          where="the previous version is back in place (not verified)") from None
    except CpctlError as again:
        back = WaitResult(False, again.message)
    if back.verified or isinstance(node.waiter, NoWait):
        raise CpctlError("new version of %s did not become healthy: %s; ROLLED BACK to the previous version (%s)%s; "
                         "the failed version is kept as revision %d" % (component, why, back.detail,
                                                                         companions_back(written), failed_number),
                         ExitCode.ROLLED_BACK)
    raise CpctlError("new version of %s did not become healthy: %s; the previous version was put back but is NOT "
                     "healthy either (%s): both versions are kept (previous: in place and revision %d; failed: "
                     "revision %d); act now" % (component, why, back.detail, number, failed_number),
                     ExitCode.ROLLBACK_FAILED)


def companions_back(written: Written) -> str:
    """", with its companion files (P: previous bytes back; Q: removed, absent before)" ("" without)."""
    if not written.companions_before:
        return ""
    return ", with its companion files (%s)" % "; ".join(
        "%s: %s" % (c.path, "removed, absent before" if c.data is None else "previous bytes back")
        for c in written.companions_before)


def _restore(node: Node, written: Written, reason: str, options: ApplyOptions) -> int:
    """Write the previous bytes back over cpctl's failed version (kept as a revision marked failed), and
    each companion file's previous bytes (removed when it was absent) by the same change - only over
    cpctl's: another writer's version is a conflict, never overwritten."""
    still_ours(node, written, options, "before putting the previous version back")
    manifest = current(node, written.component, "rollback")
    back = written.plan.inverse.manifest.after if written.plan is not None else written.previous
    assert back is not None
    change, kept = replace_plan(node, manifest, back, "rollback", reason, options.keep,
                                {"automatic": True}, replaced_failed=True, companions=written.companions_before,
                                awaits=True)
    node.apply(change)
    return kept.previous


def _put_back_now(node: Node, target: PodTarget, original: Before, written: Written, options: ApplyOptions,
                  exc: BaseException) -> CpctlError:
    """SIGINT/SIGTERM after the write, before the verdict: the previous bytes go back (unless they
    already are: the automatic rollback had written them), and are waited for; a second signal
    ends that wait. Returns the error to exit with (130, or 10 when another writer got there first)."""
    signal = interrupted_by(exc) or "interrupted"
    component = written.component
    what = "%s while waiting for the new version of %s" % (signal, component)
    try:
        if _checksum_now(node, written.old.path) == manifests.checksum(written.previous):
            number, before = None, _baseline(node, target, original)
        else:
            before = _baseline(node, target, original)
            number = _restore(node, written, "interrupted (%s) while waiting for the new version" % signal, options)
    except CpctlError as again:
        if again.code == ExitCode.CONFLICT:
            return CpctlError("%s; %s" % (what, again.message), ExitCode.CONFLICT)
        return Interrupted(signal, "%s, and putting the previous version back failed: %s" % (what, again.message),
                           where="the new version is still in place: %s" % node.command("rollback", component))
    except (KeyboardInterrupt, Terminated):
        return Interrupted(signal, "%s, interrupted again while putting the previous version back" % what,
                           where="see where it stands with %s" % node.command("status", component))
    kept = "" if number is None else "; the new one is revision %d" % number
    try:
        back = _verify(node, written.old_target or target, before, options)
    except (KeyboardInterrupt, Terminated):
        state = "back in place (not verified: interrupted again)"
    except CpctlError as failed:
        state = "back in place but NOT healthy (%s): act now" % failed.message
    else:
        state = "back in place and %s" % (back.detail if back.verified else "not verified: %s" % back.detail)
    return Interrupted(signal, what, where="the previous version is %s%s%s" % (state, companions_back(written), kept))


def _baseline(node: Node, target: PodTarget, original: Before) -> Before:
    """What the pod of the previous version must be new against: the pod running now - unless that
    is still the very pod seen before the change (the kubelet never replaced it): then the previous
    version never went away, and any Ready pod of it proves it is back."""
    now: Before = node.waiter.before(target)
    seen, was = (now or {}).get("state"), (original or {}).get("state")
    same_probe = (now or {}).get("probe") == (original or {}).get("probe")
    if isinstance(seen, PodState) and isinstance(was, PodState) and same_probe \
            and seen.present and not seen.is_new_since(was):
        return None
    return now


# --- flags, rollback, revisions ----------------------------------------------------------------------
def flags_version(data: bytes, component: str, container: Optional[str], sets: Sequence[Tuple[str, str]],
                  unsets: Sequence[str], edit: str = "cpctl edit") -> Tuple[bytes, List[str]]:
    """The manifest ``data`` with the flags changed, and one line per effect (re-formatting noted);
    ``edit``: the command a refusal points to."""
    pod = checks.parse_new(data, "the current manifest of %s" % component)
    index, chosen = flags.pick_container(pod, container)
    lists, said = flags.new_lists(chosen, sets, unsets, edit)
    if lists == {where: list(chosen.get(where) or []) for where in flags.LISTS}:
        return data, said
    new, rewritten = flags.set_flags(data, pod, index, lists)
    if rewritten:
        said.append("the file was re-written as a whole (its layout allows no in-place edit): comments are lost")
    return new, said


def mounts_version(data: bytes, root: str, component: str, container: Optional[str],
                   sets: Sequence[Tuple[str, str]], companions: Sequence[Companion]) -> Tuple[bytes, List[str]]:
    """``flags --mount``: the manifest ``data`` with a hostPath volume and mount for each --set value
    naming a path the container does not see, and one line per mount added (``root``: the node's
    root, ``--node-root``)."""
    pod = checks.parse_new(data, "the new manifest of %s" % component)
    index, chosen = flags.pick_container(pod, container)
    wanted = companion_files.mount_wanted(sets, companion_files.on_node(companions, root), root,
                                          checks.binary_of(chosen))
    return companion_files.add_mounts(data, index, wanted)


def rollback_target(node: Node, component: str, to: Optional[int], force: bool = False
                    ) -> Tuple[revisions.Revision, bytes, str]:
    """The revision ``rollback`` applies, its verified bytes, and the checksum of the manifest now.

    ``to``: that revision; one marked failed (it was applied and did not become healthy) is
    refused (exit 4) unless ``force``. Without ``to``: the version the change that wrote the bytes in
    place replaced (undo), unless it failed; else the newest revision before the current one that
    is not the bytes in place and not failed (else the newest such revision after it)."""
    manifest = current(node, component, "rollback")
    component = manifest.pod_name or component
    store = revisions_of(node)
    kept = store.list(manifest.file)
    if not kept:
        raise CpctlError("%s has no revisions: cpctl keeps them each time apply, edit, flags or rollback changes it"
                         % component, ExitCode.NOT_FOUND)
    if to is not None:
        chosen = store.find(kept, to, component)
        if chosen.failed and not force:
            raise CpctlError("revision %d of %s is marked failed (it was applied and did not become healthy): "
                             "not rolling back to it without --force" % (to, component), ExitCode.REFUSED)
    else:
        usable = [r for r in kept if r.checksum != manifest.checksum and not r.failed and r.action != "displaced"]
        if not usable:
            raise CpctlError("%s has no earlier healthy revision to roll back to (see %s; choose one "
                             "with --to)" % (component, node.command("revisions", component)), ExitCode.NOT_FOUND)
        before = _replaced_last(node, manifest)
        now = next((r.number for r in reversed(kept) if r.checksum == manifest.checksum), None)
        earlier = [r for r in usable if now is None or r.number < now]
        chosen = next((r for r in reversed(usable) if r.checksum == before), None) or (earlier or usable)[-1]
        _refuse_crossing(node, component, manifest, kept, chosen, now)
    return chosen, store.read(chosen), manifest.checksum or ""


def rollback_companions(node: Node, revision: revisions.Revision) -> List[Companion]:
    """The companion files as they were when ``revision``'s bytes were in place: for each path a change
    from ``revision`` on wrote, the bytes the first such change found (None: absent), verified.

    A revision records every companion path a change met while it was in place, "absent" included
    (``RevisionStore._relabel``). A store written before that rule may name a path only in a later
    revision: when ``revision``'s own manifest does not mount it, those later bytes were never this
    version's, and the path is left as it is (writing them would only be refused as not mounted)."""
    store = revisions_of(node)
    found: Dict[str, Companion] = {}
    pod: Optional[Mapping[str, object]] = None
    for kept in store.list(revision.file):
        if kept.number < revision.number:
            continue
        for index, entry in enumerate(kept.companions):
            if entry["path"] in found:
                continue
            data = store.read_companion(kept, index)
            if kept.number != revision.number and data is not None:
                if pod is None:
                    try:
                        pod = manifests.parse_pod(store.read(revision))
                    except manifests.InvalidManifest:
                        pod = {}
                if not companion_files.mounted(pod, mounts.node_path(node.node_root, entry["path"])):
                    found[entry["path"]] = Companion(entry["path"], None, "")
                    continue
            found[entry["path"]] = Companion(entry["path"], data, "revision %d" % kept.number)
    return [c for c in found.values() if c.source]


def _refuse_crossing(node: Node, component: str, manifest: Manifest, kept: List[revisions.Revision],
                     chosen: revisions.Revision, now: Optional[int]) -> None:
    """A rollback without --to never undoes what a writer other than cpctl did (a kubeadm upgrade):
    REFUSED, naming it, when the bytes in place were written by another writer (detected, or no
    revision holds them), or an ``outside`` revision lies between ``chosen`` and the one in place."""
    found = outside.detect(node, manifest.file, manifest.checksum)
    # an outside revision AFTER the chosen one is crossed; the chosen one itself is not: going back to
    # the bytes a kubeadm upgrade wrote keeps that upgrade (issue 49: it was refused as undoing it)
    crossed = [r for r in kept if r.action == revisions.OUTSIDE and r.number > chosen.number
               and (now is None or r.number <= now)]
    unknown = now is None and not any(r.legacy for r in kept)
    if found is None and not crossed and not unknown:
        return
    if found is not None:
        what = found.note
    elif crossed:
        what = "%s, revision %d" % (crossed[-1].reason or "replaced outside cpctl", crossed[-1].number)
    else:
        what = "the manifest in place is no kept revision: replaced outside cpctl"
    raise CpctlError("%s was changed by a writer other than cpctl (%s) since revision %d was in place: rolling back "
                     "to it would undo that change too; nothing changed. Choose the revision with --to N (see %s)"
                     % (component, what, chosen.number, node.command("revisions", component)), ExitCode.REFUSED)


def _replaced_last(node: Node, manifest: Manifest) -> Optional[str]:
    """The checksum of the bytes that the change which wrote the manifest's bytes in place replaced
    (from the history; None when no record says): what "undo the last change" goes back to."""
    def wrote_these(record: Mapping[str, object]) -> bool:
        return record.get("file") == manifest.file and record.get("checksum") == manifest.checksum and \
            record.get("action") in ("apply", "edit", "flags", "rollback")
    found = node.state.read_history(limit=1, keep=wrote_these)
    previous = found[-1].get("previous") if found else None
    return previous if isinstance(previous, str) else None


def _kept(node: Node, component: str) -> Tuple[str, str, Optional[str], bool, List[revisions.Revision]]:
    """(the component's pod name, file name, checksum now or None when parked, parked?, the
    revisions oldest first) of ``component`` (as the user named it)."""
    manifests.validate_component_name(component)
    scan, parked = node.scan(), node.parked()
    present, parked_hits = node.resolve(component, scan, parked)
    if present:
        manifest = node.single(component, present, "it has no current version")
        filename, checksum, name = manifest.file, manifest.checksum, manifest.pod_name or component
    elif parked_hits:
        filename, checksum = parked_hits[0], None
        name = str(parked[filename].get("component") or component)
    else:
        raise node.not_found(component)
    kept = revisions_of(node).list(filename) if node.state.ensure(create=False) else []
    return name, filename, checksum, not present, kept


def _row(revision: revisions.Revision, checksum: Optional[str]) -> Dict[str, object]:
    return dict(revision.to_dict(), current=(revision.checksum == checksum))


def list_revisions(node: Node, component: str) -> Dict[str, Any]:
    """The kept revisions of ``component``, oldest first, and which one the file holds now."""
    component, filename, checksum, parked, kept = _kept(node, component)
    found = outside.detect(node, filename, checksum) if not parked else None
    return {"node": node.node_name, "component": component, "file": filename, "checksum": checksum,
            "parked": parked, "revisions": [_row(r, checksum) for r in kept],
            "outside": found.to_dict() if found else None}


def show_revision(node: Node, component: str, number: int) -> Dict[str, object]:
    """Revision ``number`` of ``component``: its label and its content (checked against its
    checksum; credential-looking flag values redacted)."""
    component, filename, checksum, _, kept = _kept(node, component)
    store = revisions_of(node)
    chosen = store.find(kept, number, component)
    content = flags.redact(store.read(chosen).decode("utf-8", "replace"))
    return {"node": node.node_name, "component": component, "file": filename, "revision": _row(chosen, checksum),
            "manifest": content}


def diff_revisions(node: Node, component: str, first: int, second: int) -> Dict[str, object]:
    """A unified diff from revision ``first`` to revision ``second`` of ``component``."""
    component, filename, checksum, _, kept = _kept(node, component)
    store = revisions_of(node)
    old, new = store.find(kept, first, component), store.find(kept, second, component)
    diff = text_diff(store.read(old), store.read(new), filename)
    return {"node": node.node_name, "component": component, "file": filename, "from": _row(old, checksum),
            "to": _row(new, checksum), "diff": diff, "identical": old.checksum == new.checksum}
