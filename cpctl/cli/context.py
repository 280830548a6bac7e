"""What every command of one cpctl run shares: settings, output format, where it runs; and output.

Only click and the standard library are imported here (``cpctl --help`` imports this module).
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import click

if TYPE_CHECKING:
    from cpctl.core.settings import Settings
    from cpctl.fleet.targets import RemoteOptions
    from cpctl.ops.changelease import Holder


class CliState:
    """The run's global options, resolved by ``cli.main``; ``command`` is the declared command path.
    (A plain class: ``dataclasses`` is not imported at start-up.)"""

    def __init__(self, settings: "Settings", output: str = "text") -> None:
        self.settings = settings
        self.output = output
        self.remote: Optional["RemoteOptions"] = None
        self.command = ""
        self.census = "inventory"      # --census without -H/-i: "cluster" counts through this node's API server
        self.node_options: Tuple[str, ...] = ()   # with -H/-i: node options given on the command line (hints)
        self.change_lease: Optional["Holder"] = None   # the cluster's change lease, while this run holds it


#: Set by the cpctl.controlplane collection to its task's private temp dir (removed when the task
#: ends): the run is one task of an Ansible play, and its hints name no file under that dir.
ANSIBLE_TASK_DIR = "CPCTL_ANSIBLE_TASK_DIR"


def ansible_task_dir() -> Optional[str]:
    """The temp dir of the Ansible task this run is, None outside Ansible (:data:`ANSIBLE_TASK_DIR`)."""
    value = os.environ.get(ANSIBLE_TASK_DIR, "")
    return os.path.realpath(value) if value else None


def gone_after_task(path: Optional[str]) -> bool:
    """Whether ``path`` is a file of the Ansible task (gone when the hint is read): never in a hint."""
    task_dir = ansible_task_dir()
    if not path or task_dir is None:
        return False
    return os.path.realpath(path).startswith(task_dir.rstrip("/") + "/")


def state(ctx: click.Context) -> CliState:
    """The run's ``CliState`` (set up by the main group before any command runs)."""
    found = ctx.find_object(CliState)
    if found is None:
        raise RuntimeError("cpctl command run outside the cpctl group")
    return found


# Values that are blocks of text (a file, a diff, a rendered report, a container's log lines):
# their newlines and tabs are the block's own layout and stay (a Go stack trace indents with
# tabs); every other control character is escaped like anywhere else.
BLOCK_KEYS = frozenset({"diff", "config", "manifest", "summary", "yaml", "lines"})


def printable(value: Any, block: bool = False) -> Any:
    """``value`` with every string made safe for a terminal: control and format characters (a
    newline that would fake a table row, an ESC sequence, a bidi override) become visible escapes.
    Text renderers get this; JSON output keeps the exact values. The strings of a dict key in
    ``BLOCK_KEYS`` (or all strings, with ``block``) keep their newlines and tabs: they are shown
    as blocks."""
    if isinstance(value, str):
        if value.isprintable():
            return value
        if block:
            return "\n".join(_escaped(line, keep="\t") for line in value.split("\n"))
        return _escaped(value)
    if isinstance(value, dict):
        return {printable(k): printable(v, block or k in BLOCK_KEYS) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable(v, block) for v in value]
    return value


