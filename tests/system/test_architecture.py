"""The dependency rule of cpctl's layers, checked on the source (docs/architecture.md).

    cli -> ops -> core -> probes | fleet -> host -> agent (stdlib only, shipped), errors, timeutil

A module may import modules of a lower layer, or of its own package; never upwards, never across
between probes and fleet, and no import cycle anywhere - lazy imports inside functions included.
``cpctl.agent`` is shipped to the masters as the agent: standard library only. The simulator
``cpctl_lab`` and the product never import each other.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

ROOT = Path(__file__).resolve().parents[2]
LAYERS: List[Tuple[str, int]] = [      # longest prefix wins
    ("cpctl.__main__", 70),
    ("cpctl.cli", 60),
    ("cpctl.ops", 50),
    ("cpctl.core", 40),
    ("cpctl.probes", 30),
    ("cpctl.fleet", 30),
    ("cpctl.host", 20),
    ("cpctl.agent", 5),
    ("cpctl.errors", 8),
    ("cpctl.timeutil", 10),
    ("cpctl.catalogue", 10),
    ("cpctl.inputs", 10),
    ("cpctl.redaction", 10),
    ("cpctl", 0),                      # the package itself: its version string
]


def modules(package: str) -> Dict[str, Path]:
    base = ROOT / package
    found = {}
    for path in base.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of one source file, parsed once per test run: the files do not change
    during a run, and every test here walks all of them."""
    return ast.parse(path.read_text(), str(path))


