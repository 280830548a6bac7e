"""Boot cpctl's systemd units under a real systemd: a throw-away ``systemd-nspawn`` container.

The test machines do not run systemd as PID 1, so ``systemctl`` has nothing to talk to there.
This harness gives the units a real systemd (Debian bookworm's) the only safe way:

* the container's root is its own tree, a ``debootstrap`` image cached under CACHE_DIR, booted
  with ``--volatile=overlay`` so every boot starts from the same pristine image and nothing
  written inside reaches it;
* ``systemd-nspawn`` runs inside ``unshare --mount --propagation private`` with fresh tmpfs on
  /tmp and /run/systemd/nspawn (its scratch dirs), in a cgroup of its own that is removed after;
* the container has ``--private-network``: cpctl and its dependencies arrive as wheels built
  on the host from a commit (``git archive``, never the working tree other people edit);
* every long step runs under ``timeout``, so a hung build or boot cannot hang CI.

Never run systemd, systemd-tmpfiles or a boot target against the machine's own root: the boot
cleanup empties the real /tmp of the whole machine.

Inside, ``tests/systemd_real/cpctl-e2e.service`` (pulled in with ``systemd.wants=``) runs
``tests/systemd_real/scenario.py``, which writes ``results.json`` to a bound directory and ends
the container; :func:`run_scenario` returns that JSON with the console log and the timings. When
the first boot asks for it (``results["reboot"]``), the node is booted a second time after the given
moment, with the dirs a real node keeps on disk (``PERSISTENT``) carried over from the first boot.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
SCENARIO_DIR = Path(__file__).resolve().parent / "systemd_real"
CACHE_DIR = Path(os.environ.get("CPCTL_TEST_CACHE", "/var/cache/cpctl-test"))
SUITE = "bookworm"
IMAGE_DIR = CACHE_DIR / ("%s-systemd" % SUITE)
# What the image holds; a change here (or to the version) rebuilds the cached image.
IMAGE_PACKAGES = ("systemd", "systemd-sysv", "dbus", "python3", "python3-venv")
IMAGE_RECIPE = {"version": 2, "suite": SUITE, "variant": "minbase", "packages": list(IMAGE_PACKAGES)}
FALLBACK_MIRROR = "http://deb.debian.org/debian"
E2E_UNIT = "cpctl-e2e.service"
RESULTS_FILE = "results.json"
CONSOLE_FILE = "console.log"
KERNEL_FILE = "kernel.log"

DEBOOTSTRAP_TIMEOUT = 1500     # ~2-4 min on a quiet machine; over 600 s was seen with both cores busy (issue 44)
PIP_TIMEOUT = 300
BOOT_TIMEOUT = 300
KEEP_WHEEL_SETS = 3
STALE_RUN_DIR = 3600


class HarnessError(RuntimeError):
    """A step of the harness itself failed (not an assertion about cpctl)."""


@dataclass
class ScenarioRun:
    """What one container boot produced, and how long each step took (seconds)."""

    commit: str
    returncode: int
    results: Dict[str, Any]
    console: str
    kernel_lines: Optional[List[str]]
    timings: Dict[str, float] = field(default_factory=dict)
    image_built: bool = False


# --- can it run at all --------------------------------------------------------------------------

def cgroup_hierarchies() -> List[Path]:
    """The cgroup hierarchies nspawn uses: the unified root on cgroup v2, else the hybrid layout's
    ``systemd`` (name=systemd, v1) and ``unified`` (v2) mounts."""
    root = Path("/sys/fs/cgroup")
    if (root / "cgroup.controllers").exists():
        return [root]
    return [root / name for name in ("systemd", "unified") if os.path.ismount(root / name)]


def cannot_run_reason() -> Optional[str]:
    """Why the container cannot be booted on this machine at all, or None when it can."""
    if os.geteuid() != 0:
        return "booting a systemd-nspawn container needs root (euid %d)" % os.geteuid()
    hierarchies = cgroup_hierarchies()
    if not hierarchies:
        return "no cgroup hierarchy nspawn can use under /sys/fs/cgroup"
    probe = "cpctl-test-probe-%d" % os.getpid()
    for hierarchy in hierarchies:
        try:
            (hierarchy / probe).mkdir()
            (hierarchy / probe).rmdir()
        except OSError as exc:
            return "no write access to %s (%s): nspawn needs a cgroup of its own" % (hierarchy, exc.strerror)
    return None


# --- small helpers ------------------------------------------------------------------------------

def _run(args: List[str], timeout: float, what: str) -> str:
    """Run ``args`` under coreutils ``timeout`` (and a Python timeout behind it); its stdout, or
    HarnessError with the output's end."""
    wrapped = ["timeout", "--kill-after=10", str(int(timeout))] + args
    try:
        proc = subprocess.run(wrapped, capture_output=True, text=True, timeout=timeout + 30)
    except subprocess.TimeoutExpired as exc:
        raise HarnessError("%s did not finish within %d s" % (what, timeout)) from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise HarnessError("%s failed (exit %d):\n%s" % (what, proc.returncode, tail))
    return proc.stdout


