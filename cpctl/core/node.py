"""Park and restore static pod manifests on one node, crash-safe, locked and journaled.

Every change follows the same write-ahead protocol under the node lock::

    journal(intent) -> metadata -> move the manifest -> history -> clear journal -> wait

``move`` is one rename(2) (or, across filesystems, copy-to-dot-temp + fsync + rename + unlink),
so after a SIGKILL at any instant the manifest's bytes exist in the manifests dir or the state
dir, never half-written and never twice in the manifests dir. The next cpctl command reads the
journal and rolls the interrupted operation forward (the file already moved) or back (it did
not), and reports which.
"""

from __future__ import annotations

import os
import secrets
from typing import Any, Callable, Optional

from cpctl.core import manifests
from cpctl.core.manifests import DirScan, Manifest
from cpctl.core.state import StateDir, iso, parse_iso, user_label
from cpctl.errors import CpctlError, ExitCode
from cpctl.host import ops as hostops
from cpctl.host.base import Host
from cpctl.probes.base import NoWait, PodTarget, Waiter, WaitResult


class Outcome:
    """The result of one component operation, for text or JSON output."""

    def __init__(self, component: str, action: str, changed: bool, message: str, **extra: Any) -> None:
        self.component = component
        self.action = action
        self.changed = changed
        self.message = message
        self.extra = extra

    def to_dict(self) -> dict:
        data = {"component": self.component, "action": self.action, "changed": self.changed,
                "message": self.message}
        data.update({k: (v.to_dict() if hasattr(v, "to_dict") else v) for k, v in self.extra.items()})
        return data


