"""etcd's answers are untrusted input from a master: the member list and alarm parsers of
``probes.etcdcluster`` take what etcd sends (measured: real-node-facts.md "etcd, measured") and
refuse what it never sends. The real etcd runs in tests/probes/test_etcd_census_real.py."""

from __future__ import annotations

import json
from typing import Any

from cpctl.probes.etcdcluster import EtcdCensus, judge_health, parse_alarms, parse_member_list, uint64_text

BIG = str((1 << 64) - 5)          # above 2^63, as etcd's IDs often are


def listing(*members: Any, header: Any = None) -> bytes:
    return json.dumps({"header": header or {"cluster_id": "17", "member_id": BIG}, "members": list(members)}).encode()


def test_a_member_list_as_etcd_sends_it() -> None:
    body = listing({"ID": BIG, "name": "m1", "peerURLs": ["https://10.0.0.1:2380"],
                    "clientURLs": ["https://10.0.0.1:2379/"]},
                   {"ID": "12", "peerURLs": ["https://10.0.0.4:2380"], "isLearner": True})
    parsed, why = parse_member_list(200, body)
    assert parsed is not None and not why
    (m1, m4), (answered_by, cluster_id) = parsed
    assert (m1.member_id, m1.client_urls, m1.learner, m1.started) == (BIG, ("https://10.0.0.1:2379",), False, True)
    assert m4.learner and not m4.started and m4.label == "an unstarted learner (ID c)"
    assert (answered_by, cluster_id) == (BIG, "17")


def test_what_etcd_never_sends_is_refused() -> None:
    good = {"ID": "1", "name": "m1", "peerURLs": [], "clientURLs": []}
    for bad in ([good, dict(good, name="again")],                  # one ID twice
                [dict(good, ID="-1")], [dict(good, ID=str(1 << 64))], [dict(good, ID=True)], [dict(good, ID=1.5)],
                [dict(good, isLearner="yes")], [dict(good, clientURLs="https://x")], ["m1"], []):
        parsed, why = parse_member_list(200, listing(*bad))
        assert parsed is None and why == "an answer that is not etcd's member list", bad
    assert parse_member_list(200, b"[1, 2")[1] == "an answer that is not JSON"
    assert parse_member_list(503, b"{}")[1] == "HTTP 503"


def test_plain_http_client_urls_are_not_asked_unless_allowed() -> None:
    body = listing({"ID": "1", "name": "m1", "clientURLs": ["http://10.0.0.1:2379"]})
    (member,), _ = parse_member_list(200, body)[0] or ((), ("", ""))
    assert member.client_urls == () and "only plain http:// client URLs" in member.why_not
    (member,), _ = parse_member_list(200, body, allow_http=True)[0] or ((), ("", ""))
    assert member.client_urls == ("http://10.0.0.1:2379",)


def test_alarms_by_name_or_number_and_corrupt_blocks() -> None:
    alarms, _ = parse_alarms(200, json.dumps({"alarms": [{"memberID": BIG, "alarm": "NOSPACE"},
                                                         {"memberID": 7, "alarm": 2}]}).encode())
    assert alarms is not None and [(a.member_id, a.alarm) for a in alarms] == [(BIG, "NOSPACE"), ("7", "CORRUPT")]
    census = EtcdCensus(alarms=tuple(alarms))
    assert census.blocking_alarms == ["CORRUPT (raised by member ID 7)"]
    assert parse_alarms(200, b"{}")[0] == []                       # none active: etcd leaves the key out
    assert parse_alarms(200, b'{"alarms": [{"memberID": "x", "alarm": "NOSPACE"}]}')[0] is None
    assert parse_alarms(200, json.dumps({"alarms": [{"memberID": "1", "alarm": "NOSPACE"}] * 300}).encode())[0] is None


def test_health_answers() -> None:
    assert judge_health(200, b'{"health":"true","reason":""}') == (True, "")
    assert judge_health(503, b'{"health":"false","reason":"RAFT NO LEADER"}') == (False, "unhealthy: RAFT NO LEADER")
    assert judge_health(503, b'{"health":"false"}') == (False, "unhealthy: HTTP 503")          # 3.4: no reason
    assert judge_health(200, b'{"health":"false\\u001b[2J"}')[0] is False
    assert judge_health(0, b"", "connection refused") == (False, "connection refused")


def test_ids() -> None:
    assert uint64_text(BIG) == BIG and uint64_text(int(BIG)) == BIG and uint64_text("0") == "0"
    assert uint64_text("1" * 21) is None and uint64_text(None) is None and uint64_text(" 1") is None
