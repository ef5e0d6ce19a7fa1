"""The sim engine without a process: options, launch spec (loopback, key by name only), startup
classification, and the exact stream it would send, fed through the real client and accounting."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from sse_fakes import split_events

from bakeoff.core import EngineLog, build_launch
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.schema import Arm
from bakeoff.core.engine.client import stream_chat
from bakeoff.core.measure.definitions import StreamAccount, account
from bakeoff.engines.sim import SERVER, SimAdapter, SimOptions
from bakeoff.engines.sim.server import DEFAULTS, stream_actions


def _arm(**kw: Any) -> Arm:
    return Arm.model_validate({"name": "a", "engine": "sim", "model": "sim", **kw})


def _events(actions: list[tuple[str, Any]]) -> list[dict[str, Any] | str]:
    out: list[dict[str, Any] | str] = []
    for kind, value in actions:
        if kind == "send":
            data = value.decode().removeprefix("data: ").strip()
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def _body(behaviour: dict[str, Any], request_no: int = 1, max_tokens: int = 10) -> bytes:
    return b"".join(v for k, v in stream_actions(behaviour, request_no, max_tokens) if k == "send")


def _client(body: bytes) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=iter(split_events(body)), headers={"content-type": "text/event-stream"})

    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://sim")


def _account(behaviour: dict[str, Any], max_tokens: int = 10) -> tuple[Any, StreamAccount]:
    result = stream_chat(_client(_body(behaviour, max_tokens=max_tokens)), {}, timeout_s=5)
    caps = SimAdapter.capabilities
    return result, account(result, caps.token_counts)


# -- options -------------------------------------------------------------------------------------
def test_options_reject_unknown_keys_naming_them() -> None:
    with pytest.raises(ConfigError, match=r"arms\[2\]\.options\.stal_s: unknown key"):
        SimAdapter().options(_arm(options={"stal_s": 3}), 2)


def test_options_reject_wrong_usage_without_offset_and_request_zero() -> None:
    with pytest.raises(ConfigError, match="usage_offset"):
        SimAdapter().options(_arm(options={"usage": "wrong", "usage_offset": 0}))
    with pytest.raises(ConfigError, match="from 1"):
        SimAdapter().options(_arm(options={"fault": "kill", "fault_on_requests": [0]}))


@pytest.mark.parametrize("options, field", [({"launch_speeds": [float("nan")]}, "launch_speeds[0]"),
                                            ({"itl_ms": float("inf")}, "itl_ms"),
                                            ({"ttft_ms": float("nan")}, "ttft_ms")])
def test_options_refuse_nan_and_infinity_naming_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"arms\[0\]\.options\.{re.escape(field)}: Input should be a finite number"):
        SimAdapter().options(_arm(options=options), 0)


def test_options_defaults_match_the_server_defaults() -> None:
    """The adapter validates what the server reads: the two default tables must not drift apart."""
    # launch_speeds/launch_seed are drawn by the adapter into the one launch_speed the server reads
    served = SimOptions().model_dump(exclude={"kind", "launch_speeds", "launch_seed"})
    assert {**served, "launch_speed": 1.0} == DEFAULTS


def test_require_api_key_needs_api_key_env() -> None:
    with pytest.raises(ConfigError, match="api_key_env"):
        SimAdapter().preflight(_arm(options={"require_api_key": True}))
    SimAdapter().preflight(_arm(options={"require_api_key": True}, api_key_env="SIM_KEY"))


# -- launch spec ---------------------------------------------------------------------------------
def test_launch_spec_binds_loopback_by_default_and_host_when_asked(tmp_path: Any) -> None:
    spec = build_launch(SimAdapter(), _arm(), 4321, tmp_path)
    assert spec.argv[2] == str(SERVER)
    assert spec.argv[spec.argv.index("--host") + 1] == "127.0.0.1"
    assert spec.argv[spec.argv.index("--port") + 1] == "4321"
    spec = build_launch(SimAdapter(), _arm(settings={"host": "0.0.0.0"}), 4321, tmp_path)
    assert spec.argv[spec.argv.index("--host") + 1] == "0.0.0.0"


def test_launch_spec_passes_behaviour_and_extra_args(tmp_path: Any) -> None:
    spec = build_launch(SimAdapter(), _arm(options={"tokens_per_event": 3, "fault": "stall"},
                                         extra_args=["--bogus"]), 1, tmp_path)
    behaviour = json.loads(spec.argv[spec.argv.index("--behaviour") + 1])
    assert behaviour["tokens_per_event"] == 3 and behaviour["fault"] == "stall"
    assert spec.argv[-1] == "--bogus"


def test_api_key_travels_by_variable_name_never_by_value(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIM_KEY", "s3cr3t-value-xyz")
    spec = build_launch(SimAdapter(), _arm(api_key_env="SIM_KEY", options={"require_api_key": True}), 1, tmp_path)
    assert spec.argv[spec.argv.index("--api-key-env") + 1] == "SIM_KEY"
    assert "s3cr3t-value-xyz" not in " ".join(spec.argv) + json.dumps(spec.env)


# -- startup classification ----------------------------------------------------------------------
@pytest.mark.parametrize(("log", "reason"), [
    ("I sim: starting\nE sim: couldn't bind 127.0.0.1:80: Address already in use\n", "port-in-use"),
    ("usage: sim_server [-h]\nsim_server: error: unrecognized arguments: --bogus\n", "unknown-flag"),
    ("I sim: starting\nE sim: CUDA error: out of memory\n", "out-of-memory"),
    ("I sim: starting\nE sim: segfault in the kernel launcher\n", "crashed"),
])
def test_startup_failures_are_classified_quoting_the_line(log: str, reason: str) -> None:
    err = SimAdapter().classify_startup_failure(log)
    assert err is not None and err.reason == reason
    assert err.log_line is not None and err.log_line in str(err) and err.log_line in log


def test_a_clean_log_is_not_classified() -> None:
    assert SimAdapter().classify_startup_failure("I sim: starting\nI sim: listening on x\n") is None


# -- the stream ----------------------------------------------------------------------------------
def test_tokens_are_packed_per_event_and_usage_is_true() -> None:
    events = _events(list(stream_actions({"tokens_per_event": 4}, 1, 10)))
    text_events = [e for e in events
                   if isinstance(e, dict) and e["choices"] and e["choices"][0]["delta"].get("content")]
    assert [len(e["choices"][0]["delta"]["content"].split()) for e in text_events] == [4, 4, 2]
    usage = [e for e in events if isinstance(e, dict) and "usage" in e]
    assert usage[-1]["usage"]["completion_tokens"] == 10
    assert events[-1] == "[DONE]"


def test_pacing_sleeps_before_first_token_and_between_events() -> None:
    actions = list(stream_actions({"ttft_ms": 200, "itl_ms": 10}, 1, 3))
    assert [v for k, v in actions if k == "sleep"] == [0.2, 0.01, 0.01]


def test_chunk_usage_is_cumulative_when_asked() -> None:
    events = _events(list(stream_actions({"tokens_per_event": 2}, 1, 5, chunk_usage=True)))
    seen = [e["usage"]["completion_tokens"] for e in events if isinstance(e, dict) and e.get("choices")]
    assert seen == [0, 2, 4, 5, 5]


def test_fault_hits_only_the_listed_requests_after_the_given_tokens() -> None:
    behaviour = {"fault": "kill", "fault_after_tokens": 3, "fault_on_requests": [2]}
    assert ("kill", None) not in list(stream_actions(behaviour, 1, 10))
    actions = list(stream_actions(behaviour, 2, 10))
    assert actions[-1] == ("kill", None)
    sent = [e for e in _events(actions) if isinstance(e, dict) and e["choices"][0]["delta"].get("content")]
    assert len(sent) == 3


def test_stall_pauses_then_the_stream_carries_on() -> None:
    actions = list(stream_actions({"fault": "stall", "fault_after_tokens": 2, "stall_s": 7}, 1, 4))
    assert ("stall", 7) in actions
    assert _events(actions)[-1] == "[DONE]"


def test_good_stream_accounts_cleanly() -> None:
    result, fields = _account({})
    assert result.error is None
    assert fields.completion_tokens == 10 and fields.token_events == 10 and fields.flags == []
    assert result.final is not None
    assert SimAdapter().reader.server_stats(_client(b""), result.final, None, EngineLog("")).completion_tokens == 10


def test_malformed_sse_is_an_error_sample_flagged() -> None:
    result, fields = _account({"fault": "malformed", "fault_after_tokens": 2})
    assert result.error is not None and "malformed SSE" in result.error
    assert "malformed-sse" in fields.flags


def test_missing_usage_is_flagged_and_never_recounted_from_events() -> None:
    result, fields = _account({"usage": "missing"})
    assert result.error is None
    assert fields.completion_tokens is None and fields.usage_present is False
    assert "usage-missing" in fields.flags
    assert fields.decode_tps is None  # no rate without the true count
    assert SimAdapter().reader.server_stats(_client(b""), result.final, None, EngineLog("")).completion_tokens == 10


def test_wrong_usage_disagrees_with_the_events_and_is_flagged() -> None:
    _, fields = _account({"usage": "wrong", "usage_offset": 3})
    assert fields.completion_tokens == 13
    assert any(f.startswith("token-events-mismatch") for f in fields.flags)


def test_packed_events_from_an_engine_claiming_one_per_event_are_flagged() -> None:
    _, fields = _account({"tokens_per_event": 4})
    assert fields.completion_tokens == 10  # N still from usage
    assert any(f.startswith("token-events-mismatch: events carry 3 tokens, usage says 10") for f in fields.flags)
