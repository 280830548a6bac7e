"""Client side of the lab: state file helpers, env rendering, and ``start_lab()`` for tests.

``start_lab(dir, masters=1, **lags)`` launches ``python -m cpctl_lab run`` as a subprocess (so the
code under test talks to it exactly as to a remote cluster: over sockets and files) and returns
a :class:`LabHandle` once the API answers and every static pod's mirror is Running and Ready.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional, Union

DEFAULT_DIR = Path("~/.cache/cpctl-lab").expanduser()
PathLike = Union[str, "os.PathLike[str]"]


class LabError(Exception):
    """A lab operation failed in a way the user can act on (printed as one line by the CLI)."""


def atomic_write(path: Path, text: str) -> None:
    """Write via a dot-prefixed temp file and rename, so readers never see half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def read_state(directory: PathLike) -> Optional[dict[str, Any]]:
    try:
        return json.loads((Path(directory) / "lab.json").read_text())
    except (OSError, ValueError):
        return None


def pid_alive(pid: Optional[int]) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its new parent) is not running
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def env_vars(info: dict[str, Any], master: int = 1) -> dict[str, str]:
    """The environment cpctl needs to act as the node agent of master ``master`` (1-based)."""
    masters = info["masters"]
    if not 1 <= master <= len(masters):
        raise LabError(f"--master must be between 1 and {len(masters)}")
    m = masters[master - 1]
    return {
        "CPCTL_MANIFESTS_DIR": m["manifests_dir"],
        "CPCTL_STATE_DIR": m["state_dir"],
        "CPCTL_NODE_NAME": m["name"],
        "KUBECONFIG": info["kubeconfig"],
        "CPCTL_CRICTL": m["crictl"],
    }


def env_text(info: dict[str, Any], master: int = 1) -> str:
    return "".join(f"export {k}={v}\n" for k, v in env_vars(info, master).items())


def control_call(info: dict[str, Any], path: str, method: str = "GET", timeout: float = 2.0) -> Any:
    url = (info.get("control") or {}).get("url")
    if not url:
        raise LabError("lab state has no control channel")
    req = urllib.request.Request(url + path, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def running_state(directory: PathLike) -> Optional[dict[str, Any]]:
    """lab.json if its process is alive and its control channel answers, else None."""
    info = read_state(directory)
    if not info or not pid_alive(info.get("pid")):
        return None
    try:
        control_call(info, "/state", timeout=1.0)
    except (OSError, ValueError, LabError):
        return None
    return info


def package_root() -> str:
    """The directory that contains the ``cpctl`` package (put on PYTHONPATH for the child)."""
    return str(Path(__file__).resolve().parents[2])


def spawn(directory: Path, args: list[str], log: Optional[Path] = None) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = package_root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    directory.mkdir(parents=True, exist_ok=True)
    out = open(log or directory / "lab.log", "ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "cpctl_lab", "run", "--dir", str(directory), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    finally:
        out.close()


def wait_ready(directory: Path, proc: subprocess.Popen, timeout: float) -> dict[str, Any]:
    """Poll lab.json then the control channel's /ready until the lab is settled."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = ""
            try:
                tail = (directory / "lab.log").read_text().strip().splitlines()[-1]
            except (OSError, IndexError):
                pass
            raise LabError(f"lab process exited with code {proc.returncode}: {tail}")
        info = read_state(directory)
        if info and info.get("pid") == proc.pid:
            try:
                if control_call(info, "/ready", timeout=1.0).get("ready"):
                    return info
            except (OSError, ValueError):
                pass
        time.sleep(delay)
        delay = min(delay * 1.5, 0.1)
    raise LabError(f"lab in {directory} not ready after {timeout:.0f}s (see {directory / 'lab.log'})")


def lag_args(**opts: Any) -> list[str]:
    names = {
        "start_lag": "--start-lag",
        "ready_lag": "--ready-lag",
        "stop_lag": "--stop-lag",
        "file_check_frequency": "--file-check-frequency",
        "lease_renew": "--lease-renew",
        "port": "--port",
        "node_name": "--node-name",
        "gc_after": "--gc-after",
    }
    out: list[str] = []
    for k, v in opts.items():
        if v is None:
            continue
        if k == "aggregated_discovery":
            if not v:
                out.append("--legacy-discovery")
            continue
        if k not in names:
            raise TypeError(f"start_lab() got an unexpected option {k!r}")
        out += [names[k], str(v)]
    return out


def stop_process(
    info: dict[str, Any], proc: Optional[subprocess.Popen] = None, timeout: float = 10.0
) -> None:
    pid = info.get("pid")
    try:
        control_call(info, "/shutdown", method="POST", timeout=1.0)
    except (OSError, ValueError, LabError):
        if pid_alive(pid):
            os.kill(int(pid), signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return
        elif not pid_alive(pid):
            return
        time.sleep(0.02)
    if pid_alive(pid):
        os.kill(int(pid), signal.SIGKILL)
    if proc is not None:
        proc.wait(5)


class LabHandle:
    """A running lab started by :func:`start_lab`; use as a context manager or call ``stop()``."""

    def __init__(self, directory: Path, proc: subprocess.Popen, info: dict[str, Any]) -> None:
        self.dir = directory
        self.proc = proc
        self.info = info

    @property
    def env(self) -> dict[str, str]:
        return env_vars(self.info, 1)

    def env_for(self, master: int) -> dict[str, str]:
        return env_vars(self.info, master)

    @property
    def kubeconfig(self) -> str:
        return str(self.info["kubeconfig"])

    @property
    def api_url(self) -> str:
        return str(self.info["api"]["url"])

    @property
    def control_url(self) -> str:
        return str(self.info["control"]["url"])

    @property
    def crictl(self) -> str:
        return str(self.info["crictl"])

    def crictl_for(self, master: int) -> str:
        return str(self.info["masters"][master - 1]["crictl"])

    @property
    def worker(self) -> str:
        return str(self.info["worker"])

    @property
    def masters(self) -> list[str]:
        return [m["name"] for m in self.info["masters"]]

    def manifests_dir(self, master: int = 1) -> Path:
        return Path(self.info["masters"][master - 1]["manifests_dir"])

    def state_dir(self, master: int = 1) -> Path:
        return Path(self.info["masters"][master - 1]["state_dir"])

    def node_name(self, master: int = 1) -> str:
        return str(self.info["masters"][master - 1]["name"])

    def ports(self, master: int = 1) -> dict[str, int]:
        return dict(self.info["masters"][master - 1]["ports"])

    def ready(self) -> bool:
        return bool(control_call(self.info, "/ready").get("ready"))

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.ready():
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise LabError("lab did not settle in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_process(self.info, self.proc)

    def __enter__(self) -> "LabHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_lab(directory: PathLike, masters: int = 1, timeout: float = 20.0, **opts: Any) -> LabHandle:
    """Start ``python -m cpctl_lab run`` in ``directory`` and wait until it is settled.

    ``opts``: start_lag, ready_lag, stop_lag, file_check_frequency, lease_renew, port, node_name,
    gc_after, aggregated_discovery (False serves legacy discovery only).
    """
    d = Path(directory).expanduser().resolve()
    if running_state(d):
        raise LabError(f"a lab is already running in {d}")
    proc = spawn(d, ["--masters", str(masters), *lag_args(**opts)])
    try:
        info = wait_ready(d, proc, timeout)
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        raise
    return LabHandle(d, proc, info)
