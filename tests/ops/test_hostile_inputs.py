"""Issue #22 items 1, 2, 8 and 9 on one node: what a master (its kubelet's flags, its files, its state
dir) says is untrusted input, and secrets never leave cpctl.

* 1: a node name that is not a DNS-1123 subdomain is refused (exit 4, one line, escaped) by every
  command before any use; ``edit``'s private copy stays in its private dir;
* 2: one redaction rule for secret values, in text, ``-o json``, ``--dry-run`` and the history, in
  every form (``--flag=value``, quoted, two items, ``env``);
* 8: a crafted journal names only the manifests dir, the state dir and companion files cpctl
  recorded: ``admin.conf`` and ``pki/ca.crt`` next to the manifests dir stay intact;
* 9: deep JSON in the state dir, ``-H ''``, a crictl that prints a 200 MiB line, a crafted revision
  number, a history past 64 MiB, a manifest named ``*.yaml`` in bash completion.

The real CLI runs as a subprocess against real files (``tests.coreutil.NodeDirs``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from typing import Any, Dict, List

import pytest

from cpctl.core.revisions import MAX_NUMBER
from cpctl.ops.scheduler import CONFIG_ANNOTATION
from cpctl.probes.diagnose import LOG_LINE_CHARS_MAX
from tests.coreutil import CLI, MANIFESTS, NodeDirs, check_result, sealed, sha, snapshot

pytestmark = pytest.mark.timeout(180)

ESC = "\x1b]0;owned\x07\x1b[2J"


class Node(NodeDirs):
    """A node whose kubelet dir is ours: its flags name the node (no CPCTL_NODE_NAME)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.kubelet = os.path.join(root, "kubelet")
        os.makedirs(self.kubelet)
        self.node_name = ""

    def kubelet_flags(self, text: str) -> None:
        with open(os.path.join(self.kubelet, "kubeadm-flags.env"), "w") as handle:
            handle.write('KUBELET_KUBEADM_ARGS="%s"\n' % text)

    def env(self, **extra: str) -> dict:
        env = super().env(CPCTL_KUBELET_DIR=self.kubelet, **extra)
        if not self.node_name:
            env.pop("CPCTL_NODE_NAME", None)
        return env

    def cli(self, *args: str, rc: Any = 0, cwd: Any = None, **env: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(CLI + list(args), env=self.env(**env), capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL, cwd=cwd or self.root)
        check_result(proc, rc)
        return proc


@pytest.fixture
def node(tmp_path: Any) -> Node:
    return Node(str(tmp_path))


# --- item 1: node names ---------------------------------------------------------------------------
HOSTILE_NAMES = ["../../etc/profile.d/x", "cp1" + ESC, "CP_1", "-cp1", "a" * 254, "cp1..x", "cp1/"]


@pytest.mark.slow
@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_a_hostile_node_name_from_the_kubelet_is_refused_by_every_command(node: Node, tmp_path: Any,
                                                                         name: str) -> None:
    node.kubelet_flags("--hostname-override=%s" % name)
    outside = os.path.join(str(tmp_path), "outside")
    os.makedirs(outside)
    before = snapshot(node.manifests, outside)
    editor = os.path.join(str(tmp_path), "editor.sh")
    with open(editor, "w") as handle:
        handle.write("#!/bin/sh\nsed -i 's/leader-elect=true/leader-elect=false/' \"$1\"\n")
    os.chmod(editor, 0o755)
    for args in (["status"], ["stop", "scheduler"], ["start", "scheduler"], ["edit", "scheduler", "--yes"],
                 ["flags", "scheduler", "--set", "v=2"], ["logs", "scheduler"], ["history"],
                 ["is-running", "scheduler"], ["-o", "json", "status"]):
        proc = node.cli(*args, rc=4, EDITOR=editor, TMPDIR=outside)
        assert "not a valid Kubernetes node name" in proc.stderr, (args, proc.stderr)
        assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stderr, (args, proc.stderr)
    assert snapshot(node.manifests, outside) == before      # no edit copy, no change, anywhere
    assert not os.path.exists(node.state)                  # refused before the node was touched at all


def test_a_valid_override_is_used_lowercased_and_a_bad_option_is_a_usage_error(node: Node) -> None:
    node.kubelet_flags("--hostname-override=CP-1.Example.COM")
    assert json.loads(node.cli("-o", "json", "status").stdout)["node"] == "cp-1.example.com"
    proc = node.cli("--node-name", "evil/../x", "status", rc=2)
    assert "not a valid Kubernetes node name" in proc.stderr


def test_the_edit_copy_is_named_only_from_checked_names(tmp_path: Any) -> None:
    from cpctl.cli.commands.edits import _copy_path
    work = str(tmp_path)
    assert _copy_path(work, "cp-1", "kube-scheduler.yaml") == os.path.join(work, "cp-1-kube-scheduler.yaml")
    for hostile in ("../../etc/profile.d/x.sh", "..", ".hidden", "a\x1bb.yaml", "x/y.yaml"):
        path = _copy_path(work, "cp-1", hostile)
        assert os.path.dirname(path) == work and path.endswith("cp-1-manifest.yaml")


def test_a_cancelled_edit_leaves_no_file(node: Node, tmp_path: Any) -> None:
    node.node_name = "cp-1"
    private = os.path.join(str(tmp_path), "tmp")
    os.makedirs(private)
    proc = node.cli("edit", "scheduler", "--yes", EDITOR="true", TMPDIR=private)
    assert "edit cancelled" in proc.stdout
    assert os.listdir(private) == []


# --- item 2: one redaction rule ---------------------------------------------------------------------
SECRET_MANIFEST = b"""apiVersion: v1
kind: Pod
metadata:
  name: kube-scheduler
  namespace: kube-system
spec:
  hostNetwork: true
  containers:
  - name: kube-scheduler
    image: registry.k8s.io/kube-scheduler:v1.30.0
    command:
    - kube-scheduler
    - --kubeconfig=/etc/kubernetes/scheduler.conf
    - --token
    - TWOITEM-S3CRET
    - "--client-secret=QUOTED S3CRET"
    env:
    - name: SCHED_PASSWORD
      value: ENV-S3CRET
    - {name: API_TOKEN, value: "FLOW-S3CRET"}
"""
SECRETS = ["FLAG-S3CRET", "TWOITEM-S3CRET", "QUOTED S3CRET", "QUOTED", "ENV-S3CRET", "FLOW-S3CRET"]


def _no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, (secret, text)


@pytest.mark.slow
def test_secret_values_never_leave_cpctl(node: Node, tmp_path: Any) -> None:
    node.node_name = "cp-1"
    new = os.path.join(str(tmp_path), "new.yaml")
    with open(new, "wb") as handle:
        handle.write(SECRET_MANIFEST)
    outputs: List[str] = []
    for args in (["flags", "etcd", "--set", "initial-cluster-token=FLAG-S3CRET", "--dry-run"],
                 ["-o", "json", "flags", "etcd", "--set", "initial-cluster-token=FLAG-S3CRET", "--dry-run"],
                 ["flags", "etcd", "--set", "initial-cluster-token=FLAG-S3CRET"],
                 ["-o", "json", "flags", "etcd"], ["flags", "etcd"],
                 ["apply", "scheduler", "-f", new, "--dry-run", "--force"],
                 ["-o", "json", "apply", "scheduler", "-f", new, "--dry-run", "--force"],
                 ["apply", "scheduler", "-f", new, "--force"], ["history"], ["-o", "json", "history"],
                 ["-o", "json", "flags", "scheduler", "--set", "v=2", "--dry-run"]):
        proc = node.cli(*args)
        outputs += [proc.stdout, proc.stderr]
    refused = node.cli("flags", "scheduler", "--set", "token=FLAG-S3CRET", "--force", rc=4)   # the two-item form
    assert "--token is followed by '<redacted>'" in refused.stderr
    outputs += [refused.stdout, refused.stderr]
    _no_secret(*outputs)
    assert "<redacted>" in "".join(outputs)
    with open(node.history_file) as handle:
        history = handle.read()
    _no_secret(history)
    records = [json.loads(line) for line in history.splitlines()]
    assert [r["action"] for r in records] == ["flags", "apply"]
    # The manifests themselves hold the values, of course: redaction is about what leaves cpctl.
    with open(os.path.join(node.manifests, "etcd.yaml")) as handle:
        assert "--initial-cluster-token=FLAG-S3CRET" in handle.read()


def test_a_failure_line_is_redacted_too(node: Node) -> None:
    node.node_name = "cp-1"
    proc = node.cli("flags", "scheduler", "--set", "token=FLAG-S3CRET", "--container", "nope", rc=2)
    _no_secret(proc.stderr)
    proc = node.cli("-o", "json", "flags", "scheduler", "--set", "token=FLAG-S3CRET", "--container", "nope", rc=2)
    _no_secret(proc.stderr)


def test_the_rule_covers_every_form() -> None:
    from cpctl.redaction import redact, redact_text
    text = redact_text('--initial-cluster-token=A1 --token "B2 b" "--password=C3 c" --token-auth-file=/etc/keep '
                       "--etcd-password set to D4 --oidc-client-secret already E5\n"
                       "    - --token\n    - F6\n  - name: ETCD_PASSWORD\n    value: G7\n"
                       '{"name": "MY_SECRET", "value": "H8"}\n-----BEGIN EC PRIVATE KEY-----\nI9\n'
                       "-----END EC PRIVATE KEY-----\n")
    for secret in ("A1", "B2", "C3", "D4", "E5", "F6", "G7", "H8", "I9"):
        assert secret not in text, (secret, text)
    assert "--token-auth-file=/etc/keep" in text
    data = redact({"command": ["x", "--token", "J0", "--v", "2"], "env": [{"name": "X_TOKEN", "value": "K1"}],
                   "flags": [{"name": "bootstrap-token", "value": "L2"}, {"name": "v", "value": "3"}]})
    assert data == {"command": ["x", "--token", "<redacted>", "--v", "2"],
                    "env": [{"name": "X_TOKEN", "value": "<redacted>"}],
                    "flags": [{"name": "bootstrap-token", "value": "<redacted>"}, {"name": "v", "value": "3"}]}


# --- item 8: the journal's reach -------------------------------------------------------------------
def _kubernetes_files(node: Node) -> Dict[str, str]:
    """admin.conf and pki/ca.crt next to the manifests dir (its parent is /etc/kubernetes here)."""
    files = {"admin": os.path.join(node.root, "admin.conf"), "ca": os.path.join(node.root, "pki", "ca.crt")}
    os.makedirs(os.path.dirname(files["ca"]))
    for path in files.values():
        with open(path, "w") as handle:
            handle.write("precious %s\n" % path)
    return files


def _journal(node: Node, steps: List[dict], commit: int, action: str = "stop") -> None:
    os.makedirs(node.state, mode=0o700, exist_ok=True)
    staged = os.path.join(node.state, "staged")
    os.makedirs(staged, mode=0o700, exist_ok=True)
    entry = {"version": 2, "op": "c0ffee0000000001", "action": action, "component": "kube-scheduler",
             "file": "kube-scheduler.yaml", "checksum": sha(MANIFESTS["kube-scheduler.yaml"]), "commit": commit,
             "steps": steps, "record": {}, "started": "2026-01-01T00:00:00Z", "pid": 424242}
    with open(node.journal, "w") as handle:
        json.dump(sealed(node.state, entry), handle)   # sealed: the path rules below the seal still hold
    os.chmod(node.journal, 0o600)


def test_a_crafted_journal_cannot_touch_files_next_to_the_manifests_dir(node: Node) -> None:
    node.node_name = "cp-1"
    files = _kubernetes_files(node)
    with open(files["admin"], "rb") as handle:
        admin_sum = sha(handle.read())
    evil = os.path.join(node.state, "evil")
    os.makedirs(node.state, mode=0o700, exist_ok=True)
    with open(evil, "wb") as handle:
        handle.write(b"#!/bin/sh\nid\n")
    os.chmod(evil, 0o4755)
    before = snapshot(node.root + "/admin.conf", node.root + "/pki", node.manifests)
    scheduler = os.path.join(node.manifests, "kube-scheduler.yaml")
    current = sha(MANIFESTS["kube-scheduler.yaml"])
    crafted = [
        # rolled back: the "undo" of a write that created admin.conf deletes it
        ([{"kind": "write", "path": files["admin"], "checksum": admin_sum},
          {"kind": "touch", "path": scheduler}], 1, "stop"),
        # rolled forward (the commit write is "done"): ca.crt set aside, a setuid file moved in
        ([{"kind": "write", "path": scheduler, "checksum": current},
          {"kind": "remove", "path": files["ca"], "kept": os.path.join(node.state, "staged", "old")},
          {"kind": "move", "src": evil, "path": files["ca"], "checksum": sha(b"#!/bin/sh\nid\n")}], 0, "apply"),
        # a companion-looking name outside what cpctl recorded
        ([{"kind": "write", "path": scheduler, "checksum": current},
          {"kind": "move", "src": os.path.join(node.root, "pki", "x-config.yaml"),
           "path": os.path.join(node.state, "removed", "x"), "checksum": current}], 0, "scheduler-remove"),
    ]
    for steps, commit, action in crafted:
        _journal(node, steps, commit, action)
        proc = node.cli("status", rc=7)
        assert "is corrupt" in proc.stderr and "outside the manifests dir" in proc.stderr, proc.stderr
        assert snapshot(node.root + "/admin.conf", node.root + "/pki", node.manifests) == before
        os.remove(node.journal)


def test_a_scheduler_add_config_next_to_the_manifests_dir_is_still_journaled(node: Node) -> None:
    """The companion files cpctl writes itself keep working: add writes the config, remove moves it."""
    node.node_name = "cp-1"
    node.cli("scheduler", "add", "sched2", "--no-wait")
    config = os.path.join(node.root, "sched2-config.yaml")
    assert os.path.isfile(config)
    node.cli("scheduler", "remove", "sched2", "--no-wait")
    assert not os.path.exists(config)


def test_scheduler_remove_moves_only_a_config_cpctl_recorded_writing(node: Node) -> None:
    """A generated manifest's annotation is anyone's words: pointed at admin.conf, remove leaves it."""
    node.node_name = "cp-1"
    files = _kubernetes_files(node)
    node.cli("scheduler", "add", "sched2", "--no-wait")
    path = os.path.join(node.manifests, "sched2.yaml")
    with open(path) as handle:
        text = handle.read()
    config = os.path.join(node.root, "sched2-config.yaml")
    assert config in text
    with open(path, "w") as handle:
        handle.write(text.replace("%s: %s" % (CONFIG_ANNOTATION, config),
                                  "%s: %s" % (CONFIG_ANNOTATION, files["admin"])))
    proc = node.cli("scheduler", "remove", "sched2", "--no-wait")
    assert "%s stays: cpctl has no record of writing it" % files["admin"] in proc.stdout
    with open(files["admin"]) as handle:
        assert handle.read().startswith("precious")
    assert not os.path.exists(path)


# --- item 9: small things -----------------------------------------------------------------------------
DEEP = "[" * 20000 + "]" * 20000       # under every size bound, past every recursion limit


@pytest.mark.slow
def test_deeply_nested_state_files_are_corrupt_not_a_crash(node: Node) -> None:
    node.node_name = "cp-1"
    os.makedirs(os.path.join(node.state, "meta"), mode=0o700)
    os.chmod(node.state, 0o700)
    with open(node.journal, "w") as handle:
        handle.write('{"version": 2, "steps": %s}' % DEEP)
    proc = node.cli("status", rc=7)
    assert "is corrupt" in proc.stderr
    os.remove(node.journal)
    node.cli("stop", "scheduler")
    with open(os.path.join(node.state, "meta", "kube-scheduler.yaml.json"), "w") as handle:
        handle.write('{"a": %s}' % DEEP)
    assert "is corrupt" in node.cli("status", rc=7).stderr
    os.remove(os.path.join(node.state, "meta", "kube-scheduler.yaml.json"))
    node.cli("start", "scheduler")
    node.cli("flags", "scheduler", "--set", "v=2")
    with open(os.path.join(node.state, "revisions", "kube-scheduler.yaml.1.json"), "w") as handle:
        handle.write('{"a": %s}' % DEEP)
    assert "is corrupt" in node.cli("revisions", "scheduler", rc=7).stderr
    with open(node.history_file, "a") as handle:
        handle.write('{"a": %s}\n' % DEEP)
    node.cli("history")


def test_an_empty_host_option_is_a_usage_error(node: Node) -> None:
    node.node_name = "cp-1"
    before = snapshot(node.manifests)
    for args in (["-H", "", "stop", "scheduler"], ["-H", " , ", "status"], ["--host=", "restart", "scheduler"]):
        assert "empty" in node.cli(*args, rc=2).stderr
    assert snapshot(node.manifests) == before


def _fake_crictl(path: str, line_bytes: int) -> None:
    """A runtime whose kube-scheduler container wrote one enormous line (after a few short ones)."""
    metadata = {"name": "kube-scheduler-cp-1", "namespace": "kube-system", "uid": "u"}
    pods = json.dumps({"items": [{"id": "sb1", "createdAt": "1", "state": "SANDBOX_READY", "metadata": metadata}]})
    ps = json.dumps({"containers": [{"id": "c1", "createdAt": "1", "state": "CONTAINER_RUNNING", "podSandboxId": "sb1",
                                     "metadata": {"name": "kube-scheduler", "attempt": 0}}]})
    with open(path, "w") as handle:
        handle.write("""#!/bin/sh
case "$1" in
pods) echo '%s' ;;
ps) echo '%s' ;;
logs) printf '2026-01-01T00:00:00Z short one\\n2026-01-01T00:00:01Z short two\\n' >&2
      printf '2026-01-01T00:00:02Z ' >&2; head -c %d /dev/zero | tr '\\000' 'a' >&2; echo >&2 ;;
*) exit 1 ;;
esac
""" % (pods, ps, line_bytes))
    os.chmod(path, 0o755)


@pytest.mark.slow
def test_crictl_output_is_read_bounded_and_tail_1_is_one_line(node: Node, tmp_path: Any) -> None:
    node.node_name = "cp-1"
    crictl = os.path.join(str(tmp_path), "crictl")
    _fake_crictl(crictl, 200 << 20)
    proc = subprocess.Popen(CLI + ["logs", "scheduler", "--tail", "1"], env=node.env(CPCTL_CRICTL=crictl),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=node.root)
    out, err = proc.communicate(timeout=120)
    _, status, usage = os.wait4(proc.pid, 0) if proc.returncode is None else (0, 0, None)
    assert proc.returncode == 0, err
    lines = out.decode().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= LOG_LINE_CHARS_MAX + 100, (len(lines), len(out))
    assert lines[0].startswith("aaaa") and lines[0].endswith("more characters]")


@pytest.mark.slow
def test_crictl_output_memory_is_bounded(node: Node, tmp_path: Any) -> None:
    """Peak memory of the run, measured by the kernel (ru_maxrss of the child), stays far below the
    200 MiB the container wrote (the old code held it several times over)."""
    node.node_name = "cp-1"
    crictl = os.path.join(str(tmp_path), "crictl")
    _fake_crictl(crictl, 200 << 20)
    code = ("import os, subprocess, sys, resource\n"
            "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    measured = subprocess.run([sys.executable, "-c", code] + CLI + ["logs", "scheduler", "--tail", "1"],
                              env=node.env(CPCTL_CRICTL=crictl), capture_output=True, text=True, timeout=120)
    rc, max_kib = measured.stdout.split()
    assert rc == "0"
    assert int(max_kib) < 160 * 1024, max_kib


def _revision(node: Node, number: int) -> None:
    data = MANIFESTS["kube-scheduler.yaml"]
    revisions = os.path.join(node.state, "revisions")
    os.makedirs(revisions, mode=0o700, exist_ok=True)
    os.chmod(node.state, 0o700)
    with open(os.path.join(revisions, "kube-scheduler.yaml.%d" % number), "wb") as handle:
        handle.write(data)
    meta = {"number": number, "file": "kube-scheduler.yaml", "checksum": sha(data), "size": len(data), "mode": 0o600,
            "saved_at": "2026-01-01T00:00:00Z", "saved_by": "root", "host": "x", "action": "apply", "reason": None,
            "replaced_by": "0" * 64, "failed": False, "op": "abc"}
    with open(os.path.join(revisions, "kube-scheduler.yaml.%d.json" % number), "w") as handle:
        json.dump(meta, handle)


@pytest.mark.parametrize("number", [999999999, MAX_NUMBER])
def test_a_crafted_revision_number_never_blocks_later_changes(node: Node, number: int) -> None:
    node.node_name = "cp-1"
    os.makedirs(node.state, mode=0o700)
    _revision(node, number)
    for level in (2, 3, 4):
        node.cli("flags", "scheduler", "--set", "v=%d" % level)
    listed = json.loads(node.cli("-o", "json", "revisions", "scheduler").stdout)["revisions"]
    assert [r["number"] for r in listed][-3:] == [number + 1, number + 2, number + 3] if number < MAX_NUMBER \
        else [1, 2, 3]


@pytest.mark.slow
def test_history_past_64_mib_shows_its_tail(node: Node) -> None:
    node.node_name = "cp-1"
    os.makedirs(node.state, mode=0o700)
    filler = json.dumps({"time": "2026-01-01T00:00:00Z", "action": "stop", "component": "old", "pad": "x" * 1000})
    with open(node.history_file, "w") as handle:
        for _ in range((65 << 20) // len(filler) + 1):
            handle.write(filler + "\n")
        handle.write(json.dumps({"time": "2026-02-02T00:00:00Z", "action": "start", "component": "newest"}) + "\n")
    assert os.path.getsize(node.history_file) > 64 << 20
    records = json.loads(node.cli("-o", "json", "history").stdout)["history"]
    assert records[-1]["component"] == "newest"
    assert "newest" in node.cli("history", "--limit", "1").stdout


@pytest.mark.skipif(not shutil.which("bash"), reason="bash not installed")
def test_bash_completion_never_expands_a_manifest_name_as_a_glob(node: Node, tmp_path: Any) -> None:
    node.node_name = "cp-1"
    with open(os.path.join(node.manifests, "*.yaml"), "wb") as handle:
        handle.write(MANIFESTS["kube-scheduler.yaml"].replace(b"name: kube-scheduler", b"name: star"))
    cwd = os.path.join(str(tmp_path), "cwd")
    os.makedirs(cwd)
    for name in ("secret-plan.txt", "id_rsa"):
        open(os.path.join(cwd, name), "w").close()
    env = node.env(PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if not shutil.which("cpctl", path=env["PATH"]):
        pytest.skip("no cpctl console script next to %s" % sys.executable)
    script = ('source <(cpctl completion bash)\n'
              'COMP_WORDS=(cpctl status ""); COMP_CWORD=2; _cpctl_completion cpctl\n'
              'printf "<%s>\\n" "${COMPREPLY[@]}"\n')
    proc = subprocess.run(["bash", "--norc", "-c", script], env=env, capture_output=True, text=True, timeout=60,
                          cwd=cwd)
    assert proc.returncode == 0 and proc.stderr == "", proc
    shown = proc.stdout.splitlines()
    assert "<*>" in shown and "<scheduler>" in shown, shown
    assert not any("secret-plan" in s or "id_rsa" in s for s in shown), shown
    assert stat.S_ISREG(os.stat(os.path.join(node.manifests, "*.yaml")).st_mode)
