"""Helpers for the core (issue #2) tests: a kubeadm-like node in a tmp dir, the real CLI (in this
process, or as a subprocess where the process is the point), directory snapshots and the
crash-safety invariants checked on the filesystem."""

from __future__ import annotations

import ctypes
import hashlib
import io
import json
import os
import select
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator, Optional

import pytest
import yaml

CLI = [sys.executable, "-m", "cpctl"]
NODE = "cp-1"

_POD = """\
apiVersion: v1
kind: Pod
metadata:
  labels:
    component: {name}
    tier: control-plane
  name: {name}
  namespace: kube-system
spec:
  containers:
  - command:
    - {name}
{args}    image: registry.k8s.io/{image}
    name: {name}
  hostNetwork: true
  priorityClassName: system-node-critical
"""


def _pod(name: str, image: str, args: list) -> bytes:
    return _POD.format(name=name, image=image, args="".join("    - --%s\n" % a for a in args)).encode()


# The four manifests kubeadm writes, shortened but structurally real.
MANIFESTS = {
    "etcd.yaml": _pod("etcd", "etcd:3.5.12-0", ["data-dir=/var/lib/etcd", "listen-client-urls=https://127.0.0.1:2379"]),
    "kube-apiserver.yaml": _pod("kube-apiserver", "kube-apiserver:v1.30.0",
                                ["etcd-servers=https://127.0.0.1:2379", "secure-port=6443"]),
    "kube-controller-manager.yaml": _pod("kube-controller-manager", "kube-controller-manager:v1.30.0",
                                         ["kubeconfig=/etc/kubernetes/controller-manager.conf", "leader-elect=true"]),
    "kube-scheduler.yaml": _pod("kube-scheduler", "kube-scheduler:v1.30.0",
                                ["kubeconfig=/etc/kubernetes/scheduler.conf", "leader-elect=true"]),
}
POD_OF = {f: yaml.safe_load(d)["metadata"]["name"] for f, d in MANIFESTS.items()}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class NodeDirs:
    """A manifests dir and a state dir for one simulated control-plane node."""

    def __init__(self, root: str, state: Optional[str] = None, files: Optional[dict] = None) -> None:
        self.root = root
        self.manifests = os.path.join(root, "manifests")
        self.state = state or os.path.join(root, "state")
        self.files = dict(MANIFESTS if files is None else files)
        self.pods = {f: yaml.safe_load(d)["metadata"]["name"] for f, d in self.files.items()}
        os.makedirs(self.manifests, exist_ok=True)
        for name, data in self.files.items():
            with open(os.path.join(self.manifests, name), "wb") as handle:
                handle.write(data)
            os.chmod(os.path.join(self.manifests, name), 0o600)

    @property
    def parked(self) -> str:
        return os.path.join(self.state, "parked")

    @property
    def journal(self) -> str:
        return os.path.join(self.state, "journal.json")

    @property
    def history_file(self) -> str:
        return os.path.join(self.state, "history.jsonl")

    def env(self, **extra: str) -> dict:
        env = dict(os.environ)
        env.update({"CPCTL_MANIFESTS_DIR": self.manifests, "CPCTL_STATE_DIR": self.state, "CPCTL_PROBE": "none",
                    "CPCTL_NODE_NAME": NODE})
        env.pop("CPCTL_DEBUG", None)
        env.update(extra)
        return env

    def argv(self, *args: str, lock_timeout: Optional[float] = None) -> list:
        pre = ["--lock-timeout", str(lock_timeout)] if lock_timeout is not None else []
        return CLI + pre + list(args)

    def run(self, *args: str, rc: Optional[int] = 0, lock_timeout: Optional[float] = None,
            timeout: float = 60, process: bool = False) -> subprocess.CompletedProcess:
        """Run the real CLI; check the exit code and, on failure, exactly one stderr line.

        The CLI runs in this process (``cpctl.cli.main.run``, what the console script calls after
        setting its SIGTERM handler), with this node's environment and its own stdin/stdout/stderr:
        the same code and the same output, without ~0.1 s of interpreter start-up per command.
        ``process=True`` (or ``CPCTL_TEST_PROCESS=1`` for every run) starts ``python -m cpctl``
        instead, for tests about the process itself."""
        argv = self.argv(*args, lock_timeout=lock_timeout)
        if process or os.environ.get("CPCTL_TEST_PROCESS"):
            proc = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=timeout)
        else:
            proc = run_in_process(argv, self.env())
        check_result(proc, rc)
        return proc

    def history(self) -> list:
        if not os.path.exists(self.history_file):
            return []
        with open(self.history_file, "rb") as handle:
            return [json.loads(line) for line in handle.read().decode().splitlines() if line.strip()]

    def present(self) -> list:
        return sorted(n for n in os.listdir(self.manifests) if not n.startswith("."))

    def parked_files(self) -> list:
        if not os.path.isdir(self.parked):
            return []
        return sorted(n for n in os.listdir(self.parked) if not n.startswith("."))


