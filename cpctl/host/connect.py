"""The one way cpctl opens a ``Host`` on a master: through the keeper, or a direct SSH connection.

With ``--persist`` (and no become password, which the keeper must never hold) the keeper hands
over an agent it keeps ready; this process then never imports paramiko. Otherwise one paramiko
connection is made for this run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from cpctl.host.base import Host


def open_host(target: str, options: Any, become: Optional[bool] = None, python: Optional[str] = None) -> Host:
    """A connected ``Host`` for ``target`` (an ssh_config alias or [user@]host[:port]).

    ``become``/``python`` override the options per host (inventory vars) in a copy that shares
    the run's key ring: each private key is read, and its passphrase asked, once per run."""
    if options.persist > 0 and options.become_password is None:
        from cpctl.host import keeper  # no paramiko in this process: the keeper has it
        return keeper.attach(target, _per_host(options, become, python))
    from cpctl.host import ssh
    ssh.keyring_of(options)            # made on the run's options, before any per-host copy
    return ssh.connect(target, _per_host(options, become, python))


def _per_host(options: Any, become: Optional[bool], python: Optional[str]) -> Any:
    """``options`` with this host's inventory vars, or ``options`` itself when it has none."""
    if become is None and python is None:
        return options
    return dataclasses.replace(options, become=options.become if become is None else become,
                               python=python or options.python)
