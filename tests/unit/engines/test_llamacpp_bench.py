"""The llama-bench reference (engines/llamacpp/bench.py): the command matches the arm's settings, llama-bench's
JSON is read for its tg test, and the reference runs the llama-bench beside the arm's llama-server, refuses
another build's, and says the server's share. Fake programs in a temporary directory: no engine runs."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from bakeoff.core import Arm
from bakeoff.engines.llamacpp.adapter import LlamaCppAdapter
from bakeoff.engines.llamacpp.bench import bench_argv, parse_bench_json, reference

RECORD = {"build_commit": "abc1234", "build_number": 11434, "n_threads": 2, "n_gpu_layers": 99,
          "flash_attn": "off", "n_prompt": 0, "n_gen": 32, "n_depth": 40, "avg_ts": 120.0, "stddev_ts": 3.5}


def _option(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_argv_carries_the_arms_settings_and_only_those() -> None:
    arm = Arm.model_validate({"name": "a", "engine": "llamacpp", "model": "m.gguf", "settings": {
        "threads": 2, "gpu_layers": "all", "flash_attn": "on", "ubatch": 256, "kv_type": "q8_0"}})
    argv = bench_argv(Path("/x/llama-bench"), "m.gguf", arm, depth=40, n_gen=32)
    assert (_option(argv, "-t"), _option(argv, "-ngl"), _option(argv, "-fa")) == ("2", "999", "on")
    assert (_option(argv, "-d"), _option(argv, "-n"), _option(argv, "-p")) == ("40", "32", "0")
    assert (_option(argv, "-ub"), _option(argv, "-ctk"), _option(argv, "-ctv")) == ("256", "q8_0", "q8_0")
    assert "-b" not in argv
    plain = bench_argv(Path("/x/llama-bench"), "m.gguf", Arm(name="b", engine="llamacpp", model="m.gguf"), 10, 8)
    assert not {"-t", "-ngl", "-fa"} & set(plain)  # unset: both tools keep their own defaults


def test_json_tg_record_is_read_and_a_missing_one_is_an_error() -> None:
    pp = {**RECORD, "n_prompt": 512, "n_gen": 0, "avg_ts": 900.0}
    result = parse_bench_json("some log line\n" + json.dumps([pp, RECORD]))
    assert (result.tg_tps, result.n_gen, result.depth, result.build_number) == (120.0, 32, 40, 11434)
    with pytest.raises(ValueError, match="no tg test"):
        parse_bench_json(json.dumps([pp]))


def _fakes(tmp_path: Path, bench_build: int) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    server = bin_dir / "llama-server"
    server.write_text("#!/bin/sh\necho 'version: 0.6.0-dev (build 11434, commit abc1234)' >&2\n")
    bench = bin_dir / "llama-bench"
    bench.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(tmp_path / 'argv.json')!r}, 'w')"
                     f".write(json.dumps(sys.argv))\nprint(json.dumps([{{**{RECORD!r}, 'build_number': "
                     f"{bench_build}}}]))\n")
    for p in (server, bench):
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    return server


def test_reference_runs_the_llama_bench_beside_the_server_and_gives_the_share(tmp_path: Path) -> None:
    server = _fakes(tmp_path, 11434)
    arm = Arm.model_validate({"name": "a", "engine": "llamacpp", "model": str(tmp_path / "m.gguf"),
                              "options": {"binary": str(server)}, "settings": {"threads": 2}})
    ref = reference(LlamaCppAdapter(), arm, depth=40, n_gen=32, server_tps=[90.0, 96.0, None])
    assert "error" not in ref, ref
    assert ref["tg_tps"] == 120.0 and ref["server_tps"] == 93.0
    assert ref["share"] == pytest.approx(93.0 / 120.0)
    assert "server share 78%" in ref["line"] and "tg32 @ d40" in ref["line"]
    ran = json.loads((tmp_path / "argv.json").read_text())
    assert ran[0] == str(server.parent / "llama-bench") and _option(ran, "-m") == str(tmp_path / "m.gguf")


def test_another_builds_llama_bench_is_refused_and_an_attached_arm_has_none(tmp_path: Path) -> None:
    server = _fakes(tmp_path, 9999)
    arm = Arm.model_validate({"name": "a", "engine": "llamacpp", "model": str(tmp_path / "m.gguf"),
                              "options": {"binary": str(server)}})
    ref = reference(LlamaCppAdapter(), arm, depth=40, n_gen=32, server_tps=[90.0])
    assert "share" not in ref and "build 9999" in ref["error"]
    attached = reference(LlamaCppAdapter(), Arm(name="u", engine="llamacpp", url="http://127.0.0.1:1"), 1, 1, [])
    assert "launched" in attached["error"]
