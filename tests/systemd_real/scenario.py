"""The scenario run INSIDE the throw-away container booted by tests/systemd_container.py.

It installs cpctl from /wheels into /opt/cpctl, puts four kubeadm-like static pod manifests in
/etc/kubernetes/manifests, installs the units with ``cpctl systemd install``, records a baseline
and drives the units through the real systemd: the check run by its timer (clean node) and
directly (a manifest changed out of band; then without node_exporter's textfile dir), the watch
while a manifest is moved out of the dir and back, and the hardening as systemd applies it.
It only records what it saw, in RESULTS_DIR/results.json (rewritten after every step, so a
stuck step still leaves the earlier ones); tests/system/test_systemd_real.py judges.

Exit status 0: every step ran. Non-zero: a step of the scenario itself broke (results.json has
the traceback under "errors"). Runs on the image's own Python 3, standard library only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

E2E = Path(__file__).resolve().parent
VENV = Path("/opt/cpctl")
CPCTL = VENV / "bin" / "cpctl"
MANIFESTS = Path("/etc/kubernetes/manifests")
TEXTFILE_DIR = Path("/var/lib/node_exporter/textfile_collector")
PROM = TEXTFILE_DIR / "cpctl.prom"
UNIT_DIR = Path("/etc/systemd/system")
CHECK, TIMER, WATCH = "cpctl-check.service", "cpctl-check.timer", "cpctl-watch.service"
MOVED = "kube-scheduler.yaml"
DRIFTED = "kube-controller-manager.yaml"
WAIT = 60.0
WATCH_WAIT = 30.0

# The shipped timer fires 2 min after boot and every 5 min (+ up to 30 s at random). The drop-in
# resets all its triggers (an empty OnCalendar= empties the whole list) to one, 3 s after the
# timer starts: the timer's run comes now and exactly once, and never in the middle of a later step.
TIMER_DROP_IN = "[Timer]\nOnCalendar=\nOnActiveSec=3s\nRandomizedDelaySec=0\n"
# The container runs no kubelet: there are no pods to look at, and a check that could not look at them
# says so as drift (issue 49: "unknown", never OK). This node is told so, as an operator would on a
# node without crictl or API access: the check judges the files and says the pods were not checked.
CHECK_DROP_IN = "[Service]\nEnvironment=CPCTL_PROBE=none\n"
TIMER_PROPERTIES = ["LoadState", "ActiveState", "TimersMonotonic", "TimersCalendar", "Persistent",
                    "RandomizedDelayUSec", "AccuracyUSec", "LastTriggerUSec", "Triggers"]
RUN_PROPERTIES = ["LoadState", "ActiveState", "Result", "ExecMainCode", "ExecMainStatus"]
WATCH_PROPERTIES = ["ActiveState", "SubState", "MainPID", "NRestarts", "Result"]

Record = Dict[str, Any]


# --- commands and the journal -------------------------------------------------------------------

def run(args: List[str], timeout: float = 120, **env: str) -> Record:
    """Run a command; its exit status is recorded, never raised."""
    started = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **env))
    return {"args": args, "rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
            "seconds": round(time.monotonic() - started, 2)}


def show(unit: str, properties: Optional[List[str]] = None) -> Dict[str, str]:
    """``systemctl show`` as a dict (every property when ``properties`` is None)."""
    args = ["systemctl", "show", unit] + (["--property=" + ",".join(properties)] if properties else [])
    lines = run(args)["stdout"].splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def cursor() -> str:
    """The journal's current end: entries logged later are read with --after-cursor."""
    out = run(["journalctl", "--no-pager", "-q", "-n", "0", "--show-cursor"])["stdout"]
    match = re.search(r"^-- cursor: (\S+)", out, re.M)
    if not match:
        raise RuntimeError("journalctl printed no cursor: %r" % out)
    return match.group(1)


def _text(value: Any) -> str:
    """MESSAGE as text: journald stores non-UTF-8 messages as a list of byte values."""
    if isinstance(value, list):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


def _about(raw: Dict[str, Any], unit: str) -> bool:
    """Whether a journal entry is the unit's output or systemd's line about the unit (what -u picks)."""
    return unit in (raw.get("_SYSTEMD_UNIT"), raw.get("UNIT"), raw.get("OBJECT_SYSTEMD_UNIT"))


