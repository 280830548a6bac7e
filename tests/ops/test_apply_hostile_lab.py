"""apply against the lab when things go wrong around the wait (issue #22 items 3, 4 and 7).

* item 3: Ctrl-C (a real SIGINT to a real ``cpctl apply``) after the wait timed out, while cpctl
  asks crictl for the failed container's logs: the previous version still goes back and is
  verified, then exit 130;
* item 4: another writer replaces the manifest while cpctl waits: no success reported for a
  change no longer on disk, no rollback over their version, both versions kept, exit 10;
* item 7: SIGKILL during the wait: the next commands (status, stop) say the change was never
  verified, ``check`` reports it, and a later verdict clears it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest

from tests.labfixture import is_ready, mirror, run_cpctl, wait_for
from tests.ops.test_apply_lab import BAD_FLAG, _history, _path, _read, _revisions, _with_flag, _write

pytestmark = pytest.mark.end_to_end


def _popen(lab: Any, *args: str, **env_over: str) -> subprocess.Popen:
    env = dict(os.environ, **lab.env)
    env.pop("CPCTL_PROBE", None)
    env.update(env_over)
    return subprocess.Popen([sys.executable, "-m", "cpctl", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _replace_as_an_editor(path: str, data: bytes) -> None:
    """What another writer does: a new file renamed over the manifest."""
    temp = os.path.join(os.path.dirname(path), ".other-writer.tmp")
    with open(temp, "wb") as handle:
        handle.write(data)
    os.chmod(temp, stat.S_IMODE(os.stat(path).st_mode))
    os.rename(temp, path)


def _interrupting_logs_crictl(lab: Any, tmp_path: Any) -> tuple:
    """A crictl that, for ``logs`` (cpctl's diagnosis after a failed wait), copies the manifest as it
    is then to a marker file and sends SIGINT to the cpctl that ran it (its parent, a process the test
    started): the Ctrl-C lands inside the diagnosis however busy the machine is (a signal sent by the
    test after seeing the marker could come after the call's 5 s timeout). Everything else is the lab's."""
    marker = os.path.join(str(tmp_path), "crictl-logs-called")
    wrapper = os.path.join(str(tmp_path), "crictl")
    with open(wrapper, "w") as handle:
        handle.write("#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = logs ] && { cp '%s' '%s'; kill -INT \"$PPID\"; "
                     "sleep 20; }; done\nexec '%s' \"$@\"\n" % (_path(lab), marker, lab.env["CPCTL_CRICTL"]))
    os.chmod(wrapper, 0o755)
    return wrapper, marker


def test_ctrl_c_while_diagnosing_a_failed_wait_still_rolls_back(lab: Any, tmp_path: Any) -> None:
    old = _read(_path(lab))
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), 20, "scheduler Ready")
    bad = _with_flag(old, BAD_FLAG)
    wrapper, marker = _interrupting_logs_crictl(lab, tmp_path)
    proc = _popen(lab, "apply", "scheduler", "-f", _write(tmp_path, bad), "--timeout", "6", "--settle", "0",
                  "--force", CPCTL_CRICTL=wrapper)          # --force: past cpctl's flag-name check
    out, err = proc.communicate(timeout=90)
    assert os.path.exists(marker), "cpctl never asked crictl for logs: %s" % (out + err)
    assert _read(marker) == bad, "the broken version was in place while cpctl diagnosed it"
    assert proc.returncode == 130, out + err
    lines = err.strip().splitlines()
    assert all(line.startswith("cpctl: waiting: ") for line in lines[:-1]), err    # heartbeats, then the error
    err = lines[-1]
    assert "SIGINT while waiting for the new version of kube-scheduler" in err
    assert "the previous version is back in place and" in err and "NOT" not in err, err
    assert _read(_path(lab)) == old, "the previous version went back"
    assert [r["action"] for r in _history(lab)] == ["apply", "rollback"]
    assert is_ready(mirror(lab, "kube-scheduler")), "verified: the previous version runs and is Ready"
    status = run_cpctl(lab, "status", "scheduler")
    assert status.returncode == 0 and "never verified" not in status.stdout + status.stderr


def _apply_then_other_writer(lab: Any, tmp_path: Any, theirs_flag: str, timeout: str) -> tuple:
    old = _read(_path(lab))
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), 20, "scheduler Ready")
    ours = _with_flag(old, BAD_FLAG)
    theirs = _with_flag(old, theirs_flag)
    proc = _popen(lab, "apply", "scheduler", "-f", _write(tmp_path, ours), "--timeout", timeout, "--settle", "0",
                  "--force")
    wait_for(lambda: _read(_path(lab)) == ours, 20, "cpctl's version written")
    time.sleep(0.5)                                  # inside cpctl's wait
    _replace_as_an_editor(_path(lab), theirs)
    out, err = proc.communicate(timeout=120)
    return proc, out, err, old, ours, theirs


def _both_kept(lab: Any, old: bytes, ours: bytes, theirs: bytes) -> None:
    assert _read(_path(lab)) == theirs, "the other writer's version stays in place, untouched"
    revisions = _revisions(lab)
    by_sum = {r["checksum"]: r for r in revisions}
    assert _sha(old) in by_sum, "the version before cpctl's is kept"
    assert _sha(ours) in by_sum and by_sum[_sha(ours)]["action"] == "displaced", "cpctl's version is kept"
    assert _sha(theirs) not in by_sum, "theirs is never filed as cpctl's (failed) revision"
    assert not [r for r in revisions if r["failed"]]
    actions = [r["action"] for r in _history(lab)]
    assert "rollback" not in actions and actions[0] == "apply", actions


def test_other_writer_during_the_wait_is_no_success(lab: Any, tmp_path: Any) -> None:
    """cpctl's version crash-loops, theirs is healthy: cpctl must not verify their pod as its own."""
    proc, out, err, old, ours, theirs = _apply_then_other_writer(lab, tmp_path, "--v=7", "60")
    assert proc.returncode == 10, out + err
    assert "another writer put other bytes there" in err and "before its verdict" in err, err
    assert "applied" not in out
    _both_kept(lab, old, ours, theirs)


def test_other_writer_during_the_wait_is_never_rolled_back_over(lab: Any, tmp_path: Any) -> None:
    """Both versions crash-loop: the automatic rollback must not overwrite theirs."""
    proc, out, err, old, ours, theirs = _apply_then_other_writer(lab, tmp_path, BAD_FLAG + "-theirs", "6")
    assert proc.returncode == 10, out + err
    assert "before rolling back" in err and "ROLLED BACK" not in err, err
    _both_kept(lab, old, ours, theirs)


def _kinds(check: subprocess.CompletedProcess) -> Dict[str, List[Dict[str, Any]]]:
    found: Dict[str, List[Dict[str, Any]]] = {}
    for finding in json.loads(check.stdout)["findings"]:
        found.setdefault(finding["kind"], []).append(finding)
    return found


def test_sigkill_during_the_wait_is_said_by_the_next_commands(lab: Any, tmp_path: Any) -> None:
    old = _read(_path(lab))
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), 20, "scheduler Ready")
    bad = _with_flag(old, BAD_FLAG)
    proc = _popen(lab, "apply", "scheduler", "-f", _write(tmp_path, bad), "--timeout", "120", "--force")
    wait_for(lambda: _read(_path(lab)) == bad, 20, "the new version written")
    time.sleep(0.5)                                  # inside the wait
    proc.kill()
    proc.communicate(timeout=30)
    assert _read(_path(lab)) == bad, "the unverified version stays"

    status = run_cpctl(lab, "status", "scheduler")
    assert status.returncode == 0, status.stderr
    assert "apply of kube-scheduler (kube-scheduler.yaml)" in status.stdout and "never verified" in status.stdout
    assert "cpctl rollback kube-scheduler" in status.stdout
    check = run_cpctl(lab, "-o", "json", "check")
    assert check.returncode == 1, check.stdout + check.stderr
    [finding] = _kinds(check)["unverified"]
    assert finding["component"] == "kube-scheduler" and "never verified" in finding["message"]
    stop = run_cpctl(lab, "stop", "controller-manager", "--timeout", "30")
    assert stop.returncode == 0, stop.stderr
    assert "warning: apply of kube-scheduler" in stop.stderr and "never verified" in stop.stderr

    back = run_cpctl(lab, "rollback", "scheduler", "--timeout", "60", "--settle", "0")
    assert back.returncode == 0, back.stdout + back.stderr
    assert _read(_path(lab)) == old
    check = run_cpctl(lab, "-o", "json", "check")
    assert "unverified" not in _kinds(check), "the rollback's verdict clears it"
    assert "never verified" not in run_cpctl(lab, "status").stdout


def test_start_confirms_a_change_never_verified(lab: Any, tmp_path: Any) -> None:
    """A healthy version whose apply was killed while it settled: `cpctl start` (the manifest already
    in place) waits for the pod and, once it is Running and Ready, confirms the change."""
    old = _read(_path(lab))
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), 20, "scheduler Ready")
    good = _with_flag(old, "--v=3")
    proc = _popen(lab, "apply", "scheduler", "-f", _write(tmp_path, good), "--timeout", "60", "--settle", "60")
    wait_for(lambda: _read(_path(lab)) == good, 20, "the new version written")
    time.sleep(1.0)
    proc.kill()
    proc.communicate(timeout=30)
    assert "never verified" in run_cpctl(lab, "status").stdout
    start = run_cpctl(lab, "start", "scheduler", "--timeout", "30")
    assert start.returncode == 0, start.stdout + start.stderr
    assert "never verified is verified now" in start.stdout, start.stdout
    assert "never verified" not in run_cpctl(lab, "status").stdout
    assert "unverified" not in _kinds(run_cpctl(lab, "-o", "json", "check"))
