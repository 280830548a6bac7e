"""Remote runs: reach masters over SSH (``ssh``), name them in an inventory (``inventory``) and
fan work out over many of them (``fleet``).

Nothing here imports paramiko at package import time: ``cpctl --help`` must stay fast, so only
:mod:`cpctl.remote.ssh` imports it, and callers import that module when they connect.
"""