def journal(unit: str, after: Optional[str] = None) -> List[Record]:
    """Entries about ``unit`` (systemd's own lines and the service's output), after ``after``.

    Filtered here, not with ``journalctl -u``: systemd 252's --after-cursor skips one entry too
    many when the cursor's own entry does not match the filter, losing e.g. "Starting ...".
    """
    args = ["journalctl", "--no-pager", "-o", "json"] + (["--after-cursor", after] if after else [])
    entries = []
    for line in run(args)["stdout"].splitlines():
        raw = json.loads(line)
        if not _about(raw, unit):
            continue
        entries.append({"message": _text(raw.get("MESSAGE")), "pid": raw.get("_PID"),
                        "from_systemd": raw.get("_PID") == "1", "priority": int(raw.get("PRIORITY", 6)),
                        "job_type": raw.get("JOB_TYPE"), "job_result": raw.get("JOB_RESULT")})
    return entries


def settled_journal(unit: str, after: str) -> List[Record]:
    """The entries once journald has them all: a service's last output lines arrive through its
    stream socket and may trail systemd's own "Finished" line a little."""
    run(["journalctl", "--sync"])
    entries = journal(unit, after)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.5)
        again = journal(unit, after)
        if len(again) == len(entries):
            break
        entries = again
    return entries


def wait_for(probe: Callable[[], Any], timeout: float = WAIT) -> Any:
    """Poll ``probe`` until it returns something truthy (returned) or ``timeout`` passes (None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)
    return None


def start_job_result(unit: str, after: str) -> Optional[str]:
    """JOB_RESULT of systemd's last "start" job for ``unit`` since ``after`` (done, failed, ...)."""
    results = [e["job_result"] for e in journal(unit, after) if e["job_type"] == "start" and e["job_result"]]
    return results[-1] if results else None


# --- the steps ----------------------------------------------------------------------------------

def install() -> Record:
    """cpctl into a venv the hardened units may execute, the manifests, the units; daemon-reload."""
    steps = [run([sys.executable, "-m", "venv", str(VENV)]),
             run([str(VENV / "bin" / "pip"), "install", "-q", "--no-index", "--find-links", "/wheels", "cpctl"],
                 timeout=300, PIP_DISABLE_PIP_VERSION_CHECK="1")]
    MANIFESTS.mkdir(parents=True, mode=0o755, exist_ok=True)      # /etc/kubernetes is the node's disk
    for manifest in sorted((E2E / "manifests").glob("*.yaml")):
        target = MANIFESTS / manifest.name
        shutil.copyfile(manifest, target)
        target.chmod(0o600)
    installed = run([str(CPCTL), "-o", "json", "systemd", "install", "--cpctl-path", str(CPCTL)])
    steps += [installed, run(["systemctl", "daemon-reload"]), run([str(CPCTL), "baseline"])]
    written = json.loads(installed["stdout"])["written"] if installed["rc"] == 0 else []
    return {"steps": steps, "ok": all(step["rc"] == 0 for step in steps),
            "units": {os.path.basename(path): Path(path).read_text() for path in written},
            "manifests": sorted(p.name for p in MANIFESTS.iterdir()),
            "versions": {"systemd": run(["systemctl", "--version"])["stdout"].splitlines()[0],
                         "python": sys.version.split()[0],
                         "pip_freeze": run([str(VENV / "bin" / "pip"), "freeze"])["stdout"].split()}}


def prom_state() -> Record:
    """The metrics file as node_exporter would find it."""
    if not PROM.exists():
        return {"exists": False, "dir_exists": TEXTFILE_DIR.is_dir()}
    return {"exists": True, "mode": "%04o" % (PROM.stat().st_mode & 0o7777), "text": PROM.read_text()}


def _run_outcome(after: str, **extra: Any) -> Record:
    """How a check run ended, told by the journal (oneshot units may unload right after)."""
    job = wait_for(lambda: start_job_result(CHECK, after))
    return dict(extra, job_result=job, journal=settled_journal(CHECK, after), service=show(CHECK, RUN_PROPERTIES),
                prom=prom_state())


