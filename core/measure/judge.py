"""Judging one structured answer against its schema, within bounds, so that no answer can crash or hang a run.

An answer is read as RFC 8259 JSON (no NaN or Infinity, integers of any length up to a bound) and judged by
``jsonschema`` on a registry that fetches nothing (core/config/answer_schema.py). Every bound passed is the
answer's invalid reason, never an exception: nesting, size and digits are counted before Python's reader (which
recurses per level and refuses integers past 4,300 digits) sees the text; a schema applying a ``pattern`` is
judged in a child process killed past ``VALIDATION_S``, since Python's ``re`` backtracks without limit on
patterns such as ``^(a+)+$`` and cannot be stopped in a thread. This module imports little: the child loads it.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import threading
from decimal import Decimal
from typing import Any

from ..config.answer_schema import validator_for

__all__ = ["MAX_CHARS", "MAX_DEPTH", "MAX_DIGITS", "VALIDATION_S", "judged", "stop_judging"]

MAX_DEPTH = 64  # deeper than any answer a schema asks of an engine; jsonschema recurses a few frames a level
MAX_CHARS = 1_000_000  # about 250k tokens: past any structured answer, and judged in about a second
MAX_DIGITS = 10_000  # an integer's digits: int() of a long literal costs their square (10k: milliseconds)
VALIDATION_S = 5.0  # a schema with a pattern: its child is killed past this (an honest answer takes milliseconds)

_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)  # possessive: linear even on an unterminated string
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")


def _constant(name: str) -> Any:
    """What RFC 8259 does not allow and Python's reader would accept: NaN, Infinity."""
    raise ValueError(f"{name} is not a JSON number")


class _LongInt(int):
    """An integer past Python's 4,300-digit limit on ``str(int)``: jsonschema's messages repr their values."""

    digits: int

    def __repr__(self) -> str:
        return f"<an integer of {self.digits:,} digits>"

    __str__ = __repr__


def _integer(literal: str, over: list[str]) -> int:
    """The integer, or 0 with why it was not read in ``over`` (a bound passed by a value that may well be JSON)."""
    digits = len(literal.lstrip("-"))
    if digits > MAX_DIGITS:
        over.append(f"an integer of {digits:,} digits, over the {MAX_DIGITS:,} bakeoff reads")
        return 0
    if digits <= 4_000:
        return int(literal)
    value = _LongInt(Decimal(literal))  # Decimal: not held to Python's limit on int(str)
    value.digits = digits
    return value


def _too_deep(text: str) -> bool:
    """Whether brackets outside strings nest past MAX_DEPTH (counted before parsing: json recurses per level)."""
    depth = 0
    for bracket in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > MAX_DEPTH:
            return True
    return False


def _parsed(text: str) -> tuple[Any, str | None]:
    """The JSON value of an answer, or why it has none: not JSON, or past a bound (said with the bound)."""
    if len(text) > MAX_CHARS:
        return None, f"answer of {len(text):,} characters, over the {MAX_CHARS:,} bakeoff judges"
    if _too_deep(text):
        return None, f"nested deeper than {MAX_DEPTH} levels, the bound bakeoff judges: {text[:80]!r}"
    over: list[str] = []
    try:
        value = json.loads(text, parse_constant=_constant, parse_int=lambda literal: _integer(literal, over))
    except ValueError as exc:
        return None, f"not JSON ({exc}): {text[:80]!r}"
    return (None, f"{over[0]}: {text[:80]!r}") if over else (value, None)


def _has_pattern(schema: Any) -> bool:
    """Whether ``schema`` applies a regular expression anywhere (patterns in data keywords included: cheaper to
    judge those in the child too than to tell them apart)."""
    if isinstance(schema, list):
        return any(_has_pattern(s) for s in schema)
    return isinstance(schema, dict) and ("pattern" in schema or "patternProperties" in schema
                                         or any(_has_pattern(v) for v in schema.values()))


def _schema_problem_here(instance: Any, schema: Any) -> str | None:
    from jsonschema.exceptions import best_match
    from referencing.exceptions import Unresolvable

    try:
        error = best_match(validator_for(schema).iter_errors(instance))
    except RecursionError:  # refused at load (a $ref loop); kept as a reason should one slip through
        return "validation recursed past Python's limit (a $ref that loops?)"
    except Unresolvable as exc:
        return f"a $ref resolves to nothing ({exc})"[:300]
    if error is None:
        return None
    return f"at {error.json_path}: {error.message}"[:300]


def _judgement(text: str, schema: Any) -> str | None:
    """Why ``text`` is not a JSON value valid against ``schema``, or None (reasons without their context)."""
    value, why = _parsed(text)
    if why:
        return why
    problem = _schema_problem_here(value, schema)
    return f"schema {problem}" if problem else None


class _Child:
    """A child process judging answers against schemas with a ``pattern``: Python's ``re`` can backtrack for
    hours on ``^(a+)+$`` and cannot be stopped in a thread (it holds the GIL); a child past its bound is killed
    and the answer judged invalid, the reason saying so. Started on first use, replaced after a kill."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None

    def _started(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True, env=_child_env())
            assert self._proc.stdout is not None
            self._proc.stdout.readline()  # "ready": imports done, before any bound runs
        return self._proc

    def judge(self, text: str, schema: Any, bound_s: float) -> str | None:
        with self._lock:
            proc = self._started()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps({"text": text, "schema": schema}, default=str) + "\n")
                proc.stdin.flush()
                reply = proc.stdout.readline() if select.select([proc.stdout], [], [], bound_s)[0] else ""
            except OSError:  # the child died (it is replaced below)
                reply = ""
            if reply:
                judged: str | None = json.loads(reply)["problem"]
                return judged
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                pipe.close()
            self._proc = None
        return (f"schema not judged within {bound_s:g} s (bakeoff's bound on a pattern's backtracking): "
                f"{text[:80]!r}")

    def stop(self) -> None:
        """End the child, if one runs (its end of input is its signal to exit); the next judgement starts one."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is None:
                return
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def _child_env() -> dict[str, str]:
    """The child imports the bakeoff this process runs: the same import path, whatever set it."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


_CHILD = """
import json, sys
from bakeoff.core.measure.judge import _judgement
_judgement("null", {"pattern": "x"})  # jsonschema imported and its registry built before any bound runs
print("ready", flush=True)
for line in sys.stdin:
    ask = json.loads(line)
    print(json.dumps({"problem": _judgement(ask["text"], ask["schema"])}), flush=True)
"""
_CHILD_JUDGE = _Child()


def stop_judging() -> None:
    """End the judging child (an arm session's close calls it: nothing it started outlives it)."""
    _CHILD_JUDGE.stop()


def judged(text: str, schema: Any, bound_s: float) -> str | None:
    """``_judgement`` here, or under a time bound in the child where the schema applies a pattern."""
    return _CHILD_JUDGE.judge(text, schema, bound_s) if _has_pattern(schema) else _judgement(text, schema)
