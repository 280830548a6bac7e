"""Writers that are not cpctl: ``kubeadm upgrade``, an editor, configuration management.

cpctl's history says which bytes cpctl last wrote to each manifest (the ``checksum`` of its newest
content-changing record: ``WRITES``). A ``stop``/``start`` (``restart``) writes nothing: a start puts
back the bytes that were parked, and those are cpctl's only when they are what cpctl last wrote; when
another writer had replaced them before the stop (a kubeadm upgrade), or the parked copy was edited by
hand, they are still that writer's. When the file in place holds other bytes than cpctl's, something
else replaced it:

* when ``/etc/kubernetes/tmp/kubeadm-backup-manifests-*/<file>`` (next to the manifests dir) holds
  the bytes cpctl wrote, it was ``kubeadm upgrade`` (which moves the old manifest there), and the
  image tags of the two versions give the version change;
* otherwise it was "replaced outside cpctl", by whom cpctl cannot know.

While ``kubeadm upgrade`` runs, its new manifests wait in ``/etc/kubernetes/tmp/kubeadm-upgraded-
manifests*``; kubeadm removes that dir when it is done. Such a dir with files younger than
``IN_FLIGHT_SECONDS`` means an upgrade is in flight: a change now would race it (kubeadm moves its
own version in over cpctl's, or moves cpctl's to its backup dir).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

import yaml

from cpctl import catalogue
from cpctl.core import manifests
from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host

BACKUP_PREFIX = "kubeadm-backup-manifests"
UPGRADED_PREFIX = "kubeadm-upgraded-manifests"
#: kubeadm waits up to 5 minutes for each of the four components.
IN_FLIGHT_SECONDS = 20 * 60
#: An empty staging dir older than this is a failed upgrade's (kubeadm fills a new one at once).
EMPTY_SETTLED = 2.0
#: History actions by which cpctl wrote the bytes the record's checksum names. Not ``start``: it puts
#: back the bytes that were parked, whoever wrote them (counted, a restart after a kubeadm upgrade made
#: the upgrade's bytes cpctl's and hid the upgrade from check, status and revisions: issue 48).
WRITES = ("apply", "edit", "flags", "rollback", "scheduler-add")
#: How ``status`` labels a manifest another writer replaced (``last_change.action``), as ``revisions`` does.
OUTSIDE_ACTION = "outside"
_FLAG_LINE = re.compile(r"^(?P<sign>[+-])\s*-\s+['\"]?--(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:=(?P<value>[^'\"]*))?")


@dataclass
class Outside:
    """The manifest in place is not what cpctl last wrote."""

    file: str
    written: str                      # checksum of the bytes cpctl last wrote
    current: str                      # checksum of the bytes there now
    note: str                         # "kubeadm upgrade v1.30.4 -> v1.31.12" or "replaced outside cpctl"
    previous: Optional[bytes] = None  # cpctl's bytes, when kubeadm's backup dir still holds them
    backup: str = ""                  # where

    def to_dict(self) -> Dict[str, object]:
        return {"file": self.file, "written_by_cpctl": self.written, "current": self.current, "note": self.note,
                "backup": self.backup or None}


def tmp_dir(manifests_dir: str) -> str:
    """kubeadm's ``/etc/kubernetes/tmp``: ``tmp`` next to the manifests dir."""
    return manifests.kubeadm_tmp_dir(manifests_dir)


def view_reads(node: Node) -> List[Tuple[str, Dict[str, object]]]:
    """The reads ``detect`` and ``in_flight`` start with (kubeadm's tmp dir, cpctl's history and
    its older segments), for ``Host.prefetched``: a check over SSH stays one round trip."""
    return [("listdir", {"path": tmp_dir(node.manifests_dir)}), node.state.read_call(node.state.history_path),
            ("listdir", {"path": node.state.path})]


