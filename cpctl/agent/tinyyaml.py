"""The YAML kubeadm and cpctl write a ClusterConfiguration in, read and written without PyYAML (the
node side has only the standard library).

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

from typing import Dict, Iterator, List, Optional, Tuple

#: (indent, content, line number, the value read over the lines after it or None: ``_yaml_multi``) of a
#: line that holds something
Line = Tuple[int, str, int, Optional[str]]


class YamlPlain(str):
    """A plain (unquoted) YAML scalar, as written: it stays plain when written back, so that its type (a
    number, a bool, null) is the one its writer meant, without resolving it here."""

    __slots__ = ()


_YAML_DEPTH = 64
_YAML_LIMIT = 4 << 20


# The YAML kubeadm (go-yaml) and cpctl (PyYAML) write a ClusterConfiguration in: block mappings and
# sequences; plain, single- and double-quoted scalars, on one line or folded over several (both wrap a
# long line at 80 columns); block scalars (``|`` ``>``, chomping ``-``/``+``, an indentation indicator:
# go-yaml's form of a string with a newline); {} and [], comments. Anything else (flow collections,
# anchors, tags, several documents) is refused with ValueError: the node side then says so (history
# ``keep-in-pending``) and leaves the undo to the next cpctl command, which reads any YAML.
def yaml_load(text: str) -> object:
    """The value of a YAML document in that subset (plain scalars as ``YamlPlain``); ValueError."""
    if len(text) > _YAML_LIMIT:
        raise ValueError("more than %d bytes" % _YAML_LIMIT)
    for char in "\x85\u2028\u2029":     # a line break to YAML 1.1 (go-yaml writes it raw in a block scalar)
        if char in text:
            raise ValueError("line %d: a Unicode line break" % (text[:text.index(char)].count("\n") + 1))
    raw = [r[:-1] if r.endswith("\r") else r for r in text.split("\n")]
    lines: List[Line] = []
    i, ended = 0, False
    while i < len(raw):
        line = raw[i]
        content = line.lstrip(" ")
        if content.startswith("\t"):
            raise ValueError("line %d: a tab in the indentation" % (i + 1))
        if not content.strip() or content.startswith("#"):
            i += 1
            continue
        if ended or line.rstrip() in ("---", "...") or line.startswith("--- "):
            if ended or line.rstrip() == "---" and lines or line.startswith("--- "):
                raise ValueError("line %d: several documents" % (i + 1))
            ended, i = line.rstrip() == "...", i + 1
            continue
        indent, content = len(line) - len(content), content.rstrip(" \t")
        multi, after = _yaml_multi(raw, i, indent, content)
        lines.append((indent, content, i + 1, multi))
        i = after
    if not lines:
        raise ValueError("an empty document")
    value, at = _yaml_block(lines, 0, lines[0][0], 0)
    if at != len(lines):
        raise ValueError("line %d: indented where no value can start" % lines[at][2])
    return value


def _yaml_item_start(content: str) -> bool:
    return content == "-" or content.startswith("- ")


def _yaml_multi(raw: List[str], i: int, indent: int, content: str) -> Tuple[Optional[str], int]:
    """(value, index of the next raw line) of a scalar on line ``i`` that goes on over the lines after
    it - a block scalar, a quoted or plain one folded -, its lines consumed; (None, i + 1) when none."""
    col, rest, dash = indent, content, -1
    while _yaml_item_start(rest):
        after = rest[1:].lstrip(" ")
        dash, col, rest = col, col + len(rest) - len(after), after
    split = _yaml_split_key(rest, i + 1)
    parent, value = (col, split[1]) if split is not None else (dash, rest)
    if not value or parent < 0:
        return None, i + 1
    if value[0] in "|>":
        return _yaml_literal(raw, i, parent, value)
    if value[0] in "'\"":
        if _yaml_close(value, value[0], 1) >= 0:
            return None, i + 1
        return _yaml_quoted_lines(raw, i, parent, value)
    return _yaml_plain_lines(raw, i, parent, value)


def _yaml_more(raw: List[str], j: int, parent: int) -> bool:
    """Whether raw line ``j`` is blank or further in than column ``parent`` (part of a scalar there)."""
    line = raw[j]
    return not line.strip(" ") or len(line) - len(line.lstrip(" ")) > parent


def _yaml_close(line: str, quote: str, at: int) -> int:
    """The index after the closing ``quote`` in ``line`` from ``at``, -1 when it does not close there."""
    while at < len(line):
        if line[at] == quote:
            if quote == "'" and line[at + 1:at + 2] == "'":
                at += 2
                continue
            return at + 1
        at += 2 if line[at] == "\\" and quote == '"' else 1
    return -1


def _yaml_quoted_lines(raw: List[str], i: int, parent: int, value: str) -> Tuple[str, int]:
    """A quoted scalar over several lines (PyYAML's form of a string with a newline; both wrap long ones)."""
    j = i + 1
    while j < len(raw) and _yaml_more(raw, j, parent):
        end = _yaml_close(raw[j], value[0], 0)
        if end >= 0:
            text = "\n".join([value] + raw[i + 1:j] + [raw[j][:end]])
            found, _ = _yaml_quoted(text, i + 1)
            _yaml_scalar(value[0] * 2 + raw[j][end:].rstrip(" \t"), j + 1)      # only a comment after it
            return found, j + 1
        j += 1
    raise ValueError("line %d: a quoted value that does not end" % (i + 1))


def _yaml_plain_lines(raw: List[str], i: int, parent: int, value: str) -> Tuple[Optional[str], int]:
    """A plain scalar folded over the lines further in than its key (a long one wrapped at 80 columns)."""
    if " #" in value or not isinstance(_yaml_scalar(value, i + 1), YamlPlain):
        return None, i + 1
    parts, j, blank = [value], i + 1, 0
    while j < len(raw) and _yaml_more(raw, j, parent) and not raw[j].lstrip(" ").startswith("#"):
        line = raw[j].strip(" ")
        if not line:
            blank += 1
        else:
            if line[:1] == "\t" or ": " in line or " #" in line or line.endswith(":"):
                raise ValueError("line %d: YAML the node side does not read in a folded value" % (j + 1))
            parts += ["\n" * blank if blank else " ", line]
            blank = 0
        j += 1
    if len(parts) == 1:
        return None, i + 1
    folded = "".join(parts)
    return (folded if "\n" in folded else YamlPlain(folded)), j - blank


def _yaml_literal(raw: List[str], i: int, parent: int, header: str) -> Tuple[str, int]:
    """A block scalar (``|`` literal, ``>`` folded; chomping ``-`` strip, ``+`` keep; an indentation
    indicator), as go-yaml writes a string with a newline."""
    head, _, comment = header.partition(" ")
    signs = head[1:]
    digits = [c for c in signs if c in "123456789"]
    if comment.strip(" ") and not comment.lstrip(" ").startswith("#") or len(digits) > 1 or \
            len(signs) - len(digits) > 1 or signs.strip("123456789+-"):
        raise ValueError("line %d: a block scalar header the node side does not read" % (i + 1))
    if digits:
        indent = parent + int(digits[0])
    else:
        j, widest = i + 1, 0
        while j < len(raw) and not raw[j].strip(" "):
            widest, j = max(widest, len(raw[j])), j + 1
        first = len(raw[j]) - len(raw[j].lstrip(" ")) if j < len(raw) else 0
        indent = first if first > parent else max(parent + 1, widest)
        if widest > indent:
            raise ValueError("line %d: a block scalar's blank line wider than its text" % (i + 1))
    texts: List[Tuple[str, bool]] = []
    j = i + 1
    while j < len(raw) and (not raw[j].strip(" ") or len(raw[j]) - len(raw[j].lstrip(" ")) >= indent):
        texts.append((raw[j][indent:], j < len(raw) - 1))
        j += 1
    return _yaml_fold(texts, head[0] == ">", "-" if "-" in signs else "+" if "+" in signs else ""), j


def _yaml_fold(texts: List[Tuple[str, bool]], folded: bool, chomp: str) -> str:
    """The value of a block scalar's lines [(text past the indentation, whether a line break ends it)]."""
    out: List[str] = []
    prev: Optional[str] = None
    ends, blank = False, 0
    for text, broken in texts:
        if not text:
            blank += broken
            continue
        if prev is None:
            out.append("\n" * blank)
        elif folded and prev[:1] not in " \t" and text[:1] not in " \t":
            out.append("\n" * blank if blank else " ")
        else:
            out.append("\n" * (blank + 1))
        out.append(text)
        prev, ends, blank = text, broken, 0
    if chomp != "-" and ends:
        out.append("\n")
    if chomp == "+":
        out.append("\n" * blank)
    return "".join(out)


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
            lines[i] = (indent + 1 + len(rest) - len(content), content, lines[i][2], lines[i][3])   # its block
            value, i = _yaml_block(lines, i, lines[i][0], depth + 1)
        else:
            value = _yaml_value(lines[i], content)
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
            out[key] = _yaml_value(lines[i], rest)
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
        end = _yaml_close(content, content[0], 1)
        if end < 0:
            return None
        key, end = _yaml_quoted(content[:end], number)
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


def _yaml_value(line: Line, text: str) -> object:
    """The scalar of a line: the one read over the lines after it (``_yaml_multi``), else ``text``."""
    return line[3] if line[3] is not None else _yaml_scalar(text, line[2])


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
        raise ValueError("line %d: YAML the node side does not read (flow style, an anchor, a tag...)" % number)
    return YamlPlain(text)


_YAML_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
                 "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0",
                 "L": "\u2028", "P": "\u2029"}


