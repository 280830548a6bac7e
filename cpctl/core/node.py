"""One node's manifests dir and cpctl state, through a ``Host``: park and restore, locked.

``Node.stop`` parks a manifest in the state dir, ``Node.start`` puts it back; both are ``Change``s
applied by the node's one ``ChangePath`` (see :mod:`cpctl.core.journal`), so after a SIGKILL at
any instant the manifest's bytes exist in the manifests dir or the state dir, never half-written
and never twice in the manifests dir, and the next cpctl command rolls the interrupted change
forward or back and says which. Features that change other files (a second scheduler, stray
moves, edits) build their own ``Change``s and apply them through ``Node.apply``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Callable, ContextManager, Dict, List, Mapping, Optional, Tuple, Type

from cpctl import catalogue
from cpctl.agent import fileops, journalseal
from cpctl.core import identity as identity_mod
from cpctl.core import manifests
from cpctl.core.apiview import LocalApiCheck
from cpctl.core.identity import NodeIdentity
from cpctl.core.manifests import DirScan, Manifest
from cpctl.core.state import LOCK, MAX_ARM_BYTES, StateDir, user_label
from cpctl.errors import CpctlError, ExitCode, Interrupted, Terminated, interrupted_by
from cpctl.host.base import Host, HttpRequest
from cpctl.probes.base import NoWait, PodTarget, Waiter, WaitResult
from cpctl.timeutil import iso

if TYPE_CHECKING:
    # Imported where a change or a diagnosis needs them: a view (``status``) never does, nor
    # pending unless a change was left unverified.
    from cpctl.core import journal, pending

NAME_MAX = 255          # bytes in one file name on Linux filesystems
META_SUFFIX = ".json"
# ``start`` of a pod the kubelet never stopped (a park undone before it noticed): how long the
# running pod must stay the same and Ready to be accepted as it is.
KEPT_SETTLE = 5.0
KEPT_MESSAGE = "the kubelet never stopped the pod: the running pod is kept"
# A restore puts back the very bytes that were parked: same pod UID, so a crash-looping pod keeps
# the kubelet's back-off, which is keyed by that UID (up to 5 minutes).
BACKOFF_NOTE = ("the restored manifest is unchanged, so the pod keeps its UID and the kubelet keeps its "
                "CrashLoopBackOff (up to 5 min): fix the manifest (%s) rather than restart it")


class Outcome:
    """The result of one component operation, for text or JSON output."""

    def __init__(self, component: str, action: str, changed: bool, message: str, **extra: object) -> None:
        self.component = component
        self.action = action
        self.changed = changed
        self.message = message
        self.extra: Dict[str, object] = extra      # output fields (file, checksum, wait: a WaitResult...)

    def to_dict(self) -> Dict[str, object]:
        data: Dict[str, object] = {"component": self.component, "action": self.action, "changed": self.changed,
                                   "message": self.message}
        data.update({k: (v.to_dict() if hasattr(v, "to_dict") else v) for k, v in self.extra.items()})
        return data


@dataclass
class Placement:
    """Where a component's manifest is: files of it in the manifests dir, parked paths."""

    component: str
    manifests_dir: str
    present: List[str]
    parked: List[str]

    def describe(self) -> str:
        """``scheduler parked at /var/lib/cpctl/parked/kube-scheduler.yaml`` and the like."""
        if self.parked and not self.present:
            return "%s parked at %s" % (self.component, self.parked[0])
        if self.present and not self.parked:
            return "%s in %s" % (self.component, self.manifests_dir)
        if self.present:
            return "%s in %s and parked at %s" % (self.component, self.manifests_dir, self.parked[0])
        return "%s neither in %s nor parked" % (self.component, self.manifests_dir)


