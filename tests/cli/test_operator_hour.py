"""The operator's third hour (issue #39): the hints, outputs and defaults an operator who lives in
kubectl and systemctl expects -- each checked by its exit code and the words they read."""

from __future__ import annotations

import json
from typing import Any

from cpctl.core import journal
from cpctl.redaction import redact_text
from tests.coreutil import NodeDirs


# --- item 1: no --force where it loses data -------------------------------------------------------
def test_a_data_dir_on_no_host_path_hints_the_edit_never_force(tmp_path: Any) -> None:
    node = NodeDirs(str(tmp_path / "node"))
    node.run("stop", "apiserver", "etcd", "--reason", "etcd restore")
    refused = node.run("flags", "etcd", "--parked", "--set", "data-dir=/var/lib/etcd-restore", rc=4)
    assert "--data-dir=/var/lib/etcd-restore is on no hostPath volume" in refused.stderr
    assert "change the hostPath with the flag: `cpctl edit etcd --parked`" in refused.stderr
    assert "--force" not in refused.stderr, refused.stderr
    # a flag name cpctl's list may lag behind still names --force: going ahead loses nothing
    typo = node.run("flags", "etcd", "--parked", "--set", "snapshot-countt=5", rc=4)
    assert "has no flag --snapshot-countt" in typo.stderr and "pass --force to go ahead" in typo.stderr


# --- item 8: redaction, a journal that does not say when, an empty namespace -----------------------
def test_a_quote_inside_a_secret_does_not_end_its_redaction() -> None:
    for text in ("--oidc-client-secret=ab'cdSECRET", "--set 'oidc-client-secret=ab'\"'\"'cdSECRET'",
                 "--oidc-client-secret ab'cdSECRET", '["--token=ab\\"cdSECRET", "--v=2"]'):
        assert "SECRET" not in redact_text(text).replace("-secret", ""), (text, redact_text(text))
    assert redact_text("['--token=abc', '--v=2']") == "['--token=<redacted>', '--v=2']"


def test_a_journal_without_start_time_or_pid_says_so() -> None:
    assert journal.started_text({"started": "2026-01-01T00:00:00Z", "pid": 7}) == \
        "started 2026-01-01T00:00:00Z by pid 7"
    assert journal.started_text({}) == "start time not recorded, pid not recorded"
    assert "None" not in journal.started_text({"started": None, "pid": 9})


def test_bind_names_the_empty_value(node: NodeDirs) -> None:
    proc = node.run("bind", "web", "--node", "n1", "--namespace", "", rc=2)
    assert "empty namespace" in proc.stderr and "component" not in proc.stderr
    assert "empty pod name" in node.run("bind", "", "--node", "n1", rc=2).stderr


# --- item 6: expected commands ---------------------------------------------------------------------
def test_version_and_a_misspelt_command(node: NodeDirs) -> None:
    from cpctl import __version__
    out = node.run("version").stdout
    assert out.startswith("client: cpctl %s (build " % __version__), out
    assert json.loads(node.run("-o", "json", "version").stdout)["client"]["version"] == __version__
    typo = node.run("stpo", "scheduler", rc=2)
    assert "No such command 'stpo'. Did you mean 'stop'?" in typo.stderr
