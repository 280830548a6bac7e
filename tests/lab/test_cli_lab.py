"""The lab's first hour (issue #17): ``cpctl lab up``/``down`` repeated behave like ``systemctl
start``/``stop`` (exit 0, one clear line), and the README's recipe - ``eval "$(cpctl lab up)"``
then plain cpctl commands, ``scheduler add --dry-run`` included - runs in a real shell.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict

import pytest

pytestmark = pytest.mark.timeout(180)


def lab_cli(env: Dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cpctl", "lab", *args], env=env, capture_output=True, text=True,
                          timeout=90)


def clean(tmp_path: Any) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CPCTL_") and k != "KUBECONFIG"}
    env["HOME"] = str(tmp_path)
    return env


@pytest.mark.lab       # starts a lab through `cpctl lab ...` (no fixture says so)
def test_up_and_down_are_idempotent(tmp_path: Any) -> None:
    env, lab_dir = clean(tmp_path), str(tmp_path / "lab")
    down = lab_cli(env, "down", "--dir", lab_dir)
    assert down.returncode == 0 and down.stdout == "no lab running in %s: nothing to stop\n" % lab_dir, down
    first = lab_cli(env, "up", "--dir", lab_dir)
    try:
        assert first.returncode == 0, first.stderr
        (note,) = first.stderr.splitlines()             # one line: which etcd runs (issue 45)
        kind = json.loads((tmp_path / "lab" / "lab.json").read_text())["etcd"]["kind"]
        said = {"real": "cpctl lab: etcd: the real etcd ", "imitation": "cpctl lab: etcd: the lab's Python imitation"}
        assert note.startswith(said[kind]), note
        again = lab_cli(env, "up", "--dir", lab_dir, "--masters", "3")
        assert again.returncode == 0, again.stderr
        assert again.stdout == first.stdout                   # the same environment: eval works again
        (line,) = again.stderr.splitlines()
        assert line.startswith("cpctl lab: a lab is already running in %s (pid " % lab_dir)
        assert "options given now are not applied" in line
    finally:
        stopped = lab_cli(env, "down", "--dir", lab_dir)
    assert stopped.returncode == 0 and stopped.stdout == "lab in %s stopped\n" % lab_dir
    again = lab_cli(env, "down", "--dir", lab_dir)
    assert again.returncode == 0 and "nothing to stop" in again.stdout and again.stderr == ""


@pytest.mark.lab       # starts a lab through `cpctl lab ...` (no fixture says so)
@pytest.mark.skipif(not shutil.which("bash"), reason="bash not installed")
def test_eval_lab_up_then_cpctl_commands_in_a_real_shell(tmp_path: Any) -> None:
    lab_dir = str(tmp_path / "lab")
    script = """
cpctl() { "$PYTHON" -m cpctl "$@"; }
eval "$(cpctl lab up --dir "$LAB")" || exit 90
trap 'cpctl lab down --dir "$LAB" >/dev/null' EXIT
cpctl status -o json >/dev/null || exit 91
cpctl scheduler add my-scheduler --dry-run || exit 92
cpctl scheduler list || exit 93
"""
    env = dict(clean(tmp_path), PYTHON=sys.executable, LAB=lab_dir)
    proc = subprocess.run(["bash", "--norc", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "dry run: nothing changed. Would write, in this order:" in proc.stdout
    # the files and the diff are shown as blocks of lines, not as one escaped line
    assert "\\x0a" not in proc.stdout and "\nkind: KubeSchedulerConfiguration\n" in proc.stdout
    assert "\n+    - --config=" in proc.stdout
    assert "(no schedulers added by cpctl)" in proc.stdout
    node_etc = os.path.join(lab_dir, "root-lab-master1", "etc", "kubernetes")   # the default config dir
    assert os.path.isfile(os.path.join(node_etc, "scheduler.conf"))
    assert not os.path.exists(os.path.join(node_etc, "my-scheduler-config.yaml"))
