"""The one flag table (core/results/flags.py): every flag a writer puts on a sample is declared there, readers
parse flag text only through it, the statistics' exclusions come from it, and docs/flags.md is generated from it."""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hostile_server import CHAT_MODES, HostileServer

from bakeoff.core.analysis.stats import EXCLUDING_FLAGS, MACHINE_FLAGS, enters_statistics
from bakeoff.core.engine.client import StreamResult, stream_chat
from bakeoff.core.measure.definitions import account
from bakeoff.core.results import flags as F
from bakeoff.core.results.sample import Sample

ROOT = Path(__file__).resolve().parents[3]
# every module that can put a flag on a sample: core (measure, engine, run, analysis), built-in engines, plugins
WRITERS = sorted([*(ROOT / "core").rglob("*.py"), *(ROOT / "engines").rglob("*.py"),
                  *(ROOT / "plugins").glob("*/src/**/*.py")])
TABLE = ROOT / "core" / "results" / "flags.py"
# lists named ``flags`` that are not a sample's: a calibration point's notes (printed as they are, never read back
# as flags), and engine command lines (``--gpus``, ``-DCMAKE_...``: a literal starting with '-' is skipped anyway)
NOT_SAMPLE_FLAGS = {ROOT / "core" / "analysis" / "calibration.py"}
# the models whose ``flags`` end on a sample (the engine's read-back, the acceptance detail, the stream, the sample)
SAMPLE_MODELS = {"Sample", "ServerStats", "AcceptanceDetail", "StreamResult"}


def _is_flag_list(node: ast.expr) -> bool:
    """``x.flags``, ``flags``, ``out["flags"]``, ``stats.flags``: a list a sample's flags are gathered in."""
    if isinstance(node, ast.Attribute):
        return node.attr == "flags"
    if isinstance(node, ast.Name):
        return node.id == "flags"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "flags"
    return False


def _literals(node: ast.expr | None) -> Iterator[ast.expr]:
    """String literals (plain or f-strings) that ``node`` puts into a list as they are."""
    if (isinstance(node, ast.Constant) and isinstance(node.value, str)) or isinstance(node, ast.JoinedStr):
        yield node
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for e in node.elts:
            yield from _literals(e)
    elif isinstance(node, ast.IfExp):
        yield from _literals(node.body)
        yield from _literals(node.orelse)
    elif isinstance(node, ast.BinOp):
        yield from _literals(node.left)
        yield from _literals(node.right)


def _text(node: ast.expr) -> str:
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        return str(first.value) if isinstance(first, ast.Constant) else "{…}"
    return str(node.value) if isinstance(node, ast.Constant) else ""