def check_by_timer() -> Record:
    """The shipped ``enable --now`` of the timer, with the drop-in that makes it fire in 3 s; the
    textfile dir exists (as node_exporter's package creates it)."""
    TEXTFILE_DIR.mkdir(parents=True, mode=0o755)
    shipped = show(TIMER, TIMER_PROPERTIES)
    drop_in = UNIT_DIR / (TIMER + ".d") / "e2e-fire-now.conf"
    drop_in.parent.mkdir(parents=True, exist_ok=True)
    drop_in.write_text(TIMER_DROP_IN)
    no_pods = UNIT_DIR / (CHECK + ".d") / "e2e-no-pods.conf"
    no_pods.parent.mkdir(parents=True, exist_ok=True)
    no_pods.write_text(CHECK_DROP_IN)
    reload = run(["systemctl", "daemon-reload"])
    after = cursor()
    enable = run(["systemctl", "enable", "--now", TIMER])
    outcome = _run_outcome(after, shipped_timer=shipped, reload=reload, enable=enable)
    outcome["timer"] = show(TIMER, TIMER_PROPERTIES)
    return outcome


def check_direct() -> Record:
    """``systemctl start`` of the check (blocks until the oneshot has ended)."""
    after = cursor()
    start = run(["systemctl", "start", CHECK], timeout=WAIT * 2)
    return _run_outcome(after, start=start)


def check_direct_with_drift() -> Record:
    """A direct run after an out-of-band change of one manifest (restored afterwards): cpctl
    exits 1, drift found, which the unit counts as success."""
    manifest = MANIFESTS / DRIFTED
    original = manifest.read_text()
    changed = original.replace(":v1.30.4", ":v1.30.5")
    if changed == original:
        raise RuntimeError("%s has no v1.30.4 image to change" % DRIFTED)
    manifest.write_text(changed)
    try:
        return dict(check_direct(), drifted=DRIFTED)
    finally:
        manifest.write_text(original)


def check_without_textfile_dir() -> Record:
    """A direct run on a node without node_exporter's textfile dir."""
    shutil.rmtree(TEXTFILE_DIR)
    return check_direct()


def _watch_record(after: str, verdict: str, file: Optional[str] = None) -> Optional[Record]:
    """The first JSON line the watch logged since ``after`` with this verdict (and file)."""
    for entry in journal(WATCH, after):
        if entry["from_systemd"] or not entry["message"].startswith("{"):
            continue
        try:
            record = json.loads(entry["message"])
        except ValueError:
            continue
        if record.get("verdict") == verdict and (file is None or os.path.basename(record.get("file") or "") == file):
            return dict(record)
    return None


def watch() -> Record:
    """Start the watch, move a manifest out of the dir and back; collect its verdicts."""
    after = cursor()
    result: Record = {"start": run(["systemctl", "start", WATCH])}
    result["watching"] = wait_for(lambda: _watch_record(after, "watching"), WATCH_WAIT)
    result["before"] = show(WATCH, WATCH_PROPERTIES)
    result["process"] = sandbox_seen_by_kernel(int(result["before"]["MainPID"] or 0))
    if result["watching"]:
        outside = MANIFESTS.parent / MOVED
        os.rename(MANIFESTS / MOVED, outside)
        result["stop"] = wait_for(lambda: _watch_record(after, "stop", MOVED), WATCH_WAIT)
        os.rename(outside, MANIFESTS / MOVED)
        result["load"] = wait_for(lambda: _watch_record(after, "load", MOVED), WATCH_WAIT)
        time.sleep(1)  # a crash right after the last verdict must still show below
    result["after"] = show(WATCH, WATCH_PROPERTIES)
    result["is_active"] = run(["systemctl", "is-active", WATCH])["stdout"].strip()
    result["journal"] = settled_journal(WATCH, after)
    return result


def sandbox_seen_by_kernel(pid: int) -> Record:
    """The running service's sandbox as the kernel enforces it: /proc/PID/status (NoNewPrivs,
    Seccomp, capability sets) and whether / is mounted read-only in its mount namespace."""
    if pid <= 0:
        return {}
    status = dict(line.split(":\t", 1) for line in Path("/proc/%d/status" % pid).read_text().splitlines()
                  if ":\t" in line)
    roots = [line.split() for line in Path("/proc/%d/mountinfo" % pid).read_text().splitlines()
             if line.split()[4] == "/"]
    return {"status": {key: status.get(key, "").strip() for key in ("NoNewPrivs", "Seccomp", "CapBnd", "CapEff")},
            "root_options": roots[-1][5] if roots else None}


