"""Client side of the lab: state file helpers, env rendering, and ``start_lab()`` for tests.

``start_lab(dir, masters=1, profile=None, **options)`` launches ``python -m cpctl_lab run`` as a
subprocess (so the code under test talks to it exactly as to a remote cluster: over sockets and
files) and returns a :class:`LabHandle` once the API answers and every static pod's mirror is
Running and Ready. Profiles and their settings: :mod:`cpctl_lab.profiles`.
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

from . import nodefiles

DEFAULT_DIR = Path("~/.cache/cpctl-lab").expanduser()
PathLike = Union[str, "os.PathLike[str]"]


class LabError(Exception):
    """A lab operation failed in a way the user can act on (printed as one line by the CLI)."""


class LabTimeout(LabError):
    """The lab did not get ready in the time given (``cpctl lab up``: exit 6, like cpctl's timeouts)."""


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


def check_layout(directory: PathLike) -> None:
    """Raise LabError if ``directory`` holds a lab laid out by an older cpctl lab.

    Older labs kept every master's manifests dir in the lab dir itself (``DIR/manifests-<node>``), so
    all masters shared one parent directory; now each lives in its node's root
    (:func:`cpctl_lab.nodefiles.manifests_dir`). Such a dir is not migrated: its state dirs, parked
    manifests and shell environments point at the old paths, and starting over beside them would
    leave two sets of manifests that disagree."""
    old = nodefiles.legacy_manifests_dirs(Path(directory))
    if old:
        raise LabError(
            f"{directory} was laid out by an older cpctl lab ({old[0].name}; each master's manifests dir is "
            f"now root-<node>/etc/kubernetes/manifests): remove {directory} or use another --dir"
        )


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
    """The environment cpctl needs to act as the node agent of master ``master`` (1-based).

    CPCTL_KUBELET_DIR (the node's /var/lib/kubelet: config.yaml, kubeadm-flags.env) and
    CPCTL_NODE_ROOT (the directory that plays the node's /: hostPaths are node paths) are always set.
    With FQDN or --hostname-override node names, CPCTL_NODE_NAME and CPCTL_MANIFESTS_DIR are left
    out on purpose: cpctl must find the node name (the override flag, else the full lowercased host
    name) and the manifests dir (the kubelet's staticPodPath) itself, as on a real node.
    """
    masters = info["masters"]
    if not 1 <= master <= len(masters):
        raise LabError(f"--master must be between 1 and {len(masters)}")
    m = masters[master - 1]
    named = (info.get("profile") or {}).get("node_naming", "short") == "short"
    env = {"CPCTL_MANIFESTS_DIR": m["manifests_dir"]} if named else {}
    env["CPCTL_STATE_DIR"] = m["state_dir"]
    if named:
        env["CPCTL_NODE_NAME"] = m["name"]
    env["KUBECONFIG"] = info["kubeconfig"]
    env["CPCTL_CRICTL"] = m["crictl"]
    if m.get("kubelet_dir"):
        env["CPCTL_KUBELET_DIR"] = m["kubelet_dir"]
    if m.get("root_dir"):
        env["CPCTL_NODE_ROOT"] = m["root_dir"]
    return env


def env_text(info: dict[str, Any], master: int = 1) -> str:
    return "".join(f"export {k}={v}\n" for k, v in env_vars(info, master).items())


def control_call(
    info: dict[str, Any], path: str, method: str = "GET", timeout: float = 2.0, body: Any = None
) -> Any:
    """One request on the lab's control channel; ``body`` (any JSON value) is sent as JSON.

    A 4xx answer raises LabError with the channel's ``error`` text."""
    url = (info.get("control") or {}).get("url")
    if not url:
        raise LabError("lab state has no control channel")
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url + path, method=method, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        if 400 <= exc.code < 500:
            try:
                why = json.loads(exc.read() or b"null").get("error")
            except (ValueError, AttributeError):
                why = None
            raise LabError(f"lab control {method} {path}: {why or exc}") from None
        raise


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
    """The directory that contains the ``cpctl_lab`` package (put on PYTHONPATH for the child)."""
    return str(Path(__file__).resolve().parents[1])


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
    raise LabTimeout(f"lab in {directory} not ready after {timeout:.0f}s (see {directory / 'lab.log'})")


VALUE_OPTIONS = {
    "start_lag": "--start-lag",
    "ready_lag": "--ready-lag",
    "stop_lag": "--stop-lag",
    "file_check_frequency": "--file-check-frequency",
    "lease_renew": "--lease-renew",
    "port": "--port",
    "node_name": "--node-name",
    "gc_after": "--gc-after",
    "masters": "--masters",
    "profile": "--profile",
    "k8s_version": "--k8s-version",
    "kubeadm_api": "--kubeadm-api",
    "ip_family": "--ip-family",
    "node_naming": "--node-naming",
    "time_scale": "--time-scale",
    "etcd_binary": "--etcd-binary",
}
#: Settings that are on/off switches: ``--NAME`` / ``--no-NAME``, left out when None (profile decides).
SWITCHES = ("local_mode", "stacked_etcd", "realistic_timing", "rbac", "component_checks", "real_master",
            "inotify")


def lag_args(**opts: Any) -> list[str]:
    """The ``cpctl lab run`` options for start_lab()'s keyword options (None: the default)."""
    out: list[str] = []
    for k, v in opts.items():
        if v is None:
            continue
        if k == "aggregated_discovery":
            if not v:
                out.append("--legacy-discovery")
            continue
        if k in SWITCHES:
            out.append(f"--{'' if v else 'no-'}{k.replace('_', '-')}")
            continue
        if k not in VALUE_OPTIONS:
            raise TypeError(f"start_lab() got an unexpected option {k!r}")
        out += [VALUE_OPTIONS[k], str(v)]
    return out


def stop_process(
    info: dict[str, Any], proc: Optional[subprocess.Popen] = None, timeout: float = 10.0
) -> None:
    pid = info.get("pid")
    try:
        control_call(info, "/shutdown", method="POST", timeout=1.0)
    except (OSError, ValueError, LabError):
        if pid and pid_alive(pid):
            os.kill(int(pid), signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return
        elif not pid_alive(pid):
            return
        time.sleep(0.02)
    if pid and pid_alive(pid):
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

    @property
    def profile(self) -> dict[str, Any]:
        """The lab's settings as recorded in lab.json (profile name, k8s_version, ip_family, ...)."""
        return dict(self.info.get("profile") or {})

    def kubelet_dir(self, master: int = 1) -> Path:
        """The master's /var/lib/kubelet: config.yaml and kubeadm-flags.env."""
        return Path(self.info["masters"][master - 1]["kubelet_dir"])

    def root_dir(self, master: int = 1) -> Path:
        """The directory that plays the master's ``/`` (etc/kubernetes/pki, kubeconfigs, ...)."""
        return Path(self.info["masters"][master - 1]["root_dir"])

    def hostname(self, master: int = 1) -> str:
        """The master's simulated kernel host name (what os.Hostname() would return there)."""
        return str(self.info["masters"][master - 1]["hostname"])

    def api_url_for(self, master: int) -> str:
        """The URL of master ``master``'s own apiserver (the load balancer is :attr:`api_url`)."""
        return str(self.info["masters"][master - 1]["api"]["url"])

    def kubeconfig_for(self, master: int) -> str:
        """admin-<node>.conf: a kubeconfig for master ``master``'s own apiserver."""
        return str(self.info["masters"][master - 1]["kubeconfig"])

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

    def inject_faults(self, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Install fault rules on every API listener, replacing earlier ones (see :mod:`cpctl_lab.faults`).

        Returns the installed rules with their ids; a malformed rule raises LabError."""
        return list(control_call(self.info, "/faults", method="POST", body=rules)["rules"])

    def clear_faults(self) -> list[dict[str, Any]]:
        """Remove every fault rule (hung requests are then served); returns them with final hit counts."""
        return list(control_call(self.info, "/faults", method="DELETE")["rules"])

    def faults(self) -> list[dict[str, Any]]:
        """The installed fault rules with their hit counts."""
        return list(control_call(self.info, "/faults")["rules"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_process(self.info, self.proc)

    def __enter__(self) -> "LabHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def ready_timeout(timeout: Optional[float], imitation: float = 30.0) -> float:
    """How long to wait for a lab to settle: ``timeout``, or ``imitation`` seconds, 90 with a real etcd
    (members join one after the other; etcd refuses a join for ~5 s after a member started, and a
    busy machine stretches the three starts)."""
    if timeout is not None:
        return timeout
    from . import etcdbin
    return imitation if etcdbin.find() is None else max(imitation, 90.0)


def start_lab(
    directory: PathLike,
    masters: Optional[int] = None,
    timeout: Optional[float] = None,
    profile: Optional[str] = None,
    **opts: Any,
) -> LabHandle:
    """Start ``python -m cpctl_lab run`` in ``directory`` and wait until it is settled.

    ``masters``: number of control-plane nodes (default: the profile's, 1 for most).
    ``profile``: a name from :data:`cpctl_lab.profiles.PROFILES` (default "default").
    ``opts``: start_lag, ready_lag, stop_lag, file_check_frequency, lease_renew, port, node_name,
    gc_after, aggregated_discovery (False serves legacy discovery only), and the profile settings
    k8s_version, ip_family, node_naming, time_scale, local_mode, stacked_etcd, realistic_timing,
    rbac, component_checks, real_master, inotify (each overrides the profile's value).
    """
    d = Path(directory).expanduser().resolve()
    if running_state(d):
        raise LabError(f"a lab is already running in {d}")
    check_layout(d)
    proc = spawn(d, lag_args(masters=masters, profile=profile, **opts))
    try:
        info = wait_ready(d, proc, ready_timeout(timeout, 20.0))
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        raise
    return LabHandle(d, proc, info)
