"""Security rules: loopback by default, no shell, an API key that travels as the name of an environment
variable only, and no secret (env value, URL credential, API key, key-flag value, a key echoed back by a
server) in a run directory, its logs or its reports."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from bakeoff.core import build_launch
from bakeoff.core.common.errors import ConfigError, EngineStartupError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.schema import Arm, Settings
from bakeoff.core.results.record import ArmAttempt, RunRecord
from bakeoff.core.run.arm import _headers
from bakeoff.core.run.plan import plan_run

ROOT = Path(__file__).resolve().parents[3]


def _python_sources() -> list[Path]:
    return [p for d in ("core", "engines", "plugins") if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.py")]


def test_no_subprocess_call_uses_a_shell() -> None:
    offenders = []
    for path in _python_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(_python_sources()) > 10
    assert offenders == []


def test_engines_bind_loopback_unless_told_otherwise(tmp_path: Path) -> None:
    assert Settings().host == "127.0.0.1"
    from bakeoff.engines.llamacpp import LlamaCppAdapter

    model = tmp_path / "m.gguf"
    model.write_bytes(b"")
    arm = Arm(name="x", engine="llamacpp", model=str(model), options={"binary": "/bin/true"})
    argv = build_launch(LlamaCppAdapter(), arm, 1234, tmp_path).argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    arm = Arm(name="x", engine="llamacpp", model=str(model), options={"binary": "/bin/true"},
              settings=Settings(host="0.0.0.0"))
    argv = build_launch(LlamaCppAdapter(), arm, 1234, tmp_path).argv
    assert argv[argv.index("--host") + 1] == "0.0.0.0"


def test_the_key_is_read_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_T_KEY", "k-123")
    assert _headers(Arm(name="x", engine="sim", model="sim", api_key_env="BAKEOFF_T_KEY")) == {
        "Authorization": "Bearer k-123"}
    assert _headers(Arm(name="x", engine="sim", model="sim")) == {}


def test_a_named_key_variable_that_is_unset_stops_the_run_before_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BAKEOFF_T_UNSET", raising=False)
    config = parse_bakeoff("arms: [{name: x, engine: sim, model: sim, api_key_env: BAKEOFF_T_UNSET}]\n")
    with pytest.raises(ConfigError, match=r"\$BAKEOFF_T_UNSET, which is not set"):
        plan_run(config)


# -- secrets never reach a run directory or a report (AUDIT M2, FAULTS D9 D10, issue 12 item 4) ---------
ENV_SECRET = "hf_PLANTED_ENV_VALUE_4242"
URL_PASSWORD = "hunter2-PLANTED-PASSWORD"
QUERY_SECRET = "PLANTED_QUERY_KEY_77"
API_KEY = "sk-PLANTED-API-KEY-9090"
FLAG_SECRET = "PLANTED_FLAG_TOKEN_31"
SECRETS = (ENV_SECRET, URL_PASSWORD, QUERY_SECRET, API_KEY, FLAG_SECRET)


def _secret_config(url_ok: str, url_echo: str) -> str:
    creds = url_ok.replace("http://", f"http://admin:{URL_PASSWORD}@")
    return f"""\
name: secrets
arms:
  - {{name: launched, engine: sim, model: sim, env: {{HF_TOKEN: {ENV_SECRET}, SIM_FLAVOUR: "1"}},
     options: {{itl_ms: 1}}}}
  - {{name: creds, engine: openai, url: "{creds}"}}
  - {{name: echoed, engine: openai, url: "{url_echo}", api_key_env: BAKEOFF_T_PLANTED_KEY}}
workload: {{prompts: [prose], max_tokens: 8, reps: 1, warmup: 0, request_timeout_s: 10}}
"""


def _leaks(root: Path, *texts: str) -> list[str]:
    """Where any planted secret appears: files under root (bytes: SQLite, WAL, logs, plots) and texts."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path.relative_to(root)}: {s}" for s in SECRETS if s.encode() in data]
    for i, text in enumerate(texts):
        found += [f"output {i}: {s}" for s in SECRETS if s in text]
    return found