def security(unit: str) -> Record:
    """``systemd-analyze security`` of the loaded unit: its exposure score and rating."""
    analysis = run(["systemd-analyze", "security", "--no-pager", unit])
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\S+)", analysis["stdout"])
    return {"rc": analysis["rc"], "exposure": float(match.group(1)) if match else None,
            "rating": match.group(2) if match else None, "text": analysis["stdout"] + analysis["stderr"]}


def hardening() -> Record:
    """What systemd applies (``systemctl show``) and how it rates it, for both services."""
    return {unit: {"show": show(unit), "security": security(unit)} for unit in (CHECK, WATCH)}


CONFIRM_UNIT = "cpctl-confirm-kube-scheduler"
CONFIRM_SANDBOX = ["ProtectSystem", "ProtectHome", "PrivateTmp", "NoNewPrivileges", "SystemCallFilter",
                   "CapabilityBoundingSet", "ReadWritePaths", "Type", "ExecStart"]


def confirm_revert() -> Record:
    """``flags --confirm-within 5s``: the transient timer fires and its service reverts the change under
    the shipped hardening; then an armed change that is confirmed stays and its timer is gone."""
    manifest = MANIFESTS / MOVED
    original = manifest.read_bytes()
    after = cursor()
    flags = [str(CPCTL), "--probe", "none", "-o", "json", "flags", "kube-scheduler", "--set", "v=4", "--force"]
    result: Record = {"arm": run(flags + ["--confirm-within", "5s"])}
    result["changed"] = manifest.read_bytes() != original
    result["timer"] = show(CONFIRM_UNIT + ".timer", ["LoadState", "ActiveState"])
    result["service"] = show(CONFIRM_UNIT + ".service", CONFIRM_SANDBOX)
    result["reverted"] = bool(wait_for(lambda: manifest.read_bytes() == original, WAIT))
    result["arm_left"] = wait_for(lambda: not (Path("/var/lib/cpctl/confirm") / (MOVED + ".json")).exists(), 10) is None
    result["journal"] = settled_journal(CONFIRM_UNIT + ".service", after)
    result["confirm_arm"] = run(flags + ["--confirm-within", "2m"])
    result["confirm"] = run([str(CPCTL), "--probe", "none", "confirm", "kube-scheduler"])
    time.sleep(1)
    result["timer_after_confirm"] = show(CONFIRM_UNIT + ".timer", ["LoadState", "ActiveState"])
    result["stays"] = manifest.read_bytes() != original
    history = run([str(CPCTL), "-o", "json", "history", "kube-scheduler"])
    result["history"] = [r.get("action") for r in json.loads(history["stdout"])["history"]] if history["rc"] == 0 \
        else history
    return result


AUDIT_POLICY = Path("/etc/kubernetes/audit/policy.yaml")
APISERVER = "kube-apiserver.yaml"
REBOOT_WINDOW = "20s"
HISTORY = Path("/var/lib/cpctl/history.jsonl")


def _sha(path: Path) -> Optional[str]:
    import hashlib
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def reboot_arm() -> Record:
    """The last step of the first boot: nothing of cpctl may run at the next boot but the revert
    units (the check timer and the watch disabled), then two changes armed with a 20 s window -
    the scheduler's flags, and the API server's audit policy with its companion file under
    /etc/kubernetes/audit - and the container ends (the node "reboots") inside the window."""
    result: Record = {"disable": [run(["systemctl", "disable", "--now", TIMER]),
                                  run(["systemctl", "disable", "--now", WATCH])]}
    result["originals"] = {name: _sha(MANIFESTS / name) for name in (MOVED, APISERVER)}
    base = [str(CPCTL), "--probe", "none", "-o", "json"]
    result["arms"] = [
        run(base + ["flags", "kube-scheduler", "--set", "v=5", "--force", "--confirm-within", REBOOT_WINDOW]),
        run(base + ["flags", "kube-apiserver", "--set", "audit-policy-file=%s" % AUDIT_POLICY,
                    "--with-file", "%s=%s" % (AUDIT_POLICY, E2E / "audit-policy.yaml"), "--mount", "--force",
                    "--confirm-within", REBOOT_WINDOW])]
    armed = [json.loads(a["stdout"]).get("confirm") or {} if a["rc"] == 0 else {} for a in result["arms"]]
    result["deadlines"] = [a.get("deadline") for a in armed]
    result["changed"] = {name: _sha(MANIFESTS / name) != digest for name, digest in result["originals"].items()}
    result["audit_written"] = AUDIT_POLICY.exists()
    result["units"] = sorted(p.name for p in UNIT_DIR.glob("cpctl-confirm-*")) + sorted(
        "timers.target.wants/" + p.name for p in (UNIT_DIR / "timers.target.wants").glob("cpctl-confirm-*"))
    result["unit_texts"] = {p.name: p.read_text() for p in UNIT_DIR.glob("cpctl-confirm-*")}
    result["timer"] = show("cpctl-confirm-kube-apiserver.timer", ["LoadState", "ActiveState", "UnitFileState",
                                                                   "TimersCalendar", "Persistent"])
    result["service"] = show("cpctl-confirm-kube-apiserver.service", ["ReadWritePaths", "ExecStart"])
    run(["sync"])
    return result