def _escaped(text: str, keep: str = "") -> str:
    """``text`` with every non-printable character except those in ``keep`` as a visible escape."""
    return "".join(c if c.isprintable() or c in keep else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    return "\\x%02x" % code if code < 0x100 else "\\u%04x" % code if code < 0x10000 else "\\U%08x" % code


def emit(ctx: click.Context, data: Any, text: str) -> None:
    """The command's result: ``data`` as JSON with ``-o json``, else ``text`` (which the caller
    built from ``printable(data)``). A progress line on the terminal is cleared first. Secret
    values are redacted here, the one way out for results (``cpctl.redaction``)."""
    from cpctl.redaction import redact, redact_text
    clear_progress()
    if state(ctx).output == "json":
        import json  # here: a text-only run need not import it
        click.echo(json.dumps(redact(data), indent=2, sort_keys=True, default=str))
    elif state(ctx).output == "yaml":
        click.echo(as_yaml(redact(data)), nl=False)
    elif text:
        click.echo(redact_text(text))


def as_yaml(data: object, start: bool = False) -> str:
    """``data`` as YAML (``-o yaml``): the same object ``-o json`` prints, keys sorted, block style;
    ``start``: with a leading ``---`` (one document of a stream, like ``kubectl get -w -o yaml``)."""
    import json

    import yaml
    plain = json.loads(json.dumps(data, default=str))           # exactly the JSON object's values
    return yaml.safe_dump(plain, sort_keys=True, default_flow_style=False, allow_unicode=True,
                          explicit_start=start)


def wide() -> bool:
    """Whether the run asked for ``-o wide`` (text renderers add columns then)."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(CliState) if ctx is not None else None
    return obj is not None and obj.output == "wide"


def note(message: str) -> None:
    """One line on stderr, prefixed like every cpctl message; whatever the message quotes (a file or
    pod name, an API's words) cannot break the line or send escape sequences. A progress line on
    the terminal is cleared first, so the message never lands after a half-drawn spinner."""
    from cpctl.redaction import redact_text
    clear_progress()
    click.echo("cpctl: %s" % printable(redact_text(message)), err=True)


_ERRORS_AS_JSON: List[bool] = []      # set by the entry point when the run asked for -o json


def errors_as_json(on: bool) -> None:
    """With ``-o json`` a failure is a JSON object on stderr (one line), not a ``cpctl:`` line."""
    _ERRORS_AS_JSON[:] = [on]


def fail(message: str, code: int, hint: str = "") -> None:
    """The one line on stderr that ends a failed run: ``cpctl: message (hint: ...)``, or with
    ``-o json`` ``{"error": {"code": 4, "reason": "refused", "message": ..., "hint": ...}}``."""
    if not (_ERRORS_AS_JSON and _ERRORS_AS_JSON[0]):
        note(message + (" (hint: %s)" % hint if hint else ""))
        return
    from cpctl.errors import ExitCode
    try:
        reason = ExitCode(code).name.lower()
    except ValueError:
        reason = "unknown"
    from cpctl.redaction import redact
    clear_progress()
    import json
    click.echo(json.dumps(redact({"error": {"code": int(code), "reason": reason, "message": message, "hint": hint}}),
                          sort_keys=True), err=True)


HEARTBEAT = 5.0                       # seconds between "still waiting" lines when stderr is no terminal
# Patterns a status never uses are text, compiled on first use through re's own cache.
_ELAPSED = r"^(?P<what>.*), (?P<seconds>\d+(?:\.\d+)?)s(?: of (?P<limit>[0-9.e+]+)s)?$"
_SHOWN: List["Progress"] = []         # progress lines drawn now (cleared before any output)


def clear_progress() -> None:
    """Erase every progress line drawn on the terminal (before a result, a message or an error)."""
    for progress in list(_SHOWN):
        progress.clear()


class Progress:
    """What a long wait is waiting for, how long it has waited and how long it may (``timeout``).

    The waiter calls it with text like ``pod X still present (api), 3.2s`` (the seconds that wait
    has lasted) at every poll. On a terminal: one self-overwriting line, erased before anything
    else is written. Otherwise (a pipe, a log, a CI job): a heartbeat line on stderr every
    ``interval`` seconds of waiting, so a silent wait never looks like a hang."""

    FRAMES = "|/-\\"

    def __init__(self, tty: bool, timeout: Optional[float] = None, interval: float = HEARTBEAT) -> None:
        self.tty = tty
        self.timeout = timeout
        self.interval = interval
        self.count = 0
        self.started: Optional[float] = None
        self.next_beat: Optional[float] = None

    def line(self, text: str) -> str:
        """``waiting: <what>: 12s of 120s`` for the waiter's ``text``; the limit is the one the
        waiter names (``..., 3.2s of 250s``: a default taken from the pod's startupProbe), else
        ``--timeout``."""
        now = time.monotonic()
        if self.started is None:
            self.started = now
        match = re.match(_ELAPSED, text, re.DOTALL)
        what, elapsed = (match.group("what"), float(match.group("seconds"))) if match else (text, now - self.started)
        limit = float(match.group("limit")) if match and match.group("limit") else self.timeout
        of = " of %gs" % limit if limit else ""
        return "waiting: %s: %ds%s" % (what, elapsed, of)

    def __call__(self, text: str) -> None:
        line = self.line(text)
        if self.tty:
            self._draw(line)
            return
        now = time.monotonic()
        if self.next_beat is None:
            self.next_beat = now + self.interval
        elif now >= self.next_beat:
            self.next_beat = now + self.interval
            note(line)

    def _draw(self, line: str) -> None:
        self.count += 1
        frame = self.FRAMES[self.count % len(self.FRAMES)]
        if self not in _SHOWN:      # marked before it is written: a Ctrl-C between the two still erases it
            _SHOWN.append(self)
        sys.stderr.write("\r\033[K%s %s" % (frame, printable(line)[:150]))
        sys.stderr.flush()

    def clear(self) -> None:
        """Erase the line (a no-op unless it is drawn)."""
        if self in _SHOWN:
            _SHOWN.remove(self)
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def progress_for(ctx: click.Context) -> Optional[Progress]:
    """The progress of long waits for a person: None with ``-o json`` (stdout is for the data and
    stderr for errors); a terminal line on a TTY, else a heartbeat every few seconds. The timeout
    shown is the command's ``--timeout`` (the wait's own limit)."""
    if state(ctx).output in ("json", "yaml"):
        return None
    timeout = ctx.params.get("timeout")
    progress = Progress(sys.stderr.isatty(), float(timeout) if isinstance(timeout, (int, float)) else None)
    ctx.call_on_close(progress.clear)
    return progress