def _subdirs(host: Host, manifests_dir: str, prefix: str) -> List[str]:
    root = tmp_dir(manifests_dir)
    try:
        names = host.listdir(root)
    except OSError:
        return []
    return sorted(os.path.join(root, n) for n in names if n.startswith(prefix))


def history(node: Node) -> List[Dict[str, object]]:
    """cpctl's history on this node, oldest first ([] before cpctl ever changed anything here)."""
    if not node.state.ensure(create=False):
        return []
    records: List[Dict[str, object]] = node.state.read_history()
    return records


def last_written(node: Node, filename: str, records: Optional[List[Dict[str, object]]] = None
                 ) -> Optional[Dict[str, object]]:
    """cpctl's newest history record that wrote ``filename``'s bytes (its ``checksum``; None: cpctl never
    wrote them). A ``start`` since changed nothing cpctl wrote: it put back what was parked."""
    def wanted(r: Dict[str, object]) -> bool:
        return r.get("file") == filename and r.get("action") in WRITES and isinstance(r.get("checksum"), str)
    if records is None:           # the newest match only: older history segments are read only as far as needed
        if not node.state.ensure(create=False):
            return None
        records = node.state.read_history(limit=1, keep=wanted)
    found = [r for r in records if wanted(r)]
    return found[-1] if found else None


def detect(node: Node, filename: str, current: Optional[str], records: Optional[List[Dict[str, object]]] = None
           ) -> Optional[Outside]:
    """An ``Outside`` when ``filename`` (checksum ``current``) is not what cpctl last wrote to it."""
    record = last_written(node, filename, records)
    if record is None or current is None or record["checksum"] == current:
        return None
    written = str(record["checksum"])
    for directory in reversed(_subdirs(node.host, node.manifests_dir, BACKUP_PREFIX)):
        path = os.path.join(directory, filename)
        try:
            data = node.host.read_file(path, manifests.MAX_MANIFEST_BYTES)
        except OSError:
            continue
        if manifests.checksum(data) == written:
            return Outside(filename, written, current, _upgrade_note(node, filename, data), data, path)
    return Outside(filename, written, current, "replaced outside cpctl")


def _upgrade_note(node: Node, filename: str, old: bytes) -> str:
    """``kubeadm upgrade OLD -> NEW`` from the image tags of the backed-up and the current manifest."""
    try:
        new = node.host.read_file(os.path.join(node.manifests_dir, filename), manifests.MAX_MANIFEST_BYTES)
    except OSError:
        return "kubeadm upgrade"
    before, after = _image_tag(old), _image_tag(new)
    if before and after and before != after:
        return "kubeadm upgrade %s -> %s" % (before, after)
    return "kubeadm upgrade"


def _image_tag(data: bytes) -> str:
    try:
        pod = yaml.safe_load(data)
        image = str(pod["spec"]["containers"][0]["image"])
    except (yaml.YAMLError, KeyError, IndexError, TypeError):
        return ""
    return image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""


def in_flight(node: Node, now: Optional[float] = None) -> Optional[str]:
    """The kubeadm staging dir of an upgrade in flight (files younger than IN_FLIGHT_SECONDS), or None."""
    now = time.time() if now is None else now
    failed = failed_upgrade(node)
    for directory in reversed(_subdirs(node.host, node.manifests_dir, UPGRADED_PREFIX)):
        if failed is not None and directory == failed.staging:
            continue                      # the leftovers of a failed upgrade: over, not in flight
        try:
            names = node.host.listdir(directory)
        except OSError:
            continue
        for name in names:
            info = node.host.lstat(os.path.join(directory, name))
            if info and now - float(info.get("mtime") or 0) < IN_FLIGHT_SECONDS:
                return directory
    return None


