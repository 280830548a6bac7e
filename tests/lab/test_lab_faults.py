"""Fault injection on the lab's API: rules set through the control channel meet chosen requests.

Each action against a running lab, with a raw HTTP client (to see exactly what goes on the wire)
and the real kubectl where its reaction is the point: real Status errors, HTML from a "proxy",
arbitrary or truncated bodies, a request that hangs without blocking anything else, a response
dripped byte by byte, a connection reset. Rules count their hits.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from typing import Any

import pytest

from cpctl_lab.control import LabError, LabHandle
from tests.labfixture import kubectl, lab  # noqa: F401


def connect(url: str, timeout: float) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)


def request(
    handle: LabHandle, path: str, method: str = "GET", timeout: float = 5.0, url: str = ""
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection to the lab's API (or ``url``): (status, headers, body)."""
    conn = connect(url or handle.api_url, timeout)
    try:
        conn.request(method, path, headers={"Accept": "application/json"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def hits(handle: LabHandle) -> list[int]:
    return [rule["hits"] for rule in handle.faults()]


def test_status_fault_with_real_status_body_method_query_and_times(lab):
    rules = lab.inject_faults(
        [
            {"method": "GET", "path": "^/api/v1/nodes$", "action": "status", "code": 503, "times": 2},
            {"path": "^/api/v1/namespaces/default/pods$", "query": "watch=", "action": "status", "code": 410},
            {"path": "^/api/v1/namespaces/kube-system$", "action": "status", "code": 504, "delay": 0.3},
        ]
    )
    assert [r["id"] for r in rules] == [rules[0]["id"] + i for i in range(3)] and hits(lab) == [0, 0, 0]
    code, headers, body = request(lab, "/api/v1/nodes")
    status = json.loads(body)
    assert code == 503 and headers["content-type"] == "application/json"
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server is currently unable to handle the request",
        "reason": "ServiceUnavailable",
        "code": 503,
    }
    assert request(lab, "/api/v1/nodes", url=lab.api_url_for(1))[0] == 503  # every listener: the master's own too
    assert request(lab, "/api/v1/nodes")[0] == 200  # only the first two
    assert request(lab, "/api/v1/nodes", method="DELETE")[0] != 503  # other methods pass
    assert request(lab, "/api/v1/namespaces/default/pods")[0] == 200  # no watch= in the query
    assert request(lab, "/api/v1/namespaces/default/pods?watch=1&resourceVersion=1")[0] == 410
    started = time.monotonic()
    code, _, body = request(lab, "/api/v1/namespaces/kube-system")
    assert code == 504 and json.loads(body)["reason"] == "Timeout" and time.monotonic() - started >= 0.3
    assert hits(lab) == [2, 1, 1]
    final = lab.clear_faults()
    assert [r["hits"] for r in final] == [2, 1, 1] and lab.faults() == []


def test_kubectl_retries_429_with_retry_after_and_fails_on_html(lab):
    lab.inject_faults([{"path": "^/api/v1/nodes$", "action": "status", "code": 429, "retry_after": 1, "times": 1}])
    out = kubectl(lab, "get", "nodes", "-o", "name").stdout
    assert "node/lab-worker1" in out and hits(lab) == [1]  # client-go honoured Retry-After and retried
    lab.inject_faults([{"path": "^/api/v1/nodes$", "action": "html"}])
    code, headers, body = request(lab, "/api/v1/nodes")
    assert code == 200 and headers["content-type"].startswith("text/html") and body.startswith(b"<!DOCTYPE html>")
    proc = kubectl(lab, "get", "nodes", check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    assert hits(lab)[0] >= 1


def test_body_faults_lists_strings_nesting_sizes_and_truncation(lab):
    lab.inject_faults(
        [
            {"path": "^/version$", "action": "body", "json": ["not", "an", "object"]},
            {"path": "^/api/v1/namespaces/default$", "action": "body", "body": "just a string", "code": 201},
            {"path": "^/api/v1/namespaces/kube-system$", "action": "body", "nested": 20000},
            {"path": "^/api/v1/namespaces/kube-public$", "action": "body", "size": 3_000_000},
            {"path": "^/api/v1/namespaces$", "action": "body", "truncate": 40},
            {"path": "^/api/v1/nodes$", "action": "body", "truncate": 10, "hangup": True},
        ]
    )
    assert json.loads(request(lab, "/version")[2]) == ["not", "an", "object"]
    assert request(lab, "/api/v1/namespaces/default")[:3:2] == (201, b"just a string")
    nested = request(lab, "/api/v1/namespaces/kube-system")[2]
    assert nested == b"[" * 20000 + b"]" * 20000
    with pytest.raises(RecursionError):
        json.loads(nested)
    big = request(lab, "/api/v1/namespaces/kube-public")[2]
    assert len(big) == 3_000_000 and json.loads(big)[0] == "x" * (3_000_000 - 4)
    code, headers, cut = request(lab, "/api/v1/namespaces")
    assert code == 200 and len(cut) == 40 == int(headers["content-length"])
    assert cut.startswith(b'{"kind": "NamespaceList"')  # the real answer, cut short
    with pytest.raises(ValueError):
        json.loads(cut)
    with pytest.raises(http.client.IncompleteRead):  # announced a full body, sent 10 bytes, hung up
        request(lab, "/api/v1/nodes")
    assert hits(lab) == [1, 1, 1, 1, 1, 1]


def test_hang_blocks_nothing_else_and_is_served_once_cleared(lab):
    lab.inject_faults([{"path": "^/api/v1/nodes$", "action": "hang"}])
    outcome: dict[str, Any] = {}

    def hung_client() -> None:
        try:
            outcome["code"] = request(lab, "/api/v1/nodes", timeout=30)[0]
        except OSError as exc:
            outcome["error"] = exc

    client = threading.Thread(target=hung_client)
    client.start()
    deadline = time.monotonic() + 5
    while hits(lab) != [1] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert hits(lab) == [1]
    assert request(lab, "/version")[0] == 200 and kubectl(lab, "get", "ns", "-o", "name").returncode == 0
    assert client.is_alive() and outcome == {}
    lab.clear_faults()
    client.join(10)
    assert outcome == {"code": 200}


def test_hang_does_not_hold_up_lab_shutdown(lab):
    lab.inject_faults([{"path": "^/api/v1/nodes$", "action": "hang"}])
    outcome: dict[str, Any] = {}

    def hung_client() -> None:
        try:
            outcome["code"] = request(lab, "/api/v1/nodes", timeout=30)[0]
        except (OSError, http.client.HTTPException) as exc:
            outcome["error"] = type(exc).__name__

    client = threading.Thread(target=hung_client)
    client.start()
    deadline = time.monotonic() + 5
    while hits(lab) != [1] and time.monotonic() < deadline:
        time.sleep(0.02)
    lab.stop()
    assert lab.proc.returncode is not None
    client.join(10)
    assert not client.is_alive() and "code" not in outcome


def test_drip_sends_the_real_answer_byte_by_byte(lab):
    expected = request(lab, "/api/v1/namespaces/default")[2]
    interval = 0.003
    lab.inject_faults([{"path": "^/api/v1/namespaces/default$", "action": "drip", "interval": interval}])
    conn = connect(lab.api_url, timeout=2)  # per read: every byte comes well within it
    started = time.monotonic()
    conn.request("GET", "/api/v1/namespaces/default")
    resp = conn.getresponse()
    body = resp.read()
    elapsed = time.monotonic() - started
    conn.close()
    assert resp.status == 200 and json.loads(body)["metadata"]["name"] == "default"
    assert len(body) == len(expected)
    assert elapsed >= 0.5 * interval * len(body)  # a lower bound only: the drip is slow, how slow varies
    assert hits(lab) == [1]


def test_reset_closes_without_a_response_and_bad_rules_are_refused(lab):
    lab.inject_faults([{"path": "^/api/v1/nodes$", "action": "reset", "times": 1}])
    with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
        request(lab, "/api/v1/nodes")
    assert request(lab, "/api/v1/nodes")[0] == 200
    assert hits(lab) == [1]
    for bad, why in (
        ({"path": "^/x", "action": "explode"}, "action must be one of"),
        ({"action": "status"}, "path (a regular expression) is required"),
        ({"path": "(", "action": "status"}, "bad regular expression"),
        ({"path": "^/x", "action": "body", "json": [], "body": "x"}, "at most one of"),
        ({"path": "^/x", "action": "status", "times": 0}, "times must be >= 1"),
        ({"path": "^/x", "action": "status", "colour": "red"}, "unknown rule field(s): colour"),
    ):
        with pytest.raises(LabError, match=why.replace("(", r"\(").replace(")", r"\)")):
            lab.inject_faults([bad])
    assert [r["action"] for r in lab.faults()] == ["reset"]  # a refused set leaves the old rules
