"""Issue 46: etcd care against a real 3-member etcd 3.5 (kubeadm's flags and PKI, tests.realetcd),
each member seen as a master whose etcd.yaml names it (tests.etcdnodes), the real cpctl as a process.

cpctl's answers are put next to etcdctl's (status, member list, alarms) and etcd's own log (when
each member defragmented), never next to cpctl's own idea of them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import jsonschema
import pytest

from tests import etcdnodes as en
from tests.realetcd import RealEtcd

pytestmark = pytest.mark.timeout(900)
SCHEMAS = Path(__file__).resolve().parents[2] / "cpctl" / "schemas"


def valid(name: str, doc: Any) -> Any:
    with open(SCHEMAS / ("%s.json" % name)) as handle:
        jsonschema.validate(doc, json.load(handle))
    return doc


def etcdctl_status(cluster: RealEtcd) -> Dict[int, Dict[str, Any]]:
    """``etcdctl endpoint status --cluster -w json`` by member ID."""
    result = cluster.ctl("endpoint", "status", "--cluster")
    assert result.rc == 0, result.stderr
    return {int(entry["Status"]["header"]["member_id"]): entry for entry in result.doc}


def test_status_matches_etcdctl_field_by_field(real_etcd_factory: Any) -> None:
    cluster = real_etcd_factory()
    cluster.add_member("m4", learner=True)                # kubeadm joins a member as a learner first
    seen: List[Any] = []

    def quiet_while_cpctl_asked() -> bool:
        """etcdctl sees the same before and after cpctl asked (the new learner catches up and its
        backend commits for a moment after it started: the sizes settle), but for the one raft entry
        cpctl's alarm list made after it read the statuses (etcd applies an alarm GET through raft,
        as it does etcdctl's)."""
        before = (etcdctl_status(cluster), cluster.member_list())
        seen[:] = [valid("etcd-status", en.cpctl_json(cluster, "m1", "etcd", "status")), before]
        after = (etcdctl_status(cluster), cluster.member_list())
        return before == (_less_one_entry(after[0]), after[1])
    cluster.wait_for(quiet_while_cpctl_asked, "a quiet cluster while cpctl asks")
    mine, (status, members) = seen
    assert len(mine["members"]) == len(members) == 4
    cluster_ids = {entry["Status"]["header"]["cluster_id"] for entry in status.values()}
    assert [int(mine["cluster_id"], 16)] == list(cluster_ids)
    rows = {int(row["id"], 16): row for row in mine["members"]}
    for listed in members:
        row, theirs = rows[listed["ID"]], status[listed["ID"]]["Status"]
        assert row["name"] == listed["name"]
        assert row["peer_urls"] == listed["peerURLs"] and row["client_urls"] == listed["clientURLs"]
        assert row["learner"] is listed["isLearner"] is bool(theirs.get("isLearner"))
        assert row["leader"] is (theirs["leader"] == listed["ID"])
        assert row["version"] == theirs["version"]
        assert row["db_size"] == theirs["dbSize"] and row["db_size_in_use"] == theirs["dbSizeInUse"]
        assert row["raft_term"] == theirs["raftTerm"] and row["raft_index"] == theirs["raftIndex"]
        assert row["raft_applied_index"] == theirs["raftAppliedIndex"]
        assert row["revision"] == theirs["header"]["revision"]
        assert row["healthy"] is True and row["alarms"] == []
    leader_ids = {entry["Status"]["leader"] for entry in status.values()}
    assert len(leader_ids) == 1 and mine["leader"] == rows[leader_ids.pop()]["name"]
    assert (mine["voters"], mine["voters_healthy"], mine["quorum"]) == (3, 3, 2)
    assert mine["alarms"] == [] == cluster.alarms()


def _less_one_entry(status: Dict[int, Dict[str, Any]]) -> Dict[int, Dict[str, Any]]:
    out = json.loads(json.dumps(status))
    for entry in out.values():
        entry["Status"]["raftIndex"] -= 1
        entry["Status"]["raftAppliedIndex"] -= 1
    return {int(k): v for k, v in out.items()}


