"""pytest fixtures that start a cpctl lab (simulated kubeadm control plane) per test.

Used via ``pytest_plugins = ["tests.labfixture"]`` in a conftest, or imported directly. Lags are
small so a test sees the kubelet react within a few hundred milliseconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from cpctl_lab.control import LabHandle, start_lab

FAST = {
    "start_lag": 0.05,
    "ready_lag": 0.05,
    "stop_lag": 0.05,
    "file_check_frequency": 1.0,
    "lease_renew": 0.2,
}
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabHandle]:
    """A single-master lab (lab-master1 + lab-worker1) in a fresh temp dir."""
    with start_lab(tmp_path / "lab", masters=1, **FAST) as handle:
        yield handle


@pytest.fixture
def lab3(tmp_path: Path) -> Iterator[LabHandle]:
    """A three-master lab (lab-master1..3 + lab-worker1)."""
    with start_lab(tmp_path / "lab", masters=3, **FAST) as handle:
        yield handle


def run_cpctl(handle: Any, *args: str, timeout: float = 120, **env_over: str) -> subprocess.CompletedProcess:
    """The real CLI (``python -m cpctl``) with a lab's environment (a LabHandle or an env dict).

    A CPCTL_PROBE from the caller's shell is dropped so every test gets the default probe;
    ``env_over`` replaces variables (e.g. KUBECONFIG)."""
    env = dict(os.environ, **(handle if isinstance(handle, dict) else handle.env))
    env.pop("CPCTL_PROBE", None)
    env.update(env_over)
    return subprocess.run([sys.executable, "-m", "cpctl", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def kubectl(
    handle: LabHandle, *args: str, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run the real kubectl against the lab (own discovery cache dir per lab). ``timeout`` tells a hang
    from a slow machine: 15 s ran out for a `kubectl delete pod` (it waits for the deletion) with both
    cores kept busy by burners (run b5)."""
    env = dict(os.environ, KUBECONFIG=handle.kubeconfig, HOME=str(handle.dir))
    proc = subprocess.run(
        [KUBECTL, "--cache-dir", str(handle.dir / "kcache"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
    return proc


def api(
    handle: LabHandle, method: str, path: str, body: Any = None, ctype: str = "application/json"
) -> tuple[int, Any]:
    """One REST call with urllib; returns (status code, decoded JSON body)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        handle.api_url + path,
        data=data,
        method=method,
        headers={"Content-Type": ctype, "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


#: Seconds between two looks of ``wait_for``: a look is mostly a request to the lab, which costs its CPU and
#: the worker's - 4 % of a core per waiting test at 0.03 s, 1.6 % at 0.1 s (measured) - on a CI run whose
#: two cores are the limit; every window the suite waits for lasts seconds (the lab's lags and timings).
POLL = 0.1


def wait_for(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll pred until it returns something truthy (exceptions count as not yet).

    The default deadline is the margin of a busy machine (the lab's simulated kubelet shares two
    cores with the suite's other worker and everything else running there): a passing wait returns
    as soon as ``pred`` holds, so only a failing test pays for it. A shorter ``timeout`` belongs only
    to a wait whose window is the point (before the kubelet's next re-list)."""
    deadline = time.monotonic() + timeout
    last: Optional[BaseException] = None
    while time.monotonic() < deadline:
        try:
            got = pred()
            if got:
                return got
        except (OSError, KeyError, AssertionError, ValueError) as exc:
            last = exc
        time.sleep(POLL)
    raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")


def get_pod(handle: LabHandle, ns: str, name: str) -> Optional[dict[str, Any]]:
    code, body = api(handle, "GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return body if code == 200 else None


def mirror(handle: LabHandle, component: str, master: int = 1) -> Optional[dict[str, Any]]:
    return get_pod(handle, "kube-system", f"{component}-{handle.node_name(master)}")


def is_ready(pod: Optional[dict[str, Any]]) -> bool:
    return bool(pod) and any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod or {}).get("status", {}).get("conditions", [])
    )


@pytest.fixture
def lab_factory(tmp_path: Path) -> Iterator[Callable[..., LabHandle]]:
    """Start labs with any profile or option (FAST lags unless overridden); all stop at teardown.

    ``start(name="lab", **opts)`` -> LabHandle, e.g. ``start(profile="ha", time_scale=0.05)``."""
    started: list[LabHandle] = []

    def start(name: str = "lab", **opts: Any) -> LabHandle:
        handle = start_lab(tmp_path / name, **{**FAST, **opts})
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()


def crictl(path: str, *args: str, timeout: float = 10) -> subprocess.CompletedProcess:
    """Run a lab crictl shim (``handle.crictl`` or ``handle.env["CPCTL_CRICTL"]``)."""
    return subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout)
