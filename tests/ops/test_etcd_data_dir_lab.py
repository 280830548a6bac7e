"""etcd on a new, empty data dir is refused before it starts (issue 45, item 5), in the lab.

The issue's scenario: ``stop apiserver etcd``, an ``edit --parked`` that points the data dir's hostPath
at a directory that does not exist, ``start etcd``: it used to exit 0 ("started ... Ready") while etcd
ran as a new member with no data - on a single master a new, empty cluster under the API server."""

from __future__ import annotations

import os
from typing import Any

from tests.labfixture import run_cpctl

TO_MISSING = "sed -i -e s#/var/lib/etcd$#/var/lib/etcd-elsewhere#"
BACK = "sed -i -e s#/var/lib/etcd-elsewhere$#/var/lib/etcd#"


def test_start_of_etcd_on_a_missing_or_empty_data_dir_is_refused(lab: Any) -> None:
    parked = os.path.join(str(lab.state_dir()), "parked", "etcd.yaml")
    assert run_cpctl(lab, "stop", "apiserver", "etcd").returncode == 0
    proc = run_cpctl(lab, "edit", "etcd", "--parked", "--yes", EDITOR=TO_MISSING)
    assert proc.returncode == 0, proc.stderr
    with open(parked, "rb") as handle:
        edited = handle.read()
    assert b"/var/lib/etcd-elsewhere" in edited

    proc = run_cpctl(lab, "start", "etcd")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "start of etcd refused: its data dir /var/lib/etcd-elsewhere" in proc.stderr
    assert "does not exist" in proc.stderr and "NEW member" in proc.stderr and "nothing changed" in proc.stderr
    assert "--new-member" not in proc.stderr and "--force" not in proc.stderr    # not a joining member
    assert "docs/etcd-restore.md" in proc.stderr
    with open(parked, "rb") as handle:
        assert handle.read() == edited                                          # still parked, as it was
    assert not os.path.exists(os.path.join(str(lab.manifests_dir()), "etcd.yaml"))

    empty = os.path.join(str(lab.root_dir()), "var/lib/etcd-elsewhere")
    os.makedirs(empty)
    proc = run_cpctl(lab, "start", "etcd", "--dry-run")                          # a dry run decides alike
    assert proc.returncode == 4 and "is empty" in proc.stderr, proc.stderr

    assert run_cpctl(lab, "edit", "etcd", "--parked", "--yes", EDITOR=BACK).returncode == 0
    proc = run_cpctl(lab, "start", "etcd", "apiserver")
    assert proc.returncode == 0, proc.stderr

    # the same rule for a change of the running manifest: refused before it is written
    before = open(os.path.join(str(lab.manifests_dir()), "etcd.yaml"), "rb").read()
    proc = run_cpctl(lab, "edit", "etcd", "--yes", EDITOR=TO_MISSING.replace("elsewhere", "new"))
    assert proc.returncode == 4 and "edit of etcd refused: its data dir /var/lib/etcd-new" in proc.stderr, proc.stderr
    assert open(os.path.join(str(lab.manifests_dir()), "etcd.yaml"), "rb").read() == before