class Node:
    """One node's manifests dir and cpctl state, through a ``Host``."""

    def __init__(self, host: Host, manifests_dir: str, state_dir: str, node_name: Optional[str] = None,
                 waiter: Optional[Waiter] = None, lock_timeout: float = 10.0,
                 log: Optional[Callable[[str], None]] = None) -> None:
        self.host = host
        self.manifests_dir = manifests_dir.rstrip("/") or "/"
        self.state = StateDir(host, state_dir)
        self._node_name = node_name
        self.waiter = waiter or NoWait()
        self.lock_timeout = lock_timeout
        self.log = log or (lambda message: None)
        self.recovered: list = []
        self._check_layout()

    @property
    def node_name(self) -> str:
        if not self._node_name:
            self._node_name = self.host.info()["hostname"].split(".")[0].lower()
        return self._node_name

    def _check_layout(self) -> None:
        manifests_dir = os.path.normpath(self.manifests_dir) + "/"
        state_dir = os.path.normpath(self.state.path) + "/"
        if state_dir.startswith(manifests_dir) or manifests_dir.startswith(state_dir):
            raise CpctlError("state dir %s and manifests dir %s must not contain each other"
                             % (self.state.path, self.manifests_dir), ExitCode.USAGE)

    # --- sessions ---------------------------------------------------------------------------
    def session(self, what: str) -> "_Session":
        """Lock the node and finish any interrupted operation first."""
        return _Session(self, what)

    def _record(self, action: str, component: str, filename: str, digest: Optional[str],
                op_id: str, **extra: Any) -> None:
        who = self.host.info()
        record = {"time": iso(), "user": user_label(self.host), "host": who["hostname"],
                  "node": self.node_name, "action": action, "component": component, "file": filename,
                  "checksum": digest, "op": op_id}
        record.update({k: v for k, v in extra.items() if v is not None})
        self.state.append_history(record)

    # --- recovery ---------------------------------------------------------------------------
    def recover(self) -> list:
        """Complete or roll back an operation a killed cpctl left in the journal."""
        entry = self.state.read_journal()
        messages = []
        if entry is not None:
            messages.append(self._recover_entry(entry))
            self.state.clear_journal()
        self._remove_temp_files()
        self.recovered.extend(messages)
        return messages

    def _remove_temp_files(self) -> None:
        for directory in (self.manifests_dir, self.state.parked_dir, self.state.meta_dir, self.state.path):
            if self.host.lstat(directory) is None:
                continue
            for name in self.host.listdir(directory):
                if hostops.is_temp_name(name):
                    self.host.unlink(directory + "/" + name)

    def _same_bytes(self, path: str, digest: str) -> Optional[bool]:
        """True/False when ``path`` holds/doesn't hold those bytes, None when it is absent."""
        info = self.host.lstat(path)
        if info is None:
            return None
        if info["kind"] != "file":
            return False
        return manifests.checksum(self.host.read_file(path, info["size"] + 1)) == digest

    def _recover_entry(self, entry: dict) -> str:
        action, component, src, dst = entry["action"], entry["component"], entry["src"], entry["dst"]
        digest, filename = entry["checksum"], entry["file"]
        at_src, at_dst = self._same_bytes(src, digest), self._same_bytes(dst, digest)
        if at_dst:
            if at_src:
                self.host.unlink(src)   # cross-filesystem copy finished; only the unlink was left
            if action == "stop":
                if self.state.read_meta(filename) is None:
                    self.state.write_meta(filename, entry["meta"])
            else:
                self.state.remove_meta(filename)
            if not self._history_has(entry["op"]):
                self._record(action, component, filename, digest, entry["op"], recovered=True,
                             reason=entry.get("meta", {}).get("reason"))
            self._note_drift(action, filename, digest)
            return "completed interrupted %s of %s (started %s by pid %s)" % (
                action, component, entry["started"], entry["pid"])
        if at_src:
            if action == "stop":
                self.state.remove_meta(filename)
            where = "still running" if action == "stop" else "still parked"
            return "rolled back interrupted %s of %s (%s)" % (action, component, where)
        raise CpctlError("interrupted %s of %s: manifest %s is in neither %s nor %s; journal kept at %s"
                         % (action, component, filename, src, dst, self.state.journal_path),
                         ExitCode.ENVIRONMENT)

    def _history_has(self, op_id: str) -> bool:
        return any(r.get("op") == op_id for r in self.state.read_history()[-20:])

    # --- inventory ------------------------------------------------------------------------
    def scan(self) -> DirScan:
        return manifests.scan(self.host, self.manifests_dir)

    def parked(self) -> dict:
        """file name -> metadata for every parked manifest."""
        metas = self.state.read_metas(self.state.parked_files())
        return {filename: meta or {"file": filename, "component": manifests.file_stem(filename)}
                for filename, meta in metas.items()}

    def view_reads(self) -> list:
        """The reads every view of this node starts with (state dir checks, journal, manifests
        dir, parked manifests and their metadata), as ``Host.prefetched`` wants them: over SSH
        they then cost one round trip instead of one each."""
        return self.state.view_reads() + [
            ("info", {}), ("lstat", {"path": self.manifests_dir}),
            ("scan_dir", {"path": self.manifests_dir, "limit": manifests.MAX_MANIFEST_BYTES})]

    def resolve(self, wanted: str, scan: DirScan, parked: dict) -> tuple:
        """(present manifests, parked file names) that ``wanted`` names."""
        manifests.validate_component_name(wanted)
        present = scan.find(wanted)
        target = manifests.ALIASES.get(wanted, wanted)
        parked_hits = [f for f, meta in parked.items()
                       if target in (meta.get("component"), manifests.file_stem(f))
                       or wanted in (meta.get("component"), manifests.file_stem(f))]
        return present, parked_hits

    def not_found(self, wanted: str) -> CpctlError:
        """The error for a component neither in the manifests dir nor parked (exit 3)."""
        return CpctlError("no static pod %r in %s and none parked" % (wanted, self.manifests_dir),
                          ExitCode.NOT_FOUND)

    def target_for(self, pod: dict, filename: str) -> PodTarget:
        meta = pod.get("metadata", {})
        return PodTarget(meta["name"], meta.get("namespace") or "default", self.node_name, pod, filename)

    # --- stop -------------------------------------------------------------------------------
    def stop(self, wanted: str, reason: Optional[str] = None, until: Optional[float] = None,
             wait: bool = True, timeout: float = 120.0) -> Outcome:
        scan, parked = self.scan(), self.parked()
        present, parked_hits = self.resolve(wanted, scan, parked)
        if not present:
            if parked_hits:
                meta = parked[parked_hits[0]]
                return Outcome(meta.get("component", wanted), "stop", False,
                               "already stopped (parked since %s by %s)" % (meta.get("parked_at", "?"),
                                                                           meta.get("parked_by", "?")))
            raise self.not_found(wanted)
        manifest = self._single(wanted, present)
        if manifest.file in parked:
            raise CpctlError("%s is in %s and also parked since %s: compare the two and remove one by hand"
                             % (manifest.file, self.manifests_dir, parked[manifest.file].get("parked_at", "?")),
                             ExitCode.REFUSED)
        assert manifest.pod is not None and manifest.data is not None
        target = self.target_for(manifest.pod, manifest.file)
        before = self.waiter.before(target) if wait else None
        meta = {"file": manifest.file, "component": manifest.pod_name, "namespace": manifest.namespace,
                "checksum": manifest.checksum, "mode": manifest.mode, "uid": manifest.uid, "gid": manifest.gid,
                "parked_at": iso(), "parked_by": user_label(self.host), "host": self.host.info()["hostname"],
                "reason": reason, "until": iso(until) if until else None,
                "manifests_dir": self.manifests_dir, "node": self.node_name}
        self._apply("stop", manifest.pod_name or wanted, manifest.file, manifest.path,
                    self.state.parked_path(manifest.file), manifest.checksum or "", meta, reason)
        result = self._wait(self.waiter.wait_stopped, target, before, wait, timeout)
        return Outcome(target.component, "stop", True, "stopped (manifest parked)", file=manifest.file,
                       checksum=manifest.checksum, until=meta["until"], wait=result)

    def _single(self, wanted: str, present: list) -> Manifest:
        valid = [m for m in present if m.valid]
        if len(present) > 1:
            raise CpctlError("%r matches several files in %s (%s): the kubelet runs only one of them; "
                             "remove the stray copy first" % (wanted, self.manifests_dir,
                                                               ", ".join(m.file for m in present)),
                             ExitCode.REFUSED)
        if not valid:
            bad = present[0]
            raise CpctlError("%s: %s; the kubelet does not run it, so there is nothing to stop"
                             % (bad.path, bad.error), ExitCode.REFUSED)
        return valid[0]

    # --- start ------------------------------------------------------------------------------
    def start(self, wanted: str, wait: bool = True, timeout: float = 120.0, reason: Optional[str] = None) -> Outcome:
        scan, parked = self.scan(), self.parked()
        present, parked_hits = self.resolve(wanted, scan, parked)
        if present and not parked_hits:
            manifest = present[0]
            return Outcome(manifest.pod_name or wanted, "start", False, "already running", file=manifest.file)
        # Present *and* parked (e.g. a kube-scheduler.yaml.bak appeared while parked): the
        # restore checks below refuse it when the kubelet would then see the pod twice.
        if not parked_hits:
            raise self.not_found(wanted)
        if len(parked_hits) > 1:
            raise CpctlError("%r matches several parked manifests (%s)" % (wanted, ", ".join(parked_hits)),
                             ExitCode.REFUSED)
        filename = parked_hits[0]
        pod, data = self.check_restorable(filename, scan)
        target = self.target_for(pod, filename)
        before = self.waiter.before(target) if wait else None
        self._apply("start", target.component, filename, self.state.parked_path(filename),
                    self.manifests_dir + "/" + filename, manifests.checksum(data), parked[filename], reason)
        result = self._wait(self.waiter.wait_started, target, before, wait, timeout)
        return Outcome(target.component, "start", True, "started (manifest restored)", file=filename,
                       checksum=manifests.checksum(data), wait=result)

    def check_restorable(self, filename: str, scan: DirScan) -> tuple:
        """Refuse a restore that would run something broken or a second copy of a pod."""
        path = self.state.parked_path(filename)
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

    # --- the protocol -------------------------------------------------------------------------
    def _apply(self, action: str, component: str, filename: str, src: str, dst: str, digest: str,
               meta: dict, reason: Optional[str] = None) -> None:
        op_id = secrets.token_hex(8)
        entry = {"op": op_id, "action": action, "component": component, "file": filename, "src": src,
                 "dst": dst, "checksum": digest, "meta": meta, "started": iso(), "pid": self.host.info()["pid"]}
        self.state.write_journal(entry)
        if action == "stop":
            self.state.write_meta(filename, meta)
        try:
            self.host.move(src, dst)
        except OSError as exc:
            self.recover()
            raise CpctlError("cannot move %s to %s: %s (nothing changed)" % (src, dst, exc.strerror or exc),
                             ExitCode.ENVIRONMENT) from None
        if action == "start":
            self.state.remove_meta(filename)
        self._record(action, component, filename, digest, op_id, reason=reason,
                     until=meta.get("until") if action == "stop" else None)
        self._note_drift(action, filename, digest)
        self.state.clear_journal()

    def _note_drift(self, action: str, filename: str, digest: str) -> None:
        """Keep the drift baseline current (imported here: only changes pay for difflib)."""
        from cpctl.ops import drift
        drift.note_change(self, action, filename, digest)

    def _wait(self, step: Callable, target: PodTarget, before: Any, wait: bool, timeout: float) -> WaitResult:
        if not wait:
            return WaitResult(False, "not waited (--no-wait)")
        return step(target, before, timeout)

    # --- views ------------------------------------------------------------------------------
    def status(self, wanted: Optional[list] = None) -> dict:
        """Per component: file, running/parked/invalid, parking details, checksum, pod state."""
        scan, parked = self.scan(), self.parked()
        rows = []
        for m in scan.manifests:
            rows.append(self._present_row(m))
        for filename, meta in parked.items():
            rows.append(self._parked_row(filename, meta))
        if wanted:
            rows = self._filter_rows(rows, wanted, scan, parked)
        warnings = self._warnings(scan)
        for row in rows:
            if row["state"] == "running" and row.get("pod"):
                target = PodTarget(row["component"], row["namespace"], self.node_name, None, row["file"])
                row["pod_state"] = self.waiter.describe(target)
        return {"node": self.node_name, "manifests_dir": self.manifests_dir, "state_dir": self.state.path,
                "components": rows, "warnings": warnings, "recovered": list(self.recovered)}

    def _present_row(self, m: Manifest) -> dict:
        if m.valid:
            return {"component": m.pod_name, "namespace": m.namespace, "file": m.file, "state": "running",
                    "checksum": m.checksum, "pod": True}
        return {"component": manifests.file_stem(m.file), "file": m.file, "state": "invalid", "error": m.error,
                "checksum": m.checksum}

    def _parked_row(self, filename: str, meta: dict) -> dict:
        row = {"component": meta.get("component") or manifests.file_stem(filename),
               "namespace": meta.get("namespace"), "file": filename, "state": "parked",
               "since": meta.get("parked_at"), "by": meta.get("parked_by"), "reason": meta.get("reason"),
               "until": meta.get("until"), "checksum": meta.get("checksum")}
        if row["until"]:
            row["overdue"] = parse_iso(row["until"]) < parse_iso(iso())
        return row

    def _filter_rows(self, rows: list, wanted: list, scan: DirScan, parked: dict) -> list:
        keep = []
        for name in wanted:
            present, parked_hits = self.resolve(name, scan, parked)
            files = {m.file for m in present} | set(parked_hits)
            if not files:
                raise self.not_found(name)
            keep.extend(r for r in rows if r["file"] in files and r not in keep)
        return keep

    def _warnings(self, scan: DirScan) -> list:
        warnings = []
        for (namespace, name), files in scan.duplicates().items():
            warnings.append("pod %s/%s is defined by several files (%s): the kubelet runs only one"
                            % (namespace, name, ", ".join(files)))
        for m in scan.manifests:
            if m.kind == "symlink":
                warnings.append("%s is a symlink: the kubelet follows it, cpctl will not move it" % m.file)
            elif not m.valid:
                warnings.append("%s is not a valid Pod manifest (%s): the kubelet skips it" % (m.file, m.error))
        return warnings

    def history(self, component: Optional[str] = None, limit: int = 50) -> list:
        records = self.state.read_history()
        if component:
            target = manifests.ALIASES.get(component, component)
            records = [r for r in records if target in (r.get("component"), manifests.file_stem(r.get("file", "")))
                       or component == r.get("component")]
        return records[-limit:] if limit else records


class _Session:
    """Context manager: state dir checked, node locked, interrupted work finished."""

    def __init__(self, node: Node, what: str) -> None:
        self.node = node
        self.what = what
        self._lock: Any = None

    def __enter__(self) -> Node:
        self.node.state.ensure(create=True)
        self._lock = self.node.state.locked(self.node.lock_timeout, self.what)
        self._lock.__enter__()
        try:
            for message in self.node.recover():
                self.node.log(message)
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        return self.node

    def __exit__(self, *exc: Any) -> None:
        self._lock.__exit__(*exc)
