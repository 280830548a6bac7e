"""Run the benchmarks:
``python -m benchmarks [startup|roundtrip|watch|drift|fanout|latency|apply|certs|apiserver|failfast|labetcd|
changelatency|all]``.

``latency`` is ``benchmarks.fanout.run_latency``: the fan-out behind a 50 ms round trip, with Ansible
and the cpctl.controlplane collection (not part of ``all``: it starts 50 sshd and takes minutes)."""

from __future__ import annotations

import compileall
import importlib
import os
import sys

NAMES = ["startup", "roundtrip", "watch", "drift", "fanout", "apply", "certs", "apiserver", "failfast", "labetcd",
         "changelatency"]


def compile_like_installed() -> None:
    """Write cpctl's .pyc files, as ``pip install`` does. From an editable checkout with
    PYTHONDONTWRITEBYTECODE=1 (set on some machines) every cpctl process would otherwise compile
    every module it imports, ~60 ms a run that no installed copy pays."""
    import cpctl
    compileall.compile_dir(os.path.dirname(cpctl.__file__), quiet=1)


def main(argv: list) -> int:
    compile_like_installed()
    wanted = argv or ["all"]
    names = NAMES if wanted == ["all"] else wanted
    for name in names:
        if name == "latency":
            from benchmarks.fanout import run_latency
            print("## latency\n%s" % run_latency())
            continue
        if name not in NAMES:
            print("unknown benchmark %r (choose from %s, latency or all)" % (name, ", ".join(NAMES)), file=sys.stderr)
            return 2
        module = importlib.import_module("benchmarks.%s" % name)
        print("## %s\n%s" % (name, module.run()))
    return 0


sys.exit(main(sys.argv[1:]))
