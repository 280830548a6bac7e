"""What every command of one cpctl run shares: settings, output format, where it runs; and output.

Only click and the standard library are imported here (``cpctl --help`` imports this module).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import click

if TYPE_CHECKING:
    from cpctl.core.settings import Settings
    from cpctl.fleet.targets import RemoteOptions


@dataclass
class CliState:
    """The run's global options, resolved by ``cli.main``; ``command`` is the declared command path."""

    settings: "Settings"
    output: str = "text"
    remote: Optional["RemoteOptions"] = None
    command: str = ""


def state(ctx: click.Context) -> CliState:
    """The run's ``CliState`` (set up by the main group before any command runs)."""
    found = ctx.find_object(CliState)
    if found is None:
        raise RuntimeError("cpctl command run outside the cpctl group")
    return found


def printable(value: Any) -> Any:
    """``value`` with every string made safe for a terminal: control and format characters (a
    newline that would fake a table row, an ESC sequence, a bidi override) become visible escapes.
    Text renderers get this; JSON output keeps the exact values."""
    if isinstance(value, str):
        return value if value.isprintable() else "".join(c if c.isprintable() else _escape(c) for c in value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable(v) for v in value]
    return value


def _escape(char: str) -> str:
    code = ord(char)
    return "\\x%02x" % code if code < 0x100 else "\\u%04x" % code if code < 0x10000 else "\\U%08x" % code


def emit(ctx: click.Context, data: Any, text: str) -> None:
    """The command's result: ``data`` as JSON with ``-o json``, else ``text`` (which the caller
    built from ``printable(data)``)."""
    if state(ctx).output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    elif text:
        click.echo(text)


def note(message: str) -> None:
    """One line on stderr, prefixed like every cpctl message; whatever the message quotes (a file or
    pod name, an API's words) cannot break the line or send escape sequences."""
    click.echo("cpctl: %s" % printable(message), err=True)


class Spinner:
    """One self-overwriting progress line on stderr, only for a terminal in text mode."""

    FRAMES = "|/-\\"

    def __init__(self) -> None:
        self.count = 0
        self.shown = False

    def __call__(self, text: str) -> None:
        self.count += 1
        frame = self.FRAMES[self.count % len(self.FRAMES)]
        sys.stderr.write("\r\033[K%s %s" % (frame, text[:150]))
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False


def progress_for(ctx: click.Context) -> Optional[Spinner]:
    """A progress line for long waits, or None (JSON output, or stderr not a terminal)."""
    if state(ctx).output != "text" or not sys.stderr.isatty():
        return None
    spinner = Spinner()
    ctx.call_on_close(spinner.clear)
    return spinner