def imports_of(path: Path, name: str, known: Set[str]) -> Set[str]:
    """Every module ``name`` imports, at any depth of the file (lazy imports count)."""
    tree = parsed(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = "%s.%s" % (base, alias.name)
                out.add(full if full in known else base)
    return out


def layer(module: str) -> Tuple[str, int]:
    return max(((prefix, rank) for prefix, rank in LAYERS if module == prefix or module.startswith(prefix + ".")),
               key=lambda item: len(item[0]))


def graph() -> Dict[str, Set[str]]:
    known = modules("cpctl")
    return {name: {m for m in imports_of(path, name, set(known)) if m in known and m != name}
            for name, path in known.items()}


def test_imports_point_down() -> None:
    wrong = []
    for name, deps in sorted(graph().items()):
        here, rank = layer(name)
        for dep in sorted(deps):
            there, dep_rank = layer(dep)
            if dep_rank > rank or (dep_rank == rank and there != here):
                wrong.append("%s (%s, layer %d) imports %s (%s, layer %d)" % (name, here, rank, dep, there, dep_rank))
    assert not wrong, "imports against the layer rule:\n" + "\n".join(wrong)


def test_no_import_cycles() -> None:
    deps = graph()
    cycles = []
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for dep in sorted(deps.get(name, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[name] = 2

    for name in sorted(deps):
        if name not in state:
            visit(name)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_agent_is_standard_library_only() -> None:
    """Every module of ``cpctl.agent`` imports the standard library and its siblings only: it runs on
    masters where nothing of cpctl, nor anything else, is installed."""
    agent = {name: path for name, path in modules("cpctl").items() if layer(name)[0] == "cpctl.agent"}
    assert "cpctl.agent.txn" in agent
    for name, path in sorted(agent.items()):
        imported = imports_of(path, name, set(agent))
        foreign = sorted(m for m in imported if m.split(".")[0] not in sys.stdlib_module_names and m not in agent)
        assert not foreign, "the agent shipped to masters (%s) imports non-stdlib modules: %s" % (name, foreign)


def test_simulator_and_product_are_separate() -> None:
    product = modules("cpctl")
    lab = modules("cpctl_lab")
    for name, path in product.items():
        assert not any(m.split(".")[0] == "cpctl_lab" for m in imports_of(path, name, set(product))), name
        assert "cpctl_lab" not in path.read_text(), "%s names the simulator" % name
    for name, path in lab.items():
        assert not any(m.split(".")[0] == "cpctl" for m in imports_of(path, name, set(lab))), name


def test_every_module_has_a_layer() -> None:
    for name in modules("cpctl"):
        assert layer(name)[0] != "cpctl" or name == "cpctl", "%s has no layer in LAYERS" % name


def test_module_map_lists_every_module() -> None:
    """docs/architecture.md's module map names every product module, and only modules that exist
    (``cli/commands/*.py`` stands for the command modules)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(cpctl/[^`]+)` \|", section, re.M))
    actual = {str(path.relative_to(ROOT)) for path in (ROOT / "cpctl").rglob("*.py")
              if path.name != "__init__.py" or path.parent == ROOT / "cpctl"}
    commands = {p for p in actual if p.startswith("cpctl/cli/commands/")}
    assert commands and "cpctl/cli/commands/*.py" in listed
    assert sorted(actual - commands - listed) == [], "modules missing from the module map"
    assert sorted(listed - actual - {"cpctl/cli/commands/*.py"}) == [], "the map names modules that do not exist"


#: The most annotations of the product that may say ``Any`` (or a name standing for it) or hold a
#: bare ``dict``/``list``/``tuple``/``set``. The number may only go down: lower it when a change types
#: more precisely.
LOOSE_ANNOTATIONS_CEILING = 150

BARE_CONTAINERS = {"dict", "list", "tuple", "set", "Dict", "List", "Tuple", "Set"}


def annotations_of(tree: ast.AST) -> List[ast.expr]:
    """Every annotation in ``tree``: parameters, returns and annotated names; a string annotation
    (a forward reference) parsed as the expression it spells."""
    found: List[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]
            found += [a.annotation for a in every if a is not None and a.annotation is not None]
            found += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return [unquoted(annotation) for annotation in found]


def unquoted(annotation: ast.expr) -> ast.expr:
    """A string annotation as the expression it spells (``"Optional[Any]"`` is loose too)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            return ast.parse(annotation.value, mode="eval").body
        except (SyntaxError, ValueError):
            return annotation
    return annotation


def says_any(expr: ast.AST, aliases: Set[str], quoted: bool = True) -> bool:
    """Does ``expr`` name ``Any`` (``Any``, ``typing.Any``, with ``quoted`` a quoted ``"Any"`` inside
    an annotation) or an alias of it?"""
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and (node.id == "Any" or node.id in aliases):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "Any":
            return True
        if quoted and node is not expr and isinstance(node, ast.Constant) and isinstance(node.value, str):
            if says_any(unquoted(node), aliases):
                return True
    return False


def assignments(tree: ast.AST) -> List[Tuple[str, ast.expr]]:
    """(name, value) of every plain or annotated assignment to a name in ``tree``."""
    assigned: List[Tuple[str, ast.expr]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            assigned += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            assigned.append((node.target.id, node.value))
    return assigned


def imported_names(tree: ast.AST, package: str) -> List[Tuple[str, str, str]]:
    """(module, name, local name) of every ``from module import name [as local]`` in ``tree``."""
    found: List[Tuple[str, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found += [(base, alias.name, alias.asname or alias.name) for alias in node.names]
    return found


def any_aliases(trees: Dict[str, ast.AST]) -> Dict[str, Set[str]]:
    """Per module (dotted name -> tree): the names that stand for a type saying ``Any`` or for a bare
    container (``JSON = Any``, ``Doc = Dict[str, JSON]``, ``Raw = dict``), its own and those it
    imports from another module of ``trees``, to a fixed point: an annotation through such a name
    is as loose as the ``Any`` it hides."""
    aliases: Dict[str, Set[str]] = {name: set() for name in trees}
    while True:
        grew = False
        for name, tree in trees.items():
            package = name.rpartition(".")[0]
            seen = aliases[name]
            more = {local for module, imported, local in imported_names(tree, package)
                    if imported in aliases.get(module, set())}
            more |= {target for target, value in assignments(tree) if says_any(value, seen | more, quoted=False)
                     or (isinstance(value, ast.Name) and value.id in BARE_CONTAINERS)}
            if more - seen:
                seen |= more
                grew = True
        if not grew:
            return aliases


def is_loose(annotation: ast.expr, aliases: Set[str]) -> bool:
    """An annotation that says ``Any`` (or an alias of it) anywhere inside, or holds a bare
    container anywhere (``dict``, ``Optional[dict]``, ``Tuple[list, str]``: unparameterised, it is
    a container of ``Any``)."""
    return says_any(annotation, aliases) or has_bare_container(annotation)


def has_bare_container(annotation: ast.expr) -> bool:
    """Is one of BARE_CONTAINERS used without ``[...]`` somewhere in ``annotation``?"""
    subscripted = {id(node.value) for node in ast.walk(annotation) if isinstance(node, ast.Subscript)}
    return any(isinstance(node, ast.Name) and node.id in BARE_CONTAINERS and id(node) not in subscripted
               for node in ast.walk(annotation))


def loose_by_file() -> Dict[str, Tuple[int, int]]:
    """Per product module: (loose annotations, all annotations)."""
    paths = modules("cpctl")
    trees: Dict[str, ast.AST] = {name: ast.parse(path.read_text()) for name, path in paths.items()}
    aliases = any_aliases(trees)
    counts: Dict[str, Tuple[int, int]] = {}
    for name, tree in trees.items():
        found = annotations_of(tree)
        loose = [a for a in found if is_loose(a, aliases[name])]
        counts[str(paths[name].relative_to(ROOT))] = (len(loose), len(found))
    return counts


def loose_annotations() -> Tuple[int, int]:
    """(loose annotations, all annotations) in ``cpctl/``: parameters, returns and annotated names."""
    counts = loose_by_file().values()
    return sum(loose for loose, _ in counts), sum(total for _, total in counts)


def test_any_alias_counts_as_loose() -> None:
    """A name standing for ``Any`` does not hide it from the count, nor when imported elsewhere."""
    trees: Dict[str, ast.AST] = {
        "pkg.a": ast.parse("JSON = Any\nDoc = Dict[str, JSON]\nRaw = dict\nType = Tuple[str, int]\n"),
        "pkg.b": ast.parse("from .a import Doc as D, Type\ndef f(a: D, b: 'List[D]', c: int, d: Optional[dict],"
                           " e: Dict[str, list]) -> Type: ...\n"),
    }
    aliases = any_aliases(trees)
    assert aliases == {"pkg.a": {"JSON", "Doc", "Raw"}, "pkg.b": {"D"}}
    assert [is_loose(a, aliases["pkg.b"]) for a in annotations_of(trees["pkg.b"])] == \
        [True, True, False, True, True, False]


def test_loose_annotations_only_go_down() -> None:
    loose, total = loose_annotations()
    print("loose annotations (Any, bare containers): %d of %d (%.1f%%)" % (loose, total, 100.0 * loose / total))
    worst = sorted(loose_by_file().items(), key=lambda item: -item[1][0])[:10]
    print("most loose: " + ", ".join("%s %d" % (path[len("cpctl/"):], n) for path, (n, _) in worst))
    assert loose <= LOOSE_ANNOTATIONS_CEILING, (loose, LOOSE_ANNOTATIONS_CEILING)


#: The test folders: one per package of cpctl (``lab`` for the simulator ``cpctl_lab``) and
#: ``system`` for the whole-system tests (README, examples, install, systemd, ansible, fuzz, this file).
TEST_AREAS = {"core": "cpctl/core", "probes": "cpctl/probes", "host": "cpctl/host", "fleet": "cpctl/fleet",
              "ops": "cpctl/ops", "cli": "cpctl/cli", "lab": "cpctl_lab", "system": None}


def test_test_files_sit_in_the_folder_of_their_package() -> None:
    """Tests mirror the packages (docs/architecture.md, "Tests"): every ``test_*.py`` is in a folder
    of ``TEST_AREAS`` whose package exists, so a new flat test file (or a folder for a package that
    is gone) fails here instead of growing the pile a contributor cannot find their way in."""
    tests = ROOT / "tests"
    for area, package in TEST_AREAS.items():
        assert (tests / area / "__init__.py").is_file(), "tests/%s/ needs an __init__.py" % area
        assert package is None or (ROOT / package / "__init__.py").is_file(), "no package %s for tests/%s" % (
            package, area)
    misplaced = sorted(str(path.relative_to(tests)) for path in tests.rglob("test_*.py")
                       if path.parent.parent != tests or path.parent.name not in TEST_AREAS)
    assert not misplaced, "test files outside tests/{%s}/: %s" % (",".join(TEST_AREAS), misplaced)


_MUTATORS = {"write_atomic": 1, "unlink": 1, "chmod": 1, "move": 2, "move_across": 2}   # name -> target args


def _step_target(node: ast.AST) -> bool:
    """``step.path``/``step.src`` or ``step["path"]``/``step["src"]`` (any name with "step" in it)."""
    if isinstance(node, ast.Attribute) and node.attr in ("path", "src"):
        return isinstance(node.value, ast.Name) and "step" in node.value.id
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and "step" in node.value.id:
        key = node.slice
        return isinstance(key, ast.Constant) and key.value in ("path", "src")
    return False


def _step_writers(tree: ast.AST) -> List[Tuple[str, int]]:
    """(enclosing class, line) of every call that writes, moves, removes or chmods a step's target."""
    found: List[Tuple[str, int]] = []

    def walk(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = child.name if isinstance(child, ast.ClassDef) else owner
            if isinstance(child, ast.Call):
                name = child.func.attr if isinstance(child.func, ast.Attribute) else \
                    child.func.id if isinstance(child.func, ast.Name) else ""
                if name in _MUTATORS and any(_step_target(a) for a in child.args[:_MUTATORS[name]]):
                    found.append((owner, child.lineno))
            walk(child, here)
    walk(tree, "")
    return found


def test_one_executor_applies_journal_steps() -> None:
    """Issue 33: a journaled step's target is changed only by ``agent/txn.StepRunner`` - the executor the
    journal runs through a Host and the node-side revert runs on the node. A second loop that writes,
    moves or removes ``step.path``/``step["path"]`` anywhere else fails here."""
    wrong = []
    for name, path in sorted(modules("cpctl").items()):
        for owner, line in _step_writers(parsed(path)):
            if not (name == "cpctl.agent.txn" and owner == "StepRunner"):
                wrong.append("%s:%d (in %s)" % (path.relative_to(ROOT), line, owner or "module"))
    assert not wrong, "journal steps applied outside agent/txn.StepRunner:\n" + "\n".join(wrong)
    assert _step_writers(parsed(ROOT / "cpctl/agent/txn.py")), "the executor itself is found"


_STEP_CALLS = {"do", "undo", "is_done", "before_state"}     # one step at a time: only the runner's own loops


def _step_drivers(tree: ast.AST) -> List[Tuple[str, int, str]]:
    """(enclosing class, line, method) of every ``x.do(...)``/``.undo``/``.is_done``/``.before_state`` call."""
    found: List[Tuple[str, int, str]] = []

    def walk(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = child.name if isinstance(child, ast.ClassDef) else owner
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr in _STEP_CALLS:
                found.append((owner, child.lineno, child.func.attr))
            walk(child, here)
    walk(tree, "")
    return found


def test_one_loop_and_one_recovery_over_journal_steps() -> None:
    """Issue 33: how a change's steps are run in order (and undone when one fails before the commit),
    and how an interrupted change is finished or rolled back, is ``StepRunner.run`` / ``recover`` -
    used by the journal and by the node-side revert alike. A second loop or recovery that drives the
    steps one by one (``runner.do(step)``, ``.undo``, ``.is_done``, ``.before_state``) anywhere but in
    ``StepRunner`` itself fails here."""
    wrong = []
    for name, path in sorted(modules("cpctl").items()):
        for owner, line, call in _step_drivers(parsed(path)):
            if not (name == "cpctl.agent.txn" and owner == "StepRunner"):
                wrong.append("%s:%d .%s() (in %s)" % (path.relative_to(ROOT), line, call, owner or "module"))
    assert not wrong, "journal steps driven one by one outside agent/txn.StepRunner:\n" + "\n".join(wrong)
    runner = next(n for n in parsed(ROOT / "cpctl/agent/txn.py").body if isinstance(n, ast.ClassDef)
                  and n.name == "StepRunner")
    assert {"run", "recover"} <= {f.name for f in runner.body if isinstance(f, ast.FunctionDef)}


# --- typed results ops -> CLI (issue 33) ----------------------------------------------------------------------
#: Change functions of ``ops`` that still return a free dict: this list only shrinks (an entry that is no
#: longer one fails the test, so it is struck off when its function gets a typed result).
UNTYPED_CHANGE_RESULTS: Set[str] = set()       # may only shrink; confirm/revert-unconfirmed are typed since issue 35

_FREE = re.compile(r"^(typing\.)?(Dict|dict|Mapping|MutableMapping|Any)\b")
_CHANGING_CALLS = {"apply", "session"}        # node.apply(change): the journal; node.session(...): the node lock


def _calls(function: ast.AST) -> Set[Tuple[str, str]]:
    """(qualifier, name) of every call in ``function``: ("", f) for ``f(...)``, ("x", f) for ``x.f(...)``."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.add(("", func.id))
            elif isinstance(func, ast.Attribute):
                owner = func.value.id if isinstance(func.value, ast.Name) else ""
                names.add((owner, func.attr))
    return names


def ops_change_functions() -> Dict[str, ast.FunctionDef]:
    """``module.function`` -> definition of every top-level function of ``cpctl/ops`` that changes a node:
    it applies a journaled change or takes the node lock (``x.apply(...)``, ``x.session(...)``), or calls
    one that does - of its own module by name, of another ops module as ``module.name(...)``."""
    defined: Dict[str, Dict[str, ast.FunctionDef]] = {}
    for name, path in sorted(modules("cpctl").items()):
        if name.startswith("cpctl.ops."):
            defined[name] = {f.name: f for f in parsed(path).body if isinstance(f, ast.FunctionDef)}
    calls = {(m, f): _calls(d) for m, functions in defined.items() for f, d in functions.items()}
    changing = {key for key, called in calls.items() if any(owner and name in _CHANGING_CALLS
                                                            for owner, name in called)}
    grew = True
    while grew:                       # callers of a change function change the node too (fixed point)
        grew = False
        for (module, fname), called in calls.items():
            if (module, fname) in changing:
                continue
            short = {m.rpartition(".")[2]: m for m in defined}
            if any((owner == "" and (module, name) in changing) or
                   (owner in short and (short[owner], name) in changing) for owner, name in called):
                changing.add((module, fname))
                grew = True
    return {"%s.%s" % key: defined[key[0]][key[1]] for key in sorted(changing)}


def test_ops_change_functions_return_typed_values() -> None:
    """Issue 33: what an ``ops`` change function returns to the CLI is a typed value (a dataclass such as
    ``ops.edits.ChangeResult``, a list of ``Outcome``s, a TypedDict), never ``Dict[str, object]``."""
    found = ops_change_functions()
    assert {"cpctl.ops.edits.replace", "cpctl.ops.edits._replace_core", "cpctl.ops.keepin.run",
            "cpctl.ops.confirm.arm"} <= set(found), "the change functions are found"
    free = sorted(name for name, definition in found.items()
                  if definition.returns is not None and _FREE.match(ast.unparse(definition.returns)))
    assert [n for n in free if n not in UNTYPED_CHANGE_RESULTS] == [], "change functions returning a free dict"
    assert sorted(UNTYPED_CHANGE_RESULTS - set(free)) == [], "typed now: strike them off UNTYPED_CHANGE_RESULTS"