@contextlib.contextmanager
def _locked(name: str, exclusive: bool = True) -> Iterator[None]:
    """Hold a lock shared by concurrent test runs: exclusive to build the image or wheels, shared
    to boot the image (so it is not rebuilt under a running container)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / (".%s.lock" % name), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_tree(path: Path) -> None:
    """``rm -rf`` that never crosses into a mount point (a failed build could leave one behind)."""
    if path.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True, timeout=300)


# --- the image ----------------------------------------------------------------------------------

def _sources_entries() -> Iterator[Tuple[List[str], List[str]]]:
    """(URIs, suites) of every apt source of this machine, deb822 and one-line formats."""
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for stanza in Path(path).read_text().split("\n\n"):
            fields = dict(re.findall(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, re.M))
            if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes") != "no":
                yield fields.get("URIs", "").split(), fields.get("Suites", "").split()
    for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
        with contextlib.suppress(OSError):
            for line in Path(path).read_text().splitlines():
                match = re.match(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line.strip())
                if match:
                    yield [match.group(1)], [match.group(2)]


def debian_mirror(suite: str = SUITE) -> str:
    """The Debian mirror this machine's apt already uses (CI and dev machines may point at
    different ones): the one it has for ``suite``, else its main archive for another release
    (not the security archive), else deb.debian.org."""
    entries = [(uris, suites) for uris, suites in _sources_entries() if uris]
    for uris, suites in entries:
        if suite in suites:
            return uris[0]
    for uris, suites in entries:
        if any(re.fullmatch(r"[a-z]+(-updates|-backports)?", s) for s in suites) and "security" not in uris[0]:
            return uris[0]
    return FALLBACK_MIRROR


def _image_stamp() -> Path:
    return CACHE_DIR / (IMAGE_DIR.name + ".recipe.json")


def _image_is_current() -> bool:
    try:
        return json.loads(_image_stamp().read_text()) == IMAGE_RECIPE and (IMAGE_DIR / "usr/lib/os-release").exists()
    except (OSError, ValueError):
        return False


def ensure_image() -> bool:
    """Build the cached image unless an up-to-date one exists; True when it was built now.

    debootstrap runs in a private mount namespace (its /proc and /sys mounts inside the new
    tree die with it even if it fails) into a scratch dir that is renamed into place only when
    complete, so a half-built image is never booted.
    """
    with _locked("image", exclusive=False):  # the usual case: no need to wait for running boots
        if _image_is_current():
            return False
    with _locked("image"):
        if _image_is_current():
            return False
        scratch = CACHE_DIR / ("%s.build-%d" % (IMAGE_DIR.name, os.getpid()))
        _remove_tree(scratch)
        try:
            _run(["unshare", "--mount", "--propagation", "private", "debootstrap", "--variant=minbase",
                  "--include=" + ",".join(IMAGE_PACKAGES), SUITE, str(scratch), debian_mirror()],
                 DEBOOTSTRAP_TIMEOUT, "debootstrap of the %s image" % SUITE)
            _trim_image(scratch)
            _remove_tree(IMAGE_DIR)
            scratch.rename(IMAGE_DIR)
        finally:
            _remove_tree(scratch)
        _image_stamp().write_text(json.dumps(IMAGE_RECIPE))
        return True


def _trim_image(root: Path) -> None:
    """Drop the downloaded .debs and what debootstrap copied of this host: an empty machine-id
    makes every boot generate its own, no /etc/hostname makes the machine name the host name."""
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    (root / "etc/machine-id").write_text("")
    (root / "etc/hostname").unlink(missing_ok=True)


def image_python() -> str:
    """The image's python3 version as "3.11": the wheels must fit it, not the host's Python."""
    target = os.readlink(IMAGE_DIR / "usr/bin/python3")
    match = re.fullmatch(r"python(\d+\.\d+)", os.path.basename(target))
    if not match:
        raise HarnessError("cannot tell the image's Python version from usr/bin/python3 -> %s" % target)
    return match.group(1)


def image_glibc() -> str:
    """The image's glibc version ("2.36"), from its dpkg database: the newest manylinux it runs."""
    status = (IMAGE_DIR / "var/lib/dpkg/status").read_text()
    match = re.search(r"^Package: libc6\n(?:[^\n]+\n)*?Version: (\d+)\.(\d+)", status, re.M)
    if not match:
        raise HarnessError("libc6 is not in the image's dpkg status")
    return "%s.%s" % match.groups()


