"""How an agent module is shipped without its typing (``untyped``), for ``host.agent.assemble``.

The agent's modules (``cpctl.agent``) are annotated for ``mypy --strict``; a master runs them without
the annotations, the ``typing`` imports, TypedDicts and type aliases: importing ``typing`` there would
import ``re``, ``collections`` and more at every agent start (``rpc._json_codec`` says what that costs),
and the annotations would be bytes on every new connection. The cut works on the parser's byte offsets,
so all else, comments included, is shipped as written, and the same source gives the same bytes on
every Python (the armed revert's sha256, ``host.agent.load_digest``)."""

from __future__ import annotations

import ast
import functools
import os
from typing import Callable, FrozenSet, List, Optional, Set, Tuple

import cpctl.agent as agent_package


def untyped(name: str, source: bytes, siblings: Set[str]) -> str:
    """The agent module ``name`` as it runs on a master: without its imports of ``siblings`` (the program
    defines their names before it) and without what only mypy reads - its ``typing`` imports, its
    TypedDicts and type aliases (``_type_only``), every annotation of a parameter, a return or an
    assignment. Cut by the parser's byte offsets, so everything else (comments too) is shipped as
    written. Whatever of the typing would be left for the master (a ``cast``, an annotation this cut
    cannot take out) is a bug of the agent's source: ValueError."""
    tree = ast.parse(source)
    lines = source.split(b"\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def at(line: int, column: int) -> int:
        return starts[line - 1] + column

    def whole_lines(node: ast.stmt) -> Tuple[int, int]:
        """The lines of ``node`` with the comment lines right above it (they say what it is) and the blank
        lines after it (they stood between it and the next statement)."""
        first, last = node.lineno - 1, node.end_lineno or node.lineno
        while first > 0 and lines[first - 1].lstrip().startswith(b"#"):
            first -= 1
        while last < len(lines) - 1 and not lines[last].strip():
            last += 1
        return starts[first], starts[last]

    cuts: List[Cut] = []
    kept: List[ast.stmt] = []
    type_names = _type_only(name, tree)
    for statement in tree.body:
        if _is_type_only(statement, type_names) or _is_sibling_import(name, statement, siblings):
            cuts.append(whole_lines(statement) + (b"",))
        else:
            kept.append(statement)
    for statement in kept:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                _is_sibling_import(name, node, set())      # cpctl imported below the top: ValueError
            cuts.extend(_annotation_cuts(node, source, at))
    out, end = [], 0
    for start, stop, instead in sorted(cuts):
        if start < end:
            raise ValueError("cpctl.agent.%s: overlapping annotation cuts at byte %d" % (name, start))
        out.append(source[end:start] + instead)
        end = stop
    text = (b"".join(out) + source[end:]).decode("utf-8")
    _check_untyped(name, text, type_names - _checking_imports(tree, type_names))
    return text


#: Where the agent's annotations come from: imported from here, they are type-only (``_type_only``).
_TYPING_MODULE = "typing"


def _is_sibling_import(name: str, node: ast.stmt, siblings: Set[str]) -> bool:
    """Is ``node`` a top-level ``from cpctl.agent.X import ...`` of a sibling the program defines before
    (dropped: one namespace)? An import of cpctl any other way is a bug: ValueError."""
    if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "cpctl" for a in node.names):
        raise ValueError("cpctl.agent.%s imports cpctl as a module" % name)
    if not isinstance(node, ast.ImportFrom) or (not node.level and (node.module or "").split(".")[0] != "cpctl"):
        return False
    package, _, sibling = (node.module or "").rpartition(".")
    if package != "cpctl.agent" or sibling not in siblings or node.col_offset or node.level:
        raise ValueError("cpctl.agent.%s imports %s: not an earlier sibling at the top" % (name, node.module))
    return True


@functools.cache
def _module_types(name: str) -> FrozenSet[str]:
    """The names the agent module ``name`` defines or imports for mypy alone (``_type_only``)."""
    directory = os.path.dirname(os.path.abspath(agent_package.__file__))
    with open(os.path.join(directory, name + ".py"), "rb") as handle:
        return frozenset(_type_only(name, ast.parse(handle.read())))


def _type_only(name: str, tree: ast.Module) -> Set[str]:
    """The names of ``tree`` (the agent module ``name``) that exist for mypy only, none on a master: what
    it imports from ``typing``, the type-only names it imports from a sibling, its TypedDict and
    Protocol classes and its type aliases (``X = Dict[str, Y]`` of type-only names), to a fixed point."""
    names: Set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == _TYPING_MODULE:
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cpctl.agent."):
            types = _module_types(node.module.rpartition(".")[2])    # type: ignore[union-attr]  # checked
            names.update(a.asname or a.name for a in node.names if a.name in types)
    names |= _checking_imports(tree, names)
    grew = True
    while grew:
        grew = False
        for node in tree.body:
            defined = _defines_type(node, names)
            if defined and defined not in names:
                names.add(defined)
                grew = True
    return names


def _checking_imports(tree: ast.Module, types: Set[str]) -> Set[str]:
    """The names ``tree`` imports under ``if TYPE_CHECKING:`` (modules such as ``ssl`` for an annotation
    ``"ssl.SSLContext"``; a function may import the same module for its own use)."""
    return {(alias.asname or alias.name).split(".")[0] for node in tree.body if _is_type_checking_block(node, types)
            for inner in ast.walk(node) if isinstance(inner, (ast.Import, ast.ImportFrom)) for alias in inner.names}


