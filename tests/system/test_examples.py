"""The files in examples/ (issue #6) are valid for cpctl and for the tools they are written for.

* inventory.yaml and ssh_config: loaded by cpctl's own inventory loader and ssh_config code;
  every master resolves to its address, user, port and ProxyJump chain through the bastion.
* the runbooks: every ``cpctl ...`` line of their shell blocks parses with cpctl's click
  command line (types, choices, arguments) and every option used is in ``--help``; the cpctl
  commands of the certs runbook run against the lab with the SSH options stripped; the CKA
  walkthrough is replayed against the lab (node names mapped to the lab's).
* the Ansible playbooks: rolling structure, the cpctl.controlplane modules they use, and
  ``ansible-playbook --syntax-check`` with the repository's collection (they run against the lab in
  tests/system/test_ansible_fleet.py).
* the DaemonSet: ``kubectl apply --dry-run=client`` against the lab, plus structure.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import click
import pytest
import yaml
from click.testing import CliRunner

from cpctl.cli import main as cli
from cpctl.cli.main import main
from cpctl.fleet.inventory import load_inventory
from cpctl.host.sshconfig import parse_target, resolve
from cpctl_lab.control import LabHandle, start_lab
from tests.labfixture import FAST, kubectl, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CERTS = EXAMPLES / "runbook-certs-renew.md"
CKA = EXAMPLES / "cka-manual-scheduling.md"
PLAYBOOK = EXAMPLES / "ansible" / "certs-renew-restart.yml"
ADMISSION = EXAMPLES / "ansible" / "admission-plugins.yml"
PLAYBOOKS = [PLAYBOOK, ADMISSION]
HOSTS_INI = EXAMPLES / "ansible" / "hosts.ini"
DAEMONSET = EXAMPLES / "daemonset-cpctl.yaml"
MASTERS = ["cluster2-master1", "cluster2-master2", "cluster2-master3"]
ADDRESSES = {"cluster2-master1": "10.20.0.11", "cluster2-master2": "10.20.0.12", "cluster2-master3": "10.20.0.13"}

SHELL_OPERATORS = {"|", "||", "&&", ";", "&"}
#: a shell redirection (``> FILE``, ``>>FILE``, ``2>&1``): group 2 is its target when in the same word
REDIRECTION = re.compile(r"^(\d*(?:>>?|<|&>)&?)(\S*)$")
# Global options that only select *where* cpctl runs; stripped to run a command against the lab.
REMOTE_WITH_VALUE = {"-i", "--inventory", "--ssh-config", "--known-hosts", "-H", "--host", "--serial", "--forks"}
REMOTE_FLAGS = {"--keep-going", "--accept-new-host-key", "--ask-become-pass"}
CPCTL = [sys.executable, "-m", "cpctl"]


# --------------------------------------------------------------------------- markdown commands


class Command:
    """One ``cpctl``/``kubectl`` command found in a shell block of a markdown file."""

    def __init__(self, line: str, argv: List[str], expect_rc: int, program: str = "cpctl", index: int = 0) -> None:
        self.line, self.argv, self.expect_rc = line, argv, expect_rc
        self.program, self.index = program, index

    def __repr__(self) -> str:
        return "Command(%r)" % self.line


def shell_lines(path: Path) -> List[str]:
    """The lines of the ```sh/```bash/```console blocks, backslash continuations joined."""
    raw_lines: List[str] = []
    in_block = False
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.strip().startswith("```"):
            in_block = not in_block and raw.strip()[3:].strip() in ("sh", "bash", "shell", "console")
        elif in_block:
            raw_lines.append(raw)
    return [text[2:] if text.startswith("$ ") else text for text in joined_lines(raw_lines)]


def joined_lines(raw_lines: List[str]) -> List[str]:
    """Shell lines stripped, a backslash continuation joined to the line after it, blank lines dropped."""
    lines: List[str] = []
    pending = ""
    for raw in raw_lines:
        text = pending + raw.strip()
        if text.endswith("\\"):
            pending = text[:-1] + " "
            continue
        pending = ""
        if text:
            lines.append(text)
    return lines


