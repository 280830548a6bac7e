"""The README's install recipes for a real master work, followed line by line in temp dirs.

The README marks the recipes it promises with ``<!-- install-tested: NAME -->`` before a
```` ```sh ```` block: ``venv`` (a venv under /opt/cpctl and a symlink /usr/local/bin/cpctl),
``build-wheelhouse`` (on a machine with access to the package index) and ``offline`` (on the
master, from the wheelhouse, without an index). Each line runs in bash as written, with the
paths a test may not touch moved into a temp dir:

* ``/opt/`` and ``/usr/local/bin/`` -> under the test's temp dir (PATH gets its ``usr/local/bin``
  first, so ``cpctl`` there is the symlink the recipe made);
* ``./cpctl`` (the repository copied to the master) -> a copy of this working tree for the
  wheelhouse build; in the venv recipe the cpctl wheel of that build, installed with
  ``PIP_NO_INDEX=1 PIP_FIND_LINKS=<wheelhouse>`` (pip's own settings), so the venv install is
  offline too and the session builds wheels once;
* ``/tmp/cpctl-build`` and ``/root/wheelhouse`` -> the session's build dir and wheelhouse;
* ``python3`` at the start of a line -> Debian's ``/usr/bin/python3`` when it can make venvs (what
  a fresh master has), else this interpreter.

The offline install runs with an index URL nothing listens on, so any access to an index would
fail it. Skipped only when no ``python3 -m venv`` is available (Debian: python3-venv).
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DEAD_INDEX = "http://127.0.0.1:9/simple"          # discard port: nothing answers
NOT_COPIED = (".git", ".ci-venv", ".venv*", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache",
              ".benchmarks", "build", "dist", "*.egg-info")
STEP_TIMEOUT = 300.0

pytestmark = pytest.mark.timeout(600)


def recipe(name: str, text: Optional[str] = None) -> List[str]:
    """The command lines of the ```sh block right after ``<!-- install-tested: NAME -->``
    (blank and comment lines dropped, ``\\`` continuations joined)."""
    lines = (README.read_text(encoding="utf-8") if text is None else text).splitlines()
    marker = "<!-- install-tested: %s -->" % name
    assert marker in (line.strip() for line in lines), "the README has no %s" % marker
    start = [line.strip() for line in lines].index(marker) + 1
    while not lines[start].strip():
        start += 1
    assert lines[start].strip() == "```sh", "%s must be followed by a ```sh block" % marker
    commands: List[str] = []
    pending = ""
    for line in lines[start + 1:]:
        if line.strip() == "```":
            break
        text_line = pending + line.strip()
        if text_line.endswith("\\"):
            pending = text_line[:-1].rstrip() + " "
            continue
        pending = ""
        if text_line and not text_line.startswith("#"):
            commands.append(text_line)
    assert commands, "%s: an empty recipe" % marker
    return commands


def substituted(line: str, paths: Dict[str, str], python: str) -> str:
    """``line`` with the real-master paths replaced by the test's (see the module docstring)."""
    if paths:                                        # one pass: a replacement is never replaced again
        pattern = re.compile("|".join(re.escape(real) for real in sorted(paths, key=len, reverse=True)))
        line = pattern.sub(lambda match: paths[match.group(0)], line)
    return re.sub(r"^python3(?=\s)", lambda _: python, line)


def run_recipe(lines: List[str], paths: Dict[str, str], python: str, env: Dict[str, str],
               cwd: Path) -> List[str]:
    """Run each line in bash; every one must exit 0. Returns their outputs."""
    outputs = []
    for line in lines:
        command = substituted(line, paths, python)
        proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", command], env=env, cwd=str(cwd),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=STEP_TIMEOUT)
        assert proc.returncode == 0, "README line `%s` (run as `%s`) failed, exit %d:\n%s" % (
            line, command, proc.returncode, proc.stdout[-4000:])
        outputs.append(proc.stdout)
    return outputs


def venv_python() -> Optional[str]:
    """The ``python3`` a recipe runs: Debian's own when it can make venvs with pip, else this one."""
    for candidate in ("/usr/bin/python3", sys.executable):
        if os.path.exists(candidate) and subprocess.run(
                [candidate, "-c", "import venv, ensurepip"], capture_output=True, timeout=60).returncode == 0:
            return candidate
    return None


def project_version() -> str:
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    return parser["metadata"]["version"]


