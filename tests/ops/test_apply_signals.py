"""apply under signals against the lab (issue #14 item 5).

* SIGTERM while waiting for the new version puts the previous bytes back at once (exit 130);
* SIGKILL at random instants of real ``cpctl apply`` runs: after each, the manifests dir holds the
  old or the new bytes complete (never a partial or a second file), the new bytes' revision is
  kept when they stand, and the next command finishes or rolls back what was interrupted.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

from tests.labfixture import is_ready, mirror, run_cpctl, wait_for
from tests.ops.test_apply_lab import BAD_FLAG, _history, _path, _read, _with_flag, _write


def _popen(lab: Any, *args: str) -> subprocess.Popen:
    env = dict(os.environ, **lab.env)
    env.pop("CPCTL_PROBE", None)
    return subprocess.Popen([sys.executable, "-m", "cpctl", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_sigterm_while_waiting_puts_the_previous_version_back(lab: Any, tmp_path: Any) -> None:
    old = _read(_path(lab))
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), 20, "scheduler Ready")
    bad = _with_flag(old, BAD_FLAG)
    proc = _popen(lab, "apply", "scheduler", "-f", _write(tmp_path, bad), "--timeout", "120", "--force")
    wait_for(lambda: _read(_path(lab)) == bad, 20, "the new version written")
    time.sleep(0.5)                                  # well inside the wait
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "SIGTERM while waiting for the new version of kube-scheduler" in err
    assert "the previous version is back in place" in err and len(err.strip().splitlines()) == 1
    assert _read(_path(lab)) == old
    assert [r["action"] for r in _history(lab)] == ["apply", "rollback"]
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), 20, "the old version Ready again")

    # Ctrl-C once the new version was verified, while cpctl watches it stay Ready: it is kept, the
    # message says what was verified, nothing is asked or undone (issue #39, item 4)
    good = _with_flag(old, "--v=3")
    err_path = os.path.join(str(tmp_path), "settle.err")
    env = dict(os.environ, **lab.env)
    env.pop("CPCTL_PROBE", None)
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "cpctl", "apply", "scheduler", "-f",
                                 _write(tmp_path, good, "good.yaml"), "--timeout", "120", "--settle", "120"],
                                env=env, stdout=subprocess.PIPE, stderr=err_file, text=True)
        try:
            wait_for(lambda: "settling before the verdict" in _read(err_path).decode(), 90, "the settle under way")
        finally:
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=60)
    err = _read(err_path).decode()
    assert proc.returncode == 130, out + err
    assert "apply of kube-scheduler interrupted after verification (" in err and "); kept" in err, err
    assert "cpctl rollback kube-scheduler undoes it" in err
    assert _read(_path(lab)) == good
    assert [r["action"] for r in _history(lab)] == ["apply", "rollback", "apply"]


def _invariants(lab: Any, old: bytes, new: bytes) -> str:
    names = sorted(os.listdir(str(lab.manifests_dir())))
    assert not [n for n in names if n.startswith(".")], names
    assert [n for n in names if n.startswith("kube-scheduler")] == ["kube-scheduler.yaml"], names
    now = _read(_path(lab))
    assert now in (old, new), "a complete version, never a partial file"
    state = str(lab.state_dir())
    assert not os.path.exists(os.path.join(state, "journal.json"))
    staged = os.path.join(state, "staged")
    assert not (os.path.isdir(staged) and os.listdir(staged))
    return "new" if now == new else "old"


def test_random_sigkills_during_apply_keep_every_invariant(lab: Any, tmp_path: Any) -> None:
    rng = random.Random(1403)
    old = _read(_path(lab))
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), 20, "scheduler Ready")
    for round_number in range(8):
        new = _with_flag(old, "--v=%d" % (round_number + 1))
        proc = _popen(lab, "apply", "scheduler", "-f", _write(tmp_path, new, "r%d.yaml" % round_number),
                      "--timeout", "30", "--settle", "0")
        time.sleep(rng.uniform(0.25, 1.2))        # interpreter start-up is ~0.3 s: kill before, during, after
        proc.kill()
        proc.communicate(timeout=30)
        status = run_cpctl(lab, "-o", "json", "status", "scheduler")
        assert status.returncode == 0, status.stderr
        recovered = json.loads(status.stdout).get("recovered") or []
        outcome = _invariants(lab, old, new)
        if outcome == "new":
            revisions = json.loads(run_cpctl(lab, "-o", "json", "revisions", "scheduler").stdout)["revisions"]
            held = {r["checksum"]: r for r in revisions}
            assert hashlib.sha256(old).hexdigest() in held, "the replaced version is kept"
            assert held[hashlib.sha256(new).hexdigest()]["current"], "the version written is kept, current"
            assert _history(lab)[-1]["action"] == "apply"
        for message in recovered:
            assert message.startswith(("completed interrupted apply", "rolled back interrupted apply")), message
        if outcome == "new":                       # back to the start for the next round
            back = run_cpctl(lab, "rollback", "scheduler", "--timeout", "30", "--settle", "0")
            assert back.returncode == 0, back.stdout + back.stderr
        assert _read(_path(lab)) == old