def test_run_json_keeps_names_and_masks_env_values_url_credentials_and_key_flags(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from bakeoff.core.common.redact import redact_config
    from bakeoff.core.results.store import RunDir
    from bakeoff.core.run.plan import run_record

    monkeypatch.setenv("BAKEOFF_T_PLANTED_KEY", API_KEY)
    config = parse_bakeoff(_secret_config("http://127.0.0.1:9/m/ok", "http://127.0.0.1:9/m/echo_key")
                           .replace("options: {itl_ms: 1}", f"options: {{itl_ms: 1}}, extra_args: [--api-key, "
                                                           f"{FLAG_SECRET}]"))
    run = RunDir(tmp_path / "run")
    run.write_record(run_record(plan_run(config)))
    meta = run.run_json.read_text()
    assert [s for s in SECRETS if s in meta] == []  # main: the env value and the URL password are recorded
    arms = {a["name"]: a for a in json.loads(meta)["config"]["arms"]}
    assert arms["launched"]["env"] == {"HF_TOKEN": "***", "SIM_FLAVOUR": "***"}
    assert arms["launched"]["extra_args"] == ["--api-key", "***"]
    assert arms["creds"]["url"] == "http://admin:***@127.0.0.1:9/m/ok"
    assert arms["echoed"]["api_key_env"] == "BAKEOFF_T_PLANTED_KEY"
    query = redact_config({"arms": [{"name": "q", "url": f"https://gw.example/v1?api-version=2&key={QUERY_SECRET}"}]})
    assert query["arms"][0]["url"] == "https://gw.example/v1?api-version=***&key=***"
    options = {"hf_token": ENV_SECRET, "require_api_key": True, "config": {"network": {"api_key": API_KEY}}}
    masked = redact_config({"arms": [{"name": "o", "options": options}]})["arms"][0]["options"]
    assert masked == {"hf_token": "***", "require_api_key": True, "config": {"network": {"api_key": "***"}}}


def test_no_planted_secret_reaches_the_run_directory_logs_or_reports(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, hostile_server: Any) -> None:
    """One run with a secret in each way in: an env value of a launched engine, a URL password and query key,
    an API key that a gateway echoes back in its 401 body. Then grep everything it wrote."""
    from typer.testing import CliRunner

    from bakeoff.core.cli import app

    monkeypatch.setenv("BAKEOFF_T_PLANTED_KEY", API_KEY)
    bakeoff = tmp_path / "secrets.yaml"
    bakeoff.write_text(_secret_config(hostile_server.url("ok"), hostile_server.url("echo_key")))
    runs = tmp_path / "runs"
    ran = CliRunner().invoke(app, ["run", str(bakeoff), "--out", str(runs)])
    assert ran.exception is None or isinstance(ran.exception, SystemExit), ran.output
    (run_dir,) = runs.iterdir()
    samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["arm"] for s in samples if s["status"] == "ok"} >= {"launched", "creds"}  # the run really measured
    assert (run_dir / "arms" / "launched" / "argv.txt").exists()
    reported = CliRunner().invoke(app, ["report", str(run_dir)])
    as_json = CliRunner().invoke(app, ["report", str(run_dir), "--json", "--no-files"])
    assert (run_dir / "report" / "report.html").exists() and (run_dir / "report" / "summary.json").exists()
    assert _leaks(run_dir, ran.output, reported.output, as_json.output) == [], ran.output
    written = "".join(p.read_text() for p in run_dir.glob("*.jsonl"))
    assert "invalid key: Bearer ***" in written  # the gateway did echo the key back; it was masked
    resumed = CliRunner().invoke(app, ["run", "--resume", str(run_dir)])  # values are not in run.json: ask
    assert resumed.exit_code == 2 and "give the bakeoff file as well" in " ".join(resumed.output.split())
    assert "HF_TOKEN" in json.loads((run_dir / "run.json").read_text())["config"]["arms"][0]["env"]


def test_a_resumed_run_takes_the_masked_values_from_the_bakeoff_file(tmp_path: Path) -> None:
    from bakeoff.core.results.store import RunDir
    from bakeoff.core.run.resume import load_resume

    text = f"arms: [{{name: a, engine: sim, model: sim, env: {{HF_TOKEN: {ENV_SECRET}}}}}]\n"
    bakeoff = tmp_path / "b.yaml"
    bakeoff.write_text(text)
    run = RunDir(tmp_path / "r")
    run.write_record(RunRecord.model_validate({
        "config": parse_bakeoff(text).model_dump(mode="json")}))
    assert ENV_SECRET not in run.run_json.read_text()
    with pytest.raises(ConfigError, match=r"does not record secret values \(arm 'a' env\)"):
        load_resume(run.path)
    assert load_resume(run.path, bakeoff).config.arms[0].env == {"HF_TOKEN": ENV_SECRET}
    other = tmp_path / "other.yaml"
    other.write_text(text.replace("HF_TOKEN", "HF_OTHER"))
    with pytest.raises(ConfigError, match="differs"):
        load_resume(run.path, other)


