"""The etcd identity gate (issue 45 item 5) in the lab on the REAL etcd: an etcd that comes back as
another member is never a clean verdict.

An operator's mistakes, each with a data dir that holds a member - so the check before the change
(``core.etcddata``: missing or empty dir) lets it through and only the identity after it can tell:

* ``edit --parked`` points the data dir at another cluster's member, then ``start etcd``: etcd
  starts, Ready and healthy, as that other member; cpctl parks it again (exit 11) and names the
  cluster IDs;
* the data dir swapped in place for another cluster's member (``stop``, the files moved, ``start``):
  the same;
* ``edit`` of the running manifest to that dir: the edit is rolled back (exit 11), the member that
  comes back is the one before;
* ``edit --parked`` to an older copy of this very member's data dir: the same member and cluster
  IDs (etcd's log says so), only the revision, lower than the one the stop recorded, tells.

What happened is read from etcd itself, not from cpctl's words: each run's own log (``"cluster-id"``
and ``"local-member-id"`` of its "restarting local member" line) and ``etcdctl member list``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Set, Tuple

import pytest

from cpctl.ops.etcdidentity import RECORD, MemberIdentity
from tests.labfixture import kubectl, run_cpctl

pytestmark = [pytest.mark.real_etcd, pytest.mark.timeout(900)]

TO_OTHER = "sed -i -e s#/var/lib/etcd$#/var/lib/etcd-other#"
BACK = "sed -i -e s#/var/lib/etcd-other$#/var/lib/etcd#"
TO_OLD, BACK_FROM_OLD = TO_OTHER.replace("other", "old"), BACK.replace("other", "old")


def _etcdctl(lab: Any, *args: str) -> Any:
    proc = run_cpctl(lab, "lab", "etcdctl", "--dir", str(lab.dir), "--master", "1", *args, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def _who(lab: Any) -> Tuple[str, str, List[str]]:
    """(member ID, cluster ID, the members' names) as ``etcdctl member list`` on master 1 gives them."""
    listed = _etcdctl(lab, "member", "list", "-w", "json")
    return (str(listed["header"]["member_id"]), str(listed["header"]["cluster_id"]),
            sorted(str(m.get("name", "")) for m in listed["members"]))


def _started_as(lab: Any) -> Dict[Path, Set[Tuple[str, str]]]:
    """Each etcd run's log -> the (cluster ID, member ID) it says it started as, in decimal (etcd logs
    them in hex): its "restarting local member" / "starting local member" lines."""
    out: Dict[Path, Set[Tuple[str, str]]] = {}
    for path in (lab.dir / "containers").glob("*/etcd.log"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("msg") in ("restarting local member", "starting local member"):
                ids = (str(int(entry["cluster-id"], 16)), str(int(entry["local-member-id"], 16)))
                out.setdefault(path, set()).add(ids)
    return out


def _new_runs(lab: Any, seen: Dict[Path, Set[Tuple[str, str]]]) -> Set[Tuple[str, str]]:
    """The (cluster ID, member ID) of the etcd runs whose logs came after ``seen``."""
    return {ids for path, said in _started_as(lab).items() if path not in seen for ids in said}


def _other_cluster(factory: Callable[..., Any]) -> Tuple[Path, MemberIdentity]:
    """A stopped member of another etcd cluster (its data dir, its identity): what an operator might
    copy from another machine or an old backup."""
    other = factory(members=1)
    assert other.put(b"/other/key", b"v")[0] == 200
    header = other.gateway("m1", "/v3/maintenance/status", {})[1]["header"]
    identity = MemberIdentity.from_dict(header)
    assert identity is not None
    other.stop("m1")
    return other.members["m1"].data_dir, identity


def _rolled_back(proc: Any, was: MemberIdentity, other: MemberIdentity) -> None:
    """Exit 11, and the error (stderr's last line; the lines before it are progress) names both clusters."""
    assert proc.returncode == 11, proc.stdout + proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("cpctl: ") and "Traceback" not in proc.stderr, proc.stderr
    assert "it is a member of another cluster (cluster ID %s, was %s)" % (other.cluster_id, was.cluster_id) in error


def test_an_etcd_that_comes_back_as_another_member_is_rolled_back(lab: Any,
                                                                  real_etcd_factory: Callable[..., Any]) -> None:
    assert lab.info["etcd"]["kind"] == "real"
    kubectl(lab, "-n", "default", "create", "configmap", "mine", "--from-literal=k=v")
    member, cluster, names = _who(lab)
    other_dir, other = _other_cluster(real_etcd_factory)
    assert other.cluster_id != cluster and other.member_id != member
    root = lab.root_dir(1)
    shutil.copytree(other_dir, root / "var/lib/etcd-other")
    manifest = lab.manifests_dir(1) / "etcd.yaml"
    parked = lab.state_dir(1) / "parked" / "etcd.yaml"

    # 1. edit --parked to another cluster's member, then start: parked again, exit 11
    assert run_cpctl(lab, "stop", "apiserver", "etcd").returncode == 0
    recorded = MemberIdentity.from_dict(json.loads((lab.state_dir(1) / RECORD).read_text()))
    assert recorded is not None and (recorded.member_id, recorded.cluster_id) == (member, cluster)
    assert run_cpctl(lab, "edit", "etcd", "--parked", "--yes", EDITOR=TO_OTHER).returncode == 0
    seen = _started_as(lab)
    proc = run_cpctl(lab, "start", "etcd")
    _rolled_back(proc, recorded, other)
    assert "start of etcd ROLLED BACK (parked again)" in proc.stderr and "--new-member" in proc.stderr
    assert parked.is_file() and not manifest.exists()
    assert _new_runs(lab, seen) == {(other.cluster_id, other.member_id)}      # etcd's own word: it ran as that one
    assert MemberIdentity.from_dict(json.loads((lab.state_dir(1) / RECORD).read_text())) == recorded

    # put right: the member comes back as itself, with its objects
    assert run_cpctl(lab, "edit", "etcd", "--parked", "--yes", EDITOR=BACK).returncode == 0
    seen = _started_as(lab)
    proc = run_cpctl(lab, "start", "etcd", "apiserver")
    assert proc.returncode == 0 and "same member %s of cluster %s" % (member, cluster) in proc.stdout, \
        proc.stdout + proc.stderr
    assert _new_runs(lab, seen) == {(cluster, member)} and _who(lab) == (member, cluster, names)
    assert kubectl(lab, "-n", "default", "get", "configmap", "mine", "-o", "name").stdout.strip()

    # 2. the data dir swapped in place for the other member's: the same
    assert run_cpctl(lab, "stop", "apiserver", "etcd").returncode == 0
    os.rename(root / "var/lib/etcd", root / "var/lib/etcd-mine")
    shutil.copytree(root / "var/lib/etcd-other", root / "var/lib/etcd")
    seen = _started_as(lab)
    proc = run_cpctl(lab, "start", "etcd")
    _rolled_back(proc, recorded, other)
    assert parked.is_file() and not manifest.exists()
    assert _new_runs(lab, seen) == {(other.cluster_id, other.member_id)}
    shutil.rmtree(root / "var/lib/etcd")
    os.rename(root / "var/lib/etcd-mine", root / "var/lib/etcd")
    assert run_cpctl(lab, "start", "etcd", "apiserver").returncode == 0

    # 3. an edit of the running manifest to that dir: rolled back to the previous version
    before = manifest.read_bytes()
    seen = _started_as(lab)
    proc = run_cpctl(lab, "edit", "etcd", "--yes", EDITOR=TO_OTHER)
    _rolled_back(proc, recorded, other)
    assert "ROLLED BACK to the previous version" in proc.stderr and "same member %s" % member in proc.stderr
    assert manifest.read_bytes() == before
    assert _new_runs(lab, seen) == {(other.cluster_id, other.member_id), (cluster, member)}
    assert _who(lab) == (member, cluster, names)
    assert kubectl(lab, "-n", "default", "get", "configmap", "mine", "-o", "name").stdout.strip()


def test_an_older_copy_of_the_same_member_is_rolled_back(lab: Any) -> None:
    """The subtle one: a copy of this very member's data dir, taken earlier (an old backup). etcd starts
    as the same member of the same cluster (its log says so); only its revision, lower than the one
    the stop recorded, tells that the API's later objects are gone."""
    assert lab.info["etcd"]["kind"] == "real"
    root = lab.root_dir(1)
    member, cluster, names = _who(lab)
    assert run_cpctl(lab, "stop", "apiserver", "etcd").returncode == 0
    shutil.copytree(root / "var/lib/etcd", root / "var/lib/etcd-old")            # the old backup, consistent
    assert run_cpctl(lab, "start", "etcd", "apiserver").returncode == 0
    for i in range(3):
        kubectl(lab, "-n", "default", "create", "configmap", "later-%d" % i, "--from-literal=k=v")
    assert run_cpctl(lab, "stop", "apiserver", "etcd").returncode == 0
    recorded = MemberIdentity.from_dict(json.loads((lab.state_dir(1) / RECORD).read_text()))
    assert recorded is not None
    assert run_cpctl(lab, "edit", "etcd", "--parked", "--yes", EDITOR=TO_OLD).returncode == 0
    seen = _started_as(lab)
    proc = run_cpctl(lab, "start", "etcd")
    assert proc.returncode == 11, proc.stdout + proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert "start of etcd ROLLED BACK (parked again)" in error and "its store went back from revision %d to " \
        % recorded.revision in error, proc.stderr
    assert _new_runs(lab, seen) == {(cluster, member)}              # etcd's word: the same member, as measured
    assert (lab.state_dir(1) / "parked" / "etcd.yaml").is_file()

    assert run_cpctl(lab, "edit", "etcd", "--parked", "--yes", EDITOR=BACK_FROM_OLD).returncode == 0
    assert run_cpctl(lab, "start", "etcd", "apiserver").returncode == 0
    assert _who(lab) == (member, cluster, names)
    got = kubectl(lab, "-n", "default", "get", "configmap", "later-2", "-o", "name").stdout.strip()
    assert got == "configmap/later-2"
