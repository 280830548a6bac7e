"""TARGET parsing and ssh_config resolution, without importing paramiko.

Kept apart from :mod:`cpctl.host.ssh` so the strict parsing rules can be tested (and used by
the inventory) without paying for paramiko. The config object is duck-typed: anything with a
``lookup(host) -> dict`` like ``paramiko.SSHConfig``.

Resolution follows OpenSSH: values written in the TARGET (``user@``, ``:port``) win over the
config, the config wins over the defaults, and ``~`` and ``%h``-style tokens are expanded.
"""

from __future__ import annotations

import glob
import ipaddress
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Tuple

from cpctl.errors import CpctlError, ExitCode

_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*\$?$")
_HOST_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?$")
DEFAULT_PORT = 22
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
MAX_INCLUDE_DEPTH = 8


@dataclass(frozen=True)
class Target:
    """What the user wrote: ``[user@]host[:port]``; ``host`` may be an ssh_config alias."""

    raw: str
    host: str
    user: Optional[str] = None
    port: Optional[int] = None


@dataclass
class Endpoint:
    """One fully resolved hop: where to connect, as whom, and how to check its host key."""

    name: str                      # as written (for messages)
    hostname: str
    port: int
    user: str
    identity_files: List[str] = field(default_factory=list)
    known_hosts: List[str] = field(default_factory=list)
    strict: str = "yes"            # yes | accept-new | no
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    identities_only: bool = False
    host_key_alias: Optional[str] = None
    proxy_jump: List[str] = field(default_factory=list)

    @property
    def known_hosts_name(self) -> str:
        """The name known_hosts files use: ``host`` on port 22, ``[host]:port`` otherwise; a
        HostKeyAlias is used as is (OpenSSH adds no port to it)."""
        if self.host_key_alias:
            return self.host_key_alias
        return self.hostname if self.port == DEFAULT_PORT else "[%s]:%d" % (self.hostname, self.port)


def _bad(raw: str, why: str) -> CpctlError:
    return CpctlError("invalid target %r: %s" % (raw, why), ExitCode.USAGE,
                      "use [user@]host[:port], [user@][ipv6]:port or an ssh_config alias")