# --- the wheels ---------------------------------------------------------------------------------

def resolve_commit(repo: Path, commit: str) -> Tuple[str, str]:
    """(commit sha, tree sha) of ``commit`` in ``repo``."""
    def rev(spec: str) -> str:
        return _run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", spec], 30,
                    "git rev-parse %s" % spec).strip()
    return rev(commit + "^{commit}"), rev(commit + "^{tree}")


def build_wheels(repo: Path, commit: str) -> Tuple[Path, str]:
    """Wheels of cpctl at ``commit`` and of its dependencies for the image's Python, cached by
    tree; (their directory, the commit's sha).

    cpctl is built with ``pip wheel`` from ``git archive`` of the commit; its dependencies are
    fetched as binary wheels for the image's CPython and glibc (``pip download --python-version
    --platform``), so the host's own Python version does not matter.
    """
    sha, tree = resolve_commit(repo, commit)
    wheels_root = CACHE_DIR / "wheels"
    target = wheels_root / ("%s-py%s" % (tree, image_python()))
    with _locked("wheels"):
        if (target / ".complete").exists():
            os.utime(target)
            return target, sha
        wheels_root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=wheels_root))
        try:
            _export_and_build(repo, sha, scratch)
            (scratch / "wheels" / ".complete").touch()
            _remove_tree(target)
            (scratch / "wheels").rename(target)
        finally:
            _remove_tree(scratch)
        _prune_wheel_sets(wheels_root)
        return target, sha


def _export_and_build(repo: Path, sha: str, scratch: Path) -> None:
    source, wheels = scratch / "src", scratch / "wheels"
    source.mkdir()
    archive = scratch / "src.tar"
    _run(["git", "-C", str(repo), "archive", "--format=tar", "-o", str(archive), sha], 120, "git archive")
    _run(["tar", "-xf", str(archive), "-C", str(source)], 120, "tar -x of the export")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run(pip + ["wheel", "-q", "--no-deps", "-w", str(wheels), str(source)], PIP_TIMEOUT, "pip wheel of cpctl")
    built = sorted(wheels.glob("cpctl-*.whl"))
    if len(built) != 1 or not built[0].name.endswith("-py3-none-any.whl"):
        raise HarnessError("pip wheel did not build one pure-Python cpctl wheel: %s" % [p.name for p in built])
    platforms = [arg for tag in manylinux_tags(image_glibc(), platform.machine()) for arg in ("--platform", tag)]
    _run(pip + ["download", "-q", "--only-binary=:all:", "--implementation", "cp", "--python-version",
                image_python(), *platforms, "-d", str(wheels), str(built[0])],
         PIP_TIMEOUT, "pip download of cpctl's dependencies")


def manylinux_tags(glibc: str, arch: str) -> List[str]:
    """Every manylinux platform tag a glibc ``glibc`` ("2.36") system runs, newest first: pip does
    not widen an explicit ``--platform manylinux_2_36`` to the older tags most wheels carry."""
    major, minor = (int(part) for part in glibc.split("."))
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for version in range(minor, 4, -1):
        tags.append("manylinux_%d_%d_%s" % (major, version, arch))
        if version in legacy:
            tags.append("%s_%s" % (legacy[version], arch))
    return tags


