"""Commands of other installed packages: the ``cpctl.commands`` entry point group.

Found by reading each installed distribution's ``entry_points.txt`` on ``sys.path`` directly:
``importlib.metadata`` would cost about 30 ms of imports (email, zipfile, csv...) on every
``cpctl --help``. A plugin's module is imported only when its command runs or shows its help.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

GROUP = "cpctl.commands"
METADATA_SUFFIXES = (".dist-info", ".egg-info")
MAX_ENTRY_POINTS_BYTES = 1 << 20


class Plugin(NamedTuple):
    """One command another package adds: ``name = module:attr`` in its entry points."""

    name: str
    target: str          # "module:attr"
    package: str         # the distribution that declares it

    def load(self) -> object:
        """Import the command object (only when it runs or shows its help)."""
        module_name, _, attr = self.target.partition(":")
        value: object = importlib.import_module(module_name.strip())
        for part in attr.strip().split("."):
            value = getattr(value, part)
        return value


def find(path: Optional[List[str]] = None) -> Dict[str, Plugin]:
    """name -> plugin for every ``cpctl.commands`` entry point; the first distribution of a name
    on ``sys.path`` wins, as for imports."""
    found: Dict[str, Plugin] = {}
    seen_packages = set()
    for package, text in _entry_point_files(sys.path if path is None else path):
        if package in seen_packages:
            continue
        seen_packages.add(package)
        if GROUP not in text:            # most distributions: one substring search, no line parsing
            continue
        for name, target in _group_entries(text, GROUP):
            found.setdefault(name, Plugin(name, target, package))
    return found


def _entry_point_files(path: List[str]) -> Iterator[Tuple[str, str]]:
    """(normalised distribution name, entry_points.txt text) in ``path`` order."""
    for directory in path:
        try:
            names = sorted(os.listdir(directory or "."))
        except OSError:
            continue
        for name in names:
            if not name.endswith(METADATA_SUFFIXES):
                continue
            text = _read_small(os.path.join(directory or ".", name, "entry_points.txt"))
            if text is not None:
                yield _package_of(name), text


def _read_small(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_ENTRY_POINTS_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def _package_of(metadata_dir: str) -> str:
    """``cpctl-0.1.0.dist-info`` -> ``cpctl`` (names normalised as packaging does: - _ . alike)."""
    stem = metadata_dir.rsplit(".", 1)[0]
    return stem.split("-", 1)[0].lower().replace("_", "-").replace(".", "-")


def _group_entries(text: str, group: str) -> Iterator[Tuple[str, str]]:
    """``name = value`` lines of the INI section ``[group]`` (extras in brackets dropped)."""
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            continue
        if current == group and "=" in line:
            name, _, value = line.partition("=")
            yield name.strip(), value.split("[", 1)[0].strip()