def test_stored_error_texts_arm_records_argv_and_logs_are_masked(tmp_path: Path) -> None:
    import base64

    from bakeoff.core.common.redact import Redactor, redact_argv
    from bakeoff.core.results.sample import Sample
    from bakeoff.core.results.store import RunDir

    run = RunDir(tmp_path / "r", redactor=Redactor([ENV_SECRET, API_KEY]))
    basic = base64.b64encode(f"admin:{URL_PASSWORD}".encode()).decode()
    run.append(Sample(arm="a", engine="openai", prompt="p", mode="greedy", rep=0, status="error",
                      error=f'HTTP 401: {{"error": "invalid key: Bearer {API_KEY}", "basic": "Basic {basic}", '
                            f'"url": "http://admin:{URL_PASSWORD}@127.0.0.1:1/v1?key={QUERY_SECRET}"}}'))
    run.append_attempt("a", ArmAttempt.model_validate({"status": "failed", "error": f"engine said {ENV_SECRET}",
                                                    "log_tail": API_KEY}))
    run.write_arm_text("a", "argv.txt", " ".join(redact_argv(["srv", "--api-key", FLAG_SECRET, "--hf-token="
                                                              + FLAG_SECRET, "-e", f"K={ENV_SECRET}"])))
    log = run.arm_dir("a") / "engine-pass0.log"
    log.write_text(f"loading with token {ENV_SECRET}\n")
    run.redactor.file(log)
    assert _leaks(run.path) == [] and basic not in (run.path / "samples.jsonl").read_text()
    assert "Bearer ***" in run.samples()[0].error  # type: ignore[operator]


def test_exllama_docker_argv_names_env_variables_without_values(tmp_path: Path) -> None:
    from bakeoff.core import resolve_launch
    from bakeoff.engines.exllama import ExllamaAdapter, ExllamaOptions

    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    arm = Arm(name="x", engine="exllama", model=str(model), launch="docker", env={"HF_TOKEN": ENV_SECRET})
    adapter = ExllamaAdapter()
    argv = adapter.docker_argv(arm, ExllamaOptions(), resolve_launch(adapter, arm, 5123, tmp_path))
    assert ENV_SECRET not in " ".join(argv)  # main: -e HF_TOKEN=<value> on argv (argv.txt, ps)
    assert argv[argv.index("HF_TOKEN") - 1] == "-e"


def test_compose_file_names_env_variables_and_the_cli_gets_the_values(tmp_path: Path) -> None:
    import yaml

    from bakeoff.core.engine.compose import ComposeEngine
    from bakeoff.engines.llamacpp import LlamaCppAdapter

    model = tmp_path / "m.gguf"
    model.write_bytes(b"")
    arm = Arm(name="x", engine="llamacpp", model=str(model), launch="compose", env={"HF_TOKEN": ENV_SECRET})
    seen = tmp_path / "seen-env"
    fake = tmp_path / "compose"
    # the fake CLI fails `create` (what matters is what was written and passed) and succeeds at `down`, so the
    # engine's clean-up releases its exit guard as a real one does
    fake.write_text(f"#!/bin/sh\ncase \" $* \" in *\" down \"*) exit 0;; esac\n"
                    f"echo \"$HF_TOKEN\" > {seen}\nexit 1\n")
    fake.chmod(0o755)
    engine = ComposeEngine(LlamaCppAdapter(), arm, 5000, tmp_path / "w", tmp_path / "w" / "log", 5.0,
                           command=[str(fake)])
    with pytest.raises(EngineStartupError), engine:
        pass
    written = (tmp_path / "w" / "compose.yaml").read_text()
    assert ENV_SECRET not in written  # main: environment: {HF_TOKEN: <value>} in the run directory
    assert next(iter(yaml.safe_load(written)["services"].values()))["environment"] == ["HF_TOKEN"]
    assert seen.read_text().strip() == ENV_SECRET


def test_promote_refuses_an_arm_whose_env_values_were_masked(tmp_path: Path) -> None:
    from bakeoff.core.results.store import RunDir
    from bakeoff.core.run.promote import prepare

    run = RunDir(tmp_path / "r")
    run.write_record(RunRecord.model_validate({
        "config": parse_bakeoff(
        f"arms: [{{name: w, engine: llamacpp, model: smollm2, launch: compose, env: {{HF_TOKEN: {ENV_SECRET}}}}}]\n"
        "live: {kind: compose, name: live, health: 'http://127.0.0.1:8094/health', port: 8094}\n"
    ).model_dump(mode="json")}))
    with pytest.raises(ConfigError, match=r"does not record the secret values of arm 'w' env"):
        prepare(run.path, "w", None, None)  # not a launch definition with HF_TOKEN=***
    assert not (run.path / "promote").exists()


