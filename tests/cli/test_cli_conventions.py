"""CLI conventions (issue #23 item 6): ``-o yaml`` and ``-o wide`` as kubectl means them, completion
of revision numbers and inventory host names, one name for a component in every JSON output, and
``--manifests-dir``/``--state-dir`` given as relative paths resolved against the current directory."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Iterator, List

import yaml

from tests.cli.test_cli_completion import values
from tests.coreutil import NODE, NodeDirs, check_result


def _version(node: NodeDirs, number: int) -> bytes:
    return node.files["kube-scheduler.yaml"].replace(b"- --leader-elect=true\n",
                                                     b"- --leader-elect=true\n    - --v=%d\n" % number)


def _apply(node: NodeDirs, data: bytes) -> None:
    proc = subprocess.run(node.argv("apply", "scheduler", "-f", "-"), input=data, env=node.env(),
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_output_yaml_is_the_json_object(node: NodeDirs) -> None:
    _apply(node, _version(node, 1))
    for args in (["status"], ["history"], ["revisions", "scheduler"], ["revisions", "scheduler", "--diff", "1", "2"]):
        as_json = json.loads(node.run("-o", "json", *args).stdout)
        as_yaml = yaml.safe_load(node.run(*args, "-o", "yaml").stdout)
        if "history" in as_json:                   # records carry their own times: compare what is stable
            as_json["history"] = [r["op"] for r in as_json["history"]]
            as_yaml["history"] = [r["op"] for r in as_yaml["history"]]
        assert as_yaml == as_json, args
    error = node.run("-o", "yaml", "status", "schedular", rc=3)
    assert error.stderr.startswith("cpctl: no static pod 'schedular'"), "errors stay one line"


def test_output_wide_adds_columns(node: NodeDirs) -> None:
    _apply(node, _version(node, 1))
    narrow = node.run("status").stdout.splitlines()[1]
    wide = node.run("-o", "wide", "status").stdout.splitlines()
    assert "MIRROR POD" in wide[1] and "MIRROR POD" not in narrow
    scheduler = [line for line in wide if line.startswith("kube-scheduler ")][0]
    assert "kube-scheduler-%s" % NODE in scheduler
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        import hashlib
        assert hashlib.sha256(handle.read()).hexdigest() in scheduler, "the whole checksum"
    revisions = node.run("revisions", "scheduler", "-o", "wide").stdout.splitlines()
    assert revisions[0].split()[:6] == ["REV", "SAVED", "AT", "BY", "HOST", "ACTION"]
    history = node.run("history", "-o", "wide").stdout.splitlines()
    assert "OP" in history[0].split() and "kube-scheduler.yaml" in history[1]


def test_revision_numbers_complete(node: NodeDirs) -> None:
    env = node.env()
    assert values("cpctl revisions scheduler ", env) == []
    _apply(node, _version(node, 1))
    _apply(node, _version(node, 2))
    assert values("cpctl revisions scheduler ", env) == ["1", "2", "3"]
    assert values("cpctl revisions kube-scheduler --diff ", env) == ["1", "2", "3"]
    assert values("cpctl rollback scheduler --to ", env) == ["1", "2", "3"]
    assert values("cpctl rollback etcd --to ", env) == [], "only the component's own"


def test_host_names_complete_from_the_inventory(node: NodeDirs, tmp_path: Any) -> None:
    inventory = os.path.join(str(tmp_path), "inventory.yaml")
    with open(inventory, "w") as handle:
        handle.write("all:\n  children:\n    masters:\n      hosts:\n        cp-1: {}\n        cp-2: {}\n"
                     "    canary:\n      hosts:\n        cp-3: {}\n")
    env = dict(node.env(), CPCTL_INVENTORY=inventory)
    assert values("cpctl status -H ", env) == ["all", "canary", "masters", "cp-1", "cp-2", "cp-3"]
    assert values("cpctl -i %s stop -H cp" % inventory, node.env()) == ["cp-1", "cp-2", "cp-3"]
    assert values("cpctl status -H cp-1,cp", env) == ["cp-1,cp-2", "cp-1,cp-3"]
    assert values("cpctl status -H ", node.env()) == [], "no inventory: nothing to offer"


def _components(value: Any) -> Iterator[str]:
    """Every value of a "component" key, and every key of a "components" mapping, in ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "component" and isinstance(item, str):
                yield item
            elif key == "components" and isinstance(item, dict):
                yield from item
            else:
                yield from _components(item)
    elif isinstance(value, list):
        for item in value:
            yield from _components(item)


def test_one_name_for_a_component_in_every_json_output(node: NodeDirs, tmp_path: Any) -> None:
    """Whatever the user typed (``scheduler``), JSON says ``kube-scheduler`` (docs/json.md)."""
    new = os.path.join(str(tmp_path), "new.yaml")
    with open(new, "wb") as handle:
        handle.write(_version(node, 3))
    runs: List[List[str]] = [
        ["status", "scheduler"], ["is-running", "scheduler"], ["flags", "scheduler"],
        ["flags", "scheduler", "--set", "v=2", "--dry-run"], ["flags", "scheduler", "--set", "v=2"],
        ["apply", "scheduler", "-f", new], ["revisions", "scheduler"], ["revisions", "scheduler", "1"],
        ["revisions", "scheduler", "--diff", "1", "2"], ["rollback", "scheduler"], ["history", "scheduler"],
        ["edit", "scheduler", "--yes"], ["stop", "scheduler", "--dry-run"], ["stop", "scheduler", "--no-wait"],
        ["stop", "scheduler", "--dry-run"], ["revisions", "scheduler"], ["start", "scheduler", "--dry-run"],
        ["start", "scheduler", "--no-wait"], ["restart", "scheduler", "--dry-run"],
    ]
    for args in runs:
        proc = subprocess.run(node.argv("-o", "json", *args), env=node.env(EDITOR="true", VISUAL=""),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        if args[0] == "is-running":     # its exit code is the answer, the document on stdout says why
            assert proc.returncode in (0, 1) and proc.stderr == "", (proc.returncode, proc.stderr)
        else:
            check_result(proc, 0)
        names = set(_components(json.loads(proc.stdout)))
        assert names == {"kube-scheduler"}, (args, names)


def test_relative_dirs_are_resolved_against_the_current_directory(node: NodeDirs, tmp_path: Any) -> None:
    env = {k: v for k, v in node.env().items() if k not in ("CPCTL_MANIFESTS_DIR", "CPCTL_STATE_DIR")}
    rel = ["--manifests-dir", "manifests", "--state-dir", "state"]
    stop = subprocess.run(node.argv(*rel, "stop", "scheduler", "--no-wait"), env=env, cwd=node.root,
                          capture_output=True, text=True, timeout=60)
    check_result(stop, 0)
    assert node.parked_files() == ["kube-scheduler.yaml"], "parked in ./state, as the relative path says"
    status = subprocess.run(node.argv("-o", "json", "status"), env=dict(env, CPCTL_MANIFESTS_DIR="manifests",
                                                                       CPCTL_STATE_DIR="./state"),
                            cwd=node.root, capture_output=True, text=True, timeout=60)
    check_result(status, 0)
    data = json.loads(status.stdout)
    assert data["manifests_dir"] == node.manifests and data["state_dir"] == node.state
    remote = subprocess.run(node.argv(*rel, "-H", "127.0.0.1", "status"), env=env, cwd=node.root,
                            capture_output=True, text=True, timeout=60)
    check_result(remote, 2)
    assert "must be absolute" in remote.stderr