def _parse_port(raw: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise _bad(raw, "port must be a number from 1 to 65535")
    return int(text)


def _split_host_port(raw: str, rest: str) -> Tuple[str, Optional[int]]:
    if rest.startswith("["):
        host, sep, tail = rest[1:].partition("]")
        if not sep:
            raise _bad(raw, "missing ']'")
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise _bad(raw, "%r is not an IPv6 address" % host) from None
        if not tail:
            return host, None
        if not tail.startswith(":"):
            raise _bad(raw, "unexpected text after ']'")
        return host, _parse_port(raw, tail[1:])
    if rest.count(":") > 1:
        try:
            ipaddress.IPv6Address(rest.split("%")[0])
        except ValueError:
            raise _bad(raw, "write IPv6 addresses as [addr]:port") from None
        return rest, None
    host, sep, port = rest.partition(":")
    if not _HOST_RE.match(host):
        raise _bad(raw, "bad host name %r" % host)
    return host, (_parse_port(raw, port) if sep else None)


def parse_target(raw: str) -> Target:
    """Parse TARGET strictly; anything odd is a usage error rather than a surprise connection."""
    if not isinstance(raw, str) or not raw or raw != raw.strip() or any(c.isspace() for c in raw):
        raise _bad(str(raw), "empty or contains whitespace")
    text = raw[len("ssh://"):] if raw.startswith("ssh://") else raw
    user = None
    if "@" in text:
        user, _, text = text.rpartition("@")
        if not _USER_RE.match(user):
            raise _bad(raw, "bad user name %r" % user)
    if not text:
        raise _bad(raw, "missing host")
    host, port = _split_host_port(raw, text)
    return Target(raw=raw, host=host, user=user, port=port)


def read_config_text(path: str, depth: int = 0, sources: Optional[List[str]] = None) -> str:
    """The config with ``Include`` lines inlined (paramiko does not implement Include).

    ``sources``, when given, receives every file read and the directory part of every Include
    pattern: what a cached copy must watch to know that the text changed (a file added to an
    included directory changes that directory's mtime; a wildcard in the directory part
    cannot be watched that way)."""
    if depth > MAX_INCLUDE_DEPTH:
        raise CpctlError("ssh_config %s: Include nested too deeply" % path, ExitCode.USAGE)
    from cpctl.inputs import read_input_file
    lines = read_input_file(path, "ssh_config").splitlines()
    if sources is not None:
        sources.append(path)
    out = []
    for line in lines:
        words = line.strip().replace("=", " ", 1).split()
        if len(words) >= 2 and words[0].lower() == "include":
            for pattern in words[1:]:
                pattern = os.path.expanduser(pattern)
                if not os.path.isabs(pattern):
                    pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
                if sources is not None:
                    sources.append(os.path.dirname(pattern))
                for inc in sorted(glob.glob(pattern)):
                    out.append(read_config_text(inc, depth + 1, sources))
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def _expand(path: str, hostname: str, user: str, port: int) -> str:
    tokens = {"%h": hostname, "%u": os.environ.get("USER", ""), "%r": user, "%p": str(port),
              "%d": os.path.expanduser("~"), "%%": "%"}
    path = re.sub(r"%[hurpd%]", lambda m: tokens[m.group(0)], path)
    return os.path.expanduser(path)


def _strict(value: Optional[str], accept_new: bool) -> str:
    value = (value or "yes").lower()
    if value in ("no", "off", "false"):
        return "no"
    if accept_new or value == "accept-new":
        return "accept-new"
    return "yes"


def _timeout(value: Optional[str], default: Optional[float]) -> float:
    if default is not None:
        return float(default)
    try:
        return float(value) if value else DEFAULT_CONNECT_TIMEOUT
    except ValueError:
        raise CpctlError("ssh_config: bad ConnectTimeout %r" % value, ExitCode.USAGE) from None


def split_jumps(value: Optional[str]) -> List[str]:
    if not value or value.strip().lower() == "none":
        return []
    return [hop.strip() for hop in value.split(",") if hop.strip()]


def resolve(target: Target, lookup: Optional[Callable[[str], dict]], opts: Any) -> Endpoint:
    """Merge TARGET, ssh_config (``lookup``) and explicit options into an :class:`Endpoint`.

    ``opts`` provides user, port, identity_files, known_hosts, accept_new_host_key,
    connect_timeout and proxy_jump (see ``SSHOptions``); explicit options win, like ssh's -l/-p/-i.
    """
    conf = lookup(target.host) if lookup else {}
    if conf.get("proxycommand"):
        raise CpctlError("%s: ProxyCommand is not supported, use ProxyJump" % target.raw, ExitCode.USAGE)
    hostname = conf.get("hostname") or target.host
    port = target.port or opts.port or _parse_port(target.raw, str(conf.get("port") or DEFAULT_PORT))
    user = target.user or opts.user or conf.get("user") or _local_user()
    files = list(opts.identity_files) + list(conf.get("identityfile") or [])
    known = list(opts.known_hosts or []) or (conf.get("userknownhostsfile") or "").split() \
        or list(DEFAULT_KNOWN_HOSTS)
    return Endpoint(
        name=target.raw, hostname=hostname, port=port, user=user,
        identity_files=[_expand(p, hostname, user, port) for p in files],
        known_hosts=[_expand(p, hostname, user, port) for p in known],
        strict=_strict(conf.get("stricthostkeychecking"), opts.accept_new_host_key),
        connect_timeout=_timeout(conf.get("connecttimeout"), opts.connect_timeout),
        identities_only=str(conf.get("identitiesonly", "no")).lower() == "yes",
        host_key_alias=conf.get("hostkeyalias"),
        proxy_jump=split_jumps(opts.proxy_jump if opts.proxy_jump is not None else conf.get("proxyjump")),
    )


def _local_user() -> str:
    import getpass
    return getpass.getuser()


LOGIN_NAME_VARS = ("LOGNAME", "USER", "LNAME", "USERNAME")     # getpass.getuser()'s order


def remember_login_name() -> None:
    """Set LOGNAME from the password database when none of getpass.getuser()'s variables is set
    (cron, systemd units, containers), so that it answers from the environment.

    paramiko asks for the login name on every Host/Match block of every lookup; each NSS lookup
    releases the GIL, and 20 connecting threads turned ~840 of them into ~0.4 s of waiting per
    run. The answer is the one getuser() would give. Call it before threads start: the
    environment is the whole process's.
    """
    if any(os.environ.get(name) for name in LOGIN_NAME_VARS):
        return
    import pwd
    try:
        os.environ["LOGNAME"] = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        pass                     # no passwd entry: getuser() fails later exactly as it would have


def import_paramiko_without_invoke() -> None:
    """Import paramiko with ``invoke`` hidden, once per process (``cpctl.host.ssh`` calls it first).

    paramiko.config imports invoke at module level, used only for ``Match exec`` in ssh_config;
    where invoke is installed (Fabric brings it) that adds ~0.3 s to every remote run.
    ``cpctl.host.ssh.load_ssh_config`` loads invoke itself when a config needs it. ``sys.modules``
    is left as it was found (a later ``import invoke`` works): no lasting change to the process.
    """
    import sys
    if "paramiko" in sys.modules:
        return
    hide = "invoke" not in sys.modules
    if hide:
        sys.modules["invoke"] = None  # type: ignore[assignment]  # `import invoke` -> ImportError
    try:
        import paramiko.config  # noqa: F401
    finally:
        if hide and sys.modules.get("invoke", False) is None:
            del sys.modules["invoke"]


Prompt = Callable[..., str]

#: What a file was when read: (path, inode, size, mtime_ns, ctime_ns); (path, None, 0, 0, 0) when
#: missing. The ctime tells a rewrite whose mtime was set back (utime cannot set the ctime).
Mark = Tuple[str, Optional[int], int, int, int]
RACY = 2.0      # seconds: a file changed this recently is read again, not trusted by its stat


def stat_mark(path: str) -> Mark:
    try:
        info = os.stat(os.path.expanduser(path))
    except OSError:
        return (path, None, 0, 0, 0)
    return (path, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def marks_vouch(marks: Sequence[Mark]) -> bool:
    """Will a later ``stat_mark`` of these files tell a change? Not for a wildcard path, nor for
    a file modified within the last RACY seconds: a same-size rewrite in the same mtime tick
    would look unchanged (git's "racily clean" entries). What is cached by marks (a parsed
    known_hosts or ssh_config, a config digest in the keeper) is kept only when they vouch."""
    import time
    if any(glob.has_magic(mark[0]) for mark in marks):
        return False
    newest = max((mark[3] for mark in marks if mark[1] is not None), default=0)
    return newest < time.time_ns() - int(RACY * 1e9)


def ssh_config_path(option: Optional[str]) -> Optional[str]:
    """The ssh_config file to read: ``option``, else ~/.ssh/config when it exists; None for none
    (not there, or ``none`` given, as with ``ssh -F none``)."""
    if option is None:
        default = os.path.expanduser("~/.ssh/config")
        return default if os.path.isfile(default) else None
    return None if option.lower() == "none" else option


@dataclass
class SSHOptions:
    """How to reach masters. Explicit values win over ssh_config, like ssh's -l, -p, -i, -J.

    ``prompt(text, secret=True) -> str`` asks the user (the CLI passes a click-based one; this
    layer never imports click). ``become_password`` is fed to ``sudo -S`` on stdin only.
    """

    ssh_config: Optional[str] = None          # None: ~/.ssh/config if present; "none": no config
    user: Optional[str] = None
    port: Optional[int] = None
    identity_files: List[str] = field(default_factory=list)
    known_hosts: Optional[List[str]] = None   # overrides UserKnownHostsFile
    global_known_hosts: List[str] = field(default_factory=lambda: ["/etc/ssh/ssh_known_hosts"])
    accept_new_host_key: bool = False
    connect_timeout: Optional[float] = None   # None: ConnectTimeout from ssh_config, else 10 s
    proxy_jump: Optional[str] = None          # None: ProxyJump from ssh_config; "none": direct
    use_agent: bool = True
    look_for_keys: bool = True
    prompt: Optional[Prompt] = field(default=None, repr=False, compare=False)
    become: bool = True
    become_password: Optional[str] = field(default=None, repr=False, compare=False)
    python: str = "python3"
    keyring: Any = field(default=None, repr=False, compare=False)   # ssh.KeyRing, made on first use
    persist: float = 0.0                      # > 0: connections kept by the keeper this long (see keeper)
