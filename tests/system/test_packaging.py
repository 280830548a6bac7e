"""The package as it is published (issue 48): the sdist holds what a rebuild needs - a wheel built
from the unpacked sdist alone has every file of a wheel built from the tree, the JSON Schemas of
``-o json`` (cpctl/schemas/) included -, and the metadata declares the licence the PEP 639 way
(``License-Expression``, no legacy ``License:`` field; setuptools >= 77, as pyproject.toml's
build-system requires and .ci/constraints.txt pins).

Real builds with ``python -m build --no-isolation``: this venv's setuptools is the backend (the
lock's version), nothing is fetched.
"""

from __future__ import annotations

import email
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def build(source: Path, out: Path, kind: str) -> Path:
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--" + kind, "-o", str(out), str(source)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = sorted(out.glob("*.tar.gz" if kind == "sdist" else "*.whl"))
    assert len(found) == 1, found
    return found[0]


def wheel_files(wheel: Path) -> List[str]:
    with zipfile.ZipFile(wheel) as archive:
        return sorted(n for n in archive.namelist() if ".dist-info/" not in n)


def test_a_wheel_built_from_the_sdist_is_the_wheel_built_from_the_tree(tmp_path: Path) -> None:
    sdist = build(ROOT, tmp_path / "sdist", "sdist")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        archive.extractall(tmp_path / "unpacked")              # the sdist this test just built
    top = sdist.name[: -len(".tar.gz")]
    for needed in ("pyproject.toml", "setup.cfg", "README.md", "LICENSE", "cpctl/schemas/status.json"):
        assert "%s/%s" % (top, needed) in names, needed
    rebuilt = build(tmp_path / "unpacked" / top, tmp_path / "rebuilt", "wheel")
    direct = build(ROOT, tmp_path / "direct", "wheel")
    assert wheel_files(rebuilt) == wheel_files(direct)
    schemas = sorted(p.name for p in (ROOT / "cpctl" / "schemas").glob("*.json"))
    assert schemas and [n for n in wheel_files(rebuilt) if n.startswith("cpctl/schemas/")] == [
        "cpctl/schemas/" + name for name in schemas]
    with zipfile.ZipFile(rebuilt) as archive:
        meta_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(meta_name))
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in archive.namelist())
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["License"] is None                       # the legacy field is gone
    assert not [c for c in metadata.get_all("Classifier") or [] if c.startswith("License ::")]
    assert float(metadata["Metadata-Version"]) >= 2.4
