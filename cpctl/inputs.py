"""Files and environment the user hands to this cpctl process: read them as untrusted input.

An inventory, an ssh_config or an option's environment variable can point anywhere: at
``/dev/zero`` (a read that never ends), a FIFO (a read that never starts), a directory, a huge
file. Each is one clear error instead: only regular files, and never more than a bound.
"""

from __future__ import annotations

import os
import stat
from typing import Iterable, Mapping

from cpctl.errors import CpctlError, ExitCode

MAX_INPUT_FILE = 4 << 20


def read_input_file(path: str, what: str, limit: int = MAX_INPUT_FILE) -> str:
    """The UTF-8 text of the regular file ``path`` (symlinks followed: dotfile managers use them);
    one error line, naming ``what``, for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise CpctlError("%s %s: no such file" % (what, path), ExitCode.ENVIRONMENT) from None
    except OSError as exc:
        raise CpctlError("%s %s: cannot read: %s" % (what, path, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
    try:
        info = os.fstat(fd)
        if _is_null_device(info):
            return ""                   # ``-F /dev/null``: the ssh idiom for "no config at all"
        if not stat.S_ISREG(info.st_mode):
            raise CpctlError("%s %s: not a regular file" % (what, path), ExitCode.ENVIRONMENT)
        if info.st_size > limit:
            raise CpctlError("%s %s: larger than %d bytes" % (what, path, limit), ExitCode.ENVIRONMENT)
        data = os.read(fd, limit + 1)
    except OSError as exc:
        raise CpctlError("%s %s: cannot read: %s" % (what, path, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise CpctlError("%s %s: larger than %d bytes" % (what, path, limit), ExitCode.ENVIRONMENT)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CpctlError("%s %s: not UTF-8 text" % (what, path), ExitCode.ENVIRONMENT) from None


def _is_null_device(info: os.stat_result) -> bool:
    if not stat.S_ISCHR(info.st_mode):
        return False
    try:
        return os.stat(os.devnull).st_rdev == info.st_rdev
    except OSError:
        return False


def refuse_empty(names: Iterable[str], environ: Mapping[str, str] = os.environ) -> None:
    """An environment variable that is set but empty is a mistake (``CPCTL_STATE_DIR=`` would
    otherwise silently mean the default /var/lib/cpctl): exit 2 naming it."""
    empty = [name for name in names if name in environ and not environ[name].strip()]
    if empty:
        raise CpctlError("%s set but empty: unset it or give a value" % " and ".join(empty), ExitCode.USAGE)


def load_yaml(text: "str | bytes") -> object:
    """``yaml.safe_load`` through libyaml's C parser when PyYAML has it (the same safe constructor
    and resolver, 5-10x faster: a kubeconfig with embedded certificates, a KubeletConfiguration);
    raises ``yaml.YAMLError`` like ``safe_load``. Manifests are decoded by ``core.manifests``."""
    import yaml
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
