"""Issue #37: one JSON shape per command, local or remote, checked against its JSON Schema
(cpctl/schemas/NAME.json, shipped in the wheel and sdist; docs/json.md is the prose). A no-op or a
dry run has every field - null where there is no value - and a dry run says what a real run would
change (``would_change``) next to what it changed (``changed``: nothing). Every command of the
registry (and of the lab plugin) has a schema here, or says why it prints text only (and then
refuses ``-o json``, exit 2).

The commands run on the lab's master locally and, where they may, through ``-H`` (a real sshd on
127.0.0.1): the remote host's ``data`` is validated against the same schema as the local answer and
has the same fields.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import click
import jsonschema
import pytest

from tests.coreutil import CLI, run_in_process
from tests.labfixture import kubectl
from tests.remoteutil import Cli, clean_env
from tests.sshfixture import SSHServer

SCHEMAS = Path(__file__).resolve().parents[2] / "cpctl" / "schemas"
pytestmark = pytest.mark.timeout(300)

#: command path -> the schemas of its ``-o json`` answers (several: a dry run, a listing...). Every
#: failure is ``error``; every ``-H``/``-i`` run is ``fleet`` with each host's ``data`` as here.
SCHEMA_OF: Dict[str, Tuple[str, ...]] = {
    "status": ("status",), "is-running": ("is-running",), "history": ("history",),
    "stop": ("outcomes", "plan"), "start": ("outcomes", "plan"), "restart": ("outcomes", "plan"),
    "apply": ("change",), "edit": ("change",), "flags": ("change", "flags-list"), "rollback": ("change",),
    "confirm": ("confirm",), "revert-unconfirmed": ("revert",),
    "revisions": ("revisions", "revision", "revisions-diff"),
    "logs": ("logs",), "pending": ("pending",), "bind": ("bind",), "baseline": ("baseline",), "check": ("check",),
    "certs": ("certs",), "scheduler add": ("scheduler-add",), "scheduler remove": ("scheduler-remove",),
    "scheduler list": ("scheduler-list",), "watch": ("watch-event",), "systemd install": ("systemd-install",),
    "systemd show": ("systemd-show",), "keeper status": ("keeper-status",), "keeper stop": ("keeper-stop",),
    "version": ("version",), "completion": ("completion",),
    "etcd status": ("etcd-status",), "etcd defrag": ("etcd-defrag",), "etcd alarm list": ("etcd-alarm",),
    "etcd alarm disarm": ("etcd-alarm",), "etcd recover-space": ("etcd-recover-space",),
    "etcd move-leader": ("etcd-move-leader",),
    "etcd snapshot save": ("etcd-snapshot-save",), "etcd snapshot list": ("etcd-snapshot-list",),
    "etcd snapshot schedule": ("etcd-snapshot-schedule",),
    "lab up": ("lab-env",), "lab env": ("lab-env",), "lab down": ("lab-down",), "lab profiles": ("lab-profiles",),
}
EVERY_RUN = ("error", "fleet")


def text_only() -> Dict[str, str]:
    """command path -> why it prints no JSON: the lab's own table (``cpctl_lab.cli.TEXT_ONLY``), a
    group's reason standing for each of its subcommands."""
    from cpctl_lab.cli import TEXT_ONLY, lab
    out = {}
    for name, why in TEXT_ONLY.items():
        out.update({path: why for path in _leaves("lab " + name, lab.commands[name])})
    return out


def _leaves(path: str, command: click.Command) -> List[str]:
    if isinstance(command, click.Group):
        return [leaf for name, sub in sorted(command.commands.items()) for leaf in _leaves(path + " " + name, sub)]
    return [path]


def every_command() -> List[str]:
    """Every leaf command of ``cpctl`` as its group loads them: the registry's and the plugins' (the lab)."""
    from cpctl.cli.main import main
    ctx = click.Context(main)
    return [leaf for name in main.list_commands(ctx) for leaf in _leaves(name, main.get_command(ctx, name))]


