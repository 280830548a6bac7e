"""``cpctl logs COMPONENT`` (issue #17) and the lab's ``pods/NAME/log``.

* crictl answers first (newest sandbox, newest attempt, both streams); the same lines come from
  the API server when crictl is missing; neither is one line with a documented exit code;
* ``--previous`` after a crash loop shows the attempt before the newest one, ``--tail`` counts from
  the end, a parked component is "not running" (exit 3);
* a control character a container wrote is escaped in text output and kept exact in JSON;
* ``-H`` runs it on a master over a real sshd;
* the lab's ``pods/log`` answers the real kubectl like a real API server (and its refusals).

Every expected line is read from the lab's own runtime (its crictl), never written into the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Tuple, Type

import pytest

from cpctl.probes.diagnose import merged_log_lines
from tests.coreutil import CLI, NodeDirs, check_result
from tests.labfixture import api, crictl, get_pod, is_ready, kubectl, mirror, run_cpctl, wait_for
from tests.remoteutil import Cli, clean_env

SCALE = 0.05            # crash-loop back-offs of 0.5 s, 1 s, 2 s ...
PAUSE = "registry.k8s.io/pause:3.9"


def attempts(lab: Any, name: str = "kube-scheduler") -> List[Dict[str, Any]]:
    """``crictl ps -a`` entries of container ``name`` in its newest sandbox, oldest first."""
    out = json.loads(crictl(lab.crictl, "ps", "-a", "--name", "^%s$" % name, "-o", "json").stdout)["containers"]
    newest = max(out, key=lambda c: int(c["createdAt"]))["podSandboxId"] if out else ""
    return sorted((c for c in out if c["podSandboxId"] == newest), key=lambda c: int(c["createdAt"]))


def runtime_lines(lab: Any, name: str = "kube-scheduler") -> List[str]:
    """Every line the newest attempt of ``name`` wrote, as the lab's crictl prints them (the
    control-plane components write to stderr only)."""
    proc = crictl(lab.crictl, "logs", attempts(lab, name)[-1]["id"])
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    return proc.stderr.splitlines()


def scheduler_ready(lab: Any) -> None:
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), 15, "the scheduler Ready")


def add_flag(lab: Any, flag_yaml: str) -> None:
    """Add a flag (a YAML scalar, so it may be double-quoted with escapes) to the scheduler's command."""
    path = os.path.join(str(lab.manifests_dir()), "kube-scheduler.yaml")
    with open(path) as handle:
        text = handle.read()
    with open(path + ".tmp", "w") as handle:
        handle.write(text.replace("- kube-scheduler\n", "- kube-scheduler\n    - %s\n" % flag_yaml, 1))
    os.rename(path + ".tmp", path)