def test_masking_by_value_never_touches_arm_names_orders_or_the_prompts(tmp_path: Path) -> None:
    """An env value that happens to equal an arm's name must not break resume's pass orders."""
    from bakeoff.core.common.redact import Redactor
    from bakeoff.core.results.sample import Sample
    from bakeoff.core.results.store import RunDir

    run = RunDir(tmp_path / "r", redactor=Redactor(["turbo"]))
    run.write_record(RunRecord.model_validate({
        "orders": [["turbo", "base"]], "baseline": "turbo", "prompts": [{"name": "turbo"}],
                   "arm_records": {"turbo": [{"error": "mode turbo failed"}]}}))
    meta = run.read_record().to_json()
    assert meta["orders"] == [["turbo", "base"]] and meta["baseline"] == "turbo"
    assert meta["arm_records"] == {"turbo": [{"error": "mode *** failed"}]}
    stored = run.append(Sample(arm="turbo", engine="sim", prompt="turbo", mode="greedy", rep=0, error="turbo"))
    assert (stored.arm, stored.prompt, stored.error) == ("turbo", "turbo", "***")


def test_an_unexpected_error_that_quotes_a_secret_is_masked_in_its_traceback_file(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, hostile_server: Any) -> None:
    from typer.testing import CliRunner

    from bakeoff.core.cli import app
    from bakeoff.core.run import arm as arm_module

    monkeypatch.setenv("BAKEOFF_T_PLANTED_KEY", API_KEY)

    def raising(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"bug while handling the key {API_KEY}")

    monkeypatch.setattr(arm_module, "make_sample", raising)
    bakeoff = tmp_path / "b.yaml"
    bakeoff.write_text(f"arms: [{{name: gw, engine: openai, url: '{hostile_server.url('ok')}', "
                       f"api_key_env: BAKEOFF_T_PLANTED_KEY}}]\n"
                       "workload: {prompts: [prose], max_tokens: 8, reps: 1, warmup: 0}\n")
    ran = CliRunner().invoke(app, ["run", str(bakeoff), "--out", str(tmp_path / "runs")])
    (run_dir,) = (tmp_path / "runs").iterdir()
    traces = list(run_dir.rglob("traceback-pass*.txt"))
    assert traces and "RuntimeError" in traces[0].read_text(), ran.output
    assert [x for x in _leaks(run_dir) if API_KEY in x] == []  # main: the key in the traceback file


# -- provider tokens: masked by their shape, whatever name (or none) stands before them ------------------------
@pytest.mark.parametrize(("text", "masked"), [
    ("token ghp_PROBEabcdefghijklmnopqrstuvwxyz0123", "token ghp_***"),
    ("github_pat_11ABCDEFG0abcdefghijklmnopqrstuvwxyz0123456789", "github_pat_***"),
    ("HF_TOKEN=hf_PROBEabcdefghijklmnopqrstuvwxyz", "HF_TOKEN=***"),
    ("login with hf_PROBEabcdefghijklmnopqrstuvwxyz", "login with hf_***"),
    ("aws_secret_access_key = PROBEwJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY", "aws_secret_access_key = ***"),
    ('{"SecretAccessKey": "PROBEwJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"}', '{"SecretAccessKey": "***"}'),
    ("id AKIAIOSFODNN7EXAMPLE", "id AKIA***"),
    ("x-api sk-proj-abcdefghijklmnopqrstuvwxyz012345", "x-api sk-proj-***"),
    ("sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123", "sk-ant-***"),
    ("glpat-abcdefghij1234567890", "glpat-***"),
    ("xoxb-123456789012-abcdefABCDEF", "xoxb-***"),
    ("https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX", "https://hooks.slack.com/services/***"),
    ("key AIzaSyA1234567890abcdefghijklmnopqrstuv", "key AIza***"),
    ("CI_JOB_TOKEN=abc123def456", "CI_JOB_TOKEN=***"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAabcdefghijklmnop\n-----END RSA PRIVATE KEY-----",
     "-----BEGIN RSA PRIVATE KEY-----***-----END RSA PRIVATE KEY-----"),
], ids=["github", "github-pat", "hf-env", "hf-bare", "aws-secret", "aws-json", "aws-key-id", "openai", "anthropic",
        "gitlab", "slack", "slack-webhook", "google", "env-token", "private-key"])
def test_a_provider_credential_is_masked_by_its_shape_and_says_what_it_was(text: str, masked: str) -> None:
    from bakeoff.core.common.redact import credential_shapes, redact_text

    assert redact_text(text) == masked
    assert credential_shapes(text) and credential_shapes(masked) == []  # masked text is clean (verify reads it)


def test_words_that_only_resemble_a_credential_are_left_alone() -> None:
    from bakeoff.core.common.redact import credential_shapes, redact_text

    text = ('{"completion_tokens": 1280, "max_tokens": 2048, "eos_token": "</s>", "MAX_TOKENS": 1024} '
            "xghp_abcdefghijklmnopqrstuvwxyz0123456789 task-abcdefghijklmnopqrstuvwxyz hf_hub_download")
    assert redact_text(text) == text and credential_shapes(text) == []
