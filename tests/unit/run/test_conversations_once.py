"""Issue 41 item 4: a sessions workload's conversations file is read once per run, however many arms and passes
replay it (it was read once per arm per pass, then once each by the load's check, its hash and the plan). Two sim
arms, two passes; an edited file is read again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bakeoff.core.config import sessions as sessions_module
from bakeoff.core.config.loader import load_bakeoff
from bakeoff.core.run.bakeoff import run_bakeoff


def _conversation(name: str) -> str:
    return json.dumps({"id": name, "messages": [
        {"role": "user", "content": f"{name}: list the files"}, {"role": "assistant", "content": "a.py b.py"},
        {"role": "tool", "content": "a.py: 40 lines"}, {"role": "assistant", "content": "a.py is short"}]})


def test_the_conversations_file_is_read_once_for_two_arms_and_two_passes(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "c.jsonl").write_text(_conversation("s0") + "\n" + _conversation("s1") + "\n")
    (tmp_path / "s.yaml").write_text(
        "arms:\n  - {name: base, engine: sim, model: sim, options: {itl_ms: 2}}\n"
        "  - {name: fast, engine: sim, model: sim, options: {itl_ms: 1}}\nbaseline: base\n"
        "workload: {max_tokens: 8, reps: 1, warmup: 0, passes: 2, gates: [], sessions: {file: c.jsonl}}\n")
    reads: list[Any] = []
    read = sessions_module._conversations_bytes

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(args)
        return read(*args, **kwargs)

    monkeypatch.setattr(sessions_module, "_conversations_bytes", counted)
    config = load_bakeoff(tmp_path / "s.yaml")  # the load checks the sessions and records the file's hash
    run = run_bakeoff(config, tmp_path / "runs")
    assert len(reads) == 1  # the bytes, once, for the hash, the load's check, the plan and all four replays
    turns = {(s.arm, s.pass_index, s.prompt) for s in run.samples() if s.status == "ok"}
    assert len(turns) == 2 * 2 * 4  # every turn of both conversations, by both arms, in both passes


def test_an_edited_conversations_file_is_read_again(tmp_path: Path) -> None:
    conv = tmp_path / "c.jsonl"
    conv.write_text(_conversation("s0") + "\n")
    first = sessions_module.read_conversations(conv)
    conv.write_text(_conversation("s0") + "\n" + _conversation("s1") + "\n")
    assert [s.id for s in first] == ["s0"]
    assert [s.id for s in sessions_module.read_conversations(conv)] == ["s0", "s1"]