@dataclass
class FailedUpgrade:
    """The leftovers of a ``kubeadm upgrade`` that failed: kubeadm moved every manifest it had moved
    back from its backup dir (rollbackOldManifests) and kept its tmp dirs."""

    staging: str
    backup: str
    rolled_back: List[str]

    def message(self) -> str:
        back = ("%s back from %s" % (", ".join(self.rolled_back), self.backup) if self.rolled_back else
                "its staging dir is empty and nothing waits in %s" % self.backup)
        return ("a kubeadm upgrade failed and was rolled back (%s; its leftovers stay in %s): nothing is in "
                "flight, cpctl changes are allowed" % (back, os.path.dirname(self.staging)))


def failed_upgrade(node: Node) -> Optional[FailedUpgrade]:
    """A kubeadm staging dir left by a FAILED upgrade (None when there is none, or it may be in flight).

    kubeadm (phases/upgrade/staticpods.go) stages every component's manifest, then per component
    moves the current one to its backup dir and the staged one in; on a failure it moves every
    backed-up manifest back and keeps both dirs. So a component whose staged manifest is gone and
    whose backup is gone too was moved in and rolled back: that upgrade is over. While it is in
    flight, a moved component's old manifest is in the backup dir."""
    staged_dirs = _subdirs(node.host, node.manifests_dir, UPGRADED_PREFIX)
    backups = _subdirs(node.host, node.manifests_dir, BACKUP_PREFIX)
    if not staged_dirs or not backups:
        return None
    staging, backup = staged_dirs[-1], backups[-1]
    try:
        staged, backed = set(node.host.listdir(staging)), set(node.host.listdir(backup))
    except OSError:
        return None
    if not staged:
        # every manifest moved in, then all moved back (or none staged: a patch that did not apply);
        # a staging dir kubeadm has only just made is younger than EMPTY_SETTLED seconds
        info = node.host.lstat(staging)
        settled = info is not None and time.time() - float(info.get("mtime") or 0) > EMPTY_SETTLED
        return FailedUpgrade(staging, backup, []) if settled and not backed else None
    back = [c.name for c in catalogue.COMPONENTS if c.name + ".yaml" not in staged | backed]
    return FailedUpgrade(staging, backup, back) if back else None


def refuse_in_flight(node: Node, what: str) -> None:
    """REFUSED (exit 4) while a kubeadm upgrade is in flight on this node (``--force`` skips this)."""
    staging = in_flight(node)
    if staging:
        raise CpctlError("a kubeadm upgrade is in flight on %s (its new manifests in %s are fresh): %s now would "
                         "race it; nothing changed (wait until kubeadm is done, or --force)"
                         % (node.node_name, staging, what), ExitCode.REFUSED)


def flags_set_by_cpctl(node: Node, filename: str, records: Optional[List[Dict[str, object]]] = None) -> Dict[str, str]:
    """The ``--name=value`` items cpctl's changes of ``filename`` added or changed, and that no later
    cpctl change removed (from the diffs its history records keep)."""
    out: Dict[str, str] = {}
    for record in (history(node) if records is None else records):
        if record.get("file") != filename or record.get("action") not in ("apply", "edit", "flags", "rollback"):
            continue
        added: Dict[str, str] = {}
        removed = set()
        for line in str(record.get("diff") or "").splitlines():
            match = _FLAG_LINE.match(line)
            if match is None or line.startswith(("+++", "---")):
                continue
            if match.group("sign") == "+":
                added[match.group("name")] = match.group("value") or ""
            else:
                removed.add(match.group("name"))
        for name in removed - set(added):
            out.pop(name, None)
        out.update(added)
    return out


def lost_flags(node: Node, filename: str, container: Mapping[str, object], records: List[Dict[str, object]]
               ) -> List[str]:
    """Flags cpctl set in ``filename`` that the container in place no longer has (with that value)."""
    from cpctl.core.flags import flags_of
    now = {f.name: f.value or "" for f in flags_of(container)}
    lost = []
    for name, value in sorted(flags_set_by_cpctl(node, filename, records).items()):
        if name not in now or (value != now[name] and "<redacted>" not in value):
            lost.append("--%s=%s" % (name, value) if value else "--%s" % name)
    return lost
