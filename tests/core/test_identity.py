"""Node identity by the kubelet's rules (issue #13 item 1).

The kubelet's node name is ``--hostname-override`` (kubeadm-flags.env, then KUBELET_EXTRA_ARGS),
else the FULL host name lowercased; staticPodPath and fileCheckFrequency come from its config
file. cpctl used to cut the host name at the first dot and assume both paths: on an FQDN host
every mirror-pod lookup was a 404 read as "gone". Unit tests on a MockHost, then the lab's fqdn
and override profiles with the real CLI (the fqdn one under ``unshare --uts`` with a mixed-case
FQDN as the host name).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from cpctl.core.identity import discover, go_duration
from cpctl.host.mock import MockHost
from tests.labfixture import mirror, run_cpctl

KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: {static}
fileCheckFrequency: {frequency}
"""


def _kubelet_dir(tmp_path: Any, static: str = "/srv/static", frequency: str = "20s",
                 kubeadm_args: str = "--container-runtime-endpoint=unix:///run/containerd/containerd.sock") -> str:
    path = tmp_path / "kubelet"
    path.mkdir()
    (path / "config.yaml").write_text(KUBELET_CONFIG.format(static=static, frequency=frequency))
    (path / "kubeadm-flags.env").write_text('KUBELET_KUBEADM_ARGS="%s"\n' % kubeadm_args)
    return str(path)


def test_the_full_host_name_lowercased_not_cut_at_the_first_dot(tmp_path: Any) -> None:
    found = discover(MockHost(hostname="CP-1.Prod.Example.COM"), kubelet_dir=_kubelet_dir(tmp_path),
                     extra_args_files=())
    assert found.node_name.value == "cp-1.prod.example.com"
    assert "host name" in found.node_name.source
    assert found.manifests_dir.value == "/srv/static" and "staticPodPath" in found.manifests_dir.source
    assert found.file_check_frequency.value == 20.0


def test_hostname_override_and_extra_args_win_in_the_kubelets_order(tmp_path: Any) -> None:
    kubelet = _kubelet_dir(tmp_path, kubeadm_args="--hostname-override=from-kubeadm --node-ip=10.0.0.1")
    host = MockHost(hostname="node.example.com")
    assert discover(host, kubelet_dir=kubelet, extra_args_files=()).node_name.value == "from-kubeadm"
    extra = tmp_path / "default-kubelet"
    extra.write_text("KUBELET_EXTRA_ARGS='--hostname-override From-Extra --v=2'\n")
    found = discover(host, kubelet_dir=kubelet, extra_args_files=(str(extra),))
    assert found.node_name.value == "from-extra" and str(extra) in found.node_name.source
    explicit = discover(host, node_name="given", kubelet_dir=kubelet, extra_args_files=(str(extra),))
    assert explicit.node_name.value == "given" and "--node-name" in explicit.node_name.source


def test_config_named_by_flag_relative_static_pod_path_and_go_durations(tmp_path: Any) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "kubelet.yaml").write_text(KUBELET_CONFIG.format(static="static-pods", frequency="1m30s"))
    kubelet = _kubelet_dir(tmp_path, kubeadm_args="--config=%s" % (other / "kubelet.yaml"))
    found = discover(MockHost(), kubelet_dir=kubelet, extra_args_files=())
    assert found.manifests_dir.value == str(other / "static-pods")
    assert found.file_check_frequency.value == 90.0
    assert [go_duration(v) for v in ("20s", "500ms", "1h2m3s", "1.5s", "20", "", "s", "1x")] == \
        [20.0, 0.5, 3723.0, 1.5, None, None, None, None]


def test_broken_kubelet_files_are_problems_not_failures(tmp_path: Any) -> None:
    kubelet = _kubelet_dir(tmp_path, frequency="soon")
    (tmp_path / "kubelet" / "config.yaml").write_text("staticPodPath: [not, a, path]\nfileCheckFrequency: soon\n")
    found = discover(MockHost(hostname="cp-1"), kubelet_dir=kubelet, extra_args_files=())
    assert found.manifests_dir.value == "/etc/kubernetes/manifests" and "default" in found.manifests_dir.source
    assert found.file_check_frequency.value == 20.0
    assert [p for p in found.problems if "fileCheckFrequency" in p]


