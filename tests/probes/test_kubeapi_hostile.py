"""Issue #13/#16: the API client (``cpctl.probes.kubeapi``) facing hostile answers and hostile kubeconfigs.

* Every answer that is not what a request must get - an error status, HTML from a proxy, a JSON
  list, string or 20000-deep nesting where an object belongs, a body too large or cut short, a
  reset, a server that accepts and never answers, one that drips a byte at a time - becomes ONE
  ``ApiFailure`` (no RecursionError, no KeyError, no exit 70) within the request's timeout.
  Answers come from the lab's fault injection on a real-shaped API.
* Kubeconfig values are checked as kubectl does: a token with a trailing newline (``token: |``)
  or any control character is refused by FIELD NAME; tokenFile contents are trimmed; no message
  ever contains a token, a password or what a server echoes of them (a fake server on 127.0.0.1).
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import yaml

from cpctl.agent import rpc
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.local import LocalHost
from cpctl.probes.base import Unavailable
from cpctl.probes.kubeapi import (
    ApiBadAnswer,
    ApiError,
    ApiFailure,
    ApiUnreachable,
    KubeClient,
    load_kubeconfig,
)
from cpctl_lab.control import LabHandle, start_lab
from tests.labfixture import FAST
from tests.labfixture import run_cpctl as cpctl

TOKEN = "hunter2-t0ken-f0r-the-test"
PASSWORD = "pa55w0rd-f0r-the-test"
SLACK = 0.6    # how much a request may overrun its timeout on a loaded 2-core machine


@pytest.fixture(scope="module")
def lab() -> Iterator[LabHandle]:
    """One lab for the module: each test sets its own faults and clears them."""
    import shutil
    import tempfile
    scratch = tempfile.mkdtemp(prefix="cpctl-hostile-")
    try:
        with start_lab(Path(scratch) / "lab", **FAST) as handle:
            yield handle
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture
def client(lab: LabHandle) -> Iterator[KubeClient]:
    lab.clear_faults()
    rpc.reset()   # no kept-alive connection from an earlier test: each fault meets a fresh one
    yield KubeClient(LocalHost(), load_kubeconfig(LocalHost(), lab.kubeconfig), timeout=1.0)
    lab.clear_faults()


def mirror_path(lab: LabHandle) -> str:
    return "^/api/v1/namespaces/kube-system/pods/kube-scheduler-%s$" % lab.node_name()


HOSTILE = [
    # (rule, expected failure class, words in its message)
    ({"action": "status", "code": 403}, ApiError, "403 forbidden"),
    ({"action": "status", "code": 429, "retry_after": 1}, ApiError, "429 Too many requests"),
    ({"action": "status", "code": 500}, ApiError, "500 Internal error occurred"),
    ({"action": "status", "code": 503}, ApiError, "503 the server is currently unable"),
    ({"action": "html"}, ApiBadAnswer, "answered 200 with text/html, not JSON"),
    ({"action": "html", "code": 502}, ApiError, "502 (text/html answer)"),
    ({"action": "body", "json": ["not", "an", "object"]}, ApiBadAnswer, "answered a list, not a JSON object"),
    ({"action": "body", "json": "a string"}, ApiBadAnswer, "answered a string, not a JSON object"),
    ({"action": "body", "nested": 20000}, ApiBadAnswer, "JSON nested too deeply"),
    ({"action": "body", "size": 6 << 20}, ApiBadAnswer, "over the limit of 4194304 bytes"),
    ({"action": "body", "truncate": 40}, ApiBadAnswer, "a body that is not valid JSON"),
    ({"action": "body", "truncate": 10, "hangup": True}, ApiUnreachable, "answer cut short"),
    ({"action": "body", "json": {"kind": "Status", "status": "Success"}}, ApiBadAnswer, "answered a Status, not a Pod"),
    ({"action": "body", "json": {"kind": "Pod", "metadata": {"name": "impostor"}}}, ApiBadAnswer,
     "answered another object (impostor)"),
    ({"action": "body", "json": {"kind": "Pod", "metadata": ["x"]}}, ApiBadAnswer, "answer.metadata is a list"),
    ({"action": "reset"}, ApiUnreachable, "Connection reset by peer"),
    ({"action": "hang"}, ApiUnreachable, "no complete answer within 1s"),
    ({"action": "drip", "interval": 0.05}, ApiUnreachable, "no complete answer within 1s"),
]


@pytest.mark.parametrize("rule,failure,words", HOSTILE, ids=[r[0]["action"] + str(i) for i, r in enumerate(HOSTILE)])
def test_each_hostile_answer_is_one_clear_api_failure(lab, client, rule, failure, words):
    lab.inject_faults([dict(rule, path=mirror_path(lab))])
    started = time.monotonic()
    with pytest.raises(ApiFailure) as excinfo:
        client.get_pod("kube-system", "kube-scheduler-%s" % lab.node_name())
    took = time.monotonic() - started
    assert type(excinfo.value) is failure, excinfo.value.message
    assert words in excinfo.value.message, excinfo.value.message
    assert "\n" not in excinfo.value.message and len(excinfo.value.message) < 400
    assert excinfo.value.code in (ExitCode.API, ExitCode.NOT_FOUND, ExitCode.CONFLICT)
    assert took < 1.0 + SLACK, took
    assert [r["hits"] for r in lab.faults()] == [1]


def test_the_api_probe_is_blind_never_gone(lab, client):
    """Only a Kubernetes "not found" is "gone"; a proxy's 404 page or an error is "could not look"."""
    from cpctl.probes.api import ApiProbe
    from cpctl.probes.base import PodTarget
    probe = ApiProbe(LocalHost(), lab.kubeconfig)
    target = PodTarget("kube-scheduler", "kube-system", lab.node_name())
    assert probe.observe(target).present
    for rule in ({"action": "html", "code": 404}, {"action": "body", "code": 404, "json": {"error": "no"}},
                 {"action": "status", "code": 500}, {"action": "body", "json": {"kind": "Pod", "metadata": {
                     "name": target.mirror_name}, "status": {"conditions": "Ready"}}}):
        lab.inject_faults([dict(rule, path=mirror_path(lab))])
        with pytest.raises(Unavailable):
            probe.observe(target, timeout=1.0)
    lab.clear_faults()
    gone = PodTarget("no-such-pod", "kube-system", lab.node_name())
    assert probe.observe(gone).present is False   # the real 404: a Status with reason NotFound