class Node:
    """One node's manifests dir and cpctl state, through a ``Host``."""

    def __init__(self, host: Host, manifests_dir: str, state_dir: str, node_name: Optional[str] = None,
                 waiter: Optional[Waiter] = None, lock_timeout: float = 10.0,
                 log: Optional[Callable[[str], None]] = None, kubeconfig: str = "/etc/kubernetes/admin.conf",
                 identity: Optional[NodeIdentity] = None) -> None:
        self.host = host
        self.kubeconfig = kubeconfig          # API credentials, a path on this node
        self.crictl = "crictl"                # the runtime's CLI on this node (for diagnoses and logs)
        self.node_root = "/"                  # the directory holding the node's / (hostPaths resolve under it)
        self._identity = identity             # where node name and manifests dir came from
        self._identity_loader: Optional[Callable[[], NodeIdentity]] = None
        self._identity_reads: List[Tuple[str, Dict[str, object]]] = []
        self.manifests_dir = manifests_dir.rstrip("/") or "/"
        self.state = StateDir(host, state_dir)
        self._node_name = identity_mod.check_node_name(
            node_name, "--node-name / inventory node_name", ExitCode.USAGE) if node_name else None
        self.waiter = waiter or NoWait()
        self.lock_timeout = lock_timeout
        self.log = log or (lambda message: None)
        self.invocation: Tuple[str, ...] = ()    # what reaches this node again (-H/-i...): hints repeat it
        # What stands on the node if this run stops now, while a step blocks that a signal cannot end
        # (a --confirm-check on a master): an interrupted fan-out reports it at once ("" : nothing known).
        self.standing = ""
        self.recovered: List[str] = []
        self._local_api = LocalApiCheck(host, self.manifests_dir)
        self.origin = "cpctl"                 # the command in whose session changes happen (history)
        self._changes: Optional[journal.ChangePath] = None
        self._listeners: List[journal.Listener] = []
        # Dry run: the same decisions, every Change recorded in ``planned`` instead of applied,
        # and the node's view (scan, parked) as it would be after them (``_planned_paths``).
        self.dry_run = False
        self.planned: List[journal.Change] = []
        # after the journal's recovery, under the lock: what else a killed change left to put back
        # (``core.keptin.settle``: a ClusterConfiguration change whose manifest change did not stay)
        self.recovery_hooks: List[Callable[[], List[str]]] = []
        # then, only in a session that changes something (never a view, a dry run or ``confirm``):
        # what a change command owes the node besides (``ops.confirm.restart_dead_timers``: an arm
        # whose revert timer died gets it back)
        self.change_hooks: List[Callable[[], List[str]]] = []
        self._planned_paths: Dict[str, Optional[str]] = {}   # path -> where its bytes are now (None: gone)
        self._check_layout()

    def _log(self, message: str) -> None:
        self.log(message)

    def command(self, *words: str) -> str:
        """A cpctl command line for a hint about this node (``cpctl -H m1 confirm kube-apiserver``
        over SSH): the one way a message names a cpctl command (``settings.command_hint``)."""
        from cpctl.core.settings import command_hint
        return command_hint(self.invocation, *words)

    @property
    def identity(self) -> Optional[NodeIdentity]:
        """Where the node name and the manifests dir came from (and the kubelet's re-list period)."""
        if self._identity is None and self._identity_loader is not None:
            self._identity = self._identity_loader()
            self._identity_loader = None
        return self._identity

    def defer_identity(self, loader: Callable[[], NodeIdentity],
                       reads: List[Tuple[str, Dict[str, object]]]) -> None:
        """Read the kubelet's files only when asked (both the node name and the manifests dir were
        given, so nothing else waits for them); until then ``view_reads`` includes ``reads``, so a
        view over SSH still costs one round trip."""
        self._identity, self._identity_loader, self._identity_reads = None, loader, list(reads)

    @property
    def node_name(self) -> str:
        """The kubelet's node name: given, or by its rule (the FULL host name, lowercased)."""
        if not self._node_name:
            self._node_name = identity_mod.host_node_name(self.host)
        return self._node_name

    def who(self) -> Dict[str, object]:
        """Who acts on this node, for history records: the host's info, the node name, and the
        command the change came from (``cpctl check --fix``, ``cpctl apply kube-apiserver``...)."""
        return dict(self.host.info(), node=self.node_name, origin=self.origin)

    @property
    def changes(self) -> journal.ChangePath:
        """The node's one change path (made on first use: a view never loads the journal code)."""
        if self._changes is None:
            from cpctl.core import journal
            self._changes = journal.ChangePath(self.host, self.state, self.manifests_dir, self.who, self._log)
            self._changes.listeners = self._listeners
        return self._changes

    @property
    def listeners(self) -> List[journal.Listener]:
        """Called after every change is recorded (the drift baseline listens here)."""
        return self._listeners

    def _check_layout(self) -> None:
        manifests_dir = os.path.normpath(self.manifests_dir) + "/"
        state_dir = os.path.normpath(self.state.path) + "/"
        if state_dir.startswith(manifests_dir) or manifests_dir.startswith(state_dir):
            raise CpctlError("state dir %s and manifests dir %s must not contain each other"
                             % (self.state.path, self.manifests_dir), ExitCode.USAGE)

    # --- sessions and changes ------------------------------------------------------------------
    def session(self, what: str, changing: bool = True) -> "_Session":
        """Lock the node (state dir and manifests dir) and finish any interrupted change first.

        A session that will change something (``changing``) first makes sure, when the API
        answers, that this node is a registered Node: with a wrong node name every mirror-pod
        lookup is a 404 that reads exactly like "pod gone"."""
        return _Session(self, what, changing)

    def finish_interrupted(self, what: str) -> None:
        """Finish or undo a change a killed cpctl left in the journal, under the node lock, and
        release it: what a view does before it reads, so that it shows the node as it stands."""
        with self.session(what, changing=False):
            return

    def check_registered(self) -> None:
        """Refuse (exit 3) when the API answers and knows no Node of this name, naming those it knows.

        Nothing is refused when the API cannot be asked (no kubeconfig, API down, forbidden): the
        waits then say what they could not verify."""
        from cpctl.probes.kubeapi import KubeClient, any_kubeconfig, load_kubeconfig
        try:
            if not any_kubeconfig(self.host, self.kubeconfig):
                return
            client = KubeClient(self.host, load_kubeconfig(self.host, self.kubeconfig), timeout=3.0)
            if client.get_node(self.node_name) is not None:
                return
            names = [str((n.get("metadata") or {}).get("name")) for n in client.list_nodes()]
        except (CpctlError, OSError):
            return
        source = self.identity.node_name.source if self.identity else "--node-name"
        raise CpctlError("node %r (from %s) is not a registered Node; the API knows %s: pass --node-name "
                         "(or fix the kubelet's --hostname-override)" % (self.node_name, source,
                                                                        ", ".join(sorted(names)) or "no nodes"),
                         ExitCode.NOT_FOUND)

    def apply(self, change: journal.Change) -> journal.Applied:
        """Apply ``change`` through the node's one change path (inside a ``session``); in a dry
        run, record it in ``planned`` instead and let later decisions see the files where it
        would put them."""
        from cpctl.core import journal
        if self.dry_run:
            self.planned.append(change)
            self._plan_moves(change)
            return journal.Applied(change, True, message="planned (dry run)")
        return self.changes.apply(change)

    def _plan_moves(self, change: journal.Change) -> None:
        from cpctl.core import journal
        for step in change.steps:
            if step.kind == journal.MOVE:
                self._planned_paths[step.path] = self._planned_paths.pop(step.src, step.src)
                self._planned_paths[step.src] = None
            elif step.kind == journal.REMOVE:
                self._planned_paths[step.path] = None

    def real_path(self, path: str) -> Optional[str]:
        """Where the bytes that ``path`` would hold are now: ``path`` itself outside a dry run;
        in one, the source of a planned move to it, or None when a planned step took it away."""
        return self._planned_paths.get(path, path) if self.dry_run else path

    def recover(self) -> List[str]:
        """Complete or roll back a change a killed cpctl left in the journal; drop its leftovers."""
        entry = self.state.read_journal()
        messages = []
        if entry is not None:
            messages.append(self.changes.recover(entry).message)
        self._remove_leftovers()
        self.recovered.extend(messages)
        return messages

    def unverified(self, held: bool) -> Tuple[List[pending.Pending], List[str]]:
        """(changes never verified, one notice line each - or about a corrupt pending file).

        A change cpctl is verifying right now is not one of them: unless this run holds the node
        lock (``held``), an entry counts only when no other cpctl holds it either."""
        if self.host.lstat(self.state.pending_path) is None:    # what pending.present asks
            return [], []
        from cpctl.core import pending
        entries, problem = pending.read(self.host, self.state)
        if entries and not held and self.lock_busy():
            return [], []
        found = [entries[name] for name in sorted(entries)]
        now = {e.file: self.checksum_of(self.manifests_dir + "/" + e.file) or None for e in found}
        return found, ([problem] if problem else []) + [pending.describe(e, now[e.file], self.command) for e in found]

    def lock_busy(self) -> bool:
        """True when another cpctl holds this node's lock now (taken and released at once if free)."""
        path = self.state.path + "/" + LOCK
        try:
            self.host.lock(path, 0, "pid %s (cpctl looking whether the node is busy)" % self.host.info()["pid"])
        except fileops.LockBusy:
            return True
        except OSError:
            return False
        self.host.unlock(path)
        return False

    def _remove_leftovers(self) -> None:
        """Dot-temp files of killed writers, and staged files no journal refers to any more."""
        for directory in (self.manifests_dir, self.state.parked_dir, self.state.meta_dir, self.state.path,
                          self.state.path + "/revisions"):
            if self.host.lstat(directory) is None:
                continue
            for name in self.host.listdir(directory):
                if fileops.is_temp_name(name):
                    self.host.unlink(directory + "/" + name)
        if self.host.lstat(self.state.staged_dir) is not None:
            for name in self.host.listdir(self.state.staged_dir):
                self.host.unlink(self.state.staged_path(name))

    # --- inventory ----------------------------------------------------------------------------
    def scan(self) -> DirScan:
        """The manifests dir as the kubelet would load it (in a dry run: after the planned moves;
        a manifest planned into the dir from elsewhere is not listed, no decision needs it)."""
        found = manifests.scan(self.host, self.manifests_dir)
        if self.dry_run and self._planned_paths:
            found.manifests = [m for m in found.manifests if self.real_path(m.path) == m.path]
        return found

    def parked(self) -> Dict[str, Dict[str, object]]:
        """file name -> metadata for every parked manifest (in a dry run: after the planned moves)."""
        names = self.state.parked_files()
        if self.dry_run:
            names = [n for n in names if self.real_path(self.state.parked_path(n)) is not None]
            names += [n for n in self._planned_parks() if n not in names]
        metas = self.state.read_metas(names)
        if self.dry_run:
            metas.update(self._planned_parks())
        return {filename: meta or {"file": filename, "component": manifests.file_stem(filename)}
                for filename, meta in metas.items()}

    def _planned_parks(self) -> Dict[str, Dict[str, object]]:
        """file name -> metadata of the manifests a dry run's planned changes park."""
        from cpctl.core import journal
        parks: Dict[str, Dict[str, object]] = {}
        for change in self.planned:
            for step in change.steps:
                if step.kind == journal.MOVE and os.path.dirname(step.path) == self.state.parked_dir:
                    name = os.path.basename(step.path)
                    meta = self.state.meta_path(name)
                    data = next((change.data.get(i) for i, s in enumerate(change.steps)
                                 if s.kind == journal.WRITE and s.path == meta), None)
                    parks[name] = _json_object(data) or {"file": name}
        return {name: meta for name, meta in parks.items()
                if self.real_path(self.state.parked_path(name)) not in (None, self.state.parked_path(name))}

    def view_reads(self) -> List[Tuple[str, Dict[str, object]]]:
        """The reads every view of this node starts with (state dir checks, journal, manifests
        dir, parked manifests and their metadata), as ``Host.prefetched`` wants them: over SSH
        they then cost one round trip instead of one each."""
        pending = self._identity_reads if self._identity_loader is not None else []
        return pending + self.state.view_reads() + [self._local_api.read_call(),
            ("info", {}), ("lstat", {"path": self.manifests_dir}),
            ("scan_dir", {"path": self.manifests_dir, "limit": manifests.MAX_MANIFEST_BYTES}),
            ("lstat", {"path": self.state.confirm_dir}),      # (confirmations.directory: read_all's)
            ("scan_dir", {"path": self.state.confirm_dir, "limit": MAX_ARM_BYTES})]

    def session_reads(self) -> List[Tuple[str, Dict[str, object]]]:
        """What a change session reads first under the node lock, before it changes anything: the
        journal, the leftovers' dirs, the keep-in, pending and confirm records, the kubeconfig (the
        registered-node check, the API probe), a view's reads (the manifests, the parked ones), the
        history. Over SSH ``_Session`` asks them in one round trip right after taking the lock."""
        from cpctl.core.revisions import MAX_META_BYTES
        from cpctl.probes.kubeapi import kubeconfig_reads
        state = self.state
        key = state.path + "/" + journalseal.JOURNAL_KEY
        reads: List[Tuple[str, Dict[str, object]]] = [
            state.read_call(state.journal_path), state.read_call(state.pending_path),
            ("lstat", {"path": state.path + "/keepin"}), ("lstat", {"path": key}), ("read_file", {"path": key,
            "limit": 256}), ("scan_dir", {"path": state.path + "/revisions", "limit": MAX_META_BYTES})]
        reads += [("listdir", {"path": path}) for path in (self.manifests_dir, state.meta_dir, state.path,
                                                          manifests.kubeadm_tmp_dir(self.manifests_dir))]
        reads.append(state.read_call(state.history_path))
        return self.view_reads() + reads + kubeconfig_reads(self.kubeconfig)

    def resolve(self, wanted: str, scan: DirScan, parked: Mapping[str, Mapping[str, object]]
                ) -> Tuple[List[Manifest], List[str]]:
        """(present manifests, parked file names) that ``wanted`` names."""
        manifests.validate_component_name(wanted)
        present = scan.find(wanted)
        target = catalogue.canonical(wanted)
        parked_hits = [f for f, meta in parked.items()
                       if target in (meta.get("component"), manifests.file_stem(f), f)
                       or wanted in (meta.get("component"), manifests.file_stem(f), f)]
        return present, parked_hits

    def placement(self, wanted: str) -> "Placement":
        """Where ``wanted``'s manifest is now, read back from the node: the one answer to "where
        was it left" after an interruption or a failed step (restart, Ctrl-C, SIGTERM)."""
        present, parked_hits = self.resolve(wanted, self.scan(), self.parked())
        return Placement(wanted, self.manifests_dir, [m.file for m in present],
                         [self.state.parked_path(f) for f in parked_hits])

    def not_found(self, wanted: str) -> CpctlError:
        """The error for a component neither in the manifests dir nor parked (exit 3), with the
        names it was probably meant to be and the ones this node has."""
        known = list(catalogue.ALIASES)
        try:
            scan, parked = self.scan(), self.parked()
            known += [m.pod_name for m in scan.valid if m.pod_name] + [manifests.file_stem(m.file) for m in scan.valid]
            known += [str(meta.get("component") or manifests.file_stem(f)) for f, meta in parked.items()]
        except CpctlError:
            pass
        close = manifests.close_names(wanted, known)
        hint = "did you mean %s? " % " or ".join(repr(n) for n in close) if close else ""
        ours = sorted(set(known) - set(catalogue.ALIASES.values()) - set(catalogue.ALIASES))
        return CpctlError("no static pod %r in %s and none parked (%sknown: %s)"
                          % (wanted, self.manifests_dir, hint, ", ".join(list(catalogue.ALIASES) + ours)),
                          ExitCode.NOT_FOUND)

    def target_for(self, pod: Dict[str, object], filename: str,
                   parked: Optional[Mapping[str, Mapping[str, object]]] = None, waiting: bool = True) -> PodTarget:
        """The static pod ``pod`` (from ``filename``) on this node, marked ``stale_api`` by the one
        rule ``api_view_stale`` (``parked``: already read, else read now). ``waiting``: a wait will
        bring this pod back (a change of it), so its own absence does not count; False for a look at
        it as it stands (``check``, ``status``)."""
        metadata = pod.get("metadata", {})     # a valid pod's: an object with a string name (podspec)
        meta: Mapping[str, object] = metadata if isinstance(metadata, dict) else {}
        stale = bool(self.api_view_stale(parked, besides=filename if waiting else "",
                                         carrier=waiting and catalogue.carries_api(str(meta["name"]))))
        namespace = meta.get("namespace")
        return PodTarget(str(meta["name"]), namespace if isinstance(namespace, str) and namespace else "default",
                         self.node_name, pod, filename, stale_api=stale)

    def api_view_stale(self, parked: Optional[Mapping[str, Mapping[str, object]]] = None, besides: str = "",
                       carrier: bool = False) -> str:
        """Why the API's view of this node's pods cannot be trusted now ("" when it can, or cannot be
        told): this node's API server or etcd is parked (a kubelet in local mode, on by default from
        v1.33, then cannot update its mirror pods while the other API servers keep serving the frozen
        ones), or - in local mode - its own API server does not answer or cannot serve
        (``local_api_down``). Waits then believe the runtime and the health endpoints only. The one rule
        ``status``, ``check``, the metrics and the waits judge by (issue 49). For a wait that brings
        the API server or etcd itself back (``besides`` its file, ``carrier``), its own absence is
        what the wait ends: neither its park nor the API being down because of it counts."""
        carriers = self._parked_carriers(parked, besides)
        if carriers:
            return "this node's %s is parked: its kubelet cannot update its mirror pods" % ", ".join(sorted(carriers))
        return "" if carrier else self.local_api_down()

    def api_view_ahead(self, parked: Optional[Mapping[str, Mapping[str, object]]] = None) -> List[HttpRequest]:
        """The HTTP request ``api_view_stale(parked)`` is about to make (none when a park decides), for
        ``Host.http_ahead``: a view asks it together with its other requests from the node."""
        return [] if self._parked_carriers(parked, "") else self._local_api.ahead(self._apiserver_pod)

    def _parked_carriers(self, parked: Optional[Mapping[str, Mapping[str, object]]], besides: str) -> List[str]:
        """The parked components (but ``besides``'s file) that carry the API's view of this node."""
        try:
            found = self.parked() if parked is None else parked
        except CpctlError:
            found = {}
        return [str(meta.get("component") or manifests.file_stem(name)) for name, meta in found.items()
                if name != besides and catalogue.carries_api(str(meta.get("component") or manifests.file_stem(name)))]

    def local_api_down(self) -> str:
        """Why this node's kubelet cannot update its mirror pods although nothing is parked (local
        mode, its own API server not answering: crash-looping, or its etcd down); "" otherwise."""
        return self._local_api.down(self._apiserver_pod)

    def _apiserver_pod(self) -> Optional[Dict[str, object]]:
        """This node's API server manifest's pod (None when there is none, or the dir cannot be read)."""
        try:
            return next((m.pod for m in self.scan().valid if m.pod_name == catalogue.KUBE_APISERVER), None)
        except CpctlError:
            return None

    # --- stop -------------------------------------------------------------------------------
    def check_parkable(self, components: List[str]) -> None:
        """Read-only preflight before a session: refuse a manifest cpctl could not park before the
        state dir is even created, so a refusal leaves the node exactly as it was."""
        manifests.check_manifests_dir(self.host, self.manifests_dir)
        scan = self.scan()
        for wanted in components:
            for manifest in scan.find(wanted):
                check_storable(manifest.file)
                manifests.refuse_link(manifest, "stop")

    def stop(self, wanted: str, *, reason: Optional[str] = None, until: Optional[float] = None,
             wait: bool = True, timeout: float = 120.0) -> Outcome:
        """Park ``wanted``'s manifest (one journaled change), then wait until the kubelet stopped
        its pod. The keywords come in the same order as ``start``'s (``until``: stop only)."""
        scan, parked = self.scan(), self.parked()
        present, parked_hits = self.resolve(wanted, scan, parked)
        if not present:
            if parked_hits:
                meta = parked[parked_hits[0]]
                return Outcome(str(meta.get("component") or wanted), "stop", False,
                               "already stopped (parked since %s by %s)" % (meta.get("parked_at", "?"),
                                                                           meta.get("parked_by", "?")))
            raise self.not_found(wanted)
        manifest = self.single(wanted, present, "there is nothing to stop")
        manifests.refuse_link(manifest, "stop")
        if manifest.file in parked:
            raise CpctlError("%s is in %s and also parked since %s: compare the two and remove one by hand"
                             % (manifest.file, self.manifests_dir, parked[manifest.file].get("parked_at", "?")),
                             ExitCode.REFUSED)
        check_storable(manifest.file)
        assert manifest.pod is not None and manifest.data is not None
        target = self.target_for(manifest.pod, manifest.file)
        wait = wait and not self.dry_run
        before = self.waiter.before(target) if wait else None
        meta = {"file": manifest.file, "component": manifest.pod_name, "namespace": manifest.namespace,
                "checksum": manifest.checksum, "mode": manifest.mode, "uid": manifest.uid, "gid": manifest.gid,
                "parked_at": iso(), "parked_by": user_label(self.host), "host": self.host.info()["hostname"],
                "reason": reason, "until": iso(until) if until else None,
                "manifests_dir": self.manifests_dir, "node": self.node_name,
                "content": parked_content(manifest.data)}
        self.apply(self.park_change(manifest, meta, reason))
        result = self._wait(self.waiter.wait_stopped, target, before, wait, timeout,
                            "its manifest stays parked at %s" % self.state.parked_path(manifest.file))
        return Outcome(target.component, "stop", True, "stopped (manifest parked)", file=manifest.file,
                       checksum=manifest.checksum, until=meta["until"], wait=result,
                       parked=self.state.parked_path(manifest.file))

    def park_change(self, manifest: Manifest, meta: Mapping[str, object], reason: Optional[str]) -> journal.Change:
        """Write the metadata, then move the manifest into the parked area (the commit step)."""
        from cpctl.core import journal
        meta_path = self.state.meta_path(manifest.file)
        meta_bytes = self.state.meta_bytes(meta)
        step = journal.write(meta_path, manifests.checksum(meta_bytes), before=self.checksum_of(meta_path))
        return journal.Change("stop", manifest.pod_name or manifest.file, manifest.file, manifest.checksum,
                              [step, journal.move(manifest.path, self.state.parked_path(manifest.file),
                                                  manifest.checksum or "")],
                              commit=1, record={"reason": reason, "until": meta["until"]}, data={0: meta_bytes})

    def checksum_of(self, path: str) -> str:
        """sha256 of the regular file at ``path``, "" when there is none (a write step's ``before``)."""
        info = self.host.lstat(path)
        if info is None or info["kind"] != "file":
            return ""
        return manifests.checksum(self.host.read_file(path, info["size"] + 1))

    def single(self, wanted: str, present: List[Manifest], consequence: str) -> Manifest:
        """The one valid manifest ``wanted`` names in the dir; refused when several files match (the
        kubelet runs only one) or the file is not something the kubelet runs."""
        valid = [m for m in present if m.valid]
        if len(present) > 1:
            raise CpctlError("%r matches several files in %s (%s): the kubelet runs only one of them; "
                             "remove the stray copy first" % (wanted, self.manifests_dir,
                                                               ", ".join(m.file for m in present)),
                             ExitCode.REFUSED)
        if not valid:
            bad = present[0]
            raise CpctlError("%s: %s; the kubelet does not run it, so %s"
                             % (bad.path, bad.error, consequence), ExitCode.REFUSED)
        return valid[0]

    # --- start ------------------------------------------------------------------------------
    def start(self, wanted: str, *, reason: Optional[str] = None, wait: bool = True,
              timeout: float = 120.0, new_member: bool = False) -> Outcome:
        """Restore ``wanted``'s parked manifest (one journaled change), then wait for a new Ready
        pod. The keywords come in the same order as ``stop``'s. etcd on a data dir that holds no
        member is refused first unless ``new_member`` (``core.etcddata``)."""
        scan, parked = self.scan(), self.parked()
        present, parked_hits = self.resolve(wanted, scan, parked)
        if present and not parked_hits:
            return self._already_in_place(wanted, present, wait, timeout)
        # Present *and* parked (e.g. a kube-scheduler.yaml.bak appeared while parked): the
        # restore checks below refuse it when the kubelet would then see the pod twice.
        if not parked_hits:
            raise self.not_found(wanted)
        if len(parked_hits) > 1:
            raise CpctlError("%r matches several parked manifests (%s)" % (wanted, ", ".join(parked_hits)),
                             ExitCode.REFUSED)
        filename = parked_hits[0]
        pod, data = self.check_restorable(filename, scan)
        from cpctl.core import etcddata
        etcddata.refuse_empty(self.host, pod, self.node_root, "start of %s" % wanted, new_member,
                              self.command("start", wanted, "--new-member"))
        target = self.target_for(pod, filename)
        wait = wait and not self.dry_run
        before = self.waiter.before(target) if wait else None
        digest = manifests.checksum(data)
        edited = hand_edit(parked[filename], digest)
        from cpctl.core import journal
        op = journal.new_op()
        before_steps: List[journal.Step] = []
        after_steps: List[journal.Step] = []
        data_by_step: Dict[int, bytes] = {}
        record: Dict[str, object] = {"reason": reason}
        revision: Optional[int] = None
        if edited:                       # what cpctl parked becomes a revision, then the edited copy goes in
            record["hand_edited"] = edited
            before_steps, data_by_step, after_steps, revision = self._keep_parked_original(
                filename, parked[filename], digest, op)
            record["revision"] = revision
        steps = before_steps + [journal.move(self.state.parked_path(filename), self.manifests_dir + "/" + filename,
                                             digest), journal.remove(self.state.meta_path(filename))] + after_steps
        self.apply(journal.Change("start", target.component, filename, digest, steps, commit=len(before_steps),
                                  record=record, data=data_by_step, op=op))
        # the very bytes that were parked, and the old pod still runs: the kubelet may never have seen the park
        kept = self.waiter.wait_kept(target, before, min(KEPT_SETTLE, timeout)) if wait and not edited else None
        if kept is not None:
            return Outcome(target.component, "start", True, "started (manifest restored); %s" % KEPT_MESSAGE,
                           file=filename, checksum=digest, wait=kept)
        result = self._wait(self.waiter.wait_started, target, before, wait, timeout,
                            "its manifest stays restored at %s/%s" % (self.manifests_dir, filename))
        message = "started (manifest restored)"
        if edited:
            message = "started (manifest restored; %s%s)" % (edited, "; what cpctl parked is kept as revision %d"
                                                             % revision if revision else "")
        extra: Dict[str, object] = {"hand_edited": True, "revision": revision} if edited else {}
        return Outcome(target.component, "start", True, message, file=filename, checksum=digest, wait=result,
                       **extra)

    def _keep_parked_original(self, filename: str, meta: Mapping[str, object], digest: str,
                              op: str) -> Tuple[List[journal.Step], Dict[int, bytes], List[journal.Step],
                                                Optional[int]]:
        """The steps that keep what cpctl parked (its copy in the metadata) as the next revision of
        ``filename``, before a hand-edited parked copy is restored; none when the metadata holds no
        usable copy (parked by an older cpctl, or changed outside cpctl too)."""
        content = meta.get("content")
        original = content.encode("utf-8") if isinstance(content, str) else b""
        if not original or manifests.checksum(original) != meta.get("checksum"):
            return [], {}, [], None
        from cpctl.core.revisions import DEFAULT_KEEP, RevisionStore
        store = RevisionStore(self.host, self.state.path)
        record = {"saved_at": iso(), "saved_by": user_label(self.host), "host": str(self.host.info()["hostname"]),
                  "action": "start", "reason": "what cpctl parked; the parked copy was edited by hand before start",
                  "replaced_by": digest, "failed": False, "op": op}
        mode = meta.get("mode")
        before, data, after, number = store.keep_steps(filename, original, mode if isinstance(mode, int) else 0o600,
                                                       record, DEFAULT_KEEP,
                                                       store.list(filename))
        return before, data, after, number

    def _already_in_place(self, wanted: str, present: List[Manifest], wait: bool, timeout: float) -> Outcome:
        """``start`` of a component whose manifest is already in the dir: the file alone says
        nothing about the pod (it may crash-loop, or a restore may just have happened), so wait for
        the pod like a restore does; never claim it runs without having seen it."""
        manifest = self.single(wanted, present, "it cannot be started: fix or remove the file")
        target = self.target_for(manifest.pod or {}, manifest.file)
        if not wait or self.dry_run:
            seen = self.waiter.describe(target)
            if seen is None:
                message = "manifest already in place (pod not checked: --no-wait)"
            elif seen.get("present") and seen.get("ready"):
                message = "already running (pod %s %s and Ready)" % (target.mirror_name, seen.get("phase") or "Running")
            else:
                seen_as = "absent" if not seen.get("present") else "phase %s" % (seen.get("phase") or "?")
                message = "manifest already in place, but pod %s is not running and Ready (%s)" % (
                    target.mirror_name, seen_as)
            return Outcome(target.component, "start", False, message, file=manifest.file)
        result = self._wait(self.waiter.wait_started, target, None, True, timeout,
                            "its manifest is in %s" % manifest.path)
        message = "already running" if result.verified else "manifest already in place"
        if result.verified and not isinstance(self.waiter, NoWait):
            message += self._confirm_pending(manifest)
        return Outcome(target.component, "start", False, message, file=manifest.file, wait=result)

    def _confirm_pending(self, manifest: Manifest) -> str:
        """A change of this manifest never verified, whose bytes are the ones now seen running and
        Ready: verified now, so its "verification pending" goes ("" when there is none)."""
        from cpctl.core import pending
        entries, _problem = pending.read(self.host, self.state)
        entry = entries.get(manifest.file)
        if entry is None or entry.checksum != manifest.checksum:
            return ""
        pending.clear(self.host, self.state, manifest.file, entry.op)
        return " (the %s of %s never verified is verified now)" % (entry.action, entry.started)

    def check_restorable(self, filename: str, scan: DirScan) -> Tuple[Dict[str, object], bytes]:
        """Refuse a restore that would run something broken or a second copy of a pod."""
        path = self.real_path(self.state.parked_path(filename)) or self.state.parked_path(filename)
        info = self.host.lstat(path)
        if info is None or info["kind"] != "file":
            raise CpctlError("parked manifest %s is not a regular file" % path, ExitCode.REFUSED)
        if info["size"] > manifests.MAX_MANIFEST_BYTES:
            raise CpctlError("parked manifest %s is too large (%d bytes)" % (path, info["size"]), ExitCode.REFUSED)
        data = self.host.read_file(path, manifests.MAX_MANIFEST_BYTES)
        try:
            pod = manifests.parse_pod(data)
        except manifests.InvalidManifest as exc:
            raise CpctlError("parked manifest %s is not a valid Pod: %s; not restoring" % (path, exc),
                             ExitCode.REFUSED) from None
        meta = pod["metadata"]
        key = (meta.get("namespace") or "default", meta["name"])
        clash = [m.file for m in scan.valid if (m.namespace, m.pod_name) == key]
        if clash:
            raise CpctlError("cannot restore %s: %s already defines pod %s/%s (the kubelet would run only one)"
                             % (filename, ", ".join(clash), key[0], key[1]), ExitCode.REFUSED)
        if any(m.file == filename for m in scan.manifests):
            raise CpctlError("cannot restore %s: a file of that name is already in %s"
                             % (filename, self.manifests_dir), ExitCode.REFUSED)
        return pod, data

    def _wait(self, step: Callable[..., WaitResult], target: PodTarget, before: object, wait: bool,
              timeout: float, where: str) -> WaitResult:
        """Wait for the kubelet after a committed change; a failed or interrupted wait says where
        the manifest was left (the change itself stands and is recorded)."""
        if not wait:
            return WaitResult(False, "not waited (%s)" % ("--dry-run" if self.dry_run else "--no-wait"))
        try:
            return step(target, before, timeout)
        except CpctlError as exc:
            message = exc.message
            if exc.code == ExitCode.TIMEOUT and step == self.waiter.wait_started:
                from cpctl.probes.diagnose import why_not_running
                found = why_not_running(self.host, self.crictl, self.kubeconfig, target)
                message += " (%s)" % "; ".join(found) if found else ""
                if any(_crash_looping(line) for line in found):
                    message += "; " + BACKOFF_NOTE % self.command("edit", target.component)
            raise CpctlError(message, exc.code, hint=exc.hint, where=where) from None
        except (KeyboardInterrupt, Terminated) as exc:
            signal = interrupted_by(exc)
            raise Interrupted(signal, "interrupted (%s) while waiting for pod %s (the change is recorded, the "
                                      "kubelet's reaction not verified)" % (signal, target.mirror_name),
                              where=where) from None


