"""Static pod manifests as the kubelet sees them: which files it loads and which pod each defines.

The kubelet loads every non-dot entry of the directory that is - itself or through a symlink - a
regular file (no extension filter, not recursive) of at most 10 MiB. It decodes JSON when the
text starts with "{" and otherwise the FIRST document of a YAML stream, into exactly one v1 Pod
that must pass the API validation and the static-pod rules (``cpctl.core.podspec``). cpctl
mirrors those rules so that "what is running" and "what would a file do" are answered the
kubelet's way, and ``decoded_digest`` / ``same_pod`` tell an edit the kubelet ignores (comments,
formatting, API defaults written out: ``cpctl.core.podview``) from one that gives a new pod.

A hostile file - an alias bomb, a recursive alias, a 5000-digit number, deep nesting, binary,
invalid UTF-8, a mapping as a key, a list where a name goes - is one invalid manifest with a
reason, decoded in bounded time and memory; a valid pod has the types the kubelet's decode
requires, so no code reading it later fails on a field of the wrong type.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import math
import os
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, NoReturn, Optional, Tuple, Union

from cpctl.catalogue import ALIASES
from cpctl.core import podspec, podview
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import DirEntry, Host, Stat

if TYPE_CHECKING:
    from _hashlib import HASH

    from cpctl.core import podfields

# The kubelet reads at most this much of a manifest (maxConfigLength, pkg/kubelet/config/common.go);
# a larger file is one it cannot load.
MAX_MANIFEST_BYTES = 10 << 20


# Patterns a status rarely uses are text, compiled on first use through re's own cache.
_COMPONENT_RE = r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$"
_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def validate_component_name(name: str, what: str = "component name") -> str:
    """Refuse anything that could be a path or shell trick before it reaches the filesystem;
    ``what`` names the value in the message (``bind`` checks a pod name, a node name, a namespace)."""
    if not name:
        raise CpctlError("empty %s" % what, ExitCode.USAGE)
    if len(name) > 253:
        raise CpctlError("%s too long (%d characters, at most 253)" % (what, len(name)), ExitCode.USAGE)
    if not re.match(_COMPONENT_RE, name) or ".." in name:
        shown = name if name.isprintable() else repr(name)
        raise CpctlError("invalid %s %r: use letters, digits, '.', '-', '_' only" % (what, shown),
                         ExitCode.USAGE)
    return name


def close_names(wanted: str, known: Iterable[str]) -> List[str]:
    """Up to three of ``known`` that ``wanted`` is probably a typo of (``schedular``)."""
    import difflib
    close = difflib.get_close_matches(wanted, sorted(set(known)), n=4, cutoff=0.6)
    short = [n for n in close if not any(ALIASES.get(other) == n and other != n for other in close)]
    return short[:3]                  # "scheduler", not also "kube-scheduler"


def file_stem(filename: str) -> str:
    for suffix in _FILE_SUFFIXES:
        if filename.endswith(suffix):
            return filename[: -len(suffix)]
    return filename


def _sha256_constructor() -> Callable[[bytes], HASH]:
    """The interpreter's own SHA-256 (``_sha256``; ``_sha2`` from Python 3.12): ``hashlib`` loads
    OpenSSL's library first (~2 ms of every ``cpctl status``) for the same digest."""
    for name in ("_sha256", "_sha2"):
        try:
            constructor: Callable[[bytes], HASH] = importlib.import_module(name).sha256
            return constructor
        except (ImportError, AttributeError):
            continue
    import hashlib  # pragma: no cover - an interpreter without either module
    return hashlib.sha256


if TYPE_CHECKING:
    from hashlib import sha256
else:
    sha256 = _sha256_constructor()


def checksum(data: bytes) -> str:
    return sha256(data).hexdigest()


# --- names editors, package managers and humans leave next to a manifest -----------------------
# Matched on the whole name's end, so a real component name never matches by accident.
VIM_WRITE_TEST = "4913"     # vim writes and deletes this non-dot file to test the directory
_LEFTOVER_RE = (r"(~|\.bak\d*|\.backup|\.orig|\.old|\.save|\.sw[a-px]|\.tmp|\.rej"   # re.IGNORECASE
                r"|\.dpkg-(old|new|dist|bak)|\.rpm(save|new|orig)|\.ucf-(old|dist))$")
_SWAP_RE = r"^\.(.+)\.sw[a-px]$"   # vim: .swp, then .swo ... .swa; .swx while testing