def test_lists_and_objects_are_type_checked(lab, client):
    lab.inject_faults([{"path": "^/api/v1/pods$", "action": "body", "json": {"kind": "PodList"}},
                       {"path": "^/api/v1/namespaces/default/pods$", "action": "body",
                        "json": {"kind": "PodList", "items": [1, 2]}},
                       {"path": "^/api/v1/nodes/", "action": "body", "json": {"kind": "Node", "metadata": {
                           "name": ["lab-worker1"]}}}])
    with pytest.raises(ApiBadAnswer, match="answered no items list"):
        client.list_pods()
    with pytest.raises(ApiBadAnswer, match=r"answer.items\[0\] is a number, not an object"):
        client.list_pods("default")
    with pytest.raises(ApiBadAnswer, match="metadata.name is a list, not a string"):
        client.get_node("lab-worker1")
    assert client.events_for("default", "x") == []   # hints never fail a command
    lab.clear_faults()
    assert client.get_node("lab-worker1") is not None and isinstance(client.list_pods(), list)


# --- kubeconfigs and secrets, against a fake API server on 127.0.0.1 -------------------------------
class FakeApi(ThreadingHTTPServer):
    """Answers every GET with ``answer(path, authorization)`` -> (status, JSON value); records
    the Authorization headers it saw."""

    daemon_threads = True

    def __init__(self, answer: Callable[[str, Optional[str]], tuple], family: int = socket.AF_INET) -> None:
        self.address_family = family
        self.answer = answer
        self.seen: list = []
        super().__init__(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0), _FakeHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host = "[::1]" if self.address_family == socket.AF_INET6 else "127.0.0.1"
        return "http://%s:%d" % (host, self.server_address[1])


class _FakeHandler(BaseHTTPRequestHandler):
    server: FakeApi

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        auth = self.headers.get("Authorization")
        self.server.seen.append(auth)
        status, value = self.server.answer(self.path, auth)
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def echo_auth(path: str, auth: Optional[str]) -> tuple:
    """A hostile server: a 403 whose message repeats the credentials it was sent."""
    return 403, {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                 "message": "user with credentials %r\nmay not get %s" % (auth, path)}


def pod_named(path: str, auth: Optional[str]) -> tuple:
    name = path.rsplit("/", 1)[-1]
    return 200, {"kind": "Pod", "metadata": {"name": name, "namespace": "default"}}


