"""The adapter contract stays small as engines grow (issue 41): few hooks on the adapter, each concern a declared
piece, no hook only one engine overrides, no import circle inside an engine package, no state on an adapter, an
adapter of the earlier contract refused where it is defined, and docs/plugins.md in step with all of it. For the
built-in adapters and both plugins (this folder puts the plugins' sources on the path)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from bakeoff.core import EngineAdapter as PublicEngineAdapter
from bakeoff.core import EngineLog, LaunchInputs, LaunchSpec
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.schema import Arm, Workload
from bakeoff.core.engine import contract, pieces
from bakeoff.core.engine.client import stream_chat
from bakeoff.core.engine.contract import RETIRED_HOOKS, Capabilities, EngineAdapter
from bakeoff.core.engine.launch import launch_identity
from bakeoff.core.run import arm as arm_module
from bakeoff.core.run.bakeoff import run_bakeoff
from bakeoff.engines.exllama import ExllamaAdapter
from bakeoff.engines.llamacpp import LlamaCppAdapter
from bakeoff.engines.openai import OpenAICompatAdapter
from bakeoff.engines.sim import SimAdapter
from bakeoff.engines.vllm import VllmAdapter
from bakeoff_ikllama.adapter import IkLlamaAdapter
from bakeoff_sglang.adapter import SglangAdapter

ROOT = Path(__file__).resolve().parents[3]
BUILT_IN = (LlamaCppAdapter, VllmAdapter, ExllamaAdapter, SimAdapter, OpenAICompatAdapter, IkLlamaAdapter,
            SglangAdapter)
PIECES = (pieces.Reader, pieces.PrefixCache, pieces.StructuredOutputs, pieces.NMaxSchedule, pieces.Witness,
          pieces.Selftest)


def hooks(cls: type) -> list[str]:
    """The public methods a class offers to override (properties and class attributes are not hooks)."""
    return [name for name, value in vars(cls).items() if not name.startswith("_") and inspect.isfunction(value)]


def test_the_adapter_has_at_most_twelve_methods() -> None:
    assert len(hooks(EngineAdapter)) <= 12, hooks(EngineAdapter)
    assert PublicEngineAdapter is EngineAdapter  # plugins import it from bakeoff.core


def test_no_built_in_overrides_a_hook_no_other_engine_overrides() -> None:
    for hook in hooks(EngineAdapter):
        owners = [cls.__name__ for cls in BUILT_IN
                  if any(hook in vars(k) for k in cls.__mro__[:cls.__mro__.index(EngineAdapter)])]
        assert len(owners) != 1, f"{hook} is overridden by {owners[0]} only: make it a piece of its own"


def test_every_piece_of_every_built_in_is_the_declared_kind() -> None:
    for cls in BUILT_IN:
        assert isinstance(cls.reader, pieces.Reader) and isinstance(cls.prefix_cache, pieces.PrefixCache)
        assert isinstance(cls.structured, pieces.StructuredOutputs) and isinstance(cls.witness, pieces.Witness)
        assert cls.n_max_schedule is None or isinstance(cls.n_max_schedule, pieces.NMaxSchedule)
        assert cls.selftest is None or isinstance(cls.selftest, pieces.Selftest)
    assert OpenAICompatAdapter.reader is EngineAdapter.reader  # the shortest adapter declares no piece but kinds


def _packages() -> list[Path]:
    found = [p for p in (ROOT / "engines").iterdir() if (p / "__init__.py").is_file()]
    return found + [p for p in (ROOT / "plugins").glob("*/src/*") if (p / "__init__.py").is_file()]


def _imports(module: Path, package: Path) -> set[str]:
    """The sibling modules a module imports (relative or by the package's absolute name), at any depth: an import
    inside a function or under TYPE_CHECKING is still a dependency."""
    out: set[str] = set()
    names = {f"bakeoff.engines.{package.name}", package.name}
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1:
                target = base.split(".")[0] if base else None
                out |= {target} if target else {a.name for a in node.names}
            elif node.level == 0:
                for name in names:
                    if base.startswith(name + "."):
                        out.add(base[len(name) + 1:].split(".")[0])
    return {m for m in out if (package / f"{m}.py").is_file()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_engine_package_has_an_import_circle() -> None:
    packages = _packages()
    assert {p.name for p in packages} >= {"llamacpp", "vllm", "exllama", "sim", "openai", "bakeoff_ikllama",
                                          "bakeoff_sglang"}
    for package in packages:
        graph = {m.stem: _imports(m, package) - {m.stem} for m in package.glob("*.py")}
        assert _cycle(graph) is None, f"{package.relative_to(ROOT)}: import circle {' -> '.join(_cycle(graph) or [])}"


def test_the_circle_finder_finds_a_circle() -> None:
    assert _cycle({"adapter": {"installer"}, "installer": {"options", "adapter"}, "options": set()}) == [
        "adapter", "installer", "adapter"]
    assert _cycle({"adapter": {"installer", "options"}, "installer": {"options"}, "options": set()}) is None


def test_each_engine_package_with_options_keeps_them_in_options_py() -> None:
    for cls in (LlamaCppAdapter, VllmAdapter, ExllamaAdapter, IkLlamaAdapter, SglangAdapter):
        assert cls.Options.__module__.endswith(".options"), cls.Options.__module__


def _plugins_md() -> str:
    return (ROOT / "docs" / "plugins.md").read_text()


def test_docs_name_every_hook_of_the_adapter_and_of_every_piece() -> None:
    text = _plugins_md()
    for cls in (EngineAdapter, *PIECES):
        for hook in hooks(cls):
            if cls is pieces.Witness and hook == "for_request":
                continue  # core's, not overridden
            assert re.search(rf"[`.]{hook}\(", text), f"docs/plugins.md does not name {cls.__name__}.{hook}"
    for attribute in ("reader", "prefix_cache", "structured", "witness", "n_max_schedule", "selftest"):
        assert f"`{attribute}`" in text, attribute


def test_the_migration_table_lists_every_retired_hook() -> None:
    text = _plugins_md()
    table = text[text.index("### Changes for adapters written against the earlier contract"):]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    listed = {m for row in rows for m in re.findall(r"`(\w+)[(`]", row.split(" | ")[0])}
    assert set(RETIRED_HOOKS) <= listed, set(RETIRED_HOOKS) - listed


def test_a_plugin_of_the_earlier_contract_fails_where_it_is_defined_naming_each_replacement() -> None:
    with pytest.raises(TypeError) as caught:
        class _Old(EngineAdapter):
            def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
                return LaunchSpec(argv=[])

            def server_stats(self, *args: Any) -> Any:
                return None

            def for_sessions(self, arm: Arm) -> Arm:
                return arm

            def witness_due(self, every: int) -> bool:
                return False
    message = str(caught.value)
    assert "_Old.server_stats: this hook was replaced by a Reader as the class attribute 'reader'" in message
    assert "_Old.for_sessions: this hook was replaced by a PrefixCache" in message and "launch(arm)" in message
    assert "_Old.witness_due: this hook was replaced by a Witness" in message and "docs/plugins.md" in message
    with pytest.raises(ValueError, match="StructuredOutputs"):
        Capabilities.model_validate({"structured": ["json_schema"]})


def test_every_retired_hook_is_refused() -> None:
    for hook in RETIRED_HOOKS:
        with pytest.raises(TypeError, match=rf"\.{hook}: this hook was replaced by"):
            type("_Old", (OpenAICompatAdapter,), {hook: lambda self: None})


ARM = Arm(name="a", engine="vllm", model="Qwen/Qwen3-0.6B", options={"witness_every": 2})


def test_an_adapter_keeps_no_state_through_the_launch_identity_and_the_read_back() -> None:
    adapter = LlamaCppAdapter()
    arm = Arm(name="a", engine="llamacpp", model="m.gguf", url="http://127.0.0.1:1")
    first = launch_identity(adapter, arm, Workload())
    assert launch_identity(adapter, arm, Workload()) == first
    http = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(500)), base_url="http://x")
    adapter.reader.server_stats(http, {"timings": {"predicted_n": 4}}, None, EngineLog(""), arm=arm)
    assert vars(adapter) == {} and vars(adapter.reader) == {}


def test_the_witness_asks_on_one_request_in_every_and_its_rate_is_part_of_the_launch_identity() -> None:
    vllm = VllmAdapter()
    assert vllm.witness.for_request(ARM, 0) == {"return_token_ids": True} == vllm.witness.for_request(ARM, 2)
    assert vllm.witness.for_request(ARM, 1) == {}
    assert pieces.Witness().for_request(ARM, 0) == {}  # the default asks nothing
    attached = ARM.model_copy(update={"url": "http://127.0.0.1:1"})
    other = attached.model_copy(update={"options": {"witness_every": 3}})
    assert launch_identity(vllm, attached, Workload()) != launch_identity(vllm, other, Workload())


class _EveryOther(pieces.Witness):
    def every(self, arm: Arm) -> int:
        return 2

    def fields(self, arm: Arm) -> dict[str, Any]:
        return {"witness": True}


def test_the_arm_run_counts_the_witness_requests_per_engine_start(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter lives in the arm's run, not on the adapter: each engine start asks on its first request and
    on one in every two after it, warm-up included."""
    monkeypatch.setattr(SimAdapter, "witness", _EveryOther())
    sent: list[bool] = []
    real = stream_chat

    def recording(http: httpx.Client, body: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        sent.append(body.get("witness") is True)
        return real(http, body, *args, **kwargs)

    monkeypatch.setattr(arm_module, "stream_chat", recording)
    config = parse_bakeoff("arms: [{name: s, engine: sim, model: sim}]\n"
                           "workload: {prompts: [prose], max_tokens: 4, reps: 3, warmup: 1, warmup_settle: null, "
                           "gates: [], passes: 2}\n")
    run_bakeoff(config, tmp_path / "runs")
    assert sent == [True, False, True, False] * 2  # a warm-up and three timed requests, twice
    assert vars(SimAdapter()) == {}


def test_pieces_module_names_what_it_exports() -> None:
    assert set(pieces.__all__) <= set(vars(pieces)) and set(contract.__all__) <= set(vars(contract))
