"""Issue 47: the transaction around a journaled change is ONE class in the agent (``agent.txn.Transaction``),
run on the node in ONE call (``Host.transaction``) - by cpctl's journal and by the node-side revert alike.

The structure is held the way ``test_one_loop_and_one_recovery_over_journal_steps`` holds the loop: one
``Transaction`` class; nothing else seals and writes a journal, appends to the history file, or names and
fills the staged files of a change. Round trips are counted where an ``AgentHost`` writes a request.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Set, Tuple

import pytest

from cpctl.agent import rpc, txn
from cpctl.core import journal
from cpctl.core.node import Node
from cpctl.host import replies
from cpctl.host.replies import BadReply
from tests.coreutil import NODE, NodeDirs, stop_killed_after_move
from tests.host.test_agent_protocol import CountingAgent

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]

#: Staging outside the Transaction, on purpose: the revert plan a remote ``--confirm-within`` writes at arm time
#: names and fills its staged files next to the plan, for the node-side Transaction to run later. May only shrink.
STAGED_ELSEWHERE: Set[str] = {"cpctl.ops.confirm._stage"}


def _modules() -> Iterator[Tuple[str, ast.Module]]:
    for path in sorted((ROOT / "cpctl").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        yield name, ast.parse(path.read_text(encoding="utf-8"))


def _owners(tree: ast.Module) -> Iterator[Tuple[str, ast.AST]]:
    """(class or function that encloses it, node) for every node of ``tree``: the innermost class, else the
    outermost function."""
    def walk(node: ast.AST, owner: str) -> Iterator[Tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            here = child.name if isinstance(child, ast.ClassDef) else \
                (owner or child.name) if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner
            yield here, child
            yield from walk(child, here)
    return walk(tree, "")


def _called(node: ast.AST) -> str:
    if not isinstance(node, ast.Call):
        return ""
    return node.func.attr if isinstance(node.func, ast.Attribute) else \
        node.func.id if isinstance(node.func, ast.Name) else ""


def _receiver(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        value = func.value
        return value.attr if isinstance(value, ast.Attribute) else value.id if isinstance(value, ast.Name) else ""
    return ""


def _staged_target(node: ast.AST) -> bool:
    """``step.staged = ...``/``step.kept = ...`` or ``x["staged"] = ...``/``x["kept"] = ...``."""
    if not isinstance(node, ast.Assign):
        return False
    for target in node.targets:
        if isinstance(target, ast.Attribute) and target.attr in ("staged", "kept") and \
                isinstance(target.value, ast.Name) and "step" in target.value.id:
            return True
        if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) and \
                target.slice.value in ("staged", "kept"):
            return True
    return False


def test_one_transaction_and_nothing_of_it_outside() -> None:
    classes: List[str] = []
    wrong: List[str] = []
    staged: Set[str] = set()
    for name, tree in _modules():
        for owner, node in _owners(tree):
            where = "%s.%s" % (name, owner or "<module>")
            if isinstance(node, ast.ClassDef) and node.name == "Transaction":
                classes.append(name)
            in_transaction = name == "cpctl.agent.txn" and owner == "Transaction"
            call = _called(node)
            if call in ("sealed", "journal_bytes") and not in_transaction:
                wrong.append("%s seals or writes a journal entry (%s)" % (where, call))
            if call == "append" and isinstance(node, ast.Call) and _receiver(node) in ("host", "fs") and \
                    not (name == "cpctl.agent.journalseal" and owner == "append_history"):
                wrong.append("%s appends to a file of the node (only journalseal.append_history does)" % where)
            if call == "append_history" and _receiver(node) in ("", "journalseal") and not (in_transaction or where in (
                    "cpctl.core.state.StateDir",           # records of changes that are not journaled (keep-in, etcd)
                    "cpctl.agent.txn._append_record")):     # the node-side revert's verdict and put-back records
                wrong.append("%s writes a history record" % where)
            if _staged_target(node) and not in_transaction:
                staged.add("%s.%s" % (name, owner))
    assert classes == ["cpctl.agent.txn"], classes
    assert not wrong, "\n".join(wrong)
    assert staged == STAGED_ELSEWHERE, "staged files named outside the Transaction: %s" % sorted(staged)
    tree = next(t for n, t in _modules() if n == "cpctl.agent.txn")
    transaction = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Transaction")
    assert {"apply", "recover"} <= {f.name for f in transaction.body if isinstance(f, ast.FunctionDef)}
    assert rpc.OPS["transaction"] is txn.transaction


@pytest.fixture
def agent() -> Iterator[CountingAgent]:
    host = CountingAgent()
    yield host
    host.close()


def _history(node: NodeDirs) -> List[Dict[str, Any]]:
    with open(node.history_file) as handle:
        return [json.loads(line) for line in handle]


def test_the_apply_of_one_change_is_one_request(agent: CountingAgent, tmp_path: Any, monkeypatch: Any) -> None:
    """Before issue 47 the apply of one ``stop`` made 16 round trips (lstat x6, write_atomic x4, read_file x2,
    unlink x2, move, append); now the transaction is one request, whatever the change."""
    node = NodeDirs(str(tmp_path))
    opened = Node(agent, node.manifests, node.state, NODE)      # no listeners: the change path alone
    spans: List[List[str]] = []
    real = opened.changes.apply

    def counted(change: journal.Change) -> journal.Applied:
        start = len(agent.requests)
        try:
            return real(change)
        finally:
            spans.append(agent.requests[start:])
    monkeypatch.setattr(opened.changes, "apply", counted)
    with opened.session("count"):
        opened.stop("scheduler", reason="count", wait=False)
    with opened.session("count"):
        opened.start("scheduler", wait=False)
    assert spans == [["transaction"], ["transaction"]]
    assert [r["action"] for r in _history(node)] == ["stop", "start"]
    assert not os.path.exists(node.journal) and not os.listdir(os.path.join(node.state, "staged"))


def test_the_recovery_of_one_change_is_one_request(agent: CountingAgent, tmp_path: Any) -> None:
    """A stop killed right after its move: the next session's recovery completes and records it in one
    transaction (after the reads that check the journal's seal and paths)."""
    node = NodeDirs(str(tmp_path))
    node.run("start", "scheduler", rc=None)                    # makes the state dir (and its journal key)
    stop_killed_after_move(node)
    opened = Node(agent, node.manifests, node.state, NODE)
    with opened.session("count", changing=False):
        pass
    assert agent.requests.count("transaction") == 1
    assert opened.recovered and "completed interrupted stop of etcd" in opened.recovered[0]
    record = _history(node)[-1]
    assert record["op"] == "feedc0de" and record["recovered"] is True and record["node"] == NODE
    assert not os.path.exists(node.journal)


@pytest.mark.parametrize("result", [{"state": "done", "kept": False}, {"state": "completed"},
                                    {"state": "aborted", "kept": False},
                                    {"state": "completed", "kept": False, "failed": "x"},
                                    {"state": "no_key", "kept": False}, {"state": "conflict", "kept": False},
                                    {"state": "completed", "kept": False, "failed": ["x"] * 65}])
def test_a_transaction_outcome_that_is_not_one_is_a_bad_reply(result: Dict[str, Any]) -> None:
    line = (json.dumps({"ok": True, "result": result}) + "\n").encode()
    with pytest.raises(BadReply) as err:
        replies.checked("m1", "transaction", {}, line)
    assert "bad reply from the agent" in err.value.message
