"""Say which installed Python packages differ from the lock (``CPCTL_CI_LATEST=1 .ci/run``).

Usage: ``python3 .ci/moved.py .ci/constraints.txt``. Prints one line per package whose installed
version is not the locked one (``moved: NAME LOCKED -> INSTALLED``), and the packages installed that
the lock does not name; always exits 0: the suite that follows decides whether the newest releases pass.
"""

import re
import sys
from importlib import metadata


def locked(path: str) -> dict:
    """{normalized name: version} from a pip-compile output (``name==version`` lines, markers allowed)."""
    pins = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;]+)", line)
            if match:
                pins[normalize(match.group(1))] = match.group(2)
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main() -> int:
    pins = locked(sys.argv[1])
    installed = {normalize(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    moved = sorted((name, pins[name], version) for name, version in installed.items()
                   if name in pins and pins[name] != version)
    new = sorted(name for name in installed if name not in pins and name != "cpctl")
    for name, was, now in moved:
        print("ci-latest: moved: %s %s -> %s" % (name, was, now))
    for name in new:
        print("ci-latest: not in the lock: %s %s" % (name, installed[name]))
    if not moved and not new:
        print("ci-latest: every package is at its locked version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
