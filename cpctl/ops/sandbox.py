"""Where the hardened units' sandbox hides files, the one rule ``cpctl systemd install`` and the
``--confirm-within`` revert unit both refuse by (a unit whose ExecStart, state dir or kubeconfig
lies there could never do its job, and nothing would say why until it fails).

``ProtectHome=yes`` makes /home, /root and /run/user inaccessible, ``PrivateTmp=yes`` gives the
service its own empty /tmp and /var/tmp. Paths written into a unit file must also be plain: an
absolute path of letters, digits and ``._+/-`` (systemd would interpret ``%``, ``$``, spaces).
"""

from __future__ import annotations

import re
from typing import Mapping, Optional

HIDDEN_FROM_UNITS = {"/home": "ProtectHome=yes", "/root": "ProtectHome=yes", "/run/user": "ProtectHome=yes",
                     "/tmp": "PrivateTmp=yes", "/var/tmp": "PrivateTmp=yes"}
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._+/-]+$")

# The sandbox every shipped unit runs in (cpctl systemd install's units, the snapshot timer, the
# --confirm-within revert unit). ProtectSystem=strict makes the whole tree read-only, so the
# check unit lists the three places --fix and the metrics write to; the "-" prefix keeps a
# missing textfile dir from failing the unit (the check then reports that as an error).
HARDENING = """\
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
NoNewPrivileges=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
# inotify needs no socket; the probes talk HTTPS to the API server and crictl uses a unix socket.
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
CapabilityBoundingSet=CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_CHOWN CAP_FOWNER
UMask=0077
"""


def hidden_reason(path: str, what: str = "", hidden: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Why the sandbox hides ``path`` from a unit ("PATH is under /root, which ProtectHome=yes hides
    from the unit"), or None. ``what`` follows the path in the text (" (symlink target)")."""
    hidden = HIDDEN_FROM_UNITS if hidden is None else hidden
    for root, setting in hidden.items():
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return "%s%s is under %s, which %s hides from the unit" % (path, what, root, setting)
    return None
