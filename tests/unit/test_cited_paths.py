"""Docstrings, comments and docs cite only files a reader can open.

Every path a module's docstrings or comments, README.md or a page under docs/ cites from the repository root
(``core/...``, ``engines/...``, ``tests/...``, ``docs/...``, ``evidence/...``, ``benchmarks/...``, ``examples/...``,
``plugins/...``, ``scripts/...``) must exist in this checkout; a link in a markdown page may also be relative to the
page. A citation of ``shared/...`` (notes kept beside the repository while it was built) fails too: a reader of the
repository cannot open it. Paths after another prefix (``llama.cpp/examples/server/``, a URL) belong to other
projects and are not checked.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()
TOP = ("core", "engines", "tests", "docs", "evidence", "benchmarks", "examples", "plugins", "scripts", "shared")
# A cited path starts a word: "core/x.py" counts, "llama.cpp/examples/x" and "github.com/o/r/docs/x" do not.
CITED = re.compile(r"(?<![\w./\-~$])(?:" + "|".join(TOP) + r")/[\w./*\-]*")


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    return out.split()


def _python_prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a module."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = node.body[0] if node.body else None
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str):
                yield doc.lineno, doc.value.value


def _citations(line: int, text: str) -> Iterator[tuple[int, str]]:
    """(line, path) of every path cited in a piece of prose that starts on ``line``."""
    for match in CITED.finditer(text):
        yield line + text.count("\n", 0, match.start()), match.group(0).rstrip(".-")  # a path ending a sentence


def _exists(cited: str, beside: Path) -> bool:
    if cited.startswith("shared/"):
        return False
    for base in (ROOT, beside):
        if "*" in cited:
            if any(base.glob(cited.rstrip("/"))):
                return True
        elif (base / cited).exists():
            return True
    return False


def _broken(tracked: list[str]) -> list[str]:
    out = []
    for name in tracked:
        is_doc = name == "README.md" or (name.startswith("docs/") and name.endswith(".md"))
        if not (is_doc or name.endswith(".py")) or name.startswith("tests/fixtures/") or name == SELF:
            continue  # fixtures are captured as they are; this module's prose shows made-up paths
        source = (ROOT / name).read_text(encoding="utf-8")
        prose = enumerate(source.splitlines(), 1) if is_doc else _python_prose(source)
        for start, text in prose:
            for line, cited in _citations(start, text):
                if not _exists(cited, (ROOT / name).parent):
                    out.append(f"{name}:{line}: {cited}")
    return out


def test_every_cited_path_exists() -> None:
    broken = _broken(_tracked())
    assert not broken, "cited paths that are not in the repository:\n" + "\n".join(broken)


def test_the_scan_finds_a_missing_path_and_passes_real_ones(tmp_path: Path) -> None:
    # The scan itself: a docstring citing a moved module is caught, one citing a real module is not.
    assert _exists("core/analysis/stats.py", tmp_path) and _exists("tests/fixtures/ikllama/fail-*.log", tmp_path)
    assert not _exists("engines/llamacpp.py", tmp_path) and not _exists("shared/engines/INTERFACES.md", tmp_path)
    module = '"""See core/analysis/stats.py and\nengines/llamacpp.py."""\nx = 1  # from shared/x.md\n'
    found = [cited for start, text in _python_prose(module) for cited in _citations(start, text)]
    assert found == [(3, "shared/x.md"), (1, "core/analysis/stats.py"), (2, "engines/llamacpp.py")]
    assert not CITED.findall("https://github.com/o/r/docs/x.md and llama.cpp/examples/server/")


LINK = re.compile(r"\]\(([^)\s]+)\)")  # a markdown link's target


def test_every_relative_markdown_link_opens() -> None:
    """A link in any tracked markdown page (docs, evidence captions, READMEs) that is relative to the page."""
    broken = []
    for name in _tracked():
        if not name.endswith(".md") or name.startswith("tests/fixtures/"):
            continue
        for n, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1):
            for target in LINK.findall(line):
                path = target.split("#")[0]
                if path and not re.match(r"[a-z]+:", path) and not ((ROOT / name).parent / path).exists():
                    broken.append(f"{name}:{n}: {target}")
    assert not broken, "links that open nothing:\n" + "\n".join(broken)


def test_docs_hold_hand_written_pages_and_evidence_holds_the_runs() -> None:
    """Run directories, captures and reports live under evidence/; docs/ is prose a person wrote."""
    tracked = _tracked()
    assert [n for n in tracked if n.startswith("docs/") and not n.endswith(".md")] == []
    assert any(n.startswith("evidence/") and n.endswith("/run.json") for n in tracked)