def test_status_with_a_member_down_names_it_and_still_answers(real_etcd: RealEtcd) -> None:
    real_etcd.stop("m3")
    mine = valid("etcd-status", en.cpctl_json(real_etcd, "m1", "etcd", "status"))
    row = next(r for r in mine["members"] if r["name"] == "m3")
    assert row["healthy"] is False and row["db_size"] is None and "refused" in row["why"]
    assert (mine["voters"], mine["voters_healthy"], mine["quorum"]) == (3, 2, 2)


def test_defrag_dry_run_prints_the_order_and_why_and_changes_nothing(real_etcd: RealEtcd) -> None:
    en.garbage(real_etcd, 4)
    sizes = {n: s["dbSize"] for n, s in en.statuses(real_etcd).items()}
    leader = _leader(real_etcd)
    plan = valid("etcd-defrag", en.cpctl_json(real_etcd, "m1", "etcd", "defrag", "--all", "--dry-run",
                                              "--min-free", "1MiB"))
    assert plan["dry_run"] is True and plan["changed"] is False
    order = [s["member"] for s in plan["steps"]]
    assert order[-1] == leader and sorted(order) == ["m1", "m2", "m3"]
    assert all(s["action"] == "defrag" for s in plan["steps"])
    assert "last, after leadership moved" in plan["steps"][-1]["why"]
    # the default thresholds (100 MiB free): every member skipped, and said so
    text = en.cpctl(real_etcd, "m1", "etcd", "defrag", "--all", "--dry-run").stdout
    assert text.count("skip") == 3 and "below --min-free 100.0 MB" in text, text
    assert {n: s["dbSize"] for n, s in en.statuses(real_etcd).items()} == sizes
    assert en.defrag_intervals(real_etcd) == {"m1": [], "m2": [], "m3": []}
    assert en.history(real_etcd, "m1") == []


def _leader(cluster: RealEtcd) -> str:
    found = en.statuses(cluster)
    leader_ids = {s["leader"] for s in found.values()}
    assert len(leader_ids) == 1, found
    leader_id = leader_ids.pop()
    return next(n for n in found if cluster.member_id(n) == leader_id)


def test_rolling_defrag_of_150_mb_followers_first_leader_last_writes_go_on(real_etcd: RealEtcd) -> None:
    live = os.urandom(256 << 10)
    for index in range(32):                          # 8 MiB that stay: "in use" is then data, not metadata
        assert real_etcd.put(b"/live/%04d" % index, live)[0] == 200
    en.garbage(real_etcd, 150)
    before = en.statuses(real_etcd)
    assert all(s["dbSize"] > 150 << 20 for s in before.values()), before
    leader = _leader(real_etcd)
    writer = en.Writer(real_etcd).start()
    started = time.monotonic()
    try:
        done = valid("etcd-defrag", en.cpctl_json(real_etcd, "m1", "etcd", "defrag", "--all"))
    finally:
        max_gap = writer.stop()
    elapsed = time.monotonic() - started
    print("defrag of 3 members with 150 MiB garbage each: %.1f s; writer: %d puts, longest gap %.2f s, "
          "%d put attempts timed out" % (elapsed, len(writer.done), max_gap, writer.failures))
    steps = done["steps"]
    assert [s["action"] for s in steps] == ["defrag"] * 3 and done["changed"] is True
    assert steps[-1]["member"] == leader and steps[-1]["moved_leader_to"] in {"m1", "m2", "m3"} - {leader}
    assert all(not s["moved_leader_to"] for s in steps[:-1])
    after = en.statuses(real_etcd)
    for name, status in after.items():             # each member's DB within 10 % of what it uses
        assert status["dbSize"] <= 1.1 * status["dbSizeInUse"], (name, status)
        assert next(s for s in steps if s["member"] == name)["db_size_after"] <= 1.1 * status["dbSizeInUse"]
    assert _leader(real_etcd) != leader              # it leads no more: leadership was moved, not lost
    # etcd's own log: one defragmentation per member, never two at once, the old leader's last
    spans = en.defrag_intervals(real_etcd)
    assert all(len(s) == 1 for s in spans.values()), spans
    ordered = sorted((s[0][0], s[0][1], name) for name, s in spans.items())
    assert [name for _, _, name in ordered] == [s["member"] for s in steps]
    for (_, end, _), (start, _, _) in zip(ordered, ordered[1:]):
        assert end <= start, spans
    assert max_gap < 2.0, "a writer through the cluster waited %.2f s" % max_gap
    records = en.history(real_etcd, "m1")
    assert [(r["action"], r["member"]) for r in records] == [
        ("etcd-defrag", steps[0]["member"]), ("etcd-defrag", steps[1]["member"]),
        ("etcd-move-leader", leader), ("etcd-defrag", leader)]