def clean_env(**extra: str) -> Dict[str, str]:
    """This environment without an active venv, cpctl settings or pip settings, plus ``extra``."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("CPCTL_", "PIP_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(extra)
    return env


@dataclass
class Wheelhouse:
    """The session's wheelhouse, built by the README's recipe from a copy of this working tree."""

    python: str
    path: Path
    source: Path

    def cpctl_wheel(self) -> Path:
        wheels = sorted(self.path.glob("cpctl-*.whl"))
        assert len(wheels) == 1, wheels
        return wheels[0]


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Wheelhouse:
    """``build-wheelhouse`` once per session (it needs the package index: the registry)."""
    python = venv_python()
    if python is None:
        pytest.skip("python3 -m venv is not available here (Debian: apt-get install python3-venv)")
    root = tmp_path_factory.mktemp("wheelhouse")
    source = root / "cpctl"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_COPIED))
    paths = {"/tmp/cpctl-build": str(root / "cpctl-build"), "./cpctl": str(source)}
    run_recipe(recipe("build-wheelhouse"), paths, python, clean_env(), root)
    return Wheelhouse(python, root / "wheelhouse", source)


@dataclass
class Master:
    """A fake master's file system: ``/opt`` and ``/usr/local/bin`` under a temp dir."""

    root: Path

    @property
    def paths(self) -> Dict[str, str]:
        return {"/opt/": "%s/opt/" % self.root, "/usr/local/bin/": "%s/usr/local/bin/" % self.root}

    @property
    def cpctl(self) -> Path:
        return self.root / "usr/local/bin/cpctl"

    def env(self, **extra: str) -> Dict[str, str]:
        env = clean_env(**extra)
        env["PATH"] = os.pathsep.join([str(self.root / "usr/local/bin"), env.get("PATH", "")])
        return env


@pytest.fixture
def master(tmp_path: Path) -> Master:
    (tmp_path / "opt").mkdir()
    (tmp_path / "usr/local/bin").mkdir(parents=True)
    return Master(tmp_path)


def run_installed(master: Master, *args: str) -> Tuple[int, str]:
    """The installed cpctl, through the symlink, outside the repository and its venv."""
    proc = subprocess.run([str(master.cpctl), *args], env=master.env(HOME=str(master.root)), cwd=str(master.root),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return proc.returncode, proc.stdout


def check_installed(master: Master, recipe_outputs: List[str]) -> None:
    """What every recipe promises: ``cpctl --version`` (the recipe's own last line), ``--help`` and
    the lab plugin work from the venv under /opt, whose cpctl is its own copy, and ``cpctl systemd``
    would write ``ExecStart=/usr/local/bin/cpctl``: the path it was run by."""
    assert recipe_outputs[-1].strip() == "cpctl %s" % project_version()
    venv = master.root / "opt/cpctl"
    assert master.cpctl.is_symlink() and Path(os.readlink(master.cpctl)) == venv / "bin/cpctl"
    code, text = run_installed(master, "--help")
    assert code == 0 and text.startswith("Usage: cpctl") and "Exit codes:" in text, text
    code, text = run_installed(master, "--version")
    assert code == 0 and text.strip() == "cpctl %s" % project_version(), text
    code, text = run_installed(master, "lab", "--help")
    assert code == 0 and "Simulated kubeadm control-plane" in text, text
    where = subprocess.run([str(venv / "bin/python"), "-c", "import cpctl, cpctl_lab; print(cpctl.__file__)"],
                           capture_output=True, text=True, env=master.env(), cwd=str(master.root), timeout=60)
    assert where.returncode == 0 and where.stdout.startswith(str(venv)), where
    code, text = run_installed(master, "systemd", "show", "cpctl-check.service")
    assert code == 0 and "ExecStart=%s check" % master.cpctl in text, text


def test_venv_under_opt_with_a_symlink(wheelhouse: Wheelhouse, master: Master) -> None:
    paths = dict(master.paths, **{"./cpctl": str(wheelhouse.cpctl_wheel())})
    env = master.env(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse.path), PIP_INDEX_URL=DEAD_INDEX)
    outputs = run_recipe(recipe("venv"), paths, wheelhouse.python, env, master.root)
    check_installed(master, outputs)


def test_offline_install_from_the_wheelhouse(wheelhouse: Wheelhouse, master: Master) -> None:
    names = {path.name.split("-")[0].lower() for path in wheelhouse.path.glob("*.whl")}
    assert {"cpctl", "click", "pyyaml", "watchdog", "paramiko"} <= names, names   # every dependency, as a wheel
    paths = dict(master.paths, **{"/root/wheelhouse": str(wheelhouse.path)})
    env = master.env(PIP_INDEX_URL=DEAD_INDEX)
    outputs = run_recipe(recipe("offline"), paths, wheelhouse.python, env, master.root)
    assert "--no-index" in " ".join(recipe("offline"))
    check_installed(master, outputs)


def test_recipe_reader_and_path_substitution() -> None:
    text = "\n".join(["<!-- install-tested: demo -->", "", "```sh", "# a comment", "python3 -m venv /opt/x",
                      "/opt/x/bin/pip install \\", "  ./cpctl", "", "```", "python3 after"])
    lines = recipe("demo", text)
    assert lines == ["python3 -m venv /opt/x", "/opt/x/bin/pip install ./cpctl"]
    paths = {"/opt/": "/t/opt/", "./cpctl": "/t/./cpctl/opt/"}
    assert [substituted(line, paths, "/usr/bin/python3") for line in lines] == [
        "/usr/bin/python3 -m venv /t/opt/x", "/t/opt/x/bin/pip install /t/./cpctl/opt/"]
    with pytest.raises(AssertionError):
        recipe("missing", text)