@pytest.fixture
def fake() -> Iterator[Callable[..., FakeApi]]:
    servers: list = []

    def start(answer: Callable[[str, Optional[str]], tuple], family: int = socket.AF_INET) -> FakeApi:
        server = FakeApi(answer, family)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def kubeconfig(tmp_path: Path, server: str, user: Any, cluster_extra: Optional[dict] = None,
               raw: Optional[str] = None) -> str:
    """A kubeconfig file: ``user`` is the user entry's value (any YAML value), or ``raw`` the whole text."""
    path = tmp_path / ("kubeconfig-%d" % len(list(tmp_path.iterdir())))
    if raw is None:
        raw = yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": dict({"server": server}, **(cluster_extra or {}))}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "users": [{"name": "u", "user": user}]})
    path.write_text(raw)
    return str(path)


def refused(path: str) -> str:
    with pytest.raises(CpctlError) as excinfo:
        load_kubeconfig(LocalHost(), path)
    assert excinfo.value.code == ExitCode.ENVIRONMENT
    message = excinfo.value.message
    assert TOKEN not in message and PASSWORD not in message and "\n" not in message
    return message


def test_token_with_a_trailing_newline_is_refused_by_field_name(fake, tmp_path):
    server = fake(pod_named)
    block = ("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
             "clusters: [{name: k, cluster: {server: '%s'}}]\n"
             "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
             "users:\n- name: u\n  user:\n    token: |\n      %s\n" % (server.url, TOKEN))
    message = refused(kubeconfig(tmp_path, "", None, raw=block))
    assert "user field token contains a control character" in message and "token: |" in message
    assert server.seen == []   # refused before any request
    for field, value in (("token", "a\x01" + TOKEN), ("username", "admin\n"), ("password", PASSWORD + "\r")):
        user = {field: value} if field != "password" else {"username": "admin", "password": value}
        assert "user field %s contains a control character" % field in refused(kubeconfig(tmp_path, server.url, user))
    assert "contains a colon" in refused(kubeconfig(tmp_path, server.url, {"username": "a:b", "password": PASSWORD}))
    assert "not both" in refused(kubeconfig(tmp_path, server.url, {"token": TOKEN, "username": "admin"}))


def test_token_file_is_trimmed_like_client_go(fake, tmp_path):
    server = fake(pod_named)
    (tmp_path / "tok").write_text("\n  %s \n\n" % TOKEN)
    client = KubeClient(LocalHost(), load_kubeconfig(LocalHost(), kubeconfig(tmp_path, server.url,
                                                                              {"tokenFile": "tok"})))
    assert client.get_pod("default", "p1")["metadata"]["name"] == "p1"
    assert server.seen == ["Bearer %s" % TOKEN]
    (tmp_path / "blank").write_text(" \n\t\n")
    assert "tokenFile %s is empty" % (tmp_path / "blank") in refused(kubeconfig(tmp_path, server.url,
                                                                                  {"tokenFile": "blank"}))
    (tmp_path / "split").write_text("%s\n%s\n" % (TOKEN, TOKEN))
    assert "the token contains a control character" in refused(kubeconfig(tmp_path, server.url,
                                                                            {"tokenFile": "split"}))


@pytest.mark.parametrize("raw,words", [
    ("users: {u: x}", "kubeconfig.users is an object, not a list"),
    ("users: [{name: u, user: [token]}]", "users[u].user is a list, not an object"),
    ("users: [{name: u, user: {token: 12345}}]", "user.token is a number, not a string"),
    ("users: [{name: u, user: {password: [x], username: y}}]", "user.password is a list, not a string"),
    ("users: [{name: u, user: {client-certificate-data: 5, client-key-data: 6}}]",
     "client-certificate-data is a number, not a base64 string"),
])
def test_fields_of_the_wrong_type_are_named(fake, tmp_path, raw, words):
    head = ("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: {server: "
            "'http://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n")
    assert words in refused(kubeconfig(tmp_path, "", None, raw=head + raw + "\n"))


def test_server_urls_ipv6_and_credentials(fake, tmp_path):
    six = fake(pod_named, socket.AF_INET6)
    client = KubeClient(LocalHost(), load_kubeconfig(LocalHost(), kubeconfig(tmp_path, six.url, {"token": TOKEN})))
    assert client.get_pod("default", "v6")["metadata"]["name"] == "v6"
    port = six.server_address[1]
    assert "IPv6 address without brackets" in refused(kubeconfig(tmp_path, "http://::1:%d" % port, {}))
    message = refused(kubeconfig(tmp_path, "https://admin:%s@10.0.0.1:6443" % PASSWORD, {}))
    assert "carries credentials" in message


