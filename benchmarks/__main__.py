"""Run the benchmarks: ``python -m benchmarks [startup|roundtrip|watch|drift|fanout|all]``."""

from __future__ import annotations

import importlib
import sys

NAMES = ["startup", "roundtrip", "watch", "drift", "fanout"]


def main(argv: list) -> int:
    wanted = argv or ["all"]
    names = NAMES if wanted == ["all"] else wanted
    for name in names:
        if name not in NAMES:
            print("unknown benchmark %r (choose from %s or all)" % (name, ", ".join(NAMES)), file=sys.stderr)
            return 2
        module = importlib.import_module("benchmarks.%s" % name)
        print("## %s\n%s" % (name, module.run()))
    return 0


sys.exit(main(sys.argv[1:]))
