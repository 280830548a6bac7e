"""The YAML kubeadm and cpctl write a ClusterConfiguration in, read and written without PyYAML (the
node side has only the standard library).

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

from typing import Dict, Iterator, List, Optional, Tuple

#: (indent, content, line number) of a line that holds something
Line = Tuple[int, str, int]


class YamlPlain(str):
    """A plain (unquoted) YAML scalar, as written: it stays plain when written back, so that its type (a
    number, a bool, null) is the one its writer meant, without resolving it here."""

    __slots__ = ()


_YAML_DEPTH = 64
_YAML_LIMIT = 4 << 20


# The YAML kubeadm (go-yaml) and cpctl (PyYAML) write a ClusterConfiguration in: block mappings and
# sequences, plain, single- and double-quoted scalars on one line, {} and [], comments. Anything else
# (flow collections, anchors, tags, block or multi-line scalars, several documents) is refused with
# ValueError: the node side then leaves the undo to the next cpctl command, which reads any YAML.
def yaml_load(text: str) -> object:
    """The value of a YAML document in that subset (plain scalars as ``YamlPlain``); ValueError."""
    if len(text) > _YAML_LIMIT:
        raise ValueError("more than %d bytes" % _YAML_LIMIT)
    lines: List[Line] = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw[:-1] if raw.endswith("\r") else raw
        content = line.lstrip(" ")
        if content.startswith("\t"):
            raise ValueError("line %d: a tab in the indentation" % number)
        if not content.strip() or content.startswith("#"):
            continue
        if content.rstrip() in ("---", "...") or content.startswith("--- "):
            if lines or content.rstrip() != "---":
                raise ValueError("line %d: several documents" % number)
            continue
        lines.append((len(line) - len(content), content.rstrip(" \t"), number))
    if not lines:
        raise ValueError("an empty document")
    value, at = _yaml_block(lines, 0, lines[0][0], 0)
    if at != len(lines):
        raise ValueError("line %d: indented where no value can start" % lines[at][2])
    return value


def _yaml_item_start(content: str) -> bool:
    return content == "-" or content.startswith("- ")


def _yaml_block(lines: List[Line], i: int, indent: int, depth: int) -> Tuple[object, int]:
    if depth > _YAML_DEPTH:
        raise ValueError("line %d: nested deeper than %d" % (lines[i][2], _YAML_DEPTH))
    if _yaml_item_start(lines[i][1]):
        return _yaml_seq(lines, i, indent, depth)
    return _yaml_map(lines, i, indent, depth)


def _yaml_nested(lines: List[Line], i: int, indent: int, depth: int,
                 same_level_seq: bool) -> Tuple[object, int]:
    """The value on the lines after a key or a dash with nothing after it: a block further in (a
    mapping's sequence may also start at the key's own column), else null."""
    if i < len(lines) and (lines[i][0] > indent or (same_level_seq and lines[i][0] == indent and
                                                    _yaml_item_start(lines[i][1]))):
        return _yaml_block(lines, i, lines[i][0], depth + 1)
    return YamlPlain(""), i


def _yaml_seq(lines: List[Line], i: int, indent: int, depth: int) -> Tuple[List[object], int]:
    out: List[object] = []
    while i < len(lines) and lines[i][0] == indent and _yaml_item_start(lines[i][1]):
        rest = lines[i][1][1:]
        content = rest.lstrip(" ")
        if not content:
            value, i = _yaml_nested(lines, i + 1, indent, depth, False)
        elif _yaml_item_start(content) or _yaml_split_key(content, lines[i][2]) is not None:
            lines[i] = (indent + 1 + len(rest) - len(content), content, lines[i][2])   # the item's block
            value, i = _yaml_block(lines, i, lines[i][0], depth + 1)
        else:
            value = _yaml_scalar(content, lines[i][2])
            i += 1
            if i < len(lines) and lines[i][0] > indent:
                raise ValueError("line %d: a multi-line value" % lines[i][2])
        out.append(value)
    return out, i


def _yaml_map(lines: List[Line], i: int, indent: int, depth: int) -> Tuple[Dict[str, object], int]:
    out: Dict[str, object] = {}
    while i < len(lines) and lines[i][0] == indent and not _yaml_item_start(lines[i][1]):
        number = lines[i][2]
        split = _yaml_split_key(lines[i][1], number)
        if split is None:
            raise ValueError("line %d: not a 'key: value' line" % number)
        key, rest = split
        if key in out:
            raise ValueError("line %d: the key %r twice" % (number, str(key)[:40]))
        if rest:
            out[key] = _yaml_scalar(rest, number)
            i += 1
            if i < len(lines) and lines[i][0] > indent:
                raise ValueError("line %d: a multi-line value" % lines[i][2])
        else:
            out[key], i = _yaml_nested(lines, i + 1, indent, depth, True)
    if i < len(lines) and lines[i][0] > indent:
        raise ValueError("line %d: indented where no value can start" % lines[i][2])
    return out, i


def _yaml_split_key(content: str, number: int) -> Optional[Tuple[str, str]]:
    """(key, the rest after ``: ``) of a ``key: value`` line, None when it is none."""
    if content[:1] in ("'", '"'):
        key, end = _yaml_quoted(content, number)
        after = content[end:].lstrip(" ")
        if not after.startswith(":") or after[1:2] not in ("", " "):
            return None
        return key, after[1:].strip(" ")
    at = content.find(": ")
    if at < 0 and content.endswith(":"):
        at = len(content) - 1
    if at <= 0 or content[0] in "?&*!|>%@`[{#," or " #" in content[:at]:
        return None
    return YamlPlain(content[:at].rstrip(" ")), content[at + 1:].strip(" ")


def _yaml_scalar(text: str, number: int) -> object:
    """One scalar on one line (a trailing comment dropped)."""
    if text[:1] in ("'", '"'):
        value, end = _yaml_quoted(text, number)
        tail = text[end:]
        if tail.strip(" ") and not tail.lstrip(" ").startswith("#") or tail[:1] not in ("", " "):
            raise ValueError("line %d: text after a quoted value" % number)
        return value
    cut = text.find(" #")
    text = (text[:cut] if cut >= 0 else text).rstrip(" ")
    if text in ("{}", "[]"):
        return {} if text == "{}" else []
    if text[:1] in "[{&*!|>%@`#" or text.startswith("- ") or ": " in text or text.endswith(":"):
        raise ValueError("line %d: YAML the node side does not read (%s...)" % (number, text[:12]))
    return YamlPlain(text)


_YAML_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
                 "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0",
                 "L": "\u2028", "P": "\u2029"}


def _yaml_quoted(text: str, number: int) -> Tuple[str, int]:
    """(value, index after the closing quote) of a quoted scalar at the start of ``text``."""
    out: List[str] = []
    quote, i = text[0], 1
    while i < len(text):
        char = text[i]
        if char == quote:
            if quote == "'" and text[i + 1:i + 2] == "'":
                out.append("'")
                i += 2
                continue
            return "".join(out), i + 1
        if char == "\\" and quote == '"':
            code = text[i + 1:i + 2]
            size = {"x": 2, "u": 4, "U": 8}.get(code, 0)
            if size:
                try:
                    out.append(chr(int(text[i + 2:i + 2 + size], 16)))
                except ValueError:
                    raise ValueError("line %d: a bad escape" % number) from None
                i += 2 + size
                continue
            if code not in _YAML_ESCAPES:
                raise ValueError("line %d: a bad escape" % number)
            out.append(_YAML_ESCAPES[code])
            i += 2
            continue
        out.append(char)
        i += 1
    raise ValueError("line %d: a quoted value that does not end on its line" % number)


def yaml_dump(value: object) -> str:
    """``value`` (read by ``yaml_load``, or made of dicts, lists and strings) as block YAML: plain
    scalars as they were written, other strings double-quoted."""
    if not isinstance(value, dict) or not value:
        raise TypeError("only a non-empty mapping is written")
    return "".join(line + "\n" for line in _yaml_lines(value, 0))


def _yaml_inline(value: object) -> Optional[str]:
    """The text of a value that fits after ``key: `` or ``- ``, None for a block."""
    if isinstance(value, (dict, list)):
        return None if value else ("{}" if isinstance(value, dict) else "[]")
    if isinstance(value, YamlPlain):
        return str(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    if not isinstance(value, str):
        raise TypeError("a %s is not written" % type(value).__name__)
    out: List[str] = []
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif char in "\n\t":
            out.append("\\n" if char == "\n" else "\\t")
        elif ord(char) < 0x20 or 0x7f <= ord(char) <= 0x9f or char in "\u2028\u2029\ufeff" or \
                0xd800 <= ord(char) <= 0xdfff:
            out.append("\\u%04x" % ord(char))
        else:
            out.append(char)
    return '"%s"' % "".join(out)


def _yaml_lines(value: object, indent: int) -> Iterator[str]:
    pad = " " * indent
    if isinstance(value, dict):
        pairs: List[Tuple[Optional[str], object]] = [
            (str(k) if isinstance(k, YamlPlain) else _yaml_inline(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        pairs = [(None, v) for v in value]
    else:                                    # a block is a mapping or a list (``_yaml_inline``)
        raise TypeError("a %s is no block" % type(value).__name__)
    for key, item in pairs:
        head = pad + "-" if key is None else pad + key + ":"
        text = _yaml_inline(item)
        if text is not None:
            yield head + (" " + text if text else "")
        elif key is not None:
            yield head
            for line in _yaml_lines(item, indent + 2):
                yield line
        else:
            inner = list(_yaml_lines(item, indent + 2))
            inner[0] = pad + "- " + inner[0][indent + 2:]
            for line in inner:
                yield line