def test_nothing_a_server_echoes_of_the_credentials_reaches_a_message(fake, tmp_path):
    server = fake(echo_auth)
    for user in ({"token": TOKEN}, {"username": "admin", "password": PASSWORD}):
        client = KubeClient(LocalHost(), load_kubeconfig(LocalHost(), kubeconfig(tmp_path, server.url, user)))
        with pytest.raises(ApiError) as excinfo:
            client.get_pod("default", "p1")
        message = excinfo.value.message
        assert excinfo.value.status == 403 and "<redacted>" in message and "\n" not in message
        assert TOKEN not in message and PASSWORD not in message
        assert server.seen[-1] != user   # the credentials were sent, only never shown
    assert server.seen[0] == "Bearer %s" % TOKEN


def test_cli_with_a_token_block_exits_7_in_one_line_without_the_token(fake, tmp_path):
    # issue #16: this used to exit 70 printing "Invalid header value b'Bearer <the token>\n'"
    server = fake(pod_named)
    block = ("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
             "clusters: [{name: k, cluster: {server: '%s'}}]\n"
             "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
             "users:\n- name: u\n  user:\n    token: |\n      %s\n" % (server.url, TOKEN))
    path = kubeconfig(tmp_path, "", None, raw=block)
    env = {"KUBECONFIG": path, "CPCTL_STATE_DIR": str(tmp_path / "state"),
           "CPCTL_MANIFESTS_DIR": str(tmp_path / "manifests"), "CPCTL_NODE_NAME": "n1"}
    for args in (["pending"], ["bind", "p1", "--node", "n1"]):
        proc = cpctl(env, *args)
        assert proc.returncode == 7, (args, proc.returncode, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("cpctl: kubeconfig ")
        assert TOKEN not in proc.stderr + proc.stdout and "Invalid header" not in proc.stderr
    assert server.seen == []


def test_a_status_lists_the_nodes_pods_once_and_falls_back_to_gets(lab, client):
    """Issue 38: ``prefetch`` makes one list (``fieldSelector=spec.nodeName``) for the mirror pods
    a status shows; each answers one ``observe``. A pod the list lacks is asked for by name (only a
    404 means gone); a refused list leaves every pod to its GET; a list without an answer is the
    answer of each of its pods (no GET is tried after it)."""
    from cpctl.probes.api import ApiProbe
    from cpctl.probes.base import PodTarget
    node = lab.node_name()
    names = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
    targets = [PodTarget(name, "kube-system", node) for name in names]
    missing = PodTarget("no-such-pod", "kube-system", node)
    pod_gets = {"method": "GET", "path": "^/api/v1/namespaces/kube-system/pods/", "action": "status", "code": 500}
    the_list = {"method": "GET", "path": "^/api/v1/namespaces/kube-system/pods$", "query": "fieldSelector="}

    probe = ApiProbe(LocalHost(), lab.kubeconfig)
    probe.prefetch(targets + [missing])
    lab.inject_faults([dict(pod_gets, path=pod_gets["path"] + "(etcd|kube-)")])   # a GET of a listed pod fails
    states = [probe.observe(t) for t in targets]
    assert all(s.present and s.uid and s.source == "api" for s in states)
    assert [r["hits"] for r in lab.faults()] == [0]              # all four came from the list
    assert probe.observe(missing).present is False                # not listed: its own GET (404)
    with pytest.raises(Unavailable):                              # used once: the next look is a GET
        probe.observe(targets[0])

    lab.inject_faults([dict(the_list, action="status", code=403)])
    probe.prefetch(targets)
    assert [probe.observe(t).present for t in targets] == [True] * 4   # by GET, as before
    assert [r["hits"] for r in lab.faults()] == [1]

    lab.inject_faults([dict(the_list, action="reset"), pod_gets])
    rpc.reset()     # a fresh connection: a reset on a kept-alive one is retried once, on a new one
    probe.prefetch(targets)
    for target in targets:
        with pytest.raises(Unavailable, match="reset"):
            probe.observe(target)
    assert [r["hits"] for r in lab.faults()] == [1, 0]
    lab.clear_faults()