def _prune_wheel_sets(wheels_root: Path) -> None:
    """Keep the most recently used wheel sets only (one per commit tested)."""
    sets = sorted((p for p in wheels_root.iterdir() if (p / ".complete").exists()),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for old in sets[KEEP_WHEEL_SETS:]:
        _remove_tree(old)


# --- the boot -----------------------------------------------------------------------------------

# The node's disk that survives a "reboot" (a second boot of the same run): bound from the run
# dir, never from this machine's /etc or /var; everything else is the volatile overlay again.
# /var/lib/systemd/timers holds the persistent timers' stamps (Persistent=true compares the deadline
# with the last trigger recorded there; a real node keeps /var).
PERSISTENT = {"etc-kubernetes": "/etc/kubernetes", "etc-systemd-system": "/etc/systemd/system",
              "var-lib-cpctl": "/var/lib/cpctl", "opt": "/opt", "var-lib-systemd-timers": "/var/lib/systemd/timers"}
REBOOT_WAIT_MAX = 120


def _stage_persistent(run_dir: Path) -> None:
    """The persistent dirs of the node, seeded from the image (its /etc/systemd/system, symlinks
    kept), with the scenario's driver unit in place."""
    persist = run_dir / "persist"
    for name in PERSISTENT:
        (persist / name).mkdir(parents=True)
        (persist / name).chmod(0o700 if name == "var-lib-cpctl" else 0o755)    # as on a node: the state dir 0700
    units = persist / "etc-systemd-system"
    shutil.rmtree(units)
    shutil.copytree(IMAGE_DIR / "etc/systemd/system", units, symlinks=True)
    shutil.copyfile(SCENARIO_DIR / E2E_UNIT, units / E2E_UNIT)


def _stage_run_dir() -> Path:
    """A run dir under CACHE_DIR for the scenario files and the results: the private mount
    namespace puts a fresh tmpfs on /tmp, so nothing bound may live there (pytest's tmp dirs, a
    CI clone of the repo). Run dirs a killed run left behind are removed on the way."""
    runs = CACHE_DIR / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for stale in runs.glob("boot-*"):
        if time.time() - stale.stat().st_mtime > STALE_RUN_DIR:
            _remove_tree(stale)
    run_dir = Path(tempfile.mkdtemp(prefix="boot-", dir=runs))
    shutil.copytree(SCENARIO_DIR, run_dir / "e2e", ignore=shutil.ignore_patterns("__pycache__"))
    (run_dir / "out").mkdir()
    _stage_persistent(run_dir)
    return run_dir


def _nspawn_command(run_dir: Path, wheels: Path, machine: str) -> List[str]:
    e2e = run_dir / "e2e"
    return ["systemd-nspawn", "--directory=%s" % IMAGE_DIR, "--volatile=overlay", "--machine=%s" % machine,
            "--register=no", "--keep-unit", "--private-network", "--settings=no", "--link-journal=no",
            "--resolv-conf=off", "--timezone=off", "--console=read-only",
            "--bind-ro=%s:/wheels" % wheels,
            "--bind-ro=%s:/e2e" % e2e,
            *("--bind=%s:%s" % (run_dir / "persist" / name, where) for name, where in PERSISTENT.items()),
            "--bind=%s:/results" % (run_dir / "out"),
            "--boot", "--", "systemd.wants=%s" % E2E_UNIT]


def _boot_script(cgroups: List[Path], nspawn: List[str], timeout: int) -> str:
    """Shell run by ``unshare --mount``: private scratch mounts, own cgroup, then nspawn under timeout."""
    join = " ".join("echo $$ > %s;" % shlex.quote(str(cg / "cgroup.procs")) for cg in cgroups)
    return ("set -e; mount -t tmpfs -o mode=1777 tmpfs /tmp; mkdir -p /run/systemd/nspawn; "
            "mount -t tmpfs -o mode=0755 tmpfs /run/systemd/nspawn; %s "
            "exec timeout --kill-after=15 %d %s" % (join, timeout, " ".join(shlex.quote(a) for a in nspawn)))


def _cgroup_pids(cgroup: Path) -> List[int]:
    pids: List[int] = []
    for procs in cgroup.rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            pids.extend(int(line) for line in procs.read_text().split())
    return pids


def _remove_cgroups(cgroups: List[Path]) -> None:
    """Remove the boot's cgroups (deepest first); whatever still runs in them was started by
    this boot, so it is killed first."""
    deadline = time.monotonic() + 20
    for cgroup in cgroups:
        while cgroup.exists():
            for pid in _cgroup_pids(cgroup):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                for directory in sorted((p for p in cgroup.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                    directory.rmdir()
                cgroup.rmdir()
            except OSError as exc:
                if exc.errno not in (errno.EBUSY, errno.ENOENT) or time.monotonic() > deadline:
                    raise HarnessError("cannot remove cgroup %s: %s" % (cgroup, exc)) from exc
                time.sleep(0.2)


class _KernelLog:
    """New /dev/kmsg records from now on (seccomp kills are logged by the kernel as audit
    type=1326, which never reaches the container's journal); None where kmsg is unreadable."""

    def __init__(self) -> None:
        self.fd: Optional[int] = None
        with contextlib.suppress(OSError):
            self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self.fd, 0, os.SEEK_END)

    def read_new(self) -> Optional[List[str]]:
        if self.fd is None:
            return None
        lines = []
        try:
            while True:
                try:
                    record = os.read(self.fd, 8192).decode("utf-8", "replace")
                except BlockingIOError:
                    break
                except OSError as exc:  # EPIPE: records were overwritten while we read
                    if exc.errno != errno.EPIPE:
                        raise
                    continue
                lines.append(record.split(";", 1)[-1].rstrip("\n"))
        finally:
            os.close(self.fd)
            self.fd = None
        return lines


def boot(run_dir: Path, wheels: Path, timeout: int = BOOT_TIMEOUT) -> Tuple[int, Optional[List[str]]]:
    """Boot the image once with the staged run dir; (nspawn's exit status, new kernel log lines).

    The console goes to ``run_dir/out/console.log``. nspawn returns the exit status the
    scenario's unit ended the container with (its script's), 124/137 on timeout.
    """
    name = "cpctl-e2e-%d" % os.getpid()
    cgroups = [hierarchy / name for hierarchy in cgroup_hierarchies()]
    for cgroup in cgroups:
        cgroup.mkdir(exist_ok=True)  # exists only if a killed run of the same pid left it behind
    kernel = _KernelLog()
    script = _boot_script(cgroups, _nspawn_command(run_dir, wheels, name), timeout)
    try:
        with open(run_dir / "out" / CONSOLE_FILE, "ab") as console:     # a second boot appends
            proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                  stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                  timeout=timeout + 60)
        return proc.returncode, kernel.read_new()
    finally:
        _remove_cgroups(cgroups)


def _reboot_after(results: Path) -> Optional[float]:
    """When the first boot asked for a second one: the Unix time to boot again at (None: no reboot)."""
    try:
        asked = json.loads(results.read_text()).get("reboot")
    except (OSError, ValueError):
        return None
    return float(asked["after"]) if isinstance(asked, dict) and not asked.get("done") else None


def run_scenario(repo: Path = REPO, commit: str = "HEAD", keep_dir: Optional[Path] = None) -> ScenarioRun:
    """Image (cached), wheels of ``commit`` (cached), one boot; the scenario's results.

    ``keep_dir`` receives results.json, console.log and kernel.log for a later look.
    """
    timings: Dict[str, float] = {}
    started = time.monotonic()
    built = ensure_image()
    timings["image"] = time.monotonic() - started
    mark = time.monotonic()
    wheels, sha = build_wheels(repo, commit)
    timings["wheels"] = time.monotonic() - mark
    run_dir = _stage_run_dir()
    try:
        mark = time.monotonic()
        with _locked("image", exclusive=False):
            returncode, kernel_lines = boot(run_dir, wheels)
            timings["boot"] = time.monotonic() - mark
            reboot = _reboot_after(run_dir / "out" / RESULTS_FILE) if returncode == 0 else None
            if reboot is not None:     # the node goes down inside the arms' window, comes up after it
                time.sleep(max(0.0, min(REBOOT_WAIT_MAX, reboot - time.time())))
                mark = time.monotonic()
                returncode, more = boot(run_dir, wheels)
                kernel_lines = None if kernel_lines is None or more is None else kernel_lines + more
                timings["boot2"] = time.monotonic() - mark
        out = run_dir / "out"
        if kernel_lines is not None:
            (out / KERNEL_FILE).write_text("\n".join(kernel_lines) + "\n")
        console = (out / CONSOLE_FILE).read_text(errors="replace")
        results_path = out / RESULTS_FILE
        results = json.loads(results_path.read_text()) if results_path.exists() else {}
        if keep_dir is not None:
            for produced in out.iterdir():
                shutil.copy(produced, keep_dir / produced.name)
    finally:
        _remove_tree(run_dir)
    timings["total"] = time.monotonic() - started
    return ScenarioRun(commit=sha, returncode=returncode, results=results, console=console,
                       kernel_lines=kernel_lines, timings=timings, image_built=built)