def commands_in(path: Path, programs: Tuple[str, ...] = ("cpctl",)) -> List[Command]:
    """Every command of ``programs`` in the shell blocks (in order), split at shell operators."""
    found = []
    for index, line in enumerate(shell_lines(path)):
        words = shlex.split(line, comments=True)
        expect = re.search(r"#.*\bexit code (\d+)", line)
        segment: List[str] = []
        redirected = False
        for word in words + [";"]:
            if redirected:                        # the file of a `> FILE`
                redirected = False
                continue
            redirection = REDIRECTION.match(word)
            if redirection:
                redirected = not redirection.group(2)
                continue
            if word not in SHELL_OPERATORS:
                segment.append(word)
                continue
            if segment and segment[0] in programs:
                found.append(Command(line, segment[1:], int(expect.group(1)) if expect else 0, segment[0], index))
            segment = []
    return found


# --------------------------------------------------------------------------- parsing with cpctl's click


def _split_options(command: click.Command, args: List[str]) -> Tuple[List[str], List[str]]:
    """Option tokens of ``command`` up to its first positional word, and the rest."""
    by_name = {name: p for p in command.params if isinstance(p, click.Option) for name in p.opts + p.secondary_opts}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name = args[i].split("=", 1)[0]
        assert name in by_name, "%s: unknown option %s" % (command.name, name)
        option = by_name[name]
        i += 1 if option.is_flag or option.count or "=" in args[i] else 2
    return args[:i], args[i:]


def parse_cli(argv: List[str]) -> List[Tuple[List[str], List[str]]]:
    """Parse ``cpctl ARGV`` like cpctl would, without running it.

    Returns, per command level, the command path (``[]``, ``["restart"]``, ``["lab", "up"]``)
    and the option names used at that level; click raises on anything cpctl would refuse.
    """
    levels: List[Tuple[List[str], List[str]]] = []
    command: click.Command = main
    path: List[str] = []
    args = list(argv)
    parent: Optional[click.Context] = None
    while isinstance(command, click.Group):
        options, rest = _split_options(command, args)
        assert rest, "cpctl %s: no command word in %r" % (" ".join(path), argv)
        ctx = command.make_context(path[-1] if path else "cpctl", options + rest[:1], parent=parent)
        sub = command.get_command(ctx, rest[0])
        assert sub is not None, "cpctl %s: no command %r" % (" ".join(path), rest[0])
        levels.append((list(path), [o.split("=", 1)[0] for o in options if o.startswith("-")]))
        command, parent, args = sub, ctx, rest[1:]
        path.append(rest[0])
    command.make_context(path[-1], list(args), parent=parent)
    levels.append((path, [a.split("=", 1)[0] for a in args if a.startswith("-")]))
    return levels


def help_text(path: List[str]) -> str:
    """``cpctl PATH --help`` (in-process: the same click objects ``python -m cpctl`` runs)."""
    result = CliRunner().invoke(main, path + ["--help"], prog_name="cpctl")
    assert result.exit_code == 0, result.output
    return result.output


def check_commands(commands: List[Command]) -> Dict[Tuple[str, ...], set]:
    """Parse every command; then every option used must appear in that command's --help."""
    used: Dict[Tuple[str, ...], set] = {}
    for command in commands:
        try:
            levels = parse_cli(command.argv)
        except click.ClickException as exc:
            pytest.fail("%s: cpctl would refuse it: %s" % (command.line, exc.format_message()))
        for path, options in levels:
            used.setdefault(tuple(path), set()).update(options)
    for path, options in used.items():
        text = help_text(list(path))
        missing = [o for o in sorted(options) if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(o), text)]
        assert not missing, "cpctl %s --help does not mention %s" % (" ".join(path), missing)
    return used


def local_argv(argv: List[str]) -> List[str]:
    """``argv`` without the global options that send it over SSH (to run it on the lab)."""
    out, i = [], 0
    while i < len(argv) and argv[i].startswith("-"):
        name = argv[i].split("=", 1)[0]
        width = 1 if "=" in argv[i] or name in REMOTE_FLAGS or main_option_is_flag(name) else 2
        if name not in REMOTE_WITH_VALUE and name not in REMOTE_FLAGS:
            out += argv[i:i + width]
        i += width
    return out + argv[i:]