# --- against the lab's profiles -----------------------------------------------------------------

def _status(handle: Any, *args: str, **env: str) -> Any:
    proc = run_cpctl(handle, "-o", "json", *args, "status", **env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_override_profile_finds_node_and_manifests_from_the_kubelet(lab_factory: Any) -> None:
    handle = lab_factory(profile="override")
    env = handle.env
    assert "CPCTL_NODE_NAME" not in env and "CPCTL_MANIFESTS_DIR" not in env and "CPCTL_KUBELET_DIR" in env
    data = _status(handle)
    assert data["node"] == handle.node_name(1) and "hostname-override" in data["identity"]["node_name"]["source"]
    assert data["manifests_dir"] == str(handle.manifests_dir(1))
    stop = run_cpctl(handle, "stop", "scheduler", "--timeout", "30")
    assert stop.returncode == 0 and "gone (api)" in stop.stdout, stop.stdout + stop.stderr
    assert mirror(handle, "kube-scheduler") is None
    start = run_cpctl(handle, "start", "scheduler", "--timeout", "30")
    assert start.returncode == 0 and "Running and Ready (api)" in start.stdout, start.stdout + start.stderr


def test_a_wrong_node_name_is_refused_before_any_change(lab: Any) -> None:
    proc = run_cpctl(lab, "--node-name", "wrongname", "stop", "scheduler")
    assert proc.returncode == 3, proc.stderr
    assert "'wrongname'" in proc.stderr and lab.node_name(1) in proc.stderr and lab.worker in proc.stderr
    assert os.path.exists(os.path.join(lab.manifests_dir(1), "kube-scheduler.yaml"))


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare --uts")
def test_fqdn_host_name_in_mixed_case(lab_factory: Any) -> None:
    handle = lab_factory(profile="fqdn", node_name="lab-master1.cpctl.test")
    hostname = "Lab-Master1.CPCTL.test"
    env = dict(os.environ, **handle.env)
    for key in ("CPCTL_NODE_NAME", "CPCTL_MANIFESTS_DIR", "CPCTL_PROBE"):
        env.pop(key, None)
    code = ("import socket, subprocess, sys; socket.sethostname(sys.argv[1]); "
            "sys.exit(subprocess.call([sys.executable, '-m', 'cpctl'] + sys.argv[2:]))")

    def cpctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["unshare", "--uts", sys.executable, "-c", code, hostname, *args],
                              capture_output=True, text=True, env=env, timeout=120)
    status = cpctl("-o", "json", "status")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["node"] == "lab-master1.cpctl.test"
    assert all((row.get("observed") or {}).get("present") for row in data["components"]), data["components"]
    stop = cpctl("stop", "scheduler", "--timeout", "30")
    assert stop.returncode == 0 and "gone (api)" in stop.stdout, stop.stdout + stop.stderr
    start = cpctl("start", "scheduler", "--timeout", "30")
    assert start.returncode == 0 and "Running and Ready" in start.stdout, start.stdout + start.stderr


@pytest.mark.parametrize("text", [
    "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock "
    "--pod-infra-container-image=registry.k8s.io/pause:3.10",
    "  --a=1\t--b 2\r\n--c", "", "   ", "--a\x0b--b", "--a=é --b=\xa0x", '--a="q w" --b', "--a='x' --c=d", "--a=x\\ y",
    "--node-ip=10.0.0.5 --v 2 -x --flag", '--a="unterminated',
])
def test_kubeadm_flags_split_as_shlex_does(text: str) -> None:
    """Issue 38: a line without quotes or escapes is split without importing shlex; the pairs are
    the ones shlex's words give (a quoted line still goes through shlex)."""
    import shlex

    from cpctl.core import identity
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    expected = []
    for index, word in enumerate(words):
        if word.startswith("--"):
            following = words[index + 1] if index + 1 < len(words) else ""
            expected.append(tuple(word.split("=", 1)) if "=" in word
                            else (word, following if not following.startswith("-") else ""))
    assert identity._flags(text) == expected
