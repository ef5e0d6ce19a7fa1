"""The llama-bench reference (engines/llamacpp/bench.py): the command matches the arm's settings, llama-bench's
JSON is read for its tg test, and the reference runs the llama-bench beside the arm's llama-server, refuses
another build's, and says the server's share. Fake programs in a temporary directory: no engine runs."""

from __future__ import annotations

import io
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
                     f".write(json.dumps(sys.argv))\nasked = lambda flag: int(sys.argv[sys.argv.index(flag) + 1])\n"
                     f"print(json.dumps([{{**{RECORD!r}, 'build_number': {bench_build}, "
                     f"'n_gen': asked('-n'), 'n_depth': asked('-d')}}]))\n")  # it reports the test it ran
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


def test_a_run_with_the_reference_shows_it_beside_each_arms_decode_rate_in_80_columns(tmp_path: Path) -> None:
    """`bakeoff run --llama-bench`'s step after the run, on a real llama.cpp run's samples: each arm's reference
    at the arm's median depth and longest answer is kept in references.json, and every report of the run shows it
    (the default verdict block in 80 columns, markdown, summary.json) without running anything again."""
    from bakeoff.core.analysis.reference import REFERENCES_FILE, bench_inputs
    from bakeoff.core.cli.console import make_console
    from bakeoff.core.reports import print_run, render_markdown, summarize_run
    from bakeoff.core.results.store import RunDir
    from bakeoff.core.run.reference import write_run_references

    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "reports" / "llamacpp-run"
    run_path = tmp_path / "run"
    run_path.mkdir()
    for f in ("run.json", "samples.jsonl"):
        (run_path / f).write_text((fixture / f).read_text())
    server = _fakes(tmp_path, 11434)
    run = RunDir(run_path, create=False)
    config = run.read_record().config
    assert config is not None
    config = config.model_copy(update={"arms": [a.model_copy(update={
        "model": str(tmp_path / "m.gguf"), "options": {"binary": str(server)}}) for a in config.arms[:2]]})
    refs = write_run_references(config, run)
    depth, n_gen, rates = bench_inputs(run.samples(), "spec-off")
    assert depth > 0 and n_gen > 0 and rates
    assert list(refs) == ["spec-off", "spec-off-twin"] and (run_path / REFERENCES_FILE).is_file()
    assert refs["spec-off"].depth == depth and refs["spec-off"].n_gen == n_gen and refs["spec-off"].tg_tps == 120.0

    summary = summarize_run(run_path, n_boot=200, seed=0)
    assert refs["spec-off"].server_tps is not None
    assert summary.references["spec-off"].share == pytest.approx(refs["spec-off"].server_tps / 120.0)
    assert "llama-bench tg" in render_markdown(summary)
    sink = io.StringIO()  # as piped, through the command line's console
    print_run(run_path, make_console(file=sink, width=80, force_terminal=False), write=False, n_boot=200, seed=0)
    text = sink.getvalue()
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Engine's own benchmark"))
    table = lines[at + 1: at + 4]
    assert table[0].split() == ["arm", "bakeoff", "decode", "llama-bench", "tg", "server", "share", "at"]
    assert table[1].startswith("spec-off ") and "120.0 ± 3.5" in table[1] and f"tg{n_gen} @ d{depth}" in table[1]
    command = lines.index(f"bakeoff report {run_path} --tables")  # on a line of its own, never wrapped
    assert all(len(line) <= 80 and line == line.rstrip() for line in lines[:command]), text


def test_a_reference_taken_on_a_busy_machine_says_so_and_a_failed_one_says_why() -> None:
    from bakeoff.core.analysis.reference import BenchReference
    from bakeoff.core.reports.reference import reference_lines, reference_markdown

    busy = BenchReference(arm="spec-off", depth=59, n_gen=128, tg_tps=48.2, stddev_tps=0.8, build_number=11434,
                          server_tps=58.7, share=58.7 / 48.2, foreign_cores=0.9, foreign_limit=0.25)
    quiet = busy.model_copy(update={"arm": "twin", "foreign_cores": 0.1})
    failed = BenchReference(arm="attached", error="only a launched (native) llama.cpp arm has a build")
    lines = reference_lines({r.arm: r for r in (busy, quiet, failed)})
    rows = {line.split()[0]: line for line in lines[2:5]}
    assert "122% busy" in rows["spec-off"] and "busy" not in rows["twin"] and " n/a " in rows["attached"]
    notes = " ".join(lines[5:])
    assert "spec-off: the machine was busy while llama-bench ran (0.90 cores" in notes
    assert "attached: only a launched (native) llama.cpp arm" in notes and "twin:" not in notes
    assert all(len(line) <= 80 for line in lines)
    assert "| spec-off | 58.7 | 48.2 ± 0.8 | 122% busy | tg128 @ d59 |" in reference_markdown({"spec-off": busy})