def main_option_is_flag(name: str) -> bool:
    return any(name in p.opts and p.is_flag for p in main.params if isinstance(p, click.Option))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    """One lab for this module (overrides the per-test fixture of tests.labfixture): the tests
    here touch different components and pods, and a lab start costs more than they do."""
    with start_lab(tmp_path_factory.mktemp("examples") / "lab", masters=1, **FAST) as handle:
        yield handle


class Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def cpctl_in(lab: LabHandle, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Callable:
    """Run ``cpctl ARGV`` in-process (``cpctl.cli.main.run``, the console entry point) as the lab's
    node agent: the lab's environment, exit code and output as a subprocess would see them."""
    for key, value in lab.env.items():
        monkeypatch.setenv(key, value)

    def run(argv: List[str]) -> Result:
        capsys.readouterr()
        code = cli.run(list(argv))
        out, err = capsys.readouterr()
        return Result(code, out, err)
    return run


def tidy_state_dir(handle: LabHandle) -> None:
    """Older labs created the state dir 0755, which cpctl check (rightly) reports as drift."""
    if handle.state_dir().exists():
        os.chmod(handle.state_dir(), 0o700)


# --------------------------------------------------------------------------- inventory and ssh_config


def test_inventory_loads_with_cpctl() -> None:
    inventory = load_inventory(str(EXAMPLES / "inventory.yaml"))
    masters = inventory.select("masters")
    assert [h.name for h in masters] == MASTERS
    assert [h.name for h in inventory.select("all")] == MASTERS
    for host in masters:
        assert host.node_name == host.name
        assert host.get("user") == "ubuntu" and host.become is True
        assert host.target == "ubuntu@%s" % host.name
        assert host.groups == ["masters"]
        assert (host.manifests_dir, host.state_dir) == ("/etc/kubernetes/manifests", "/var/lib/cpctl")
    assert [h.name for h in inventory.select("masters,!cluster2-master1")] == MASTERS[1:]


def test_ssh_config_resolves_every_master_through_the_bastion() -> None:
    from cpctl.host.ssh import SSHOptions, load_ssh_config
    config = load_ssh_config(str(EXAMPLES / "ssh_config"))
    home = os.path.expanduser("~")
    for host in load_inventory(str(EXAMPLES / "inventory.yaml")).select("masters"):
        ep = resolve(parse_target(host.target), config.lookup, SSHOptions())
        assert (ep.hostname, ep.user, ep.port) == (ADDRESSES[host.name], "ubuntu", 22)
        assert ep.proxy_jump == ["bastion"]
        assert ep.strict == "yes" and ep.connect_timeout == 10.0 and ep.identities_only
        assert ep.identity_files == [home + "/.ssh/cluster2_ed25519"]
        assert ep.known_hosts == [home + "/.ssh/known_hosts.cluster2"]
        chain, hop = [], ep
        while hop.proxy_jump:   # follow the ProxyJump chain like cpctl.host.ssh.open_chain does
            assert len(chain) < 5, "ProxyJump loop: %s" % chain
            hop = resolve(parse_target(hop.proxy_jump[0]), config.lookup, SSHOptions())
            chain.append(hop)
        assert [(h.name, h.hostname, h.user, h.port) for h in chain] == [
            ("bastion", "bastion.cluster2.example.net", "jump", 22)]
        assert chain[0].strict == "yes" and chain[0].known_hosts == ep.known_hosts
    # The alias alone (as "cpctl -H cluster2-master2" would use it) takes User from ssh_config.
    ep = resolve(parse_target("cluster2-master2"), config.lookup, SSHOptions())
    assert (ep.hostname, ep.user, ep.proxy_jump) == ("10.20.0.12", "ubuntu", ["bastion"])


# --------------------------------------------------------------------------- runbooks


def test_command_extraction_helpers(tmp_path: Path) -> None:
    assert parse_cli(["-i", "inv.yaml", "--serial", "1", "restart", "etcd", "--timeout", "5"]) == [
        ([], ["-i", "--serial"]), (["restart"], ["--timeout"])]
    # a lab dir that does not exist yet (a fixed /tmp path may be a file another job left there)
    assert parse_cli(["lab", "up", "--dir", str(tmp_path / "lab")])[-1] == (["lab", "up"], ["--dir"])
    for bad in (["restart", "etcd", "--serial", "1"], ["restart"], ["-o", "xml", "status"],
                ["restart", "etcd", "--timeout", "0"], ["stop", "etcd", "--no-such-option"]):
        with pytest.raises((click.ClickException, AssertionError)):
            parse_cli(bad)
    # The in-process help is what "python -m cpctl ... --help" prints.
    proc = subprocess.run(CPCTL + ["restart", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert set(re.findall(r"--[\w-]+", proc.stdout)) == set(re.findall(r"--[\w-]+", help_text(["restart"])))
    assert local_argv(["-i", "x", "--ssh-config", "y", "-H", "m1", "--keep-going", "-o", "json", "status"]) == [
        "-o", "json", "status"]


def test_certs_runbook_commands_exist() -> None:
    commands = commands_in(CERTS)
    used = check_commands(commands)
    lines = [" ".join(c.argv) for c in commands]
    fleet = [c for c in commands if c.argv[:1] != ["keeper"]]      # `cpctl keeper stop` is local
    assert all(c.argv[:2] == ["-i", "inventory.yaml"] for c in fleet), lines
    assert [c.argv for c in commands if c not in fleet] == [["keeper", "stop"]]
    assert any(c.argv[-1] == "status" for c in commands)
    assert any(c.argv[-1] == "check" for c in commands)
    assert any(c.argv[-1] == "certs" for c in commands)      # the proof, before and after (issue 26)
    restarts = [c.argv for c in commands if "restart" in c.argv]
    assert any("--dry-run" in a and "--stale-certs" in a for a in restarts)
    assert any(a[a.index("--serial") + 1] == "1" for a in restarts if "--serial" in a)
    for argv in restarts:
        rest = argv[argv.index("restart") + 1:]
        assert rest[:1] == ["--stale-certs"] or rest[:4] == ["apiserver", "controller-manager", "scheduler", "etcd"]
    assert sum("--stale-certs" in a for a in restarts) >= 3
    assert "AGE is no proof" not in CERTS.read_text() and "young AGE" in CERTS.read_text()
    assert {"history", "start"} <= {p[0] for p in used if p}
    text = CERTS.read_text()
    for needed in ("kubeadm certs renew all", "quorum", "exit 6", "--serial 1", "etcd", "history", "rollback"):
        assert needed in text, needed


def test_cka_runbook_commands_exist() -> None:
    commands = commands_in(CKA)
    used = check_commands(commands)
    assert {("stop",), ("start",), ("bind",), ("pending",), ("status",), ("lab", "demo")} <= set(used)
    assert any(c.expect_rc == 10 for c in commands)


def test_certs_runbook_runs_against_the_lab(lab: LabHandle, cpctl_in: Callable) -> None:
    """Each cpctl command of the runbook, with the SSH options stripped, on the lab's master.

    Only the first real restart runs (the others repeat it on other masters) and a command
    that becomes identical without its -H runs once; start of a running component is the
    documented no-op.
    """
    tidy_state_dir(lab)
    restarted = False
    history: Optional[list] = None
    seen: List[List[str]] = []
    # step 2, `kubeadm certs renew all` on each master: in the lab, `cpctl lab certs-renew`
    renew_at = next(i for i, line in enumerate(shell_lines(CERTS)) if "kubeadm certs renew all" in line
                    and not line.lstrip().startswith("cpctl"))
    renewed = False
    for command in commands_in(CERTS):
        if command.index > renew_at and not renewed:
            proc = cpctl_in(["lab", "certs-renew", "--dir", str(lab.dir)])
            assert proc.returncode == 0, proc.stderr
            renewed = True
            # the API server's minute passes (the lab re-reads a file once its change is a scaled
            # minute old; its "reloading" verdict inside it: tests/ops/test_certs_lab.py)
            then = time.time() - 61
            for name in ("apiserver.crt", "apiserver.key"):
                os.utime(lab.root_dir() / "etc/kubernetes/pki" / name, (then, then))
        argv = local_argv(command.argv)
        if argv in seen or ("restart" in argv and "--dry-run" not in argv and restarted):
            continue
        seen.append(argv)
        restarted = restarted or ("restart" in argv and "--dry-run" not in argv)
        proc = cpctl_in(argv)
        assert proc.returncode == 0, "%s -> %d: %s%s" % (argv, proc.returncode, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
        if "--dry-run" in argv:
            assert "nothing changed" in proc.stdout and "etcd" in proc.stdout
        if argv[-1] == "certs":
            verdicts = re.findall(r"^(etcd|kube-\S+)\s+(current|reloading|STALE|unknown)\s", proc.stdout, re.M)
            wanted = "STALE" if renewed and not restarted else "current"
            # etcd and the API server re-read their certificates: only the other two need the restart
            assert [v for _, v in verdicts] == ["current", "current", wanted, wanted], proc.stdout
        if argv[:3] == ["-o", "json", "history"]:
            history = json.loads(proc.stdout)["history"]
    assert restarted
    assert history is not None and [r["action"] for r in history] == ["stop", "start"]
    assert history[0]["reason"] == "kubeadm certs renew all"


def test_cka_walkthrough_against_the_lab(lab: LabHandle, cpctl_in: Callable) -> None:
    """Replay every cpctl and kubectl line of the CKA runbook in order (cpctl lab ... excluded)."""
    tidy_state_dir(lab)
    names = {"cluster2-master1": lab.node_name(1), "cluster2-worker1": lab.worker}
    steps = [c for c in commands_in(CKA, ("cpctl", "kubectl")) if not (c.program == "cpctl" and c.argv[:1] == ["lab"])]
    ran = []
    for step in steps:
        argv = [names.get(a, a) for a in step.argv]
        if step.program == "kubectl":
            proc = kubectl(lab, *argv, check=False, timeout=30)
        else:
            proc = cpctl_in(argv)
        assert proc.returncode == step.expect_rc, "%s -> %d: %s%s" % (step.line, proc.returncode, proc.stdout,
                                                                        proc.stderr)
        ran.append(step.line)
        if step.line.startswith("kubectl run manual-schedule "):
            assert "manual-schedule" in cpctl_in(["pending"]).stdout
    assert len(ran) >= 12

    def pod(name: str) -> dict:
        return json.loads(kubectl(lab, "get", "pod", name, "-o", "json").stdout)

    assert pod("manual-schedule")["spec"]["nodeName"] == lab.node_name(1)
    assert pod("manual-schedule")["status"]["phase"] == "Running"
    wait_for(lambda: pod("manual-schedule2")["status"].get("phase") == "Running", 20, "manual-schedule2 Running")
    assert pod("manual-schedule2")["spec"]["nodeName"] == lab.worker


# --------------------------------------------------------------------------- Ansible


def _ini_hosts(path: Path) -> Dict[str, List[str]]:
    sections: Dict[str, List[str]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            sections[current] = []
        else:
            assert current is not None, line
            sections[current].append(line)
    return sections


def test_ansible_inventory() -> None:
    sections = _ini_hosts(HOSTS_INI)
    assert [line.split()[0] for line in sections["masters"]] == MASTERS
    variables = dict(line.split("=", 1) for line in sections["masters:vars"])
    assert variables["ansible_user"] == "ubuntu"
    assert (HOSTS_INI.parent / variables["cpctl_ssh_config"]).resolve() == EXAMPLES / "ssh_config"
    parser = configparser.ConfigParser(allow_no_value=True, delimiters=("=",))
    parser.read(HOSTS_INI)   # also plain INI, as Ansible's parser expects
    assert "masters" in parser.sections()


def _tasks(path: Path) -> Tuple[dict, List[dict]]:
    plays = yaml.safe_load(path.read_text())
    assert isinstance(plays, list) and len(plays) == 1
    return plays[0], plays[0]["tasks"]


def test_ansible_playbooks_use_the_collection_rolling() -> None:
    """Both playbooks roll one master at a time, stop at the first failure, and change the masters
    only through the collection's modules (no command: wrapper left)."""
    for path in PLAYBOOKS:
        play, tasks = _tasks(path)
        assert play["hosts"] == "masters" and play["serial"] == 1 and play["max_fail_percentage"] == 0
        modules = [next(k for k in t if "." in k) for t in tasks]
        assert all(m.startswith(("cpctl.controlplane.", "ansible.builtin.assert")) for m in modules), modules
        assert "command" not in path.read_text().split("#")[0]
    _, tasks = _tasks(PLAYBOOK)
    restart = next(t["cpctl.controlplane.static_pod"] for t in tasks if "cpctl.controlplane.static_pod" in t)
    assert restart["state"] == "restarted" and restart["reason"] == "{{ cpctl_reason }}"
    play, _ = _tasks(PLAYBOOK)
    assert play["vars"]["cpctl_reason"] == "kubeadm certs renew all"
    # by default the components cpctl certs finds STALE (etcd and the API server re-read theirs)
    assert play["vars"]["cpctl_components"] == [] and restart.get("component") == "{{ item }}"
    loop = next(t["loop"] for t in tasks if "cpctl.controlplane.static_pod" in t)
    assert loop == "{{ cpctl_components or cpctl.certs.stale }}"
    _, tasks = _tasks(ADMISSION)
    flags = tasks[0]["cpctl.controlplane.static_pod_flags"]
    assert flags["component"] == "apiserver" and "enable-admission-plugins" in flags["set"]


@pytest.mark.parametrize("path", PLAYBOOKS, ids=lambda p: p.name)
def test_ansible_syntax_check(path: Path) -> None:
    ansible = shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) or shutil.which("ansible-playbook")
    assert ansible, "ansible-playbook is not installed (ansible-core is a test dependency)"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(EXAMPLES.parent), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ansible, "-i", str(HOSTS_INI), "--syntax-check", str(path)], capture_output=True,
                          text=True, timeout=120, cwd=str(path.parent), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- DaemonSet


def test_daemonset_structure() -> None:
    docs = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    assert ds["apiVersion"] == "apps/v1" and ds["metadata"]["namespace"] == "kube-system"
    pod = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"} \
        in pod["tolerations"]
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    script = " ".join(container["command"] + container["args"])
    assert "cpctl" in script and "check" in script and "--prometheus-textfile" in script
    security = container["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["runAsUser"] == 0
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert "Dockerfile" in DAEMONSET.read_text() and (EXAMPLES / "Dockerfile").is_file()
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for path in ("/etc/kubernetes/manifests", "/var/lib/cpctl", "/etc/kubernetes/admin.conf",
                 "/var/lib/node_exporter/textfile_collector"):
        assert path in volumes.values(), path
        mount = mounts[path]
        assert volumes[mount["name"]] == path   # mounted where cpctl expects it on the host
    assert mounts["/etc/kubernetes/admin.conf"]["readOnly"] is True
    assert mounts["/etc/kubernetes/manifests"]["readOnly"] is True
    assert not mounts["/var/lib/node_exporter/textfile_collector"].get("readOnly")
    textfile = re.search(r"--prometheus-textfile\s+(\S+)", script).group(1)
    assert textfile.endswith(".prom") and textfile.startswith("/var/lib/node_exporter/textfile_collector/")
    # The check's command line is one cpctl accepts.
    argv = shlex.split(re.search(r"cpctl ([^\n]*?--prometheus-textfile\s+\S+)", script.replace("\\\n", " "))
                       .group(1))
    check_commands([Command("cpctl " + " ".join(argv), argv, 0)])


def test_daemonset_kubectl_dry_run(lab: LabHandle) -> None:
    proc = kubectl(lab, "apply", "--dry-run=client", "-f", str(DAEMONSET), check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "daemonset.apps/cpctl-check created (dry run)" in proc.stdout


def test_readme_lists_every_example() -> None:
    text = (EXAMPLES / "README.md").read_text()
    files = sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*") if p.is_file() and p.name != "README.md")
    assert files and all("`%s`" % f in text for f in files), [f for f in files if "`%s`" % f not in text]