def leftover_kind(name: str) -> Optional[str]:
    """What kind of leftover copy a file name looks like, or None for an ordinary name."""
    if name == VIM_WRITE_TEST:
        return "vim's write-test file"
    if name.endswith("~"):
        return "an editor backup"
    if re.search(_LEFTOVER_RE, name, re.IGNORECASE):
        return "a backup/editor leftover name"
    return None


def swap_file_of(name: str) -> Optional[str]:
    """The file a vim swap file (``.kube-apiserver.yaml.swp``) belongs to, None for other names."""
    match = re.match(_SWAP_RE, name)
    return match.group(1) if match else None


class InvalidManifest(ValueError):
    """The file is not something the kubelet would run (the message says why, on one line)."""


# --- decoding, as the kubelet's file source does it ----------------------------------------------
# pkg/kubelet/config/common.go tryDecodeSinglePod: utilyaml.ToJSON (input starting with "{" after
# white space is JSON as it is, anything else is the FIRST document of a YAML stream, converted
# with go-yaml's YAML 1.1 rules), then the typed decode and the checks in cpctl.core.podspec.
# A hostile file is one invalid manifest, decoded within these bounds (real manifests are far
# below them: a kubeadm apiserver manifest has ~270 nodes, 6 levels and no alias):
MAX_NODES = 100_000             # YAML nodes as written (JSON: values)
MAX_EXPANDED_NODES = 250_000    # nodes after alias expansion: where a "billion laughs" file stops
MAX_DEPTH = 100                 # nested mappings and lists
PARSE_SECONDS = 2.0             # wall-time backstop for the whole decode of one file
MORE_DOCUMENTS = "more YAML documents follow the first one: the kubelet decodes only the first"