def _json_object(data: Optional[bytes]) -> Optional[Dict[str, object]]:
    """``data`` decoded as a JSON object (cpctl's own metadata bytes), else None."""
    import json
    try:
        value = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parked_content(data: Optional[bytes]) -> Optional[str]:
    """The parked bytes as text for the metadata (so ``start`` can keep them as a revision if the
    parked copy is edited by hand); None when they are not UTF-8 (the kubelet reads YAML/JSON text)."""
    try:
        return data.decode("utf-8") if data is not None else None
    except UnicodeDecodeError:
        return None


def hand_edit(meta: Mapping[str, object], digest: str) -> str:
    """Why the parked bytes (sha256 ``digest``) are not what cpctl parked or last wrote ("" when they
    are, or when the metadata does not say: a manifest parked by hand has none)."""
    recorded = meta.get("checksum")
    if not isinstance(recorded, str) or not recorded or recorded == digest:
        return ""
    return "the parked copy was changed outside cpctl since it was parked (sha256 %s, cpctl parked %s)" % (
        digest[:12], recorded[:12])


def _crash_looping(line: str) -> bool:
    """Whether one ``why_not_running`` line shows a container that exited and was restarted."""
    return ("exited" in line or "CrashLoopBackOff" in line) and " restart" in line


def check_storable(filename: str) -> None:
    """Refuse, before anything changes, a manifest name cpctl could not keep its bookkeeping for
    (the metadata file adds a suffix; file names have at most NAME_MAX bytes)."""
    size = len(os.fsencode(filename + META_SUFFIX))
    if size > NAME_MAX:
        raise CpctlError("%s: file name too long for cpctl to park (%d bytes; at most %d): rename it first"
                         % (filename[:60] + "...", len(os.fsencode(filename)), NAME_MAX - len(META_SUFFIX)),
                         ExitCode.REFUSED)