def worker_pod(lab: Any, name: str, containers: List[Dict[str, Any]], **spec: Any) -> Dict[str, Any]:
    """A pod in ``default`` already bound to the lab's worker."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": dict(spec, nodeName=lab.worker, containers=containers)}


def newest_attempt_says(lab: Any, words: str) -> bool:
    found = attempts(lab)
    return bool(found) and words in crictl(lab.crictl, "logs", found[-1]["id"]).stderr


def test_crictl_answers_first_in_text_and_json(lab: Any) -> None:
    scheduler_ready(lab)
    everything = runtime_lines(lab)
    node = lab.node_name()
    text = run_cpctl(lab, "logs", "scheduler", "--tail", "2")
    check_result(text, 0)
    assert text.stdout.splitlines() == everything[-2:]
    assert text.stderr == "cpctl: kube-scheduler-%s: 2 lines of container kube-scheduler (attempt 0) from crictl\n" \
        % node
    doc = json.loads(run_cpctl(lab, "logs", "scheduler", "-o", "json", "--tail", "0").stdout)
    assert doc == {"host": None, "node": node, "component": "kube-scheduler", "pod": "kube-scheduler-%s" % node,
                   "container": "kube-scheduler", "source": "crictl", "previous": False, "lines": everything}

    # -f: the last lines, then the stream until the container exits (issue #39)
    import sys
    env = dict(os.environ, **lab.env)
    follow = subprocess.Popen([sys.executable, "-m", "cpctl", "logs", "-f", "scheduler", "--tail", "2"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(runtime_lines(lab)) >= len(everything), 10, "the log read")
        time.sleep(1.0)                                   # (the follower is up: its crictl polls every 0.5 s)
        assert run_cpctl(lab, "stop", "scheduler").returncode == 0
        out, err = follow.communicate(timeout=60)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.communicate()
    assert follow.returncode == 0, err
    assert out.splitlines()[:2] == everything[-2:], out
    assert "following container kube-scheduler (attempt 0) through crictl, across its restarts; Ctrl-C ends" in err
    assert "container kube-scheduler exited (attempt 0); nothing more to follow: kube-scheduler is not running on " \
        "%s: parked since " % node in err, err
    remote = run_cpctl(lab, "-H", "nowhere", "logs", "-f", "scheduler")
    assert remote.returncode == 2 and "logs -f follows a log on this machine only" in remote.stderr, remote.stderr


MARKER = re.compile(r"^--- kube-scheduler-\S+: container kube-scheduler (restarted|started again in a new pod "
                    r"\(manifest changed\)): attempt (\d+), container (\S+); its lines from the first(; .*)? ---$")


def test_follow_goes_on_across_restarts_with_a_line_naming_each_new_container(lab_factory: Any, tmp_path: Any) -> None:
    """Issue 48: ``logs -f`` no longer ends when the container restarts. A manifest change (a new pod)
    and then a crash loop (restarts in that pod): each next attempt is followed from its first line,
    after a marker line naming it (attempt, container id) - every line of each followed attempt, as the
    runtime holds them -; parking the component ends it (exit 0, said why)."""
    import sys
    lab = lab_factory(time_scale=SCALE)
    scheduler_ready(lab)
    out_path, err_path = tmp_path / "out", tmp_path / "err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        follow = subprocess.Popen([sys.executable, "-m", "cpctl", "logs", "-f", "scheduler", "--tail", "1"],
                                  env=dict(os.environ, **lab.env), stdout=out, stderr=err, text=True)
    try:
        wait_for(lambda: "following container" in err_path.read_text(), 60, "the follower up")
        add_flag(lab, "--no-such-flag=1")
        wait_for(lambda: sum(" restarted: attempt " in line for line in out_path.read_text().splitlines()) >= 2,
                 120, "two restarts of the crash-looping container followed")
        check_result(run_cpctl(lab, "stop", "scheduler", "--no-wait"), 0)
        follow.wait(timeout=120)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    said = err_path.read_text()
    assert follow.returncode == 0 and "Traceback" not in said, said
    assert "container kube-scheduler exited (attempt 0); waiting for its next attempt (Ctrl-C ends)" in said, said
    assert "; nothing more to follow: kube-scheduler is not running on %s: parked since " % lab.node_name() in said
    lines = out_path.read_text().splitlines()
    markers = [(i, MARKER.match(line)) for i, line in enumerate(lines) if line.startswith("--- ")]
    assert markers and all(m for _, m in markers), lines
    ids = {c["id"]: c for c in _all_attempts(lab)}
    before = 0                                        # the attempt the follower started with
    for n, (at, match) in enumerate(markers):
        assert match is not None
        attempt = int(match.group(2))                 # an attempt that ended unseen is named, never hidden
        assert (match.group(1) == "restarted") == (attempt > before), match.group(0)
        assert bool(match.group(4)) == (match.group(1) == "restarted" and attempt > before + 1), match.group(0)
        before = attempt
        [full] = [i for i in ids if i.startswith(match.group(3))]
        assert ids[full]["metadata"]["attempt"] == int(match.group(2)), (match.group(0), ids[full])
        end = markers[n + 1][0] if n + 1 < len(markers) else len(lines)
        written = crictl(lab.crictl, "logs", full).stderr.splitlines()
        assert lines[at + 1:end] == written, (match.group(0), lines[at + 1:end], written)
        assert written[-1] == "Error: unknown flag: --no-such-flag" or n == len(markers) - 1, written


def _all_attempts(lab: Any) -> List[Dict[str, Any]]:
    """``crictl ps -a`` entries of every kube-scheduler container, every sandbox."""
    listed = crictl(lab.crictl, "ps", "-a", "--name", "^kube-scheduler$", "-o", "json").stdout
    return list(json.loads(listed)["containers"])


def test_the_api_answers_when_crictl_is_missing_and_neither_is_one_line(lab: Any) -> None:
    scheduler_ready(lab)
    everything = runtime_lines(lab)
    missing = str(lab.dir / "no-such-crictl")
    proc = run_cpctl(lab, "logs", "scheduler", "-o", "json", "--tail", "2", CPCTL_CRICTL=missing)
    check_result(proc, 0)
    doc = json.loads(proc.stdout)
    assert doc["source"] == "api" and doc["lines"] == everything[-2:] and doc["container"] == "kube-scheduler"
    assert "2 lines of container kube-scheduler from the API server (crictl could not answer: %s not found)" \
        % missing in proc.stderr
    # No earlier attempt, said by the API server: nothing to show, exit 3 (as from crictl), the kubelet's words.
    refused = run_cpctl(lab, "logs", "scheduler", "--previous", CPCTL_CRICTL=missing)
    check_result(refused, 3)
    assert 'previous terminated container "kube-scheduler" in pod "kube-scheduler-%s" not found' % lab.node_name() \
        in refused.stderr
    # Neither crictl nor a kubeconfig: exit 7, one line naming both.
    neither = run_cpctl(lab, "logs", "scheduler", CPCTL_CRICTL=missing, KUBECONFIG=str(lab.dir / "no-such.conf"))
    check_result(neither, 7)
    assert "crictl could not answer (%s not found), nor the API server (cannot read kubeconfig" % missing \
        in neither.stderr


def test_previous_after_a_crash_loop_and_tail(lab_factory: Any) -> None:
    lab = lab_factory(time_scale=SCALE)
    scheduler_ready(lab)
    add_flag(lab, "--no-such-flag=1")
    wait_for(lambda: len(attempts(lab)) >= 2 and newest_attempt_says(lab, "unknown flag"), 15, "a restarted attempt")
    proc = run_cpctl(lab, "logs", "scheduler", "--previous", "--tail", "5", "-o", "json")
    check_result(proc, 0)
    doc = json.loads(proc.stdout)
    assert doc["source"] == "crictl" and doc["previous"] is True and len(doc["lines"]) == 5
    assert doc["lines"][-1] == "Error: unknown flag: --no-such-flag", "the crashed attempt's own words"
    assert " (previous attempt " in proc.stderr and "from crictl" in proc.stderr
    # The usage text before the error keeps its empty lines: exactly the tail of the runtime's log.
    assert doc["lines"] == runtime_lines(lab)[-5:]
    # Through the API the kubelet picks the last terminated attempt: the same words.
    api_doc = json.loads(run_cpctl(lab, "logs", "scheduler", "-p", "--tail", "1", "-o", "json",
                                   CPCTL_CRICTL=str(lab.dir / "none")).stdout)
    assert api_doc["source"] == "api" and api_doc["lines"] == ["Error: unknown flag: --no-such-flag"]


def test_no_previous_attempt_is_exit_3(lab: Any) -> None:
    scheduler_ready(lab)
    proc = run_cpctl(lab, "logs", "scheduler", "--previous")
    check_result(proc, 3)
    assert 'previous terminated container "kube-scheduler" in pod "kube-scheduler-%s" not found' % lab.node_name() \
        in proc.stderr


def test_a_parked_component_is_not_running(lab: Any) -> None:
    check_result(run_cpctl(lab, "stop", "scheduler", "--no-wait", "--reason", "maintenance"), 0)
    proc = run_cpctl(lab, "logs", "scheduler")
    check_result(proc, 3)
    assert proc.stdout == ""
    assert "kube-scheduler is not running on %s: parked since " % lab.node_name() in proc.stderr
    assert "reason: maintenance" in proc.stderr and "cpctl start scheduler" in proc.stderr


def test_a_container_the_pod_does_not_have_is_a_usage_error(lab: Any) -> None:
    proc = run_cpctl(lab, "logs", "scheduler", "-c", "sidecar")
    check_result(proc, 2)
    assert "has no container 'sidecar' (its containers: kube-scheduler)" in proc.stderr


def test_control_characters_are_escaped_in_text_and_exact_in_json(lab: Any) -> None:
    scheduler_ready(lab)
    add_flag(lab, '"--evil\\e]0;owned\\a=1"')            # YAML escapes: ESC and BEL in the flag's name
    wait_for(lambda: newest_attempt_says(lab, "unknown flag: --evil"), 15, "the component rejecting the flag")
    text = run_cpctl(lab, "logs", "scheduler", "--tail", "1")
    check_result(text, 0)
    assert text.stdout == "Error: unknown flag: --evil\\x1b]0;owned\\x07\n"
    assert "\x1b" not in text.stdout + text.stderr and "\x07" not in text.stdout + text.stderr
    doc = json.loads(run_cpctl(lab, "logs", "scheduler", "--tail", "1", "-o", "json").stdout)
    assert doc["lines"] == ["Error: unknown flag: --evil\x1b]0;owned\x07"]


def test_logs_on_a_master_over_ssh(sshd: Any, lab: Any, tmp_path: Any) -> None:
    scheduler_ready(lab)
    env = clean_env(str(tmp_path / "home"), **lab.env_for(1))
    kubeconfig = env.pop("KUBECONFIG")             # the master's, given as a path on the master
    remote = Cli(sshd.ssh_config, sshd.known_hosts, env)
    everything = runtime_lines(lab)
    doc = remote.json("-H", "master", "--kubeconfig", kubeconfig, "logs", "scheduler", "--tail", "2")
    [host] = doc["hosts"]
    assert host["status"] == "ok" and host["data"]["source"] == "crictl"
    assert host["data"]["lines"] == everything[-2:] and host["data"]["node"] == lab.node_name()
    text = remote.run("-H", "master", "--kubeconfig", kubeconfig, "logs", "scheduler", "--tail", "1")
    assert text.stdout.startswith("== master: ok ==\n%s\n" % everything[-1]), text.stdout


def test_lab_pods_log_answers_kubectl_like_a_real_api_server(lab: Any) -> None:
    scheduler_ready(lab)
    pod = "kube-scheduler-%s" % lab.node_name()
    everything = runtime_lines(lab)
    assert kubectl(lab, "logs", "-n", "kube-system", pod).stdout.splitlines() == everything
    assert kubectl(lab, "logs", "-n", "kube-system", pod, "--tail=1").stdout.splitlines() == everything[-1:]
    previous = kubectl(lab, "logs", "-n", "kube-system", pod, "--previous", check=False)
    assert previous.returncode == 1
    assert 'previous terminated container "kube-scheduler" in pod "%s" not found' % pod in previous.stderr
    # Several containers: the API server wants a name, and says which ones there are.
    duo = worker_pod(lab, "duo", [{"name": "a", "image": PAUSE}, {"name": "b", "image": PAUSE}])
    assert api(lab, "POST", "/api/v1/namespaces/default/pods", duo)[0] == 201
    code, status = api(lab, "GET", "/api/v1/namespaces/default/pods/duo/log")
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == "a container name must be specified for pod duo, choose one of: [a b]"
    # A container that cannot start yet (its hostPath file is missing): "waiting to start".
    mounted = {"name": "c", "image": PAUSE, "volumeMounts": [{"name": "f", "mountPath": "/f"}]}
    stuck = worker_pod(lab, "stuck", [mounted],
                       volumes=[{"name": "f", "hostPath": {"path": str(lab.dir / "no-such-file"), "type": "File"}}])
    assert api(lab, "POST", "/api/v1/namespaces/default/pods", stuck)[0] == 201
    wait_for(lambda: get_pod(lab, "default", "stuck"), what="the pod stored")
    waiting = kubectl(lab, "logs", "stuck", check=False)
    assert waiting.returncode == 1
    assert 'container "c" in pod "stuck" is waiting to start: ContainerCreating' in waiting.stderr
    # Discovery: pods/log is read only.
    code, resources = api(lab, "GET", "/api/v1")
    [log] = [r for r in resources["resources"] if r["name"] == "pods/log"]
    assert code == 200 and log["verbs"] == ["get"] and log["kind"] == "Pod"


# --- without a lab -------------------------------------------------------------------------------------

def test_both_streams_merge_in_the_order_written() -> None:
    """``crictl logs --timestamps`` stamps are RFC 3339 in the log file's zone; a line without one
    (a wrapped line) stays after the line before it; empty lines are lines."""
    out = (b"2024-05-01T10:00:00.5+02:00 out second\n"
           b"2024-05-01T08:00:02.000000001Z out fourth\n")
    err = (b"2024-05-01T08:00:00.100000000Z err first\n"
           b"2024-05-01T08:00:01Z err third\n"
           b"continued without a stamp\n"
           b"2024-05-01T08:00:01.900000000Z \n")
    assert merged_log_lines(out, err) == ["err first", "out second", "err third", "continued without a stamp", "",
                                          "out fourth"]
    assert merged_log_lines(b"", b"") == []


TOKEN = "logs-test-token-5f4e3d2c1b0a"


class _Proxy(BaseHTTPRequestHandler):
    """Something answering 200 where the API server should be, echoing the bearer token."""

    content_type = "text/html"

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        body = ("Welcome %s\n" % self.headers.get("Authorization", "")).encode()
        self.send_response(200)
        self.send_header("Content-Type", type(self).content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[Tuple[str, Type[_Proxy]]]:
    handler: Type[_Proxy] = type("Proxy", (_Proxy,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1], handler
    server.shutdown()
    server.server_close()


def test_an_api_answer_that_is_not_a_log_is_refused_and_the_token_never_shown(node: NodeDirs, tmp_path: Any,
                                                                             proxy: Tuple[str, Type[_Proxy]]) -> None:
    url, handler = proxy
    kubeconfig = tmp_path / "admin.conf"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": url}}], "users": [{"name": "u", "user": {"token": TOKEN}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    env = node.env(KUBECONFIG=str(kubeconfig), CPCTL_CRICTL=str(tmp_path / "no-crictl"))

    def logs() -> subprocess.CompletedProcess:
        return subprocess.run(CLI + ["logs", "scheduler", "-o", "json"], env=env, capture_output=True, text=True,
                              timeout=60)
    html = logs()
    check_result(html, 9)
    assert "answered 200 with text/html, not text/plain" in html.stderr and TOKEN not in html.stdout + html.stderr
    handler.content_type = "text/plain; charset=utf-8"
    echoed = logs()
    check_result(echoed, 0)
    assert json.loads(echoed.stdout)["lines"] == ["Welcome Bearer <redacted>"]
    assert TOKEN not in echoed.stdout + echoed.stderr


def test_the_marker_between_two_attempts_names_the_new_container_and_what_was_not_seen() -> None:
    """The line ``logs -f`` prints between two attempts: a restart in the same pod (attempt up), a
    container of a new pod (a manifest changed: its attempts count from 0 again - the lab restarts in
    the same sandbox, a real kubelet makes a new one), and attempts that ended between two looks."""
    from cpctl.ops.logs import restart_marker
    from cpctl.probes.diagnose import ContainerLog
    ended = ContainerLog("kube-scheduler", "a" * 64, 3, "CONTAINER_EXITED")
    assert restart_marker("kube-scheduler-cp1", ended, ContainerLog("kube-scheduler", "b" * 64, 4, "")) == (
        "--- kube-scheduler-cp1: container kube-scheduler restarted: attempt 4, container bbbbbbbbbbbbb; its lines "
        "from the first ---")
    assert restart_marker("kube-scheduler-cp1", ended, ContainerLog("kube-scheduler", "c" * 64, 0, "")) == (
        "--- kube-scheduler-cp1: container kube-scheduler started again in a new pod (manifest changed): attempt 0, "
        "container ccccccccccccc; its lines from the first ---")
    assert restart_marker("p", ended, ContainerLog("kube-scheduler", "d" * 64, 5, "")).endswith(
        "; attempt 4 ended before it could be followed ---")
    assert restart_marker("p", ended, ContainerLog("kube-scheduler", "d" * 64, 7, "")).endswith(
        "; attempts 4-6 ended before they could be followed ---")
