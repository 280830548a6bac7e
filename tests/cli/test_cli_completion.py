"""Shell completion (issue #17): ``cpctl completion bash|zsh|fish`` and the answers cpctl gives the
shells through click's protocol (``_CPCTL_COMPLETE=bash_complete`` with COMP_WORDS/COMP_CWORD),
driven exactly as the scripts drive it: the real cpctl as a subprocess.

Component names come from this machine's manifests dir (``--manifests-dir``, the environment or
the kubelet's staticPodPath) and parked manifests; a completion never prints an error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional

import pytest

from tests.coreutil import CLI, MANIFESTS, NodeDirs

SCHEDULER_NAMES = ["kube-scheduler", "scheduler"]


def complete(words: str, env: Optional[Dict[str, str]] = None, shell: str = "bash",
             cword: Optional[str] = None) -> subprocess.CompletedProcess:
    """What the shell's completion function gets for the command line ``words`` (the cursor at
    its end: a trailing space means a new, empty word)."""
    split = words.split()
    current = str(len(split) if words.endswith(" ") else len(split) - 1)
    base = {k: v for k, v in (env or os.environ).items() if not k.startswith("CPCTL_")}
    if env:
        base.update({k: v for k, v in env.items() if k.startswith("CPCTL_")})
    base.update(_CPCTL_COMPLETE="%s_complete" % shell, COMP_WORDS=words,
                COMP_CWORD=cword if cword is not None else (split[-1] if shell == "fish" and not words.endswith(" ")
                                                            else "" if shell == "fish" else current))
    return subprocess.run(CLI, env=base, capture_output=True, text=True, timeout=30)


def values(words: str, env: Optional[Dict[str, str]] = None) -> List[str]:
    """The bash candidates (``type,value`` lines) for ``words``; nothing may go to stderr."""
    proc = complete(words, env)
    assert proc.returncode == 0 and proc.stderr == "", proc
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line]


@pytest.mark.parametrize("shell, marks", [
    ("bash", ["_cpctl_completion()", "_CPCTL_COMPLETE=bash_complete", "complete -o nosort -F _cpctl_completion cpctl"]),
    ("zsh", ["#compdef cpctl", "_CPCTL_COMPLETE=zsh_complete", "compdef _cpctl_completion cpctl"]),
    ("fish", ["function _cpctl_completion", "_CPCTL_COMPLETE=fish_complete", "complete --no-files --command cpctl"]),
])
def test_completion_prints_the_script(shell: str, marks: List[str]) -> None:
    proc = subprocess.run(CLI + ["completion", shell], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    for mark in marks:
        assert mark in proc.stdout
    if shell == "bash" and shutil.which("bash"):
        syntax = subprocess.run(["bash", "-n"], input=proc.stdout, capture_output=True, text=True, timeout=30)
        assert syntax.returncode == 0, syntax.stderr
    assert subprocess.run(CLI + ["completion", "tcsh"], capture_output=True, text=True, timeout=30).returncode == 2


def test_commands_and_options_complete() -> None:
    assert {"start", "status", "stop"} <= set(values("cpctl st"))
    assert "completion" in values("cpctl comp")
    assert values("cpctl scheduler a") == ["add"]
    assert {"--no-wait", "--node-name"} <= set(values("cpctl stop --n"))     # its own and a global option
    assert values("cpctl start --all") == ["--all-parked"]
    assert values("cpctl status --outp") == ["--output"]                     # global, after the command word
    assert values("cpctl status -o ") == ["text", "json", "yaml", "wide"]
    assert values("cpctl -o ") == ["text", "json", "yaml", "wide"]
    assert values("cpctl --probe ") == ["auto", "api", "crictl", "health", "none"]


def test_component_names_from_the_manifests_dir_and_the_parked_ones(node: NodeDirs) -> None:
    env = node.env()
    everything = ["apiserver", "controller-manager", "etcd", "kube-apiserver", "kube-controller-manager",
                  "kube-scheduler", "scheduler"]
    assert values("cpctl stop ", env) == everything
    assert values("cpctl start ", env) == []                     # nothing parked yet
    node.run("stop", "scheduler")
    assert values("cpctl start ", env) == SCHEDULER_NAMES        # start: the parked ones
    assert "scheduler" not in values("cpctl stop ", env)         # stop: the running ones
    assert values("cpctl status sch", env) == ["scheduler"]      # others: both
    assert values("cpctl restart etcd kube-a", env) == ["kube-apiserver"]
    assert "etcd" not in values("cpctl restart etcd ", env)      # already given
    # --manifests-dir and --state-dir on the command line win over the environment, in any position
    other = NodeDirs(os.path.join(node.root, "other"), files={"my-pod.yaml": MANIFESTS["etcd.yaml"]})
    assert values("cpctl --manifests-dir %s stop " % other.manifests, env) == ["my-pod"]
    assert values("cpctl stop --manifests-dir %s m" % other.manifests, env) == ["my-pod"]
    assert values("cpctl start --state-dir %s " % other.state, env) == []


def test_component_names_from_the_kubelets_static_pod_path(node: NodeDirs, tmp_path: object) -> None:
    kubelet = os.path.join(node.root, "kubelet")
    os.makedirs(kubelet)
    with open(os.path.join(kubelet, "config.yaml"), "w") as handle:
        handle.write("kind: KubeletConfiguration\nstaticPodPath: %s\n" % node.manifests)
    env = {k: v for k, v in node.env().items() if k != "CPCTL_MANIFESTS_DIR"}
    env["CPCTL_KUBELET_DIR"] = kubelet
    assert values("cpctl stop sch", env) == ["scheduler"]


def test_a_completion_never_prints_an_error(node: NodeDirs, tmp_path: object) -> None:
    not_a_dir = os.path.join(node.root, "file")
    with open(not_a_dir, "w") as handle:
        handle.write("x")
    cases = [node.env(CPCTL_MANIFESTS_DIR=not_a_dir, CPCTL_STATE_DIR=not_a_dir),
             node.env(CPCTL_MANIFESTS_DIR="/nonexistent", CPCTL_KUBELET_DIR="/nonexistent"),
             node.env(CPCTL_MANIFESTS_DIR="", CPCTL_STATE_DIR="")]
    for env in cases:
        assert values("cpctl stop ", env) == []
        assert values("cpctl start ", env) == []
    for proc in (complete("cpctl stop ", node.env(), cword="x"), complete('cpctl stop "unclosed', node.env())):
        assert proc.stdout.strip() == "" and proc.stderr == "" and "Traceback" not in proc.stdout, proc
    proc = subprocess.run(CLI, env=node.env(_CPCTL_COMPLETE="tcsh_complete"), capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 1 and proc.stdout == "" and proc.stderr == ""


def test_zsh_and_fish_answers(node: NodeDirs) -> None:
    zsh = complete("cpctl start --all", node.env(), shell="zsh")
    assert zsh.returncode == 0 and zsh.stdout.split("\n")[:2] == ["plain", "--all-parked"], zsh
    fish = complete("cpctl stop sch", node.env(), shell="fish")
    assert fish.returncode == 0 and fish.stdout.strip() == "plain,scheduler", fish


@pytest.mark.skipif(not shutil.which("bash"), reason="bash not installed")
def test_real_bash_sources_the_script_and_completes(node: NodeDirs) -> None:
    """The whole path: bash sources `cpctl completion bash`, its function asks cpctl, COMPREPLY holds the names."""
    env = node.env(PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if not shutil.which("cpctl", path=env["PATH"]):
        pytest.skip("no cpctl console script next to %s" % sys.executable)
    script = ('source <(cpctl completion bash)\n'
              'COMP_WORDS=(cpctl stop sch); COMP_CWORD=2; _cpctl_completion cpctl\n'
              'echo "stop: ${COMPREPLY[*]}"\n'
              'COMPREPLY=(); COMP_WORDS=(cpctl status -o ""); COMP_CWORD=3; _cpctl_completion cpctl\n'
              'echo "output: ${COMPREPLY[*]}"\n')
    proc = subprocess.run(["bash", "--norc", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc
    assert proc.stdout.splitlines() == ["stop: scheduler", "output: text json yaml wide"]


def test_set_completes_the_catalogues_known_flags_and_unset_the_manifests(node: NodeDirs) -> None:
    """Issue 48: ``flags COMPONENT --set <TAB>`` offers ``NAME=`` for the flags the catalogue knows
    the component's binary has (core.knownflags, for etcd by its image's release); ``--unset`` the
    flags its manifest has (the parked copy's with --parked), minus those already given."""
    from cpctl.core.knownflags import ETCD_35, ETCD_36_ONLY, KUBE_SCHEDULER
    env = node.env()
    offered = values("cpctl flags scheduler --set ", env)
    assert offered == ["%s=" % name for name in sorted(KUBE_SCHEDULER - {"help"})]
    assert values("cpctl flags kube-scheduler --set leader-elect-res", env) == [
        "leader-elect-resource-lock=", "leader-elect-resource-name=",
        "leader-elect-resource-namespace="]
    assert values("cpctl flags scheduler --set profiling=", env) == []       # the value is the user's
    etcd = set(values("cpctl flags etcd --set ", env))                      # the fixture runs etcd 3.5
    assert {"%s=" % name for name in ETCD_35} - {"help="} <= etcd and not etcd & {"%s=" % n for n in ETCD_36_ONLY}
    assert values("cpctl flags scheduler --unset ", env) == ["kubeconfig", "leader-elect"]
    assert values("cpctl flags scheduler --unset kubeconfig --unset ", env) == ["leader-elect"]
    assert values("cpctl -o json flags scheduler --container nope --unset ", env) == []   # no such container
    assert values("cpctl flags my-pod --unset ", env) == [] and values("cpctl flags my-pod --set ", env) == []
    node.run("stop", "scheduler")
    assert values("cpctl flags scheduler --unset ", env) == []              # not in the dir any more
    assert values("cpctl flags scheduler --parked --unset ", env) == ["kubeconfig", "leader-elect"]
    assert "--set" in values("cpctl flags scheduler --s", env)              # option names still complete


def test_completion_uses_only_clicks_public_api() -> None:
    """Issue 48: no private click name (``_resolve_context``...) in the completion modules: the
    shells' classes override ShellComplete's public methods, parameters use ``shell_complete=``."""
    import ast
    import inspect

    from cpctl.cli import completers, completion
    for module in (completion, completers):
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("click"):
                assert not [a.name for a in node.names if a.name.startswith("_")], (module, node.module)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "click":
                assert not node.attr.startswith("_"), node.attr