def _yaml_quoted(text: str, number: int) -> Tuple[str, int]:
    """(value, index after the closing quote) of a quoted scalar at the start of ``text``; a line break
    in it folds as YAML folds it (one: a space; more: the empty lines' breaks; escaped: none)."""
    out: List[str] = []
    quote, i, kept = text[0], 1, 0
    while i < len(text):
        char = text[i]
        if char == quote:
            if quote == "'" and text[i + 1:i + 2] == "'":
                out.append("'")
                i += 2
                continue
            return "".join(out), i + 1
        if char == "\n" or char == "\\" and quote == '"' and text[i + 1:i + 2] == "\n":
            escaped = char != "\n"
            while not escaped and len(out) > kept and out[-1] in " \t":
                out.pop()                                   # white space before a line break is no content
            at, breaks = i + escaped, 0
            while at < len(text) and text[at] in " \t\n":
                breaks, at = breaks + (text[at] == "\n"), at + 1
            out.append("\n" * (breaks - 1) if escaped or breaks > 1 else " ")
            i, kept = at, len(out)
            continue
        if char == "\\" and quote == '"':
            code = text[i + 1:i + 2]
            size = {"x": 2, "u": 4, "U": 8}.get(code, 0)
            if size:
                try:
                    out.append(chr(int(text[i + 2:i + 2 + size], 16)))
                except ValueError:
                    raise ValueError("line %d: a bad escape" % number) from None
                i += 2 + size
            elif code not in _YAML_ESCAPES:
                raise ValueError("line %d: a bad escape" % number)
            else:
                out.append(_YAML_ESCAPES[code])
                i += 2
            kept = len(out)
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