def failure_line(line: str, code: int) -> bool:
    """True when ``line`` is how cpctl reports a failure with exit ``code``: ``cpctl: ...``, or
    with ``-o json`` one JSON object ``{"error": {"code": code, "reason": ..., "message": ...}}``."""
    if line.startswith("cpctl: "):
        return True
    try:
        error = json.loads(line)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return error["code"] == code and bool(error["message"]) and isinstance(error["reason"], str)


#: One in-process CLI run at a time: a run swaps the process's environment and standard streams,
#: so two threads' runs (the crash test's lanes) would each see the other's node.
_IN_PROCESS = threading.Lock()


def run_in_process(argv: list, env: dict, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """``argv`` (``CLI`` + arguments) run by ``cpctl.cli.main.run`` in this process, with ``env`` as
    the whole environment and fresh standard streams (none is a terminal); all restored after.
    Runs from several threads take turns (``_IN_PROCESS``)."""
    with _IN_PROCESS:
        return _run_in_process(argv, env, stdin)


def _run_in_process(argv: list, env: dict, stdin: bytes) -> subprocess.CompletedProcess:
    from cpctl.cli import main as cli_main
    streams = sys.stdin, sys.stdout, sys.stderr
    saved_env = dict(os.environ)
    out, err = io.BytesIO(), io.BytesIO()
    # the wrappers stay referenced here: one that is collected closes its buffer
    wrappers = (io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"),
                io.TextIOWrapper(out, encoding="utf-8", write_through=True),
                io.TextIOWrapper(err, encoding="utf-8", write_through=True))
    sys.stdin, sys.stdout, sys.stderr = wrappers
    os.environ.clear()
    os.environ.update(env)
    try:
        code = cli_main.run(list(argv[len(CLI):]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        for wrapper in wrappers[1:]:
            wrapper.flush()
        sys.stdin, sys.stdout, sys.stderr = streams
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(list(argv), code, out.getvalue().decode("utf-8"),
                                       err.getvalue().decode("utf-8"))


def killed_run(node: "NodeDirs", action: Callable[[Any], Any], kill_at: int) -> "tuple[int, int]":
    """Run ``action(node)`` on this node (``open_node`` over a ``MockHost``, probe none) in a forked
    child that SIGKILLs itself before its ``kill_at``-th host call (0: never): the kill-point sweeps'
    one harness. Returns (wait status, number of host calls when it finished)."""
    from cpctl.core.settings import Settings
    from cpctl.host.mock import Fault, MockHost
    from cpctl.ops.wiring import open_node

    def child() -> int:
        host = MockHost([Fault("*", "SIGKILL", at=kill_at)] if kill_at else [])
        settings = Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none",
                            lock_timeout=1)
        action(open_node(settings, host))
        return len(host.calls)
    return in_child(child)


def in_child(body: Callable[[], int]) -> "tuple[int, int]":
    """``body()`` in a forked child that never returns into pytest (no teardown, ever): (its wait
    status, the count ``body`` returned; 0 when it did not return). It exits 0 when ``body``
    returned, 1 when it raised; a SIGKILL it sends itself shows in the status."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            os.write(write_end, str(body()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as pipe:
        count = pipe.read()
    return status, int(count or 0)


def check_result(proc: subprocess.CompletedProcess, rc: Optional[int]) -> None:
    what = "%s\nstdout: %s\nstderr: %s" % (proc.args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, what
    if rc is not None:
        assert proc.returncode == rc, what
    if proc.returncode != 0:
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and failure_line(lines[0], proc.returncode), "want one stderr line: " + what


def snapshot(*roots: str) -> dict:
    """Every entry under ``roots``: kind, mode, owner and bytes (or link target)."""
    snap = {}
    for root in roots:
        if not os.path.lexists(root):
            snap[root] = None
            continue
        paths = [root]
        if os.path.isdir(root) and not os.path.islink(root):
            for dirpath, dirnames, filenames in os.walk(root):
                paths += [os.path.join(dirpath, n) for n in dirnames + filenames]
        for path in paths:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as handle:
                    content = sha(handle.read())
            else:
                content = None
            snap[path] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, content)
    return snap


def temp_files(*roots: str) -> list:
    found = []
    for root in roots:
        for dirpath, _dirs, filenames in os.walk(root):
            found += [os.path.join(dirpath, n) for n in filenames if ".cpctl-tmp" in n]
    return found


def complete_history_records(path: str) -> int:
    """Complete (newline-terminated, parseable) records; a torn last line is not counted."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as handle:
        data = handle.read()
    count = 0
    for line in data.split(b"\n")[:-1]:
        if line.strip():
            json.loads(line)    # every terminated line must parse
            count += 1
    return count


def assert_bytes_safe(node: NodeDirs) -> None:
    """Invariants that hold at *every* instant, even right after a SIGKILL.

    (a) each manifest's bytes exist, complete, in the manifests dir or in STATE/parked;
    (b) the manifests dir holds only the expected files, each the full original (no partial
        file, so never two files defining one pod) - dot temp files are ignored by the kubelet.
    """
    for name, data in node.files.items():
        copies = [os.path.join(node.manifests, name), os.path.join(node.parked, name)]
        found = []
        for path in copies:
            if os.path.exists(path):
                with open(path, "rb") as handle:
                    found.append(handle.read())
        assert data in found, "%s lost: copies %r" % (name, [sha(f) for f in found])
    pods = []
    for entry in node.present():
        assert entry in node.files, "unexpected file %s in the manifests dir" % entry
        with open(os.path.join(node.manifests, entry), "rb") as handle:
            assert handle.read() == node.files[entry], "partial/changed file %s in the manifests dir" % entry
        pods.append(node.pods[entry])
    assert len(pods) == len(set(pods))


def assert_settled(node: NodeDirs) -> dict:
    """Invariants once no operation is in flight: one copy per manifest, metadata matches,
    no journal, no temp file, history replays to the current state. Returns file -> state."""
    assert not os.path.exists(node.journal), "journal still pending"
    assert temp_files(node.manifests, node.state) == []
    assert_bytes_safe(node)
    present, parked = set(node.present()), set(node.parked_files())
    assert present | parked == set(node.files) and not present & parked, (present, parked)
    metas = set(os.listdir(os.path.join(node.state, "meta"))) if os.path.isdir(node.state) else set()
    assert metas == {p + ".json" for p in parked}, (metas, parked)
    for name in parked:
        with open(os.path.join(node.state, "meta", name + ".json")) as handle:
            assert json.load(handle)["checksum"] == sha(node.files[name])
    # Replaying the history gives, per file, alternating stop/start ending in today's state.
    last: dict = {}
    for rec in node.history():
        assert rec["checksum"] == sha(node.files[rec["file"]]), rec
        want = "start" if last.get(rec["file"], "start") == "stop" else "stop"
        assert rec["action"] == want, "history not alternating for %s: %r" % (rec["file"], rec)
        last[rec["file"]] = rec["action"]
    for name in node.files:
        assert (last.get(name) == "stop") == (name in parked), (name, last.get(name), parked)
    return {n: ("parked" if n in parked else "present") for n in node.files}


class Tmpfs:
    """A real tmpfs mount (so the state dir is on another filesystem: rename gives EXDEV)."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", path],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip("cannot mount a tmpfs here (need root / CAP_SYS_ADMIN): %s" % proc.stderr.strip())

    def close(self) -> None:
        subprocess.run(["umount", "-l", self.path], check=False)


def tmpfs_fixture(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    mount = Tmpfs(str(tmp_path_factory.mktemp("tmpfs")))
    try:
        yield mount.path
    finally:
        mount.close()


def meta_bytes(meta: dict) -> bytes:
    """A parked manifest's metadata file, byte for byte as cpctl writes it."""
    return (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()


def journal_for(node: NodeDirs, action: str, name: str, op: str = "feedc0de00000001", pid: int = 424242,
                meta: Optional[dict] = None) -> dict:
    """The journal entry cpctl writes before a stop or start of ``name`` (as ``Node.park_change``
    and ``Node.start`` build it), with the staged metadata bytes a stop's write step redoes from.
    Besides the journal's own fields: ``src``, ``dst`` (the manifest's move) and ``meta``."""
    data = node.files[name]
    meta = meta or {"file": name, "component": POD_OF[name], "namespace": "kube-system", "checksum": sha(data),
                    "mode": 0o600, "uid": 0, "gid": 0, "parked_at": "2024-01-01T00:00:00Z", "parked_by": "root",
                    "host": "test", "reason": "crash test", "until": None, "manifests_dir": node.manifests,
                    "node": NODE}
    in_dir, parked = os.path.join(node.manifests, name), os.path.join(node.parked, name)
    meta_path, staged = os.path.join(node.state, "meta", name + ".json"), os.path.join(node.state, "staged")
    move = {"kind": "move", "src": in_dir if action == "stop" else parked,
            "path": parked if action == "stop" else in_dir, "checksum": sha(data)}
    if action == "stop":
        os.makedirs(staged, mode=0o700, exist_ok=True)
        new = os.path.join(staged, "%s.0.new" % op)
        with open(new, "wb") as handle:
            handle.write(meta_bytes(meta))
        steps, commit = [{"kind": "write", "path": meta_path, "checksum": sha(meta_bytes(meta)), "staged": new,
                          "mode": 0o600}, move], 1
    else:
        steps, commit = [move, {"kind": "remove", "path": meta_path,
                                "kept": os.path.join(staged, "%s.1.removed" % op)}], 0
    return {"version": 2, "op": op, "action": action, "component": POD_OF[name], "file": name,
            "checksum": sha(data), "commit": commit, "steps": steps, "record": {"reason": meta.get("reason")},
            "src": move["src"], "dst": move["path"], "meta": meta, "started": "2024-01-01T00:00:00Z", "pid": pid}


def sealed(state: str, entry: dict) -> dict:
    """``entry`` sealed with the node's journal key, as cpctl seals the journal it writes (the key
    created as cpctl creates it): a hand-made journal that cpctl's recovery will act on."""
    from cpctl.agent import journalseal
    os.makedirs(state, mode=0o700, exist_ok=True)
    return journalseal.sealed(entry, journalseal.journal_key(state, create=True))


def stop_killed_after_move(node: NodeDirs, op: str = "feedc0de") -> None:
    """A stop of etcd killed right after its move: etcd.yaml is parked and the sealed journal (one
    move step, committed at step 0) says so; the next session's recovery completes the stop and
    records it in the history with ``op``."""
    src, dst = os.path.join(node.manifests, "etcd.yaml"), os.path.join(node.parked, "etcd.yaml")
    os.rename(src, dst)
    with open(dst, "rb") as handle:
        digest = sha(handle.read())
    entry = {"version": 2, "op": op, "action": "stop", "component": "etcd", "file": "etcd.yaml",
             "checksum": digest, "commit": 0, "steps": [{"kind": "move", "src": src, "path": dst, "checksum": digest}]}
    with open(node.journal, "w") as handle:
        json.dump(sealed(node.state, entry), handle)


def write_json(path: str, value: dict) -> None:
    with open(path, "w") as handle:
        json.dump(value, handle, indent=2, sort_keys=True)
    os.chmod(path, 0o600)


def edit_baseline(node: "NodeDirs", change: Callable[[dict], None]) -> None:
    """Change the node's drift baseline (``STATE/baseline.json``) behind cpctl's back."""
    path = os.path.join(node.state, "baseline.json")
    with open(path) as handle:
        baseline = json.load(handle)
    change(baseline)
    write_json(path, baseline)


def tamper_baseline_copy(node: "NodeDirs", filename: str) -> None:
    """The baseline's copy of ``filename`` no longer matches the checksum recorded with it."""
    def tamper(baseline: dict) -> None:
        baseline["manifests"][filename]["content"] += "# someone was here\n"
    edit_baseline(node, tamper)


class _Echo(BaseHTTPRequestHandler):
    """GET answers ``ok <path>``, with the client's port in ``X-Peer-Port`` (keep-alive on)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        body = b"ok " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Peer-Port", str(self.client_address[1]))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def echo_server() -> Iterator[str]:
    """A local HTTP server for the agent's ``http`` op; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d" % server.server_port
    finally:
        server.shutdown()
        server.server_close()


class ArrivalWatch:
    """Tells the instant a file of one name is renamed or created in a directory (inotify, the
    lab kubelet's ctypes wrapper).

    The crash tests kill cpctl between its journal write and its manifest move, a window of
    well under a millisecond when fsync is cheap; polling the file system (0.2 ms sleeps, then
    the GIL) lands after it on a fast machine. inotify wakes the test within microseconds.
    """

    def __init__(self, directory: str, name: str) -> None:
        from cpctl_lab.kubelet import Inotify
        self.name = name
        self._arrivals = Inotify.CREATE | Inotify.MOVED_TO
        inotify = Inotify.open()
        if inotify is None:
            raise OSError("inotify is not available")
        if inotify.watch(directory) < 0:
            inotify.close()
            raise OSError(ctypes.get_errno(), "inotify_add_watch", directory)
        self._inotify = inotify

    def wait(self, timeout: float, give_up: Callable[[], bool]) -> bool:
        """True once ``name`` arrived; False after ``timeout`` or when ``give_up()`` says so."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not give_up():
            if not select.select([self._inotify.fd], [], [], 0.02)[0]:
                continue
            if any(mask & self._arrivals and name == self.name for _wd, mask, name in self._inotify.read()):
                return True
        return False

    def close(self) -> None:
        self._inotify.close()


def schema_valid(name: str, doc: Any) -> Any:
    """``doc`` validated against cpctl's shipped JSON Schema ``cpctl/schemas/NAME.json`` (closed where
    the shape is cpctl's: a field it does not describe fails); returns ``doc``. For the flow tests
    whose answers reach branches the schema tests (tests/cli/test_json_schemas.py) do not."""
    import jsonschema
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cpctl", "schemas",
                        "%s.json" % name)
    with open(path) as handle:
        jsonschema.Draft202012Validator(json.load(handle)).validate(doc)
    return doc


class _GoYaml(yaml.SafeDumper):
    """kubeadm's way of writing a ClusterConfiguration (go-yaml, through sigs.k8s.io/yaml): keys sorted, a
    string with a newline as a literal block scalar - ``|``, ``|-``, ``|+``, ``|2-`` for a leading space -
    where the emitter allows one (else double-quoted), a long line wrapped at 80 columns. PyYAML's emitter
    is the C libyaml's that go-yaml ports: the same block scalar hints (tests/core/test_tinyyaml_multiline.py
    reads the real go-yaml's output of kubectl)."""


_GoYaml.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def go_yaml(value: Any) -> str:
    """``value`` as kubeadm writes a ClusterConfiguration (``_GoYaml``)."""
    return yaml.dump(value, Dumper=_GoYaml, sort_keys=True, width=80)
