"""`bakeoff run` outcomes: exit codes that say whether anything valid was measured (D6), an unexpected
error inside one arm fails that arm only (D1, run level), and attach mode probes the server it names
before the first request and measures the model the arm names (issue 12 item 3, AUDIT M1).

The arms attach to the hostile server (tests/fixtures/hostile_server.py): no engine process is started.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hostile_server import HostileServer
from interrupts import ctrl_c_at_rep
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.cli.exit_codes import ExitCode
from bakeoff.core.measure import definitions as measure
from bakeoff.core.results.record import ArmAttempt
from bakeoff.core.results.store import RunDir, read_samples
from bakeoff.core.run import arm as arm_module

runner = CliRunner()


def write_file(tmp_path: Path, arms: list[str], workload: str = "{prompts: [prose], max_tokens: 8, reps: 2, warmup: 0}",
               name: str = "outcome") -> Path:
    path = tmp_path / "b.yaml"
    path.write_text(f"name: {name}\narms:\n" + "".join(f"  - {a}\n" for a in arms) + f"workload: {workload}\n")
    return path


def run_cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["run", *args], env={"COLUMNS": "250"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def only_run(out: Path) -> Path:
    [run] = [p for p in out.iterdir() if p.is_dir()]
    return run


def chat_requests(srv: HostileServer, mode: str) -> list[Any]:
    return [r for r in srv.requests if r.mode == mode and r.path == "/v1/chat/completions"]


# -- exit codes (D6) ----------------------------------------------------------------------------------------
def test_every_arm_valid_exits_0(tmp_path: Path, hostile_server: HostileServer) -> None:
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url('ok')}'}}",
                                 f"{{name: b, engine: openai, url: '{hostile_server.url('crlf')}'}}"])
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.OK, out


def test_all_requests_erroring_exits_3_nothing_measured(tmp_path: Path, hostile_server: HostileServer) -> None:
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url('http500')}'}}",
                                 f"{{name: b, engine: openai, url: '{hostile_server.url('usage_missing')}'}}"])
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.NOTHING_MEASURED == 3, out
    assert "arm 'a' has no valid sample: 2 of 2 requests failed, e.g. HTTP 500" in out
    assert "arm 'b' has no valid sample" in out and "nothing valid was measured" in out


def test_one_dead_arm_of_two_exits_4_partial(tmp_path: Path, hostile_server: HostileServer) -> None:
    file = write_file(tmp_path, [f"{{name: good, engine: openai, url: '{hostile_server.url('ok')}'}}",
                                 f"{{name: bad, engine: openai, url: '{hostile_server.url('http503')}'}}"])
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.PARTIAL == 4, out
    assert "arm 'bad' has no valid sample" in out and "arm 'good'" not in out


def test_until_ci_on_an_all_error_arm_does_not_exit_0(tmp_path: Path, hostile_server: HostileServer) -> None:
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url('http429')}'}}"],
                      "{prompts: [prose], max_tokens: 8, reps: 1, warmup: 0}")
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"), "--until-ci", "5%", "--max-passes", "2")
    assert code == ExitCode.NOTHING_MEASURED, out


def test_a_config_error_exits_2(tmp_path: Path) -> None:
    file = write_file(tmp_path, ["{name: a, engine: openai, url: 'http://127.0.0.1:1', bogus: 1}"])
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.CONFIG == 2 and "bogus" in out


def test_exit_codes_are_documented_in_help_and_readme() -> None:
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "250"})
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    for code in ExitCode:
        assert f" {code.value} " in " ".join(result.output.split()), code
        assert f"| {code.value} |" in readme, code


# -- D1 at run level: an unexpected exception fails one arm, the run goes on, resume finishes it -----------
def test_an_unexpected_error_in_one_arm_fails_that_arm_with_its_cause_and_resume_finishes(
        tmp_path: Path, hostile_server: HostileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    file = write_file(tmp_path, [f"{{name: first, engine: openai, url: '{hostile_server.url('ok')}'}}",
                                 f"{{name: broken, engine: openai, url: '{hostile_server.url('ok')}'}}",
                                 f"{{name: last, engine: openai, url: '{hostile_server.url('ok')}'}}"],
                      "{prompts: [prose], max_tokens: 8, reps: 3, warmup: 0, seed: 1}")
    real = measure.make_sample  # what protocol calls

    def second_request_of_broken_raises(arm: Any, adapter: Any, result: Any, stats: Any, run_id: str, prompt: str,
                                        mode: str, rep: int, *rest: Any, **kw: Any) -> Any:
        if arm.name == "broken" and rep == 1:  # what an unforeseen engine answer does to pydantic
            from bakeoff.core.results.sample import Sample
            Sample.model_validate({"finish_reason": 7})
        return real(arm, adapter, result, stats, run_id, prompt, mode, rep, *rest, **kw)

    monkeypatch.setattr(arm_module, "make_sample", second_request_of_broken_raises)
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.PARTIAL, out
    run = only_run(tmp_path / "runs")
    meta = json.loads((run / "run.json").read_text())
    [record] = RunDir(run).arm_records()["broken"]
    assert record.status == "failed" and record.reason == "internal-error"
    assert "ValidationError" in str(record.error)
    assert "finish_reason" in (run / "arms/broken/traceback-pass0.txt").read_text()
    assert "unexpected ValidationError" in out
    stored = read_samples(run)
    assert [s.rep for s in stored if s.arm == "broken"] == [0]  # the sample before the error stays
    assert sorted(s.rep for s in stored if s.arm == "first") == [0, 1, 2]
    assert sorted(s.rep for s in stored if s.arm == "last") == [0, 1, 2]  # the run went on to the next arm
    assert meta["finished_at"] is not None

    monkeypatch.setattr(arm_module, "make_sample", real)
    code, out = run_cli("--resume", str(run))
    assert code == ExitCode.OK, out
    keys = [(s.arm, s.rep) for s in read_samples(run)]
    assert sorted(keys) == sorted({(a, r) for a in ("first", "broken", "last") for r in range(3)})


def test_a_failing_concurrency_stream_keeps_its_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    from bakeoff.core.measure import concurrency

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise OverflowError("int too large to convert")

    monkeypatch.setattr(concurrency, "stream_chat", explode)
    with httpx.Client(base_url="http://127.0.0.1:1") as http:
        batch = concurrency.run_batch(http, [{}, {}], 1.0)
    assert [r.error for r in batch.results] == ["stream failed: OverflowError: int too large to convert"] * 2


# -- attach mode: probe before the first request; the arm's model is the one measured ------------------------
def _failed_record(tmp_path: Path) -> ArmAttempt:
    return RunDir(only_run(tmp_path / "runs")).arm_records()["a"][-1]


@pytest.mark.parametrize("url, expected", [
    ("http://127.0.0.1:1", "arm 'a': cannot reach http://127.0.0.1:1: connection refused"),
    ("http://127.0.0.1:1/v1", "arm 'a': cannot reach http://127.0.0.1:1: connection refused"),
])
def test_a_dead_url_fails_the_arm_with_one_line_and_sends_nothing(tmp_path: Path, url: str, expected: str) -> None:
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{url}'}}"])
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.NOTHING_MEASURED, out
    assert str(_failed_record(tmp_path).error) == expected
    assert read_samples(only_run(tmp_path / "runs")) == []  # not 2 error samples: no request was sent
    assert out.count("connection refused") == 1  # said as it happens; a run that measured nothing has no report


@pytest.mark.parametrize("mode, words", [
    ("unauthorized", "HTTP 401 Unauthorized on /v1/models (set api_key_env"),
    ("forbidden", "HTTP 403 Forbidden on /v1/models"),
    ("notfound", "HTTP 404 on /v1/models: give the server's base URL"),
    ("models_html", "/v1/models is not an OpenAI model list (text/html"),
    ("models_slowloris", "no answer to GET /v1/models within"),
])
def test_an_attached_server_that_refuses_fails_before_any_request(
        tmp_path: Path, hostile_server: HostileServer, mode: str, words: str) -> None:
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url(mode)}'}}"])
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.NOTHING_MEASURED, out
    error = str(_failed_record(tmp_path).error)
    assert error.startswith(f"arm 'a': cannot reach http://127.0.0.1:{hostile_server.port}/m/{mode}: ")
    assert words in error
    assert chat_requests(hostile_server, mode) == []


def test_tls_to_a_plain_http_server_is_a_clear_tls_failure(tmp_path: Path, hostile_server: HostileServer) -> None:
    url = hostile_server.url("ok").replace("http://", "https://")
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{url}'}}"])
    code, _ = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.NOTHING_MEASURED
    assert "TLS handshake failed" in str(_failed_record(tmp_path).error)


def test_dns_failure_reads_as_such() -> None:
    import socket

    import httpx

    from bakeoff.core.engine.attach import _connect_cause

    exc = httpx.ConnectError("[Errno -2] Name or service not known")
    exc.__cause__ = socket.gaierror(-2, "Name or service not known")
    assert _connect_cause(exc) == "host name not resolved"


def test_the_arms_model_is_the_one_requested_from_a_multi_model_server(
        tmp_path: Path, hostile_server: HostileServer) -> None:
    file = write_file(tmp_path, [f"{{name: a, engine: openai, model: wanted-model, "
                                 f"url: '{hostile_server.url('two_models')}'}}"])
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.OK, out
    asked = {r.body["model"] for r in chat_requests(hostile_server, "two_models")}
    assert asked == {"wanted-model"}


@pytest.mark.parametrize("model, words", [
    ("model: missing-model, ", "model 'missing-model' is not served at http://127.0.0.1:{port}/m/two_models; "
                               "it serves other-model, wanted-model"),
    ("", "serves 2 models (other-model, wanted-model); name the one to measure with 'model:'"),
])
def test_a_model_the_server_does_not_serve_or_an_ambiguous_one_is_refused(
        tmp_path: Path, hostile_server: HostileServer, model: str, words: str) -> None:
    before = len(chat_requests(hostile_server, "two_models"))
    file = write_file(tmp_path, [f"{{name: a, engine: openai, {model}url: '{hostile_server.url('two_models')}'}}"])
    code, _out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.NOTHING_MEASURED
    assert words.format(port=hostile_server.port) in str(_failed_record(tmp_path).error)
    assert len(chat_requests(hostile_server, "two_models")) == before


# -- D16: names are text, and a plot that fails never loses the report --------------------------------------
def test_a_run_name_with_tex_in_it_is_reported_with_plots(tmp_path: Path, hostile_server: HostileServer) -> None:
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url('ok')}'}}"],
                      name="'run $^$ and $\\frac{'")
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.OK, out
    report = only_run(tmp_path / "runs") / "report"
    assert (report / "decode_by_prompt.svg").stat().st_size > 0 and (report / "report.html").is_file()
    assert "left out" not in out


def test_a_plot_that_fails_leaves_the_rest_of_the_report(tmp_path: Path, hostile_server: HostileServer,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.reports import plots

    def broken(*args: Any) -> Any:
        raise ValueError("ParseSyntaxException: Expected end of text")

    monkeypatch.setattr(plots, "decode_figure", broken)
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url('ok')}'}}"])
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.OK, out
    assert "plot decode_by_prompt left out: ValueError" in out
    report = only_run(tmp_path / "runs") / "report"
    assert all((report / name).is_file() for name in ("report.md", "summary.json", "report.html"))
    assert (report / "decode_vs_acceptance.svg").is_file() and not (report / "decode_by_prompt.svg").exists()


# -- D13, CLI side: a run directory that cannot be written is one line and its own exit code ----------------
def test_an_out_path_that_is_a_file_is_a_config_error(tmp_path: Path, hostile_server: HostileServer) -> None:
    (tmp_path / "outfile").write_text("x")
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url('ok')}'}}"])
    for out in ("outfile", "outfile/sub"):
        code, text = run_cli(str(file), "--out", str(tmp_path / out))
        assert code == ExitCode.CONFIG, text
        assert text.startswith("error: --out ") and str(tmp_path / "outfile") in text


def test_a_disk_that_fills_mid_run_exits_5_and_keeps_the_stored_samples(
        tmp_path: Path, hostile_server: HostileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.common.errors import RunDirError

    real = RunDir.append
    calls = {"n": 0}

    def fills_up(self: RunDir, sample: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RunDirError(f"cannot write {self.path / 'samples.jsonl'}: No space left on device")
        return real(self, sample)

    monkeypatch.setattr(RunDir, "append", fills_up)
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url('ok')}'}}"],
                      "{prompts: [prose], max_tokens: 8, reps: 4, warmup: 0}")
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.WRITE_FAILED == 5, out
    assert "No space left on device" in out and f"--resume {only_run(tmp_path / 'runs')}`" in out
    assert len(read_samples(only_run(tmp_path / "runs"))) == 2


# -- --resume with --dry-run (issue 32, USER-2 finding 4): a preview launches, sends and stores nothing ------------
def test_resume_with_dry_run_prints_the_rest_and_measures_nothing(tmp_path: Path, hostile_server: HostileServer,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url('ok')}'}}",
                                 f"{{name: b, engine: openai, url: '{hostile_server.url('ok')}'}}"],
                      "{prompts: [prose], max_tokens: 8, reps: 3, warmup: 0, gates: []}")
    ctrl_c_at_rep(monkeypatch)
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.INTERRUPTED, out
    monkeypatch.setattr(arm_module, "make_sample", measure.make_sample)  # the real one again
    run = only_run(tmp_path / "runs")
    stored = len(read_samples(run))
    sent = len(chat_requests(hostile_server, "ok"))
    assert 0 < stored < 6

    code, out = run_cli("--resume", str(run), "--dry-run")
    assert code == ExitCode.OK, out
    assert f"resuming: {stored} measurement points already stored" in out
    assert "arm a: attach to" in out and "arm b: attach to" in out
    assert len(read_samples(run)) == stored  # nothing measured
    assert len(chat_requests(hostile_server, "ok")) == sent  # nothing sent


# -- USER-3 finding 12: Ctrl-C names the directory to resume, not a placeholder ---------------------------------
def test_ctrl_c_names_the_run_directory_to_resume(tmp_path: Path, hostile_server: HostileServer,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url('ok')}'}}"])
    ctrl_c_at_rep(monkeypatch)
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.INTERRUPTED, out
    assert f"`bakeoff run --resume {only_run(tmp_path / 'runs')}` finishes the run" in out
    assert "RUN_DIR" not in out


# -- the answer first (issue 32): plain progress lines off a terminal, then the verdict block --------------------
def test_a_run_off_a_terminal_prints_plain_progress_lines_then_the_verdict(tmp_path: Path,
                                                                           hostile_server: HostileServer) -> None:
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url('ok')}'}}",
                                 f"{{name: b, engine: openai, url: '{hostile_server.url('ok')}'}}"],
                      "{prompts: [prose], max_tokens: 8, reps: 2, warmup: 0, gates: []}")
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.OK, out
    for line in ("a: request 1 of 4", "a: request 2 of 4", "b: request 3 of 4", "b: request 4 of 4"):
        assert re.search(rf"^\[0:\d\d:\d\d\] {line}(, [\d.]+ tok/s)?(, about \S+ left)?$", out, re.MULTILINE), out
    assert "outcome: each arm against a" in out and "token accounting and timing" not in out
    assert "--tables" in out


def test_a_run_whose_every_sample_the_statistics_leave_out_exits_3_nothing_measured(
        tmp_path: Path, hostile_server: HostileServer) -> None:
    # the stream names each token's id and usage claims half of them: each sample is ok with a rate, yet flagged
    # count-witness-mismatch and left out of every statistic (the table shows "–"), so nothing valid was measured
    file = write_file(tmp_path, [f"{{name: a, engine: openai, url: '{hostile_server.url('ids_lie')}'}}"],
                      workload="{prompts: [prose], max_tokens: 8, reps: 2, warmup: 0, fixed_length: false}")
    code, out = run_cli(str(file), "--out", str(tmp_path / "runs"))
    samples = RunDir(only_run(tmp_path / "runs")).samples()
    assert samples and all(s.status == "ok" and s.decode_tps and any(f.startswith("count-witness-mismatch")
                                                                     for f in s.flags) for s in samples)
    assert code == ExitCode.NOTHING_MEASURED == 3, out
    assert "arm 'a' has no valid sample: none of 2 samples enters the statistics (count-witness-mismatch ×2)" in out
