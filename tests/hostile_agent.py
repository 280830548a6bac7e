"""A compromised master's agent (a helper program for the tests, not a test).

Run by sshd in place of the master's ``python3`` (an inventory's ``python``), with the agent
loader's arguments after ours: ``hostile_agent.py MODE K -S -c LOADER``. It starts the REAL agent
(the loader cpctl sent, under this Python), relays every request to it and every answer back,
except the answer to request number ``K`` (0 is the first; -1: every answer), which it replaces as
MODE says:

* ``oversized``: a line that never ends (far past cpctl's bound), then hang-up;
* ``notjson``, ``list``, ``deep``, ``nokeys``, ``wrongtype``: malformed or mistyped answers;
* ``badname``: every ``name`` in the answer becomes ``../../../tmp/evil``;
* ``escape``: every string in the answer gains an escape sequence.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

ESC = "\x1b]0;owned\x07\x1b[2J"


def _walk(value: Any, change: Any) -> Any:
    if isinstance(value, dict):
        return {k: change(k, _walk(v, change)) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, change) for v in value]
    return value


def hostile(mode: str, answer: bytes) -> bytes:
    """The answer a compromised agent gives instead of ``answer``."""
    if mode == "notjson":
        return b"Last login: yesterday\n"
    if mode == "list":
        return b"[1, 2, 3]\n"
    if mode == "deep":
        return b'{"ok": true, "result": ' + b"[" * 100000 + b"]" * 100000 + b"}\n"
    if mode == "nokeys":
        return b'{"ok": true}\n'
    if mode == "wrongtype":
        return b'{"ok": true, "result": [1, {"kind": 5, "name": null}, "x"]}\n'
    decoded = json.loads(answer)
    if mode == "badname":
        changed = _walk(decoded, lambda k, v: "../../../tmp/evil" if k == "name" and isinstance(v, str) else v)
    elif mode == "escape":
        changed = _walk(decoded, lambda k, v: v + ESC if isinstance(v, str) and k != "b64" else v)
    else:
        raise SystemExit("unknown mode %r" % mode)
    return json.dumps(changed).encode() + b"\n"


def main() -> None:
    mode, target = sys.argv[1], int(sys.argv[2])
    real = subprocess.Popen([sys.executable] + sys.argv[3:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert real.stdin is not None and real.stdout is not None
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    header = stdin.readline()                      # the compressed program's length (host.agent.agent_payload)
    real.stdin.write(header + stdin.read(int(header)))
    real.stdin.flush()
    stdout.write(real.stdout.readline())           # the ready line
    stdout.flush()
    for number, line in enumerate(stdin):
        real.stdin.write(line)
        real.stdin.flush()
        answer = real.stdout.readline()
        if number == target and mode == "oversized":
            stdout.write(b'{"ok": true, "result": "')
            chunk = b"A" * (1 << 20)
            try:
                for _ in range(1024):
                    stdout.write(chunk)
            except BrokenPipeError:
                pass
            return
        stdout.write(hostile(mode, answer) if target in (number, -1) else answer)
        stdout.flush()


if __name__ == "__main__":
    main()
