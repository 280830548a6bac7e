"""The agent protocol beyond single ops: read-only views ask a remote node for everything they
read in one round trip (``batch``), and see what they would have seen one read at a time;
``reset`` makes an agent forget the run it served.

The agent runs for real (``SubprocessAgentHost``: the SSH agent protocol over a pipe, without
SSH); round trips are counted where the run writes a request to it.
"""

from __future__ import annotations

import ast
import json
import math
import os
import socket
import subprocess
import sys
import zlib
from typing import Iterator, List

import pytest

from cpctl.agent import fileops, rpc
from cpctl.core import views
from cpctl.core.settings import Settings
from cpctl.errors import CpctlError, ExitCode
from cpctl.host import agent as host_module
from cpctl.host.agent import SubprocessAgentHost
from cpctl.host.local import LocalHost
from cpctl.ops import drift
from cpctl.ops.wiring import open_node
from tests.coreutil import NODE, NodeDirs, echo_server

pytestmark = pytest.mark.timeout(60)


class CountingAgent(SubprocessAgentHost):
    """A real agent that records the op of every request written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: List[str] = []

    def _request(self, op: str, args: dict):  # type: ignore[no-untyped-def]
        self.requests.append(op)
        return super()._request(op, args)


@pytest.fixture
def agent() -> Iterator[CountingAgent]:
    host = CountingAgent()
    yield host
    host.close()


def _settings(node: NodeDirs) -> Settings:
    return Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none")


def _views(host, node: NodeDirs) -> dict:  # type: ignore[no-untyped-def]
    """status, check and history of ``node`` through ``host`` (times taken out)."""
    status = views.status(open_node(_settings(node), host=host))
    report = drift.check(open_node(_settings(node), host=host), now=0.0)
    history = views.history(open_node(_settings(node), host=host), None, 0)
    for row in status["components"]:
        row.pop("since", None)
    return {"status": status, "check": report.to_dict(),
            "history": [{k: v for k, v in r.items() if k != "time"} for r in history]}


def _node_with_parked(tmp_path) -> NodeDirs:  # type: ignore[no-untyped-def]
    node = NodeDirs(str(tmp_path))
    node.run("stop", "scheduler", "--reason", "one")
    node.run("stop", "controller-manager", "--reason", "two")
    return node


def test_views_make_one_round_trip_each(agent: CountingAgent, tmp_path) -> None:
    node = _node_with_parked(tmp_path)
    views.status(open_node(_settings(node), host=agent))
    assert agent.requests == ["batch"]
    del agent.requests[:]
    drift.check(open_node(_settings(node), host=agent))
    assert agent.requests == ["batch"]        # --probe none: no mirror pods asked for
    del agent.requests[:]
    views.history(open_node(_settings(node), host=agent), "scheduler", 10)
    assert agent.requests == ["batch"]


def test_views_over_the_agent_match_localhost(agent: CountingAgent, tmp_path) -> None:
    node = _node_with_parked(tmp_path)
    with open(os.path.join(node.manifests, "kube-apiserver.yaml.bak"), "wb") as handle:
        handle.write(node.files["kube-apiserver.yaml"])       # a stray: a warning and a finding
    remote, local = _views(agent, node), _views(LocalHost(), node)
    assert remote == local
    parked = {r["component"]: r for r in remote["status"]["components"] if r["state"] == "parked"}
    assert {parked["kube-scheduler"]["reason"], parked["kube-controller-manager"]["reason"]} == {"one", "two"}
    assert remote["status"]["warnings"] and len(remote["history"]) == 2


def test_a_fresh_node_is_one_round_trip_and_creates_nothing(agent: CountingAgent, tmp_path) -> None:
    node = NodeDirs(str(tmp_path))
    status = views.status(open_node(_settings(node), host=agent))
    assert agent.requests == ["batch"]
    assert len(status["components"]) == 4 and not os.path.exists(node.state)


def test_a_change_drops_the_snapshot(agent: CountingAgent, tmp_path) -> None:
    path = str(tmp_path / "f")
    with agent.prefetched([("lstat", {"path": path}), ("listdir", {"path": str(tmp_path)})]):
        assert agent.lstat(path) is None and agent.lstat(path) is None   # the snapshot, twice
        assert agent.requests == ["batch"]
        agent.write_atomic(path, b"x")
        assert agent.lstat(path)["size"] == 1                           # asked again, after the change
        assert agent.listdir(str(tmp_path)) == ["f"]
    assert agent.requests == ["batch", "write_atomic", "lstat", "listdir"]


def test_the_snapshot_ends_with_its_block(agent: CountingAgent, tmp_path) -> None:
    path = str(tmp_path / "f")
    with agent.prefetched([("lstat", {"path": path})]):
        assert agent.lstat(path) is None
    with open(path, "wb") as handle:
        handle.write(b"xy")
    assert agent.lstat(path)["size"] == 2
    assert agent.requests == ["batch", "lstat"]


def test_a_batch_carries_reads_only(agent: CountingAgent, tmp_path) -> None:
    path = tmp_path / "keep"
    path.write_bytes(b"k")
    answers = agent._request("batch", {"requests": [
        {"op": "read_file", "args": {"path": str(path), "limit": 10}},
        {"op": "unlink", "args": {"path": str(path)}},
        {"op": "lstat", "args": {"path": str(tmp_path / "missing")}},
        {"op": "read_file", "args": {"path": str(tmp_path / "missing"), "limit": 10}},
    ]})
    assert answers[0] == {"ok": True, "result": b"k"}
    assert not answers[1]["ok"] and "not batchable" in answers[1]["message"]
    assert answers[2] == {"ok": True, "result": None}
    assert not answers[3]["ok"] and answers[3]["kind"] == "os"
    assert path.exists()
    # a prefetched error is raised as the direct call raises it
    with agent.prefetched([("read_file", {"path": str(tmp_path / "missing"), "limit": 10})]):
        with pytest.raises(FileNotFoundError):
            agent.read_file(str(tmp_path / "missing"), 10)


def test_a_prefetched_answer_serves_exactly_the_same_request() -> None:
    """The snapshot's key (``agent._call_key``) is equal for two calls exactly when their request
    lines carry the same JSON (arguments in any order); the cheap key of string and integer
    arguments never mistakes "1" for 1 or True for 1, and other values fall back to the JSON text."""
    cases = [("read_file", {"path": "/a", "limit": 1}), ("read_file", {"limit": 1, "path": "/a"}),
             ("read_file", {"path": "/a", "limit": "1"}), ("read_file", {"path": "/a", "limit": True}),
             ("read_file", {"path": "/a", "limit": 1.0}), ("read_file", {"path": "/a", "limit": None}),
             ("read_tail", {"path": "/a", "limit": 1}), ("lstat", {"path": "/a"}), ("lstat", {"path": b"/a"}),
             ("lstat", {"path": ["/a"]}), ("lstat", {"path": ("/a",)}), ("info", {}), ("info", {"x": {"b64": "L2E="}})]
    for op, args in cases:
        for other_op, other_args in cases:
            same_request = json.dumps([op, rpc.encode(args)], sort_keys=True) == json.dumps(
                [other_op, rpc.encode(other_args)], sort_keys=True)
            same_key = host_module._call_key(op, args) == host_module._call_key(other_op, other_args)
            assert same_key == same_request, (op, args, other_op, other_args)
    assert isinstance(host_module._call_key("read_file", {"path": "/a", "limit": 1}), tuple)   # the cheap key


@pytest.mark.parametrize("damage", ["corrupt", "symlink"])
def test_a_bad_parked_meta_is_one_clear_error(agent: CountingAgent, tmp_path, damage: str) -> None:
    node = _node_with_parked(tmp_path)
    meta = os.path.join(node.state, "meta", "kube-scheduler.yaml.json")
    os.unlink(meta)
    if damage == "corrupt":
        with open(meta, "w") as handle:
            handle.write("{not json")
    else:
        os.symlink("/etc/hostname", meta)
    for host in (agent, LocalHost()):
        with pytest.raises(CpctlError) as err:
            views.status(open_node(_settings(node), host=host))
        assert err.value.code == ExitCode.ENVIRONMENT and meta in err.value.message


def test_reset_forgets_the_run(agent: CountingAgent, tmp_path) -> None:
    """After ``reset`` (the keeper's, between two runs) the node lock is free for others, the
    agent's HTTP connections are gone, and the agent serves on."""
    import fcntl
    lock = str(tmp_path / "lock")
    agent.lock(lock, 0, "first run")
    fd = os.open(lock, os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert agent._request("reset", {})["pid"] == agent.info()["pid"]
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)          # released
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    agent.lock(lock, 0, "next run")                            # taken again, not "already held"
    (answer,) = agent._request("batch", {"requests": [{"op": "reset", "args": {}}]})
    assert not answer["ok"] and "not batchable" in answer["message"]


def test_reset_closes_the_runs_http_connections(agent: CountingAgent) -> None:
    with echo_server() as url:
        first, again = (agent.http("GET", url)["headers"]["X-Peer-Port"] for _ in range(2))
        assert first == again                                  # one kept-alive connection
        agent._request("reset", {})
        assert agent.http("GET", url)["headers"]["X-Peer-Port"] != first   # a new one after the reset


def test_http_asked_ahead_answers_the_same_request_once_within_the_snapshot(agent: CountingAgent, tmp_path) -> None:
    """``http_ahead``: a view's HTTP requests in one ``http_many``; each answer serves the one call with
    exactly its arguments, once, while the snapshot lasts (a change, or the block's end, drops it)."""
    path = str(tmp_path / "f")
    with echo_server() as url:
        with agent.prefetched([("lstat", {"path": path})]):
            agent.http_ahead([{"method": "GET", "url": url + "/a", "timeout": 2.0, "tls": None, "limit": 100},
                              {"method": "POST", "url": url + "/b", "body": b"{}", "timeout": 3.0},
                              {"method": "GET", "url": url + "/c", "timeout": 3.0}])
            assert agent.requests == ["batch", "http_many"]
            assert agent.http("GET", url + "/a", timeout=2.0, limit=100)["body"] == b"ok /a"   # from the one trip
            (b,) = agent.http_many([{"method": "POST", "url": url + "/b", "body": b"{}"}], timeout=3.0)
            assert b["reply"]["status"] == 501          # the echo server's answer to a POST, asked ahead
            assert agent.requests == ["batch", "http_many"]
            assert agent.http("GET", url + "/a", timeout=2.0, limit=100)["body"] == b"ok /a"   # once: asked again
            assert agent.http("GET", url + "/c", timeout=1.0)["body"] == b"ok /c"    # another timeout: asked
            assert agent.requests == ["batch", "http_many", "http", "http"]
            agent.write_atomic(path, b"x")              # a change: what was asked ahead goes
            agent.http("GET", url + "/c", timeout=3.0)
            assert agent.requests[-2:] == ["write_atomic", "http"]
        del agent.requests[:]
        agent.http_ahead([{"method": "GET", "url": url + "/a", "timeout": 2.0}])   # no snapshot: asks nothing
        assert agent.requests == []


def test_http_many_ends_a_request_by_its_own_timeout(agent: CountingAgent) -> None:
    """A request of ``http_many`` with its own timeout ends by it (a silent server never answers it),
    while the others keep the call's deadline: requests asked together keep the time each had alone."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        with echo_server() as url:
            quiet, echo = agent.http_many([
                {"method": "GET", "url": "http://127.0.0.1:%d/" % silent.getsockname()[1], "timeout": 0.3},
                {"method": "GET", "url": url + "/e"}], timeout=60.0)
        assert "reply" not in quiet and echo["reply"]["body"] == b"ok /e", (quiet, echo)
    finally:
        silent.close()


# --- the agent's program: shipped zlib-compressed, compiled by the master ---

def _start_agent(payload: bytes) -> bytes:
    """Start a bare agent (``python3 -S -c loader``) with ``payload`` then one ``info`` request."""
    proc = subprocess.run(host_module.agent_bootstrap(sys.executable),
                          input=payload + b'{"op": "info", "args": {}}\n', capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_new_connection_ships_the_compressed_agent_within_100_kb() -> None:
    """Issue 47: what a new connection carries to start the agent is at most 100 KB."""
    payload = host_module.agent_payload()
    header, _, rest = payload.partition(b"\n")
    assert int(header) == len(rest) and zlib.decompress(rest) == host_module.assemble(host_module.AGENT_BASE)
    assert len(payload) <= 100 * 1024, len(payload)
    lines = _start_agent(payload).splitlines()
    assert lines[0].startswith(b'{"ready"') and lines[1].startswith(b'{"ok": true')


def _refused(payload: bytes) -> bytes:
    out = subprocess.run(host_module.agent_bootstrap(sys.executable), input=payload, capture_output=True,
                         timeout=30)
    assert out.returncode != 0 and b'"ready"' not in out.stdout
    return out.stderr


def test_the_loader_refuses_a_bad_program_and_reads_only_what_it_bounds() -> None:
    packed = host_module.agent_payload().partition(b"\n")[2]
    _refused(b"%d\n" % len(packed) + packed[:len(packed) // 2])             # cut short: never run
    _refused(b"%d\n" % len(packed) + b"\0" * len(packed))                  # not zlib
    _refused(b"x" * 100 + b"\n" + packed)                                  # no length
    assert b"bad agent" in _refused(b"%d\n" % (host_module.AGENT_PACKED_LIMIT + 1) + packed)
    bomb = zlib.compress(b"#" * (host_module.AGENT_SOURCE_LIMIT + 1))     # inflates past the bound
    assert b"bad agent" in _refused(b"%d\n" % len(bomb) + bomb)


CODEC_VALUES = [
    {"ok": True, "result": {"kind": "file", "mode": 0o644, "mtime": 1796293980.3759134, "size": 0}},
    {"ok": False, "kind": "os", "errno": 2, "strerror": "No such file or directory", "filename": "/x/é\n\"\\"},
    [None, True, False, 0, -1, 10 ** 30, 1e-300, -0.0, float("inf"), float("-inf"), "", "\u2028\ud800", "\t\x00"],
    {"1": [], "2": {}, "nested": [[{"b64": "AAEC"}]], "snowman ☃": "☃"},
]


def test_agent_codec_writes_and_reads_what_json_does() -> None:
    loads, dumps = rpc._json_codec()
    assert getattr(loads, "__module__", None) == "cpctl.agent.rpc"    # the accelerator, not the fallback
    for value in CODEC_VALUES:
        text = dumps(value)
        assert text == json.dumps(value)
        assert json.loads(text) == loads(text) and loads("  %s \r\n" % text) == loads(text)
    assert dumps({1: "a", None: "b"}) == json.dumps({1: "a", None: "b"})
    assert math.isnan(loads(dumps(float("nan"))))
    for bad in ('{"a": 1', '{"a": 1} x', "", "nul", "{'a': 1}", '["\x01"]'):
        with pytest.raises(ValueError):
            loads(bad)
    with pytest.raises(TypeError):
        dumps({"a": b"bytes"})           # bytes travel as {"b64": ...}, never raw


def test_agent_codec_falls_back_to_json_without_the_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "_json", None)          # import _json now fails
    loads, dumps = rpc._json_codec()
    assert (loads, dumps) == (json.loads, json.dumps)


def test_agent_without_the_accelerator_still_serves(tmp_path) -> None:
    loader = host_module.agent_bootstrap(sys.executable)[-1]
    argv = [sys.executable, "-S", "-c", "import sys; sys.modules['_json'] = None\n" + loader]
    proc = subprocess.run(argv, input=host_module.agent_payload() + b'{"op": "info", "args": {}}\n',
                          capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert dict(json.loads(proc.stdout.splitlines()[1])["result"], pid=0) == dict(fileops.info(), pid=0)


def test_agent_info_is_what_the_local_host_says() -> None:
    out = json.loads(_start_agent(host_module.agent_payload()).splitlines()[1])["result"]
    local = LocalHost().info()
    assert out == dict(local, pid=out["pid"]) and out["pid"] != local["pid"]
    assert out["hostname"] == socket.gethostname()


def test_agent_serving_the_views_imports_no_json_re_or_socket(tmp_path) -> None:
    """What the agent imports is CPU every master pays at every agent start: json (with re and
    enum) was a third of it. The reads of status, check and history go through it here."""
    view = open_node(_settings(NodeDirs(str(tmp_path))), host=LocalHost())
    reads = view.view_reads() + [view.state.read_call(p) for p in (view.state.history_path, view.state.journal_path)]
    request = json.dumps({"op": "batch", "args": rpc.encode(
        {"requests": [{"op": op, "args": args} for op, args in reads]})}).encode() + b"\n"
    argv = host_module.agent_bootstrap(sys.executable)
    proc = subprocess.run([argv[0], "-X", "importtime"] + argv[1:], input=host_module.agent_payload() + request,
                          capture_output=True, timeout=30)
    assert proc.returncode == 0 and b'"ok": true' in proc.stdout.splitlines()[1], proc.stderr
    imported = {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines()[1:]}
    assert "_json" in imported
    assert not imported & {"json", "re", "enum", "socket", "base64", "subprocess", "typing"}, sorted(imported)


def test_the_agent_package_ships_as_one_program() -> None:
    """Issue 47: ``cpctl.agent`` is cut into modules and shipped as one program (``assemble``): every
    module is shipped, no two define the same name (one namespace on the node), and a module that
    imports a sibling the program has not defined yet is refused rather than shipped broken."""
    directory = os.path.dirname(host_module.agent_package.__file__)
    found = sorted(name[:-3] for name in os.listdir(directory) if name.endswith(".py") and name != "__init__.py")
    assert sorted(host_module.AGENT_MODULES) == found
    owner: dict = {}
    for name in host_module.AGENT_MODULES:
        with open(os.path.join(directory, name + ".py"), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        for node in tree.body:
            targets = [node] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else \
                node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                names = [target.name] if isinstance(target, (ast.FunctionDef, ast.ClassDef)) else \
                    [n.id for n in ([target] if isinstance(target, ast.Name) else getattr(target, "elts", []))
                     if isinstance(n, ast.Name)]          # OPS["x"] = ... adds to a name, defines none
                for defined in names:
                    assert owner.setdefault(defined, name) == name, (defined, owner[defined], name)
    program = host_module.agent_source().decode()
    assert "from cpctl" not in program and "import cpctl" not in program
    assert program.count("\ndef revert_plan_main(argv):") == 1 and program.rstrip().endswith("agent_main()")
    with pytest.raises(ValueError, match="not an earlier sibling"):
        host_module.assemble(("rpc", "fileops"))


# --- shipped by need (issue 47): a view's connection carries the base, a change's modules follow ---

def _wire(request: dict) -> bytes:
    return json.dumps(dict(request, args=rpc.encode(request.get("args") or {}))).encode() + b"\n"


def test_a_status_connection_ships_less_than_a_change_and_both_stay_within_100_kb() -> None:
    base = zlib.decompress(host_module.agent_payload().partition(b"\n")[2])
    assert base == host_module.assemble(host_module.AGENT_BASE)
    assert b"class Transaction" not in base and b"def etcd_snapshot" not in base
    status = len(host_module.agent_payload())
    change = status + len(json.dumps(rpc.encode(host_module.agent_load("transaction"))))   # as it travels
    assert status < change <= 100 * 1024, (status, change)


def test_an_op_not_shipped_comes_with_its_first_request_and_only_then() -> None:
    """A fresh agent lacks ``transaction``: asked without its modules it is an error, asked with them
    (``load``) it runs, and a later request carrying modules again (a new session on a kept agent) does
    not run them: garbage in their place changes nothing then."""
    state = {"op": "transaction", "args": {"request": {"do": "nothing"}}}
    load = rpc.encode(host_module.agent_load("transaction"))
    lines = _start_agent(host_module.agent_payload() + _wire(state) + _wire(dict(state, load=load))
                         + _wire(dict(state, load=rpc.encode(b"not zlib")))
                         + _wire({"op": "load", "args": {"source": host_module.agent_load("transaction")}})
                         ).splitlines()
    bare, loaded, kept, again = (json.loads(line) for line in lines[1:5])
    assert not bare["ok"] and bare["message"] == "KeyError: 'transaction'"      # not on the node
    assert not loaded["ok"] and loaded["message"] == "KeyError: 'state_dir'"   # it ran: this request is bad
    assert kept == loaded
    assert again["ok"] and "transaction" in again["result"] and "etcd_snapshot" not in again["result"]


def test_load_refuses_more_than_its_bound() -> None:
    bomb = zlib.compress(b"#" * (rpc.LOAD_LIMIT + 1))
    lines = _start_agent(host_module.agent_payload() + _wire({"op": "load", "args": {"source": bomb}})).splitlines()
    answer = json.loads(lines[1])
    assert not answer["ok"] and "at most" in answer["message"]


def test_a_change_through_the_agent_sends_its_modules_once_per_session(tmp_path) -> None:
    agent = SubprocessAgentHost()
    try:
        sent: List[bytes] = []
        real = agent._writer.write

        def write(data: bytes) -> int:
            sent.append(data)
            return real(data)
        agent._writer.write = write                    # type: ignore[method-assign]
        for _ in range(2):
            with pytest.raises(CpctlError, match="KeyError: 'entry'"):       # it ran on the node: a bad request
                agent._request("transaction", {"request": {"do": "recover", "state_dir": str(tmp_path)}})
        assert [b'"load"' in line for line in sent] == [True, False]
    finally:
        agent.close()