def _hand_written(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of each flag written as a literal instead of through the table."""
    helpers = {n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
               and "flag" in n.name.lower()}
    for fn in ast.walk(tree):
        for node in ast.walk(fn) if fn in helpers else ():  # a flag helper's own list and return value
            if isinstance(node, ast.Return):
                yield from ((n.lineno, _text(n)) for n in _literals(node.value))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append":
                yield from ((n.lineno, _text(n)) for n in _literals(node.args[0] if node.args else None))
    said = {id(n) for kw in ast.walk(tree) if isinstance(kw, ast.keyword) and kw.arg == "description"
            for n in ast.walk(kw.value)}  # a field's description may quote a flag's name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("append", "extend", "insert") and _is_flag_list(node.func.value)):
            yield from ((n.lineno, _text(n)) for n in _literals(node.args[-1] if node.args else None))
        elif (isinstance(node, ast.AugAssign) and _is_flag_list(node.target)) or (
                isinstance(node, ast.Assign) and isinstance(node.value, ast.List | ast.BinOp)
                and any(_is_flag_list(t) for t in node.targets)):
            yield from ((n.lineno, _text(n)) for n in _literals(node.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SAMPLE_MODELS:
            for kw in node.keywords:
                if kw.arg == "flags":
                    yield from ((n.lineno, _text(n)) for n in _literals(kw.value))
        # a declared flag's text typed out anywhere ("stall: ..."), even on its way to a list through a helper
        elif isinstance(node, ast.Constant | ast.JoinedStr) and id(node) not in said \
                and F.flag_name(_text(node)) in F.FLAGS and ":" in _text(node):
            yield node.lineno, _text(node)


def _sample_flag_names(tree: ast.AST) -> Iterator[tuple[int, object]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "sample_flag":
            arg = node.args[0] if node.args else None
            yield node.lineno, arg.value if isinstance(arg, ast.Constant) else ast.dump(arg) if arg else None


def test_every_flag_a_writer_puts_on_a_sample_goes_through_the_table() -> None:
    bad = []
    for path in WRITERS:
        if path == TABLE:
            continue
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(ROOT)
        if path not in NOT_SAMPLE_FLAGS:
            bad += [f"{where}:{line}: {text[:60]!r} written by hand (declare it in core/results/flags.py and "
                    f"use its .line())" for line, text in _hand_written(tree) if not text.startswith("-")]
        bad += [f"{where}:{line}: sample_flag({name!r}) is not in the table"
                for line, name in _sample_flag_names(tree) if name not in F.FLAGS]
    assert not bad, "\n".join(bad)


def test_the_scan_catches_a_new_unlisted_flag_in_each_shape_writers_use() -> None:
    """The scan above on code a writer could add: each of these is caught, and the table's own way is not."""
    caught = ['sample.flags.append("brand-new")', 'flags.append(f"brand-new: {n} tokens")',
              'out["flags"] += ["brand-new", f"other: {x}"]', 'stats.flags.append("a" if x else f"b: {y}")',
              'def cache_flags(s):\n    return [f"brand-new: {s}"]', 'Sample(arm="a", flags=["brand-new"])',
              'def witness_flag(n):\n    return f"count-witness-mismatch: {n}"', 'why = f"stall: {s} s"']
    for src in caught:
        assert list(_hand_written(ast.parse(src))), src
    named = _sample_flag_names(ast.parse('flags.append(sample_flag("brand-new").line())'))
    assert next(iter(named))[1] == "brand-new"
    for src in ('sample.flags.append(STALL.line(f"{s} s"))', 'flags += counter_flags(a, b)',
                'flags.append(sample_flag("log-missing").line("no line"))', 'cmd_flags = ["--gpus", "all"]'):
        assert not [t for _, t in _hand_written(ast.parse(src)) if not t.startswith("-")], src


def _stream(url: str) -> StreamResult:
    out: list[StreamResult] = []
    with httpx.Client(base_url=url) as http:
        thread = threading.Thread(target=lambda: out.append(
            stream_chat(http, {"max_tokens": 16, "stream": True}, 5.0)), daemon=True)
        thread.start()
        thread.join(60)
    assert out, "the client hung"
    return out[0]


# modes that only end at a deadline (test_client_hostile.py runs them): the rest answer within a second
SLOW = {"silent", "slowloris", "slowloris_nl", "slow_complete", "header_trickle", "infinite"}


def test_every_flag_the_client_and_accounting_write_on_hostile_streams_is_declared(
        hostile_server: HostileServer) -> None:
    """Every hostile chat mode through the stream client and the accounting, as a run reads them."""
    seen: dict[str, str] = {}
    for mode in sorted(set(CHAT_MODES) - SLOW):
        result = _stream(hostile_server.url(mode))
        for counts in ("final_usage_only", "engine_per_chunk", "one_per_event"):
            for line in account(result, counts).flags:
                seen.setdefault(line, mode)
    unknown = {line: mode for line, mode in seen.items() if F.flag_name(line) not in F.FLAGS}
    assert not unknown, unknown
    assert {F.flag_name(s) for s in seen} >= {"burst-delivery", "usage-missing", "malformed-payload", "no-events"}


def test_the_glossary_in_docs_is_generated_from_the_table() -> None:
    assert (ROOT / "docs" / "flags.md").read_text() == F.glossary(), (
        "docs/flags.md is stale: python -m bakeoff.core.results.flags > docs/flags.md")


def test_the_glossary_lists_every_flag_and_says_which_keep_a_sample_out() -> None:
    text = F.glossary()
    for f in F.FLAGS.values():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{f.name}` |"))
        assert ("**out**" in row) == f.excludes, row


def test_the_statistics_leave_out_exactly_the_flags_the_table_marks() -> None:
    assert tuple(f.name for f in F.FLAGS.values() if f.excludes) == EXCLUDING_FLAGS
    assert set(MACHINE_FLAGS) == {"foreign-load", "harness-lag", "gpu-throttle"}
    for f in F.FLAGS.values():
        s = Sample(arm="a", engine="e", prompt="p", mode="m", rep=0, decode_tps=10.0, flags=[f.line("detail 1")])
        assert enters_statistics(s) is not f.excludes, f.name


def test_flag_lines_parse_back_to_name_and_detail() -> None:
    line = F.CACHE_MISS.line("3 of 10 prompt tokens cached: re-prefilled 7")
    assert line == "cache-miss: 3 of 10 prompt tokens cached: re-prefilled 7"
    assert F.flag_name(line) == "cache-miss" and F.flag_detail(line) == "3 of 10 prompt tokens cached: re-prefilled 7"
    assert F.NEEDLE_MISSED.line() == "needle-missed" and F.flag_detail("needle-missed") is None
    s = Sample(arm="a", engine="e", prompt="p", mode="m", rep=0, flags=[line, "foreign-load: 1.2 cores"])
    assert s.has_flag("cache-miss") and s.has_flag(F.FOREIGN_LOAD) and not s.has_flag(F.CACHE_IMPOSSIBLE)
    assert not s.has_flag("needle-missed")  # a prefix of no flag, a detail's words are never a name
    assert F.first_flag(s.flags, F.MACHINE) == "foreign-load"


def test_an_undeclared_name_is_refused_where_it_is_asked() -> None:
    s = Sample(arm="a", engine="e", prompt="p", mode="m", rep=0, flags=["cache-miss: 1"])
    with pytest.raises(F.UnknownFlagError, match="cache-mis"):
        s.has_flag("cache-mis")
    with pytest.raises(F.UnknownFlagError):
        F.sample_flag("brand-new")


def test_the_readme_names_exactly_the_flags_that_keep_a_sample_out() -> None:
    readme = (ROOT / "README.md").read_text()
    para = next(p for p in readme.split("\n\n") if "docs/flags.md" in p)
    named = {f.name for f in F.FLAGS.values() if f"`{f.name}`" in para}
    assert set(EXCLUDING_FLAGS) <= named, para
    assert "foreign-load" in named and "stay" in para, para  # the machine flags are said to stay in