def test_defrag_refuses_with_exit_4_when_it_would_lose_quorum(real_etcd: RealEtcd) -> None:
    en.garbage(real_etcd, 2)
    real_etcd.stop("m3")
    proc = en.cpctl(real_etcd, "m1", "etcd", "defrag", "m1", "--min-free", "0", "--min-ratio", "0", rc=4)
    assert "would leave 1 of 3 voting members healthy, 2 needed for quorum" in proc.stderr, proc.stderr
    assert "m3 (connection refused)" in proc.stderr
    error = json.loads(en.cpctl(real_etcd, "m2", "-o", "json", "etcd", "defrag", "--all", "--min-free", "0",
                                "--min-ratio", "0", rc=4).stderr)
    valid("error", error)
    assert en.defrag_intervals(real_etcd) == {"m1": [], "m2": [], "m3": []}
    assert en.history(real_etcd, "m1") == [] and en.history(real_etcd, "m2") == []


def test_defrag_of_an_unknown_member_is_exit_3_and_no_member_is_exit_2(real_etcd: RealEtcd) -> None:
    proc = en.cpctl(real_etcd, "m1", "etcd", "defrag", "m9", rc=3)
    assert "no etcd member 'm9' (members: m1, m2, m3)" in proc.stderr
    en.cpctl(real_etcd, "m1", "etcd", "defrag", rc=2)


# --------------------------------------------------------------------------- signals


def _defrag_caught(cluster: RealEtcd, sig: int) -> Dict[str, Any]:
    """Start ``cpctl etcd defrag --all``; as soon as its intent names a member, freeze that member's
    etcd (SIGSTOP: its defragmentation cannot end now), send ``sig`` to cpctl, wait for cpctl to
    end, let etcd go on. The member, cpctl's exit code and stderr."""
    args = [sys.executable, "-m", "cpctl", *en.node_args(cluster, "m1"), "etcd", "defrag", "--all",
            "--min-free", "0", "--min-ratio", "0"]
    intent = cluster.members["m1"].root / "var/lib/cpctl/etcd-op.json"
    proc = subprocess.Popen(args, cwd=en.REPO, env=en.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)
    frozen = None
    try:
        deadline = time.monotonic() + en.RUN_TIMEOUT
        while frozen is None and proc.poll() is None and time.monotonic() < deadline:
            try:
                name = json.loads(intent.read_text())["member"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.001)
                continue
            member = cluster.members[name].proc
            assert member is not None
            os.kill(member.pid, signal.SIGSTOP)
            frozen = name
        assert frozen is not None, "cpctl ended without defragmenting: %s" % (proc.communicate(timeout=60),)
        os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for member in cluster.members.values():
            if member.proc is not None and member.proc.poll() is None:
                os.kill(member.proc.pid, signal.SIGCONT)
    return {"member": frozen, "rc": proc.returncode, "stdout": out, "stderr": err}