def _defines_type(node: ast.stmt, types: Set[str]) -> str:
    """The type-only name ``node`` defines ("" when none): a class whose bases are all type-only names
    (``class Plan(TypedDict)``), an alias whose value spells type-only names and literals alone."""
    if isinstance(node, ast.ClassDef) and node.bases and all(
            isinstance(base, ast.Name) and base.id in types for base in node.bases):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
            and isinstance(node.value, (ast.Subscript, ast.Name)) and _spells_types(node.value, types):
        return node.targets[0].id
    return ""


#: Builtin types an alias may hold in its brackets (``Names = List[str]``) and still be for mypy alone.
_BUILTIN_TYPES = frozenset(("str", "int", "float", "bool", "bytes", "bytearray", "object", "BaseException", "Exception",
                            "OSError"))


def _spells_types(value: ast.expr, types: Set[str]) -> bool:
    """Does ``value`` name type-only names only (builtin types, literals and the tuples of a subscript
    besides, within its brackets)?"""
    if isinstance(value, ast.Name):
        return value.id in types
    for node in ast.walk(value):
        if isinstance(node, ast.Name) and node.id not in types and node.id not in _BUILTIN_TYPES:
            return False
        if not isinstance(node, (ast.Name, ast.Subscript, ast.Tuple, ast.Constant, ast.Load, ast.List)):
            return False
    return True


def _is_type_checking_block(node: ast.stmt, types: Set[str]) -> bool:
    """Is ``node`` an ``if TYPE_CHECKING:`` (typing's) without an ``else``: imports for annotations?"""
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" \
        and node.test.id in types and not node.orelse


def _is_type_only(node: ast.stmt, types: Set[str]) -> bool:
    """Is the top-level ``node`` for mypy alone: a ``typing`` import, an ``if TYPE_CHECKING:`` block,
    a TypedDict or Protocol, an alias?"""
    if isinstance(node, ast.ImportFrom) and node.module == _TYPING_MODULE:
        return True
    if _is_type_checking_block(node, types):
        return True
    return bool(_defines_type(node, types))


#: (start, end, what stands there instead): a range of a module's bytes replaced as it is shipped
Cut = Tuple[int, int, bytes]


def _annotation_cuts(node: ast.AST, source: bytes, at: Callable[[int, int], int]) -> List[Cut]:
    """The byte ranges of ``source`` that annotate ``node``: ``: T`` after a parameter (`` = `` before its
    default becomes ``=``, as PEP 8 writes an unannotated one) or an assigned target, `` -> T`` after a
    signature. A bare ``x: T`` (no value) is not cut out: ValueError."""
    cuts: List[Cut] = []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        positional = args.posonlyargs + args.args
        defaults: List[Optional[ast.expr]] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults)) + \
            [(args.vararg, None), (args.kwarg, None)]
        for arg, default in pairs:
            if arg is not None and arg.annotation is not None:
                after_name = at(arg.lineno, arg.col_offset) + len(arg.arg.encode("utf-8"))
                if default is None:
                    cuts.append((after_name, _end(arg.annotation, at), b""))
                else:
                    cuts.append((after_name, at(default.lineno, default.col_offset), b"="))
        if node.returns is not None:
            arrow = source.rindex(b"->", at(node.lineno, node.col_offset), at(node.returns.lineno,
                                                                               node.returns.col_offset))
            while source[arrow - 1:arrow] in (b" ", b"\t"):
                arrow -= 1
            cuts.append((arrow, _end(node.returns, at), b""))
    elif isinstance(node, ast.AnnAssign):
        if node.value is None:
            raise ValueError("line %d: a bare annotation in the agent (give it a value)" % node.lineno)
        cuts.append((_end(node.target, at), _end(node.annotation, at), b""))
    return cuts


def _end(node: ast.AST, at: Callable[[int, int], int]) -> int:
    """The byte offset just after ``node`` in the source ``at`` maps."""
    return at(node.end_lineno or node.lineno, node.end_col_offset or 0)   # type: ignore[attr-defined]


def _check_untyped(name: str, text: str, types: Set[str]) -> None:
    """Is ``text`` (the agent module ``name`` as shipped) free of typing: no annotation left, no name
    that exists for mypy only (``cast(...)``, ``isinstance(x, SomeTypedDict)``), no typing import?"""
    for node in ast.walk(ast.parse(text)):
        left = ""
        if isinstance(node, ast.arg) and node.annotation is not None:
            left = "an annotation of %s" % node.arg
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            left = "the return annotation of %s" % node.name
        elif isinstance(node, ast.AnnAssign):
            left = "an annotated assignment"
        elif isinstance(node, ast.Name) and node.id in types:
            left = "%s, which exists for mypy only" % node.id
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == _TYPING_MODULE for a in node.names):
            left = "an import of typing"
        elif isinstance(node, ast.ImportFrom) and node.module == _TYPING_MODULE:
            left = "an import from typing"
        if left:
            raise ValueError("cpctl.agent.%s would ship %s (line %d): only mypy may read typing"
                             % (name, left, getattr(node, "lineno", 0)))