_MERGE = object()               # a "<<" merge key (go-yaml: a plain "<<" or !!merge in key position)
_YAML_TAG = "tag:yaml.org,2002:"
# go-yaml v2's table of plain scalars (resolve.go): YAML 1.1 booleans, nulls, special floats.
_PLAIN_WORDS: Dict[str, object] = {word: value for words, value in (
    (("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    (("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
    (("", "~", "null", "Null", "NULL"), None),
    ((".nan", ".NaN", ".NAN"), math.nan),
    ((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    (("-.inf", "-.Inf", "-.INF"), -math.inf)) for word in words}
_WORD_STARTS = frozenset("yYnNtTfFoO~")
_NUMBER_STARTS = frozenset("0123456789+-")
_GO_INT = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
_GO_FLOAT = re.compile(r"[-+]?[0-9]*\.?[0-9]+(?:[eE][-+][0-9]+)?")      # yaml.v2's yamlStyleFloat
_DOT_FLOAT = r"\.[0-9]+(?:[eE][-+]?[0-9]+)?"   # compiled on first use (re's cache)
_SURROGATE = re.compile("[\ud800-\udfff]")
_JSON_START = re.compile(r"\s*\{")    # utilyaml.ToJSON: JSON is what starts with "{" after white space


def _go_int(text: str) -> Optional[int]:
    """``text`` as Go's ParseInt(text, 0, 64), else ParseUint(text, 0, 64), reads it (0x, 0o, 0b and
    a leading 0 for octal); None when neither does."""
    if len(text) > 80 or not _GO_INT.fullmatch(text):
        return None
    signed = text[0] in "+-"
    body = text[1:] if signed else text
    prefix = body[:2].lower()
    if prefix in ("0x", "0o", "0b"):
        number = int(body[2:], {"0x": 16, "0o": 8, "0b": 2}[prefix])
    else:
        number = int(body, 8 if len(body) > 1 and body[0] == "0" else 10)
    number = -number if text[0] == "-" else number
    if -(1 << 63) <= number < (1 << 63) or (not signed and number < (1 << 64)):
        return number
    return None


def _plain_scalar(text: str) -> object:
    """A plain (unquoted, untagged) scalar resolved as go-yaml v2 does: bool, null, int, float or
    the text itself (timestamps stay text, like every value that is none of the others). YAML 1.1
    words such as yes/no/on/off/y/n are booleans, as in the kubelet's YAML library (go-yaml v2)."""
    first = text[:1]
    if first == "<" and text == "<<":
        return _MERGE                                   # a merge key; "<<" text anywhere else
    if first in _WORD_STARTS or first in _NUMBER_STARTS or first == "." or not text:
        if text in _PLAIN_WORDS:
            return _PLAIN_WORDS[text]
        if first == ".":
            return float(text) if re.fullmatch(_DOT_FLOAT, text) else text
        if first in _NUMBER_STARTS:
            plain = text.replace("_", "")
            number = _go_int(plain)
            if number is not None:
                return number
            if _GO_FLOAT.fullmatch(plain):
                value = float(plain)
                return value if math.isfinite(value) else text     # out of range: Go keeps the text
    return text


def _tagged_scalar(tag: str, text: str) -> object:
    """A scalar with an explicit tag: !!str and unknown tags keep the text, !!int/!!float/!!bool/
    !!null must resolve to their type, !!binary is base64 (decoded to text)."""
    if not tag.startswith(_YAML_TAG):
        return text
    short = tag[len(_YAML_TAG):]
    if short == "merge":
        return _MERGE
    if short == "binary":
        try:
            raw = base64.b64decode("".join(text.split()), validate=True)
        except (ValueError, binascii.Error):
            raise InvalidManifest("!!binary value contains invalid base64 data") from None
        return raw.decode("utf-8", "replace")
    kinds: Dict[str, Tuple[type, ...]] = {"int": (int,), "float": (float, int), "bool": (bool,),
                                          "null": (type(None),)}
    if short not in kinds:
        return text
    value = _plain_scalar(text)
    resolved = isinstance(value, bool) == (short == "bool") and isinstance(value, kinds[short])
    if not resolved:
        raise InvalidManifest("cannot decode %s as a !!%s" % (podspec.shown(text), short))
    return float(value) if short == "float" and isinstance(value, (int, float)) else value


def _json_key(key: object) -> str:
    """A mapping key as the YAML-to-JSON step writes it: text, or a number/boolean made text."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        return _go_float_text(key)
    raise InvalidManifest("unsupported mapping key: %s (keys must be text, numbers or booleans)"
                          % ("a merge key (<<)" if key is _MERGE else podspec.type_name(key)))


def _go_float_text(value: float) -> str:
    """Go's strconv.FormatFloat(value, 'g', -1, 64) (shortest digits; exponent form below 1e-4 and
    from 1e6), which the YAML-to-JSON step uses for a float mapping key."""
    if not math.isfinite(value):
        return ".nan" if math.isnan(value) else ".inf" if value > 0 else "-.inf"
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    from decimal import Decimal  # only for a float mapping key: decimal costs ~1 ms to import
    sign, digit_tuple, exponent = Decimal(repr(value)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + int(exponent)
    if point - 1 < -4 or point - 1 >= 6:
        text = "%s%se%+03d" % (digits[0], "." + digits[1:] if len(digits) > 1 else "", point - 1)
    elif point <= 0:
        text = "0." + "0" * -point + digits
    else:
        text = digits[:point] + "0" * (point - len(digits)) + ("." + digits[point:] if point < len(digits) else "")
    return ("-" if sign else "") + text


def _json_value(value: object) -> object:
    """A value as the YAML-to-JSON step accepts it: a "<<" outside key position is text, and NaN or
    infinity cannot be written as JSON (the kubelet's conversion fails on the whole file)."""
    if value is _MERGE:
        return "<<"
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidManifest("a .nan or .inf number, which JSON cannot carry (the kubelet rejects the file)")
    return value


def _merge_sources(value: object) -> List[Dict[str, object]]:
    """The mappings a "<<" merge key brings in: one mapping or a list of them."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return list(value)
    raise InvalidManifest("a << merge key needs a mapping or a list of mappings")


class _Collection:
    """A mapping or list being built from parser events, with its node weight (expanded size)."""

    __slots__ = ("mapping", "anchor", "weight", "entries", "elements", "key", "has_key", "merges")

    def __init__(self, mapping: bool, anchor: Optional[str]) -> None:
        self.mapping = mapping
        self.anchor = anchor
        self.weight = 1
        self.entries: Dict[str, object] = {}
        self.elements: List[object] = []
        self.key: object = None
        self.has_key = False
        self.merges: List[List[Dict[str, object]]] = []

    def add(self, value: object, weight: int) -> None:
        self.weight += weight
        if not self.mapping:
            self.elements.append(_json_value(value))
        elif not self.has_key:
            self.key, self.has_key = value, True
        else:
            self.has_key = False
            if self.key is _MERGE:
                self.merges.append(_merge_sources(value))
            else:
                self.entries[_json_key(self.key)] = _json_value(value)   # a repeated key: the last wins

    def value(self) -> object:
        """The finished list or mapping; merged keys give way to the mapping's own, and earlier
        merge sources to later ones (the YAML merge-key rule)."""
        if not self.mapping:
            return self.elements
        if not self.merges:
            return self.entries
        merged: Dict[str, object] = {}
        for sources in reversed(self.merges):
            for source in reversed(sources):
                merged.update(source)
        merged.update(self.entries)
        return merged


class _YamlDocument:
    """Plain values (dict, list, str, int, float, bool, None) of the FIRST document of a YAML
    stream, built from libyaml's events with go-yaml's rules, and within MAX_NODES,
    MAX_EXPANDED_NODES, MAX_DEPTH and PARSE_SECONDS. An alias is a shared reference to its
    anchor's value (counted at its full size), so memory stays that of the file as written."""

    def __init__(self, text: str) -> None:
        import yaml
        self._parser = (_c_parser() or yaml.SafeLoader)(text)
        self._anchors: Dict[str, Optional[Tuple[object, int]]] = {}   # None: still being built
        self._deadline = time.monotonic() + PARSE_SECONDS

    def decode(self) -> Tuple[object, Tuple[str, ...]]:
        """(value of the first document or None, notes); raises InvalidManifest."""
        import yaml
        try:
            return self._stream()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = " at line %d, column %d" % (mark.line + 1, mark.column + 1) if mark is not None else ""
            raise InvalidManifest("invalid YAML%s: %s" % (where, _one_line(exc.problem or exc.context or ""))) \
                from None
        except yaml.YAMLError as exc:
            raise InvalidManifest("invalid YAML: %s" % _one_line(str(exc)).split(' in "<')[0]) from None
        finally:
            self._parser.dispose()

    def _stream(self) -> Tuple[object, Tuple[str, ...]]:
        import yaml
        self._parser.get_event()                          # StreamStart
        if self._parser.check_event(yaml.StreamEndEvent):  # nothing but comments and blanks
            return None, ()
        self._parser.get_event()                          # DocumentStart
        root = self._node()
        self._parser.get_event()                          # DocumentEnd: the rest of the document is read
        try:
            more = self._parser.check_event(yaml.DocumentStartEvent)
        except yaml.YAMLError:
            more = True                                   # broken, but never read by the kubelet
        return root, (MORE_DOCUMENTS,) if more else ()

    def _node(self) -> object:
        """The document's root value. One loop over the events with an explicit stack (no
        recursion, whatever the nesting); counters kept in locals: this runs for every node."""
        import yaml
        scalar_event, alias_event, mapping_start = yaml.ScalarEvent, yaml.AliasEvent, yaml.MappingStartEvent
        sequence_start = yaml.SequenceStartEvent
        get_event, anchors, deadline = self._parser.get_event, self._anchors, self._deadline
        stack: List[_Collection] = []
        nodes = expanded = 0
        while True:
            event = get_event()
            kind = type(event)
            if kind is scalar_event:
                tag, weight, written = event.tag, 1, 1
                if tag is None:
                    value = event.value if event.style else _plain_scalar(event.value)
                else:
                    value = event.value if tag == "!" else _tagged_scalar(tag, event.value)
                if event.anchor is not None:
                    anchors[event.anchor] = (value, 1)
            elif kind is alias_event:
                value, weight = _alias(anchors, event.anchor)
                written = 1
            elif kind is mapping_start or kind is sequence_start:
                if len(stack) >= MAX_DEPTH:
                    raise InvalidManifest("nested deeper than %d levels" % MAX_DEPTH)
                if event.anchor is not None:
                    anchors[event.anchor] = None
                stack.append(_Collection(kind is mapping_start, event.anchor))
                weight = written = 1
            else:                                         # MappingEnd / SequenceEnd
                done = stack.pop()
                value, weight, written = done.value(), done.weight, 0
                if done.anchor is not None:
                    anchors[done.anchor] = (value, weight)
            # ``written`` nodes are in the file; an alias adds its anchor's whole ``weight`` when
            # expanded. A collection's own node counts on its start, its size on its end.
            nodes += written
            expanded += weight if written else 0
            if nodes > MAX_NODES or expanded > MAX_EXPANDED_NODES:
                raise InvalidManifest("more than %d YAML nodes" % MAX_NODES if nodes > MAX_NODES else
                                      "more than %d nodes once its aliases are expanded (an alias bomb?)"
                                      % MAX_EXPANDED_NODES)
            if written and not nodes & 1023 and time.monotonic() > deadline:
                raise InvalidManifest("decoding took longer than %.0f s" % PARSE_SECONDS)
            if kind is mapping_start or kind is sequence_start:
                continue
            if not stack:
                return _json_value(value)
            stack[-1].add(value, weight)


def _alias(anchors: Dict[str, Optional[Tuple[object, int]]], name: str) -> Tuple[object, int]:
    """(value, weight) of the anchor an alias names; a recursive or unknown one is invalid."""
    if name not in anchors:
        raise InvalidManifest("unknown anchor %s referenced" % podspec.shown(name))
    found = anchors[name]
    if found is None:
        raise InvalidManifest("anchor %s value contains itself (a recursive alias)" % podspec.shown(name))
    return found


def _c_parser() -> Any:
    """libyaml's event parser (PyYAML keeps it in yaml._yaml), None without libyaml: PyYAML's own
    parser (SafeLoader) then gives the same events, slower, within the same bounds."""
    try:
        from yaml._yaml import CParser
    except ImportError:
        return None
    return CParser


def _one_line(text: str) -> str:
    """``text`` with every run of white space (newlines included) made one space."""
    return " ".join(text.split())


def _decode_json(text: str) -> object:
    """JSON as Go reads it (no NaN/Infinity, lone surrogates become U+FFFD), within the bounds."""
    if text.count("{") + text.count("[") + text.count(",") > MAX_NODES:
        raise InvalidManifest("more than %d JSON values" % MAX_NODES)
    try:
        value = json.loads(text, parse_constant=_no_json_constant, parse_int=_json_int)
    except RecursionError:
        raise InvalidManifest("nested deeper than %d levels" % MAX_DEPTH) from None
    except ValueError as exc:
        raise InvalidManifest("invalid JSON: %s" % _one_line(str(exc))) from None
    return _checked_json(value)


def _no_json_constant(name: str) -> NoReturn:
    """NaN and Infinity are not JSON: Go's decoder refuses them."""
    raise ValueError("%s is not JSON" % name)


def _json_int(text: str) -> Union[int, float, str]:
    """An integer literal; beyond 64 bits a float (Go cannot put it in an integer field either)."""
    if len(text) <= 20:
        return int(text)
    value = float(text)
    return value if math.isfinite(value) else text


def _checked_json(root: object) -> object:
    """``root`` with MAX_DEPTH enforced and lone surrogates replaced (iteratively: no recursion)."""
    stack: List[Tuple[Union[Dict[str, object], List[object]], int]] = \
        [(root, 1)] if isinstance(root, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidManifest("nested deeper than %d levels" % MAX_DEPTH)
        pairs: Iterable[Tuple[Any, object]] = list(node.items()) if isinstance(node, dict) else enumerate(node)
        for key, item in pairs:
            if isinstance(item, str) and _SURROGATE.search(item):
                node[key] = _SURROGATE.sub("\ufffd", item)
            elif isinstance(item, (dict, list)):
                stack.append((item, depth + 1))
        if isinstance(node, dict) and any(_SURROGATE.search(k) for k in node):
            fixed = {_SURROGATE.sub("\ufffd", k): v for k, v in node.items()}
            node.clear()
            node.update(fixed)
    return _SURROGATE.sub("\ufffd", root) if isinstance(root, str) else root


def decode(data: bytes) -> Tuple[object, Tuple[str, ...]]:
    """The value the kubelet decodes from a manifest's bytes, and notes about what it ignores:
    JSON when the text starts with "{" (after white space), else the first YAML document.
    Raises InvalidManifest, in bounded time and memory, for anything the kubelet cannot decode."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise InvalidManifest("too large (%d bytes, at most %d)" % (len(data), MAX_MANIFEST_BYTES))
    if not data.strip():
        raise InvalidManifest("empty file")
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise InvalidManifest("UTF-16 text (byte-order mark): cpctl reads UTF-8 manifests only")
    if b"\0" in data:
        raise InvalidManifest("binary content (NUL bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidManifest("not UTF-8 text (byte 0x%02x at offset %d)" % (data[exc.start], exc.start)) from None
    if _JSON_START.match(text):
        return _decode_json(text), ()
    return _YamlDocument(text).decode()


def _text(value: object) -> str:
    """A decoded value for a message: plain text as it is, anything else quoted on one line."""
    return value if isinstance(value, str) and len(value) <= 60 and value.isprintable() else podspec.shown(value)


def _pod_of(value: object) -> Dict[str, object]:
    """The decoded value as a v1 Pod mapping (the kubelet's file source decodes only Pods)."""
    if value is None:
        raise InvalidManifest("no Pod in it: the (first) YAML document is empty")
    if not isinstance(value, dict):
        raise InvalidManifest("not a mapping (the document is %s)" % podspec.type_name(value))
    kind, api_version = value.get("kind"), value.get("apiVersion")
    if kind != "Pod" or api_version != "v1":
        raise InvalidManifest("not a v1 Pod (kind=%s, apiVersion=%s)" % (_text(kind), _text(api_version)))
    return value


class ParsedPod:
    """A manifest the kubelet would run: the decoded, checked pod, notes on what the kubelet
    ignores in the file, and the decoded digest. Shared through the parse cache: never change
    ``pod`` (``parse_pod`` hands out copies)."""

    __slots__ = ("pod", "notes", "_digest")

    def __init__(self, pod: Dict[str, object], notes: Tuple[str, ...] = ()) -> None:
        self.pod = pod
        self.notes = notes
        self._digest: Optional[str] = None

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = decoded_digest(self.pod)
        return self._digest


def _parse_pod(data: bytes) -> ParsedPod:
    value, notes = decode(data)
    pod = _pod_of(value)
    try:
        podspec.validate(pod)
    except podspec.InvalidPod as exc:
        raise InvalidManifest(str(exc)) from None
    return ParsedPod(pod, notes)


_PARSED: Dict[Union[bytes, Tuple[str, bytes]], Union[ParsedPod, InvalidManifest]] = {}
_PARSED_MAX = 128               # entries; real manifests are a few KB, so at most ~8 MB
_PARSED_MAX_BYTES = 64 * 1024


def parsed(data: bytes) -> ParsedPod:
    """The kubelet's view of a manifest's bytes, parsed once per process (see ``parse_pod``);
    raises InvalidManifest. The result is shared: read it, never change it.

    Small inputs are remembered by their bytes. A large one only when it is invalid, by its
    sha256: one command scans the dir several times, and a hostile multi-MiB file would
    otherwise be decoded up to its bounds on every scan (its verdict is a line of text)."""
    key: Union[bytes, Tuple[str, bytes]] = data
    if len(data) > _PARSED_MAX_BYTES:
        key = ("sha256", sha256(data).digest())
    known = _PARSED.get(key)
    if known is None:
        try:
            known = _parse_pod(data)
        except InvalidManifest as exc:
            known = exc
        except RecursionError:          # a bound missed somewhere: still one invalid file, not a dead tool
            known = InvalidManifest("too deeply nested to decode")
        if isinstance(key, bytes) or isinstance(known, InvalidManifest):
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[key] = known
    if isinstance(known, InvalidManifest):
        raise InvalidManifest(str(known))
    return known


def parse_pod(data: bytes) -> dict:
    """Parse and check a manifest the way the kubelet's file source would accept it; the decoded
    Pod (plain dicts, lists, str, int, float, bool, None; every field cpctl reads type-checked).

    Byte-identical manifests are parsed once per process: kubeadm writes the same scheduler and
    controller-manager files on every master, and a fan-out over 20 masters would otherwise
    parse each 20 times. Every caller gets its own copy, so none can change what another one sees.
    """
    return _copy_pod(parsed(data).pod)


def _copy_pod(pod: Mapping[str, object]) -> Dict[str, object]:
    """A deep copy of a decoded pod (``_copy_tree``)."""
    return {key: _copy_tree(item) for key, item in pod.items()}


def _copy_tree(value: object) -> object:
    """A deep copy of a decoded tree (dicts, lists, immutable scalars), 2x faster than
    copy.deepcopy; an alias's shared value becomes a copy of its own."""
    if isinstance(value, dict):
        return {key: _copy_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_tree(item) for item in value]
    return value


def decoded_digest(pod: Mapping[str, object]) -> str:
    """sha256 of the pod the kubelet sees (``podview.kubelet_view``): the same digest means the
    same static pod UID and config hash at the same path, so the kubelet keeps the pod running.

    The kubelet names a static pod by a hash of the DECODED, DEFAULTED object (with the node name
    and file path), so comments, blank lines, key order, quoting, flow or block style, anchors and
    aliases, YAML or JSON, number spelling (0x10 or 16), a field set to null, an unknown field, a
    zero value, ``status: {}`` and an API default written out never change it. A rename does.
    """
    text = json.dumps(podview.kubelet_view(pod), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def same_pod(a: bytes, b: bytes) -> bool:
    """True when both manifests are valid and the kubelet sees the same pod in them
    (``decoded_digest``): it keeps the pod running untouched when one replaces the other at the
    same path. The one rule behind apply/edit/flags/rollback, watch and check."""
    try:
        return parsed(a).digest == parsed(b).digest
    except InvalidManifest:
        return False


# What the kubelet does when a manifest replaces another at the same path (``pod_effect``).
KEEPS, IN_PLACE, NEW_POD = "keeps", "in-place", "new-pod"


def pod_effect(a: bytes, b: bytes, release: Optional[podfields.Release] = None) -> str:
    """KEEPS (same pod: nothing restarts), IN_PLACE (both pin the same ``metadata.uid``: the pod
    keeps its UID and mirror pod, the changed containers restart) or NEW_POD (a new UID: the old
    pod stops and a new one starts).

    ``release``: the node's (``podfields.node_release``). Its kubelet's decoder drops every field
    that release does not know (a typo, a field of a newer release) before it hashes the pod, so
    manifests that differ only in such fields are the same pod there (KEEPS). Without it, or when
    its table is not the node's own release's (``release.note``: a node newer than cpctl's tables
    may know a field they lack), nothing more is taken as dropped: cpctl then waits for a new pod
    rather than skip a wait the kubelet needs."""
    if same_pod(a, b):
        return KEEPS
    try:
        old_pod, new_pod = parsed(a).pod, parsed(b).pod
    except InvalidManifest:
        return NEW_POD
    if release is not None and not release.note:
        from cpctl.core import podfields as fields  # the generated tables, imported when asked

        if decoded_digest(fields.known_only(old_pod, release)) == decoded_digest(fields.known_only(new_pod, release)):
            return KEEPS
    old, new = podview.pinned_uid(old_pod), podview.pinned_uid(new_pod)
    return IN_PLACE if old is not None and old == new else NEW_POD


def _link_problem(target_kind: Optional[str], error: Optional[str]) -> str:
    """Why the kubelet does not load what a symlink points to."""
    if target_kind is None:
        return "symlink to nothing (%s): the kubelet cannot read it" % (error or "dangling")
    if target_kind == "dir":
        return "symlink to a directory: the kubelet does not descend into it"
    return "symlink to a special file (%s): the kubelet skips it" % target_kind


class Manifest:
    """One directory entry the kubelet would consider, with its parse result.

    A symlink is read through, as the kubelet does (``pod``, ``valid`` and the duplicate checks
    see its target's pod), but keeps ``kind == "symlink"``: cpctl never moves or writes through a
    link, so callers that would move it must refuse on ``kind``.
    """

    def __init__(self, name: str, path: str, entry: DirEntry) -> None:
        self.file = name
        self.path = path
        self.kind: str = entry["kind"]
        self.target: Optional[str] = entry.get("target") if self.kind == "symlink" else None
        self.target_kind: Optional[str] = entry.get("target_kind") if self.kind == "symlink" else None
        self.mode: int = entry["mode"]
        self.uid: int = entry["uid"]
        self.gid: int = entry["gid"]
        self.size: int = entry["size"]
        self.mtime: float = entry["mtime"]
        self.data: Optional[bytes] = entry.get("data")
        self.pod: Optional[dict] = None
        self.notes: List[str] = []
        self._parsed: Optional[ParsedPod] = None
        self.error: Optional[str] = self._load(entry)

    def _load(self, entry: DirEntry) -> Optional[str]:
        """Parse what the kubelet would read; the reason it would not run it, or None."""
        if self.kind == "symlink" and self.target_kind != "file":
            return _link_problem(self.target_kind, entry.get("error"))
        if self.kind not in ("file", "symlink"):
            return "not a regular file"
        if self.data is None:
            size = entry.get("target_size", self.size)
            return entry.get("error") or "too large (%d bytes, at most %d)" % (size, MAX_MANIFEST_BYTES)
        try:
            self._parsed = parsed(self.data)
        except InvalidManifest as exc:
            return str(exc)
        self.pod = _copy_pod(self._parsed.pod)
        self.notes = list(self._parsed.notes)
        return None

    @property
    def valid(self) -> bool:
        return self.pod is not None

    @property
    def pod_name(self) -> Optional[str]:
        return self.pod["metadata"]["name"] if self.pod else None

    @property
    def namespace(self) -> str:
        if not self.pod:
            return ""
        return self.pod["metadata"].get("namespace") or "default"

    @property
    def checksum(self) -> Optional[str]:
        return checksum(self.data) if self.data is not None else None

    @property
    def digest(self) -> Optional[str]:
        """``decoded_digest`` of the pod (None when invalid): equal digests, same pod for the kubelet."""
        return self._parsed.digest if self._parsed is not None else None

    def matches(self, wanted: str) -> bool:
        """True when ``wanted`` names this manifest by pod name, alias, file stem or file name
        (``kube-scheduler.yaml``: what an operator sees in ``ls``)."""
        target = ALIASES.get(wanted, wanted)
        names = (self.pod_name, file_stem(self.file), self.file)
        return target in names or wanted in names


def refuse_link(manifest: Manifest, action: str) -> None:
    """Refuse (exit 4) to ``action`` (stop, remove, rewrite...) a manifest that is a symlink: the
    kubelet runs the link's target, but cpctl never moves or writes through a link. Callers that
    would move or rewrite a manifest call this before they change anything."""
    if manifest.kind == "symlink":
        raise CpctlError("cannot %s %s: it is a symlink to %s (the kubelet runs its target, but cpctl never moves "
                         "or writes through a link): replace the link by the file itself first"
                         % (action, manifest.path, podspec.shown(manifest.target or "?", 120)), ExitCode.REFUSED)


class DirScan:
    """What the kubelet would load from the manifests dir, plus what it would skip."""

    def __init__(self, path: str, manifests: List[Manifest], ignored: List[str]) -> None:
        self.path = path
        self.manifests = manifests   # non-dot entries (valid or not)
        self.ignored = ignored       # dot files and directories: the kubelet skips them

    @property
    def valid(self) -> list:
        return [m for m in self.manifests if m.valid]

    def duplicates(self) -> Dict[Tuple[str, Optional[str]], List[str]]:
        """(namespace, pod name) -> files, for pods defined by more than one file."""
        seen: Dict[Tuple[str, Optional[str]], List[str]] = {}
        for m in self.valid:
            seen.setdefault((m.namespace, m.pod_name), []).append(m.file)
        return {key: files for key, files in seen.items() if len(files) > 1}

    def find(self, wanted: str) -> List[Manifest]:
        return [m for m in self.manifests if m.matches(wanted)]


def require_directory(info: Optional[Stat], what: str, path: str, missing: str = "does not exist") -> None:
    """Fail with one clear line unless ``info`` (an lstat) is a real directory: absent (exit 7), a
    symlink (refused: cpctl uses real paths only, exit 4) or another kind of file (exit 7)."""
    if info is None:
        raise CpctlError("%s %s %s" % (what, path, missing), ExitCode.ENVIRONMENT)
    if info["kind"] == "symlink":
        raise CpctlError("%s %s is a symlink: pass the real directory" % (what, path), ExitCode.REFUSED)
    if info["kind"] != "dir":
        raise CpctlError("%s %s is not a directory" % (what, path), ExitCode.ENVIRONMENT)


def kubeadm_tmp_dir(manifests_dir: str) -> str:
    """kubeadm's ``/etc/kubernetes/tmp`` (its upgrade backups): ``tmp`` next to the manifests dir."""
    return os.path.join(os.path.dirname(manifests_dir.rstrip("/")), "tmp")


def check_manifests_dir(host: Host, path: str) -> None:
    """Fail with one clear line when the manifests dir cannot be used."""
    require_directory(host.lstat(path), "manifests dir", path)


def scan(host: Host, path: str) -> DirScan:
    """Read the whole manifests dir in one round trip and classify each entry."""
    check_manifests_dir(host, path)
    try:
        entries = host.scan_dir(path, MAX_MANIFEST_BYTES)
    except OSError as exc:
        raise CpctlError("cannot read manifests dir %s: %s" % (path, exc.strerror or exc),
                         ExitCode.ENVIRONMENT) from None
    manifests: List[Manifest] = []
    ignored: List[str] = []
    for entry in entries:
        name = entry["name"]
        if name.startswith(".") or entry["kind"] == "dir":
            ignored.append(name)
            continue
        manifests.append(Manifest(name, path.rstrip("/") + "/" + name, entry))
    return DirScan(path, manifests, ignored)
