"""Issue #37: one JSON shape per command, local or remote, checked against its JSON Schema
(tests/schemas/NAME.json; docs/json.md is the prose). A no-op or a dry run has every field - null
where there is no value - and a dry run says what a real run would change (``would_change``) next
to what it changed (``changed``: nothing). ``completion`` and ``lab profiles`` honour ``-o json``.

Each command runs on the lab's master locally and through ``-H`` (a real sshd on 127.0.0.1): the
remote host's ``data`` is validated against the same schema as the local answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator

import jsonschema
import pytest

from tests.remoteutil import Cli, clean_env
from tests.sshfixture import SSHServer

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
pytestmark = pytest.mark.timeout(300)


def schema(name: str) -> Dict[str, Any]:
    with open(SCHEMAS / ("%s.json" % name)) as handle:
        loaded: Dict[str, Any] = json.load(handle)
    jsonschema.Draft202012Validator.check_schema(loaded)
    return loaded


def valid(name: str, doc: Any) -> Any:
    jsonschema.Draft202012Validator(schema(name)).validate(doc)
    return doc


class Both:
    """One command, locally and through -H: both answers valid against ``name``'s schema."""

    def __init__(self, cli: Cli) -> None:
        self.cli = cli

    def __call__(self, name: str, *args: str, rc: int = 0) -> Dict[str, Any]:
        local = valid(name, self.cli.json(*args, ssh=False, rc=rc))
        fleet = valid("fleet", self.cli.json("-H", "master", *args, rc=rc))
        remote = fleet["hosts"][0]["data"]
        valid(name, remote)
        assert sorted(remote) == sorted(local), (name, args, sorted(remote), sorted(local))
        return dict(local)


@pytest.fixture
def both(sshd: SSHServer, lab: Any, tmp_path: Path) -> Iterator[Both]:
    cli = Cli(sshd.ssh_config, sshd.known_hosts, clean_env(str(tmp_path / "home"), **lab.env_for(1)))
    env = valid("lab-env", cli.json("lab", "env", "--dir", str(lab.dir), "--master", "1", ssh=False))
    assert env["env"] == lab.env_for(1)                   # the same variables the export lines set
    valid("lab-down", cli.json("lab", "down", "--dir", str(tmp_path / "no-lab"), ssh=False))
    yield Both(cli)


def test_every_answer_matches_its_schema_locally_and_remotely(both: Both) -> None:
    both("status", "status")
    both("is-running", "is-running", "scheduler")
    plan = both("plan", "stop", "scheduler", "--dry-run")
    assert plan["would_change"] is True and plan["changed"] is False
    both("outcomes", "stop", "scheduler")
    plan = both("plan", "stop", "scheduler", "--dry-run")
    assert plan["would_change"] is False                      # already parked: nothing would change
    both("outcomes", "start", "scheduler")
    dry = both("change", "flags", "scheduler", "--set", "v=3", "--dry-run")
    assert (dry["changed"], dry["would_change"], dry["revision"], dry["wait"]) == (False, True, None, None)
    assert "+    - --v=3" in dry["diff"]
    done = both("change", "flags", "scheduler", "--set", "v=3", "--settle", "0.2")
    assert done["changed"] is True and isinstance(done["new_revision"], int) and done["wait"]["verified"]
    noop = both("change", "flags", "scheduler", "--set", "v=3")
    assert (noop["changed"], noop["would_change"], noop["revision"], noop["checksum"]) == (False, False, None, None)
    check = both("check", "check")
    assert check["actions"] is None and check["remaining"] == check["findings"]
    history = both("history", "history")
    assert [r["action"] for r in history["history"]][:2] == ["stop", "start"]
    revisions = both("revisions", "revisions", "scheduler")
    assert [r["current"] for r in revisions["revisions"]][-1] is True


@pytest.mark.slow           # no lab, but four cpctl processes
def test_commands_without_a_node_honour_json_and_errors_are_one_object(tmp_path: Path) -> None:
    env = dict(os.environ, HOME=str(tmp_path))
    for argv, name in ((["-o", "json", "completion", "bash"], "completion"),
                       (["completion", "zsh", "-o", "json"], "completion"),
                       (["-o", "json", "lab", "profiles"], "lab-profiles")):
        proc = subprocess.run([sys.executable, "-m", "cpctl", *argv], capture_output=True, text=True, env=env,
                              timeout=60, cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stderr
        valid(name, json.loads(proc.stdout))
    proc = subprocess.run([sys.executable, "-m", "cpctl", "-o", "json", "--manifests-dir", str(tmp_path / "none"),
                           "status"], capture_output=True, text=True, env=env, timeout=60, cwd=str(tmp_path))
    assert proc.returncode == 7
    valid("error", json.loads(proc.stderr.strip().splitlines()[-1]))