def _big(cluster: RealEtcd) -> None:
    """40 MiB of live data on every member: a defragmentation copies it, long enough for the poller."""
    value = os.urandom(1 << 20)
    for index in range(40):
        assert cluster.put(b"/big/%04d" % index, value)[0] == 200


def test_sigint_during_a_defrag_names_the_member_and_leaves_nothing_half_done(real_etcd: RealEtcd) -> None:
    _big(real_etcd)
    seen = _defrag_caught(real_etcd, signal.SIGINT)
    assert seen["rc"] == 130, seen
    lines = seen["stderr"].splitlines()
    assert lines[-1].startswith("cpctl: interrupted (SIGINT) while etcd member %s was being defragmented" %
                                seen["member"]), seen
    assert "etcd finishes it by itself" in lines[-1]
    root = real_etcd.members["m1"].root / "var/lib/cpctl"
    assert not (root / "etcd-op.json").exists()
    assert [r["action"] for r in en.history(real_etcd, "m1")][-1] == "etcd-defrag-interrupted"
    real_etcd.wait_healthy(seen["member"])           # etcd finished it once it could run again
    status = valid("etcd-status", en.cpctl_json(real_etcd, "m1", "etcd", "status"))
    assert status["voters_healthy"] == 3 and status["interrupted"] == []


def test_sigkill_during_a_defrag_is_named_by_the_next_run(real_etcd: RealEtcd) -> None:
    _big(real_etcd)
    seen = _defrag_caught(real_etcd, signal.SIGKILL)
    assert seen["rc"] == -signal.SIGKILL, seen
    intent = real_etcd.members["m1"].root / "var/lib/cpctl/etcd-op.json"
    assert json.loads(intent.read_text())["member"] == seen["member"]
    real_etcd.wait_healthy(seen["member"])
    status = valid("etcd-status", en.cpctl_json(real_etcd, "m1", "etcd", "status"))
    assert len(status["interrupted"]) == 1
    assert "while member %s was being changed (defragmented)" % seen["member"] in status["interrupted"][0]
    assert not intent.exists()
    assert [r["action"] for r in en.history(real_etcd, "m1")][-1] == "etcd-defrag-killed"
    assert status["voters_healthy"] == 3
    again = valid("etcd-status", en.cpctl_json(real_etcd, "m1", "etcd", "status"))
    assert again["interrupted"] == []                 # said once, recorded once


# --------------------------------------------------------------------------- leadership


def test_move_leader_to_a_named_member_and_refusals(real_etcd_factory: Any) -> None:
    cluster = real_etcd_factory()
    cluster.add_member("m4", learner=True)
    leader = _leader(cluster)
    other = sorted({"m1", "m2", "m3"} - {leader})[0]
    moved = valid("etcd-move-leader", en.cpctl_json(cluster, "m1", "etcd", "move-leader", "--to", other))
    assert (moved["from_member"], moved["to_member"], moved["changed"]) == (leader, other, True)
    assert _leader(cluster) == other
    proc = en.cpctl(cluster, "m1", "etcd", "move-leader", "--to", "m4", rc=4)
    assert "a learner cannot lead" in proc.stderr
    same = valid("etcd-move-leader", en.cpctl_json(cluster, "m1", "etcd", "move-leader", "--to", other))
    assert same["changed"] is False and "leads already" in same["message"]
    log = cluster.members[leader].log.read_text()
    assert "leadership transfer" in log.lower() or "transfer" in log.lower()
    actions = [r["action"] for r in en.history(cluster, "m1")]
    assert actions == ["etcd-move-leader"]


def _members(rows: List[Dict[str, Any]]) -> List[str]:
    return [r["name"] for r in rows]


# --------------------------------------------------------------------------- alarms and NOSPACE

QUOTA = 16 << 20


