"""The ``cpctl`` console script and ``python -m cpctl``: process-wide settings made before anything
else is imported, then the command line (``cpctl.cli.main``).

Start-up allocates tens of thousands of objects (click, PyYAML, cpctl's modules) in a process that
mostly lives well under a second. With Python's default young generation (700 allocations) the
cyclic garbage collector ran 35 times during a ``status`` against an API server, three of those
passes over the older generation too: ~4.5 ms of its ~60 ms of CPU, for no garbage worth the
name. A young generation of ``YOUNG_GENERATION`` lets start-up finish without a pass; the
collector stays on for the commands that run for hours (``watch``, long waits), where a pass every
``YOUNG_GENERATION`` allocations costs about what 70 small ones did and holds a few MiB at most.

At exit the interpreter makes one more, full, pass over every object still alive (the modules,
their classes and functions: ~8 ms of a ``status``'s ~60 ms of CPU, about twice what a bare
``import click, yaml`` pays), only to run the finalizers of garbage in reference cycles before the
modules are torn down. cpctl leaves nothing to such a finalizer: its files are written, fsynced
and closed where they are written, locks and sockets are the kernel's to release. So the last
``atexit`` handler (registered first: they run in reverse) freezes what is alive
(``gc.freeze``), and that pass skips it; every other ``atexit`` handler (paramiko's) has run by
then, non-daemon threads were joined before any, and objects made afterwards are collected as before.
"""

import atexit
import gc

YOUNG_GENERATION = 50000


def entry() -> None:
    """Set the collector's young generation and the freeze at exit, then run the command line."""
    _older, _oldest = gc.get_threshold()[1:]
    gc.set_threshold(YOUNG_GENERATION, _older, _oldest)
    atexit.register(gc.freeze)
    from cpctl.cli.main import entry as cli_entry
    cli_entry()