def schema(name: str) -> Dict[str, Any]:
    with open(SCHEMAS / ("%s.json" % name)) as handle:
        loaded: Dict[str, Any] = json.load(handle)
    jsonschema.Draft202012Validator.check_schema(loaded)
    return loaded


def valid(name: str, doc: Any) -> Any:
    jsonschema.Draft202012Validator(schema(name)).validate(doc)
    return doc


def test_every_command_has_a_schema_or_says_why_it_prints_text() -> None:
    from cpctl.cli import registry
    commands, no_json = every_command(), text_only()
    declared = [path for path, spec in registry.COMMANDS.items() if spec.mode is not None]
    assert sorted(p for p in commands if not p.startswith("lab ")) == sorted(declared)   # the registry is all
    missing = [path for path in commands if path not in SCHEMA_OF and path not in no_json]
    assert not missing, "commands with no JSON schema and no reason to print text only: %s" % missing
    assert not set(SCHEMA_OF) & set(no_json) and set(SCHEMA_OF) | set(no_json) == set(commands)
    assert all(len(why) > 20 for why in no_json.values())
    named = {name for names in SCHEMA_OF.values() for name in names} | set(EVERY_RUN)
    assert named == {path.stem for path in SCHEMAS.glob("*.json")}           # no schema file unused
    source = Path(__file__).read_text()
    checks = source[source.index("\nclass Both"):]        # the tests below hold each to a real answer
    for name in named:
        schema(name)
        assert '"%s"' % name in checks, "schema %s is checked against no answer" % name