def _fill_history(cluster: RealEtcd, chunk: int = 256 << 10, limit: int = 400) -> None:
    """Overwrite one key until etcd answers "database space exceeded": the space is history, which a
    compaction frees (what the NOSPACE runbook is for)."""
    value = os.urandom(chunk)
    for _ in range(limit):
        status, doc = cluster.put(b"/history/key", value)
        if status != 200:
            assert "database space exceeded" in json.dumps(doc), doc
            cluster.wait_for(lambda: any(a["alarm"] == "NOSPACE" for a in cluster.alarms()), "the NOSPACE alarm")
            return
    raise AssertionError("never exceeded the quota")


def test_recover_space_from_a_real_nospace_ends_with_no_alarm_and_a_write(real_etcd_factory: Any) -> None:
    cluster = real_etcd_factory(quota_backend_bytes=QUOTA)
    _fill_history(cluster)
    theirs = cluster.alarms()
    listed = valid("etcd-alarm", en.cpctl_json(cluster, "m1", "etcd", "alarm", "list"))
    assert sorted((int(a["member_id"], 16), a["alarm"]) for a in listed["alarms"]) == \
        sorted((a["memberID"], a["alarm"]) for a in theirs)
    status = valid("etcd-status", en.cpctl_json(cluster, "m1", "etcd", "status"))
    assert status["voters_healthy"] == 3            # NOSPACE: every member still serves reads
    assert cluster.put(b"/blocked", b"x")[0] != 200
    done = valid("etcd-recover-space", en.cpctl_json(cluster, "m1", "etcd", "recover-space"))
    assert done["changed"] is True and done["compacted_to"] and done["write_revision"]
    assert [s["action"] for s in done["steps"]] == ["defrag"] * 3
    assert cluster.alarms() == []
    assert cluster.put(b"/after", b"x")[0] == 200
    assert all(s["dbSize"] < QUOTA // 2 for s in en.statuses(cluster).values())
    actions = [r["action"] for r in en.history(cluster, "m1")]
    assert actions[0] == "etcd-compact" and actions[-1] == "etcd-recover-space"
    assert actions.count("etcd-defrag") == 3 and "etcd-alarm-disarm" in actions
    again = valid("etcd-recover-space", en.cpctl_json(cluster, "m1", "etcd", "recover-space"))
    assert again["changed"] is False and "no NOSPACE alarm" in again["message"]


def test_recover_space_without_an_alarm_looks_at_the_size_against_the_quota(real_etcd_factory: Any) -> None:
    """No NOSPACE alarm is not "nothing to do" by itself: below the quota it is (said with the
    fullest member's size), but a database at its quota whose alarm was disarmed by hand
    (``etcdctl alarm disarm`` without compacting) is one write away from NOSPACE again:
    recover-space compacts, defragments and proves a write, with no alarm to disarm."""
    cluster = real_etcd_factory(quota_backend_bytes=QUOTA)
    quiet = valid("etcd-recover-space", en.cpctl_json(cluster, "m1", "etcd", "recover-space"))
    assert quiet["changed"] is False and quiet["steps"] == [] and quiet["quota"] == QUOTA
    assert quiet["message"].startswith("no NOSPACE alarm is active and every member's database is below 95 % of "
                                       "its quota (fullest: "), quiet
    assert quiet["message"].endswith("of 16.0 MB): nothing to recover"), quiet
    assert en.history(cluster, "m1") == []
    _fill_history(cluster)
    assert cluster.ctl("alarm", "disarm").rc == 0     # the alarm disarmed by hand, the space still used
    assert cluster.alarms() == []
    sizes = {n: s["dbSize"] for n, s in en.statuses(cluster).items()}
    full = sorted(n for n, size in sizes.items() if size >= 0.95 * QUOTA)
    assert full, sizes                               # the put refused: DB size + its cost >= the quota
    plan = valid("etcd-recover-space", en.cpctl_json(cluster, "m1", "etcd", "recover-space", "--dry-run"))
    assert plan["changed"] is False and [s["action"] for s in plan["steps"]] == ["defrag"] * 3
    assert plan["message"].startswith("no NOSPACE alarm is active, but %s " % full[0]), plan
    assert all(" %s " % name in plan["message"] for name in full) and "of 16.0 MB" in plan["message"]
    assert "no alarm to disarm" in plan["message"] and en.history(cluster, "m1") == []
    done = valid("etcd-recover-space", en.cpctl_json(cluster, "m1", "etcd", "recover-space"))
    assert done["changed"] is True and done["compacted_to"] and done["write_revision"]
    assert done["disarmed"] == [] and [s["action"] for s in done["steps"]] == ["defrag"] * 3
    assert "no NOSPACE alarm is active, but" in done["message"] and "0 alarm(s) disarmed" in done["message"]
    assert cluster.alarms() == [] and cluster.put(b"/after", b"x")[0] == 200
    assert all(s["dbSize"] < QUOTA // 2 for s in en.statuses(cluster).values())
    actions = [r["action"] for r in en.history(cluster, "m1")]
    assert actions[0] == "etcd-compact" and actions[-1] == "etcd-recover-space"
    assert actions.count("etcd-defrag") == 3 and "etcd-alarm-disarm" not in actions
    again = valid("etcd-recover-space", en.cpctl_json(cluster, "m1", "etcd", "recover-space"))
    assert again["changed"] is False and "nothing to recover" in again["message"]


def test_recover_space_refuses_when_the_live_data_fills_the_quota(real_etcd_factory: Any) -> None:
    cluster = real_etcd_factory(quota_backend_bytes=QUOTA)
    cluster.fill_until_nospace()                      # distinct keys: live data, nothing to compact away
    # m1's etcd.yaml was edited to a quota below the live data (applied at etcd's next restart): the
    # quota cpctl holds the space against is the manifest's, and there the space cannot come back
    en.EDITED[str(cluster.members["m1"].root)] = {"--quota-backend-bytes": str(8 << 20)}
    try:
        proc = en.cpctl(cluster, "m1", "etcd", "recover-space", "-o", "json", rc=4)
    finally:
        en.EDITED.clear()
    error = valid("error", json.loads(proc.stderr))["error"]
    assert "the space did not come back" in error["message"] and "quota-backend-bytes" in error["hint"]
    assert any(a["alarm"] == "NOSPACE" for a in cluster.alarms())      # not disarmed: it would come back
    assert cluster.put(b"/blocked", b"x")[0] != 200


def test_recover_space_and_defrag_refuse_a_corrupt_alarm(real_etcd: RealEtcd) -> None:
    real_etcd.activate_alarm("m2", "CORRUPT")
    for args in (["etcd", "recover-space"], ["etcd", "defrag", "--all"]):
        proc = en.cpctl(real_etcd, "m1", *args, rc=4)
        assert "a CORRUPT alarm is active (raised by m2)" in proc.stderr, proc.stderr
    disarm = valid("etcd-alarm", en.cpctl_json(real_etcd, "m1", "etcd", "alarm", "disarm"))
    assert disarm["changed"] is False and "still active: CORRUPT (m2)" in disarm["message"]
    assert real_etcd.alarms() == [{"memberID": real_etcd.member_id("m2"), "alarm": "CORRUPT"}]
    disarm = valid("etcd-alarm", en.cpctl_json(real_etcd, "m1", "etcd", "alarm", "disarm", "--alarm", "CORRUPT"))
    assert disarm["changed"] is True and real_etcd.alarms() == []


def _advertise_nowhere(cluster: RealEtcd, name: str) -> str:
    """Restart member ``name`` advertising a client URL nothing listens on (it still listens where its
    manifest says): the member list answers, its status (DB size, quota) cannot be read. The URL."""
    from cpctl_lab.httpserve import free_port
    member = cluster.members[name]
    dead = "https://127.0.0.1:%d" % free_port("127.0.0.1")
    argv = ["--advertise-client-urls=%s" % dead if a.startswith("--advertise-client-urls=") else a for a in member.argv]
    cluster.stop(name)
    cluster._spawn(name, argv)

    def advertised() -> bool:       # /health says false under NOSPACE: wait for the member list instead
        try:
            return any(m["name"] == name and m["clientURLs"] == [dead] for m in cluster.member_list())
        except AssertionError:      # not answering yet
            return False
    cluster.wait_for(advertised, "%s back, advertising %s" % (name, dead), name=name)
    return dead


def test_recover_space_that_cannot_read_any_size_refuses_and_never_says_recovered(real_etcd_factory: Any) -> None:
    """Issue 46, the "no size readable" branch: the member answers its member list at the URL the
    manifest listens on, but advertises a client URL nothing listens on, so no member's status (DB
    size, quota) can be read. Without an alarm recover-space cannot tell whether a database is at its
    quota; with a real NOSPACE alarm it could not see the space come back: both exit 7 with the reason
    (the member and why), nothing compacted, defragmented or disarmed, no history. Before, the dry run
    said it "would ... defragment m1" (a skip) and the run compacted, disarmed NOSPACE blind and only
    then failed its check write."""
    cluster = real_etcd_factory(members=1, quota_backend_bytes=QUOTA)
    _fill_history(cluster)
    _advertise_nowhere(cluster, "m1")
    status = valid("etcd-status", en.cpctl_json(cluster, "m1", "etcd", "status", rc=None))
    assert [m["db_size"] for m in status["members"]] == [None], status["members"]      # cpctl sees no size
    for args in (["--dry-run"], []):
        proc = en.cpctl(cluster, "m1", "-o", "json", "etcd", "recover-space", *args, rc=7)
        error = valid("error", json.loads(proc.stderr))["error"]
        assert "a NOSPACE alarm is active, but no member's database size could be read" in error["message"], error
        assert "m1" in error["message"] and "recovered" not in error["message"].replace("recover-space", ""), error
        assert [a["alarm"] for a in cluster.alarms()] == ["NOSPACE"]            # not disarmed
        assert proc.stdout == "" and en.history(cluster, "m1") == []            # nothing compacted or defragmented
    assert cluster.ctl("alarm", "disarm").rc == 0                               # disarmed by hand
    proc = en.cpctl(cluster, "m1", "-o", "json", "etcd", "recover-space", rc=7)
    error = valid("error", json.loads(proc.stderr))["error"]
    assert error["message"].startswith("no NOSPACE alarm is active, but no member's database size could be read ("), \
        error
    assert "m1" in error["message"] and "cannot tell whether a database is at its quota" in error["message"], error
    assert en.history(cluster, "m1") == []


def test_recover_space_does_not_disarm_when_a_members_size_cannot_be_read(real_etcd_factory: Any) -> None:
    """One member's size unreadable (m5 advertises a dead client URL; five members, so that the
    quorum guard lets the others be defragmented one at a time with it not healthy), NOSPACE active:
    the others are compacted and defragmented, then exit 7 naming m5 - no disarm, no "space
    recovered". Before, it disarmed and said "space recovered" while m5, still at its quota, raised
    NOSPACE again at the check write (seen: the alarm back right after the run)."""
    cluster = real_etcd_factory(members=5, quota_backend_bytes=QUOTA)
    _fill_history(cluster)
    _advertise_nowhere(cluster, "m5")
    proc = en.cpctl(cluster, "m1", "-o", "json", "etcd", "recover-space", rc=7)
    error = valid("error", json.loads(proc.stderr))["error"]
    assert error["message"].startswith("compacted to revision "), error
    assert "defragmented m" in error["message"] and "the database size of m5 (" in error["message"], error
    assert "no alarm was disarmed" in error["message"] and "etcd status" in error["hint"], error
    assert "NOSPACE" in [a["alarm"] for a in cluster.alarms()]
    actions = [r["action"] for r in en.history(cluster, "m1")]
    assert actions[0] == "etcd-compact" and actions.count("etcd-defrag") == 4, actions
    assert "etcd-alarm-disarm" not in actions and "etcd-recover-space" not in actions, actions