def after_reboot(first: Record) -> Record:
    """The second boot: no cpctl command runs; the persistent timers must have reverted both
    changes (deadline passed while the node was down: Persistent=true fires at boot)."""
    originals = first["originals"]
    result: Record = {"boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip()}
    result["reverted"] = bool(wait_for(lambda: all(_sha(MANIFESTS / n) == d for n, d in originals.items())
                                       and not list(Path("/var/lib/cpctl/confirm").glob("*.json")), WAIT * 2))
    result["manifests"] = {name: _sha(MANIFESTS / name) == digest for name, digest in originals.items()}
    result["arms_left"] = sorted(p.name for p in Path("/var/lib/cpctl/confirm").glob("*.json"))
    result["audit_left"] = AUDIT_POLICY.exists()
    result["units_left"] = wait_for(lambda: not list(UNIT_DIR.glob("cpctl-confirm-*")), 20) is None and sorted(
        p.name for p in UNIT_DIR.glob("cpctl-confirm-*"))
    run(["journalctl", "--sync"])
    result["journal"] = {unit: journal(unit) for unit in ("cpctl-confirm-kube-scheduler.service",
                                                          "cpctl-confirm-kube-apiserver.service")}
    lines = HISTORY.read_text().splitlines() if HISTORY.exists() else []
    result["history"] = [json.loads(line) for line in lines if line.strip()]
    return result


def whole_journal() -> Record:
    """Every entry about the cpctl units since boot: the test looks for denials in them."""
    run(["systemctl", "stop", WATCH])
    run(["journalctl", "--sync"])
    return {unit: journal(unit) for unit in (CHECK, TIMER, WATCH)}


# --- driver -------------------------------------------------------------------------------------

def main(results_dir: Path) -> int:
    out = results_dir / "results.json"
    if out.exists():                          # the second boot of the run: the node was "rebooted"
        results: Record = json.loads(out.read_text())
        try:
            results["after_reboot"] = after_reboot(results["reboot_arm"])
            results["completed"].append("after_reboot")
        except Exception:  # noqa: BLE001 - recorded for the test, which shows it
            results["errors"]["after_reboot"] = traceback.format_exc()
        results["reboot"]["done"] = True
        out.write_text(json.dumps(results, indent=1, sort_keys=True))
        return 1 if results["errors"] else 0
    results = {"errors": {}, "completed": []}

    def step(name: str, action: Callable[[], Any]) -> None:
        print("scenario: %s" % name, flush=True)
        try:
            results[name] = action()
            results["completed"].append(name)
        except Exception:  # noqa: BLE001 - recorded for the test, which shows it
            results["errors"][name] = traceback.format_exc()
        out.write_text(json.dumps(results, indent=1, sort_keys=True))

    step("install", install)
    if results["errors"] or not results["install"]["ok"]:
        return 1
    step("check_by_timer", check_by_timer)
    step("check_direct_with_drift", check_direct_with_drift)
    step("check_without_textfile_dir", check_without_textfile_dir)
    step("watch", watch)
    step("hardening", hardening)
    step("confirm_revert", confirm_revert)
    step("journal", whole_journal)
    step("reboot_arm", reboot_arm)
    if "reboot_arm" in results["completed"]:
        from calendar import timegm
        deadlines = [timegm(time.strptime(d, "%Y-%m-%dT%H:%M:%SZ")) for d in results["reboot_arm"]["deadlines"] if d]
        results["reboot"] = {"after": max(deadlines or [time.time()]) + 3}
        out.write_text(json.dumps(results, indent=1, sort_keys=True))
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