def _object_schemas(node: Any, path: str) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """Every subschema of ``node`` that describes a JSON object (not an ``if`` test), with its path."""
    if isinstance(node, dict):
        kind = node.get("type")
        if kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node:
            yield path, node
        for key, value in node.items():
            if key not in ("if", "then", "else", "not"):
                yield from _object_schemas(value, "%s/%s" % (path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _object_schemas(value, "%s/%d" % (path, index))


def test_every_schema_is_closed_where_the_shape_is_cpctls() -> None:
    """Issue 48: each object in every schema file (any added later too) says what else it may hold:
    ``additionalProperties: false`` - a field cpctl emits that the schema does not describe fails
    the real answers below -, or the schema of a map's values, or ``true`` with a ``$comment``
    saying whose shape it is. The schemas ship in the package (cpctl/schemas/); none is left in the
    old tests/schemas/ (a schema added there is not checked: move it)."""
    open_ones = []
    for path in sorted(SCHEMAS.glob("*.json")):
        for where, node in _object_schemas(schema(path.stem), path.name):
            extra = node.get("additionalProperties", node.get("unevaluatedProperties"))
            if extra is None or (extra is True and not node.get("$comment")):
                open_ones.append(where)
    assert not open_ones, "object schemas that do not say what else they hold: %s" % open_ones
    old = Path(__file__).resolve().parents[1] / "schemas"
    assert not list(old.glob("*.json")), "schemas live in cpctl/schemas/ (shipped in the wheel): move %s" % (
        [p.name for p in old.glob("*.json")])


def _finding_fields() -> Dict[str, List[str]]:
    """Every field a ``check`` finding can carry: the keyword arguments of each ``Finding(...)`` in
    cpctl's source (a ``**{...}`` spread counts with its keys), and of each ``X.extra.update(...)`` in
    a module that makes findings -> where it is passed."""
    import ast
    fields: Dict[str, List[str]] = {}
    for path in sorted((SCHEMAS.parent).rglob("*.py")):
        tree = ast.parse(path.read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        makes = [c for c in calls if getattr(c.func, "id", getattr(c.func, "attr", None)) == "Finding"]
        for call in makes:
            where = "%s:%d" % (path.relative_to(SCHEMAS.parents[1]), call.lineno)
            names = [k.arg for k in call.keywords if k.arg is not None] + ["kind", "severity", "message"]
            for spread in (k.value for k in call.keywords if k.arg is None):
                dicts = [node for node in ast.walk(spread) if isinstance(node, ast.Dict)]
                assert dicts and all(isinstance(key, ast.Constant) for d in dicts for key in d.keys), \
                    "%s: a **spread whose keys this test cannot see: spell them as literal keys" % where
                names += [str(key.value) for d in dicts for key in d.keys if isinstance(key, ast.Constant)]
            for name in names:
                fields.setdefault(name, []).append(where)
        for call in calls if makes else []:     # a finding's fields added later: found.extra.update(k=...)
            if isinstance(call.func, ast.Attribute) and call.func.attr == "update" and \
                    getattr(call.func.value, "attr", None) == "extra":
                where = "%s:%d" % (path.relative_to(SCHEMAS.parents[1]), call.lineno)
                assert not call.args and all(k.arg for k in call.keywords), "%s: spell the keys" % where
                for key in call.keywords:
                    fields.setdefault(str(key.arg), []).append(where)
        assert not makes or not [n for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(
            n.ctx, ast.Store) and getattr(n.value, "attr", None) == "extra"], "%s: set a finding's extra by " \
            "update(k=...), which this test reads" % path
    return fields


def test_every_field_a_check_finding_carries_is_described() -> None:
    """Issue 48: a finding carries kind-specific fields (``lost``, ``flags``, ``deadline``...) next to
    the common ones; the schema's findings are closed, so a field it does not describe fails every
    answer that holds such a finding - and the answers the tests above validate hold none of most
    kinds. So every keyword any ``Finding(...)`` in cpctl passes is a described property (19 were
    not: ``check --kubeadm``, ``lost_change``, ``unconfirmed``, ``stray``, ``duplicate`` answers
    broke their own schema)."""
    fields = _finding_fields()
    assert len(fields) > 10 and "lost" in fields                       # the scan sees the source
    described = schema("check")["$defs"]["findings"]["items"]["properties"]
    undescribed = {name: where for name, where in fields.items() if name not in described}
    assert not undescribed, "finding fields check.json does not describe: %s" % undescribed
    for name, prop in described.items():
        assert name in fields or name in ("file", "component", "diff", "fix"), "described, never emitted: " + name
        assert prop.get("description") or name in ("kind", "severity", "message", "file", "component", "diff",
                                                   "fix"), "kind-specific field without a description: " + name


def _agent_history_fields() -> Dict[str, List[str]]:
    """Every field a history record the agent writes (``cpctl/agent``: the modules that write history -
    the node-side revert, the transaction, the put-backs) can carry -> where: the keys of each record it
    builds (a dict literal or
    ``dict(...)`` call naming an ``action``), of each one it extends (``record[...] =``, ``record.setdefault``,
    ``dict(record|verdict, k=...)``), and the verdict the plan hands it (``PlanVerdict``: defined in
    ``agent.shapes``, the agent boundary's TypedDicts, which ``host.base`` re-exports)."""
    import ast
    fields: Dict[str, List[str]] = {}
    root = SCHEMAS.parents[1]

    def add(names: List[str], path: Path, node: ast.AST) -> None:
        for name in names:
            fields.setdefault(name, []).append("%s:%d" % (path.relative_to(root), getattr(node, "lineno", 0)))
    writers = ("_append_record", "append_history", "history_line", "recover")   # recover(entry, RECORD)
    for path in sorted((SCHEMAS.parent / "agent").glob("*.py")):
        tree = ast.parse(path.read_text())
        if not any(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) in writers
                   for n in ast.walk(tree)):
            continue                        # writes no history (revertplan: the plan's shape checks)
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
                if "action" in keys:
                    add(keys, path, node)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
                named = [str(k.arg) for k in node.keywords if k.arg]
                base = node.args[0] if node.args else None
                if "action" in named or getattr(base, "id", None) in ("record", "verdict"):
                    add(named, path, node)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                    getattr(node.value, "id", None) == "record" and isinstance(node.slice, ast.Constant):
                add([str(node.slice.value)], path, node)
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "setdefault" and \
                    getattr(node.func.value, "id", None) == "record" and isinstance(node.args[0], ast.Constant):
                add([str(node.args[0].value)], path, node)
    shapes = root / "cpctl" / "agent" / "shapes.py"
    verdict = next(n for n in ast.walk(ast.parse(shapes.read_text()))
                   if isinstance(n, ast.ClassDef) and n.name == "PlanVerdict")
    add([n.target.id for n in verdict.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)],
        shapes, verdict)
    return fields


def test_every_field_an_agent_history_record_carries_is_described() -> None:
    """Issue 49: the agent writes history records itself (the master's own revert: ``reverted``, the
    revert's record, ``keep-in-undone``, ``keep-in-conflict``; a recovered change: ``recovered``,
    ``unfinished``). history.json's records are closed, so a field it does not describe fails every
    ``-o json history`` that shows such a record - ``recovered`` and ``unfinished`` were not described;
    ``op``, which it requires, the node-side ``reverted`` record lacked. So every field the agent's
    writers spell is a described property."""
    fields = _agent_history_fields()
    assert {"theirs", "keys", "recovered", "unfinished", "outcome", "configmap", "armed_op"} <= set(fields), \
        sorted(fields)                                                 # the scan sees every writer
    items = schema("history")["properties"]["history"]["items"]
    undescribed = {name: where for name, where in fields.items() if name not in items["properties"]}
    assert not undescribed, "history fields history.json does not describe: %s" % undescribed
    verdict = [f for f, where in fields.items() if any("noderevert.py" in w for w in where)]
    assert "op" in verdict, verdict                                    # the node-side reverted record: op


class Both:
    """One command, locally (in this process, as the CLI runs it) and through ``-H``: both answers
    valid against ``name``'s schema, with the same fields."""

    def __init__(self, cli: Cli) -> None:
        self.cli = cli

    def local(self, name: str, *args: str, rc: int = 0, env: Any = None) -> Dict[str, Any]:
        proc = run_in_process(CLI + ["-o", "json", *args], dict(self.cli.env, **(env or {})))
        assert proc.returncode == rc, (args, proc.returncode, proc.stderr)
        assert "Traceback" not in proc.stderr
        return dict(valid(name, json.loads(proc.stdout)))

    def remote(self, name: str, *args: str, rc: int = 0) -> Dict[str, Any]:
        fleet = valid("fleet", self.cli.json("-H", "master", *args, rc=rc))
        [block] = fleet["hosts"]
        assert block["data"]["host"] == block["host"] == "master", block      # the host, a field of the answer
        return dict(valid(name, block["data"]))

    def __call__(self, name: str, *args: str, rc: int = 0) -> Dict[str, Any]:
        """Issue 48: one shape - the same keys locally and as a host's ``data`` through ``-H``, the
        host a field of both (``null``: this machine)."""
        local = self.local(name, *args, rc=rc)
        remote = self.remote(name, *args, rc=rc)
        assert sorted(remote) == sorted(local), (name, args, sorted(remote), sorted(local))
        assert "host" in local and local["host"] is None, local
        return local


@pytest.fixture
def both(sshd: SSHServer, lab: Any, tmp_path: Path) -> Iterator[Both]:
    # EDITOR=true: an edit saved as it was
    cli = Cli(sshd.ssh_config, sshd.known_hosts, clean_env(str(tmp_path / "home"), EDITOR="true", **lab.env_for(1)))
    checker = Both(cli)
    env = checker.local("lab-env", "lab", "env", "--dir", str(lab.dir), "--master", "1")
    assert env["env"] == lab.env_for(1)                   # the same variables the export lines set
    up = checker.local("lab-env", "lab", "up", "--dir", str(lab.dir))   # running: the same environment again
    assert up["env"] == lab.env_for(1)
    checker.local("lab-down", "lab", "down", "--dir", str(tmp_path / "no-lab"))
    yield checker


class Watching:
    """``cpctl -o json watch`` on the lab's master (its probe follows the mirror pods) in a child
    process; ``stop`` ends it and returns every line, each one JSON object."""

    def __init__(self, env: Dict[str, str]) -> None:
        self.proc = subprocess.Popen(CLI + ["-o", "json", "watch", "--timeout", "60"], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()            # the "watching" line: inotify is armed
        assert first, "watch exited: %s" % (self.proc.stderr.read() if self.proc.stderr else "")
        self.lines = [first]

    def stop(self) -> List[Dict[str, Any]]:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return [json.loads(line) for line in self.lines + out.splitlines() if line.strip()]


def test_every_answer_matches_its_schema_locally_and_remotely(both: Both, lab: Any, tmp_path: Path) -> None:
    watching = Watching(dict(both.cli.env, CPCTL_PROBE="api"))
    both("status", "status")
    both.local("is-running", "is-running", "scheduler")
    both("version", "version")
    certs = both("certs", "certs")
    assert {c["component"] for c in certs["components"]} >= {"kube-apiserver", "kube-scheduler"}
    logs = both.local("logs", "logs", "scheduler", "--tail", "2")
    assert logs["source"] == "crictl" and len(logs["lines"]) == 2

    plan = both("plan", "stop", "scheduler", "--dry-run")
    assert plan["would_change"] is True and plan["changed"] is False
    both.local("plan", "restart", "scheduler", "--dry-run")
    stale = both.local("plan", "restart", "--stale-certs", "--dry-run")
    assert stale["would_change"] is False and stale["left"]
    restarted = both.local("outcomes", "restart", "scheduler")         # its steps as stop and start: described
    assert [r["start"]["wait"]["verified"] for r in restarted["results"]] == [True], restarted
    both.local("outcomes", "stop", "scheduler")
    plan = both.local("plan", "stop", "scheduler", "--dry-run")
    assert plan["would_change"] is False                      # already parked: nothing would change

    # the scheduler is parked: a new pod waits; bind it by hand (once, cluster-wide: through -H)
    kubectl(lab, "run", "json-pod", "--image=httpd:2.4-alpine")
    pending = both.local("pending", "pending")
    assert [p["name"] for p in pending["pending"]] == ["json-pod"]
    dry = both("bind", "bind", "json-pod", "--node", lab.node_name(), "--dry-run")
    assert (dry["dry_run"], dry["changed"], dry["would_change"], dry["phase"]) == (True, False, True, None)
    bound = both.remote("bind", "bind", "json-pod", "--node", lab.node_name())
    assert bound["changed"] is True and bound["dry_run"] is False and sorted(bound) == sorted(dry)
    both.remote("outcomes", "start", "scheduler")

    listed = both.local("flags-list", "flags", "scheduler")
    assert listed["container"] == "kube-scheduler" and listed["parked"] is False
    dry = both("change", "flags", "scheduler", "--set", "v=3", "--dry-run")
    assert (dry["changed"], dry["would_change"], dry["revision"], dry["wait"]) == (False, True, None, None)
    assert "+    - --v=3" in dry["diff"]
    done = both.local("change", "flags", "scheduler", "--set", "v=3", "--settle", "0.2")
    assert done["changed"] is True and isinstance(done["new_revision"], int) and done["wait"]["verified"]
    noop = both("change", "flags", "scheduler", "--set", "v=3")
    assert (noop["changed"], noop["would_change"], noop["revision"], noop["checksum"]) == (False, False, None, None)
    unchanged = both.local("change", "edit", "scheduler", "--yes")          # EDITOR=true: saved as it was
    assert unchanged["changed"] is False and unchanged["action"] == "edit"
    current = Path(lab.manifests_dir()) / "kube-scheduler.yaml"
    both.local("change", "apply", "scheduler", "-f", str(current), "--dry-run")
    both.local("change", "rollback", "scheduler", "--dry-run")

    # commit-confirmed: armed over SSH, confirmed here, then "already confirmed" over SSH
    armed = both.remote("change", "flags", "scheduler", "--set", "v=4", "--settle", "0.2", "--confirm-within", "5m")
    assert armed["confirm"]["armed"] is True
    kept = both.local("confirm", "confirm", "scheduler")
    assert kept["changed"] is True and kept["confirmed"] == ["kube-scheduler"]
    again = both.remote("confirm", "confirm", "scheduler")
    assert again["changed"] is False and again["confirmed"] == [] and "already confirmed" in again["message"]
    # armed here and reverted by hand (revert-unconfirmed runs on the master itself), then nothing armed
    both.local("change", "flags", "scheduler", "--set", "v=5", "--settle", "0.2", "--confirm-within", "5m")
    reverted = both.local("revert", "revert-unconfirmed", "scheduler")
    assert reverted["reverted"] is True and reverted["action"] == "rollback" and reverted["wait"]["verified"]
    nothing = both.local("revert", "revert-unconfirmed", "scheduler")
    assert (nothing["reverted"], nothing["component"], nothing["file"], nothing["wait"]) == (
        False, "kube-scheduler", None, None)
    assert sorted(nothing) == sorted(reverted)

    revisions = both("revisions", "revisions", "scheduler")
    assert [r["current"] for r in revisions["revisions"]].count(True) == 1
    first = both.local("revision", "revisions", "scheduler", "1")
    assert first["revision"]["original"] is True and "kube-scheduler" in first["manifest"]
    diff = both.local("revisions-diff", "revisions", "scheduler", "--diff", "1", "2")
    assert diff["identical"] is False and "--v=3" in diff["diff"]
    history = both("history", "history")
    assert [r["action"] for r in history["history"]][:2] == ["stop", "start"]

    recorded = both.local("baseline", "baseline")
    kept_base = both.remote("baseline", "baseline")
    assert (recorded["recorded"], kept_base["recorded"], kept_base["replaced"]) == (True, False, False)
    assert sorted(recorded) == sorted(kept_base)
    check = both("check", "check")
    assert check["actions"] is None and check["remaining"] == check["findings"]
    fix = both.local("check", "check", "--fix", "--dry-run")
    assert fix["actions"] == [] and fix["dry_run"] is True

    add = both.local("scheduler-add", "scheduler", "add", "json-sched", "--dry-run")
    assert (add["dry_run"], add["would_change"], add["wait"]) == (True, True, None)
    added = both.local("scheduler-add", "scheduler", "add", "json-sched", "--no-wait")
    assert added["changed"] is True and sorted(added) == sorted(add)
    schedulers = both("scheduler-list", "scheduler", "list")
    assert [s["name"] for s in schedulers["schedulers"]] == ["json-sched"]
    plan_rm = both.local("scheduler-remove", "scheduler", "remove", "json-sched", "--dry-run")
    removed = both.remote("scheduler-remove", "scheduler", "remove", "json-sched", "--no-wait")
    assert (plan_rm["moved"], removed["changed"], sorted(removed["files"])) == (None, True, sorted(plan_rm["files"]))

    # the keeper: none yet; one kept by --persist; stopped
    assert both.local("keeper-status", "keeper", "status")["running"] is False
    both.cli.run("--persist", "60s", "-H", "master", "version")
    running = both.local("keeper-status", "keeper", "status")
    assert running["running"] is True and [c["target"] for c in running["connections"]] == ["master"]
    stopped = both.local("keeper-stop", "keeper", "stop")
    assert stopped["stopped"] is True and stopped["connections"] == 1
    assert both.local("keeper-stop", "keeper", "stop")["stopped"] is False

    events = watching.stop()
    for event in events:
        valid("watch-event", event)
    verdicts = [(e["file"], e["verdict"]) for e in events]
    assert ("kube-scheduler.yaml", "stop") in verdicts and ("kube-scheduler.yaml", "followed") in verdicts
    assert events[-1]["verdict"] == "exit"


@pytest.mark.slow           # no lab, but a dozen cpctl processes
def test_commands_without_a_node_honour_json_and_the_others_refuse_it(tmp_path: Path) -> None:
    env = dict(os.environ, HOME=str(tmp_path))

    def cpctl(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cpctl", *argv], capture_output=True, text=True, env=env,
                              timeout=60, cwd=str(tmp_path))
    for argv, name in ((["-o", "json", "completion", "bash"], "completion"),
                       (["completion", "zsh", "-o", "json"], "completion"),
                       (["-o", "json", "lab", "profiles"], "lab-profiles"),
                       (["-o", "json", "systemd", "show", "--cpctl-path", "/usr/local/bin/cpctl"], "systemd-show"),
                       # any executable the units' sandbox can run stands for cpctl here: only files are written
                       (["-o", "json", "systemd", "install", "--prefix", str(tmp_path / "units"), "--cpctl-path",
                         os.path.realpath("/bin/true")], "systemd-install"),
                       (["-o", "json", "etcd", "snapshot", "schedule", "--prefix", str(tmp_path / "snap-units"),
                         "--cpctl-path", os.path.realpath("/bin/true")], "etcd-snapshot-schedule")):
        proc = cpctl(*argv)
        assert proc.returncode == 0, proc.stderr
        valid(name, json.loads(proc.stdout))
    assert sorted(os.listdir(tmp_path / "units")) == ["cpctl-check.service", "cpctl-check.timer",
                                                      "cpctl-watch.service"]
    assert sorted(os.listdir(tmp_path / "snap-units")) == ["cpctl-etcd-snapshot.service", "cpctl-etcd-snapshot.timer"]
    proc = cpctl("-o", "json", "--manifests-dir", str(tmp_path / "none"), "status")
    assert proc.returncode == 7
    valid("error", json.loads(proc.stderr.strip().splitlines()[-1]))
    # the text-only commands refuse -o json before doing anything: one error object, exit 2
    for path, why in text_only().items():
        proc = cpctl("-o", "json", *path.split(), "--help")
        assert proc.returncode == 0                         # --help is text, whatever -o says
        proc = cpctl("-o", "json", *path.split(), "--dir", str(tmp_path / "no-lab"))
        assert (proc.returncode, proc.stdout) == (2, ""), (path, proc.stderr)
        error = valid("error", json.loads(proc.stderr.strip()))["error"]
        assert "prints text only" in error["message"] and why in error["message"], error


def test_etcd_answers_match_their_schemas_locally_and_remotely(real_etcd: Any, sshd: SSHServer,
                                                                tmp_path: Path) -> None:
    """etcd care (issue 46) against a real etcd: each answer locally and through ``-H`` (the fleet
    shape, the master's ``data`` as locally)."""
    from tests import etcdnodes
    cli = Cli(sshd.ssh_config, sshd.known_hosts, clean_env(str(tmp_path / "home")))
    checker = Both(cli)
    node = etcdnodes.node_args(real_etcd, "m1")
    for name, args in (("etcd-status", ["etcd", "status"]), ("etcd-defrag", ["etcd", "defrag", "--all", "--dry-run"]),
                       ("etcd-alarm", ["etcd", "alarm", "list"]), ("etcd-alarm", ["etcd", "alarm", "disarm"]),
                       ("etcd-recover-space", ["etcd", "recover-space"]),
                       ("etcd-move-leader", ["etcd", "move-leader", "--dry-run"]),
                       ("etcd-snapshot-save", ["etcd", "snapshot", "save"]),
                       ("etcd-snapshot-list", ["etcd", "snapshot", "list"])):
        checker(name, *node, *args)
    saved = checker.remote("etcd-snapshot-save", *node, "etcd", "snapshot", "save")    # written by the agent
    assert saved["where"] == "the master m1 (not this machine)" and "saved on the master m1" in saved["message"]
    assert Path(saved["snapshot"]["path"]).stat().st_mode & 0o777 == 0o600         # (that master is loopback)