class _Session:
    """Context manager: state dir checked, node locked, interrupted work finished."""

    def __init__(self, node: Node, what: str, changing: bool = True) -> None:
        self.node = node
        self.what = what
        self.changing = changing
        self._lock: Optional[ContextManager[None]] = None

    def __enter__(self) -> Node:
        self.node.origin = self.what
        host = self.node.host
        # (the ensure's lstats join a snapshot the command took, or begin one; the lock ends it)
        first: List[Tuple[str, Dict[str, object]]] = [("lstat", {"path": self.node.manifests_dir}), ("info", {})]
        host.read_ahead(first + self.node.state.view_reads())
        manifests.check_manifests_dir(host, self.node.manifests_dir)
        if self.node.dry_run:
            return self._enter_dry_run()
        self.node.state.ensure(create=True)
        self._lock = self.node.state.locked(self.node.lock_timeout, self.what, self.node.manifests_dir)
        self._lock.__enter__()
        host.snapshot(self.node.session_reads())    # taken under the lock: what the session reads first
        try:
            for message in self.node.recover():
                self.node.log(message)
            for hook in self.node.recovery_hooks:
                try:
                    for message in hook():
                        self.node.log(message)
                except CpctlError as exc:          # a corrupt record is named, never a dead tool
                    self.node.log("warning: " + exc.message)
            for message in self.node.unverified(held=True)[1]:
                self.node.log("warning: " + message)
            if self.changing:
                self._run_change_hooks()
                self.node.check_registered()
        except BaseException:
            host.forget()
            self._lock.__exit__(None, None, None)
            raise
        return self.node

    def _run_change_hooks(self) -> None:
        for hook in self.node.change_hooks:
            try:
                for message in hook():
                    self.node.log(message)
            except CpctlError as exc:          # never blocks the change it came with: named instead
                self.node.log("warning: " + exc.message)

    def _enter_dry_run(self) -> Node:
        """A dry run takes no lock and creates nothing; an interrupted change is named, since the
        real run would finish or undo it first."""
        if self.node.state.ensure(create=False) and self.node.state.read_journal() is not None:
            self.node.recovered.append("an interrupted change is pending: the real run finishes or undoes it "
                                       "first (%s shows it)" % self.node.command("status"))
        if self.changing:
            self.node.check_registered()
        return self.node

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        if self._lock is not None:
            self.node.host.forget()
            self._lock.__exit__(exc_type, exc, traceback)
