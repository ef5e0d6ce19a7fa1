"""The adapter contract's shape: typed options, and a plugin author's import that stays light.

``EngineAdapter[OptionsT]`` makes ``options()`` return the adapter's own model, so adapters read their
options without ``type: ignore``; and what a plugin imports (``bakeoff.core`` and its adapter kit) must not
drag in numpy, matplotlib or the run loop, which a plugin never calls.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from bakeoff.core import Arm, EngineAdapter, LaunchInputs, LaunchSpec, NoOptions, build_launch
from bakeoff.engines.llamacpp.adapter import LlamaCppAdapter, LlamaCppOptions

ROOT = Path(__file__).resolve().parents[3]
PLUGIN_SRC = sorted(str(p) for p in (ROOT / "plugins").glob("*/src"))


class _Opts(BaseModel):
    level: int = 1


class _Typed(EngineAdapter[_Opts]):
    name = "typed"

    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        return LaunchSpec(argv=["serve", "--level", str(self.options(arm).level)])

    def model_ref(self, model: str) -> str:
        return model  # a fake engine loads no file


class _Plain(EngineAdapter):
    name = "plain"

    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        return LaunchSpec(argv=["serve"])

    def model_ref(self, model: str) -> str:
        return model  # a fake engine loads no file


def test_the_type_parameter_is_the_options_model() -> None:
    arm = Arm(name="a", engine="typed", model="m.gguf", options={"level": 3})
    assert _Typed.Options is _Opts
    assert build_launch(_Typed(), arm, 1, Path(".")).argv == ["serve", "--level", "3"]
    assert _Plain.Options is NoOptions
    assert LlamaCppAdapter.Options is LlamaCppOptions
    assert isinstance(LlamaCppAdapter().options(Arm(name="b", engine="llamacpp", model="m.gguf")), LlamaCppOptions)


def test_options_that_disagree_with_the_type_parameter_are_refused() -> None:
    with pytest.raises(TypeError, match="Options = NoOptions but the type parameter is _Opts"):
        class _Confused(EngineAdapter[_Opts]):
            Options = NoOptions

            def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
                return LaunchSpec(argv=[])


def test_no_adapter_silences_the_type_of_its_options() -> None:
    sources = [*ROOT.glob("engines/*/*.py"), *ROOT.glob("plugins/*/src/*/*.py")]
    assert len(sources) > 10
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in sources for n, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"options\(.*# type: ignore", line)]
    assert not hits, hits


HEAVY = ("numpy", "matplotlib", "bakeoff.core.run")


def _loaded_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter has loaded after running ``code``."""
    probe = (f"import sys; sys.path[:0] = {PLUGIN_SRC!r}\n{code}\n"
             f"import json; print(json.dumps(sorted(m for m in sys.modules "
             f"if any(m == h or m.startswith(h + '.') for h in {HEAVY!r}))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return list(json.loads(out.stdout.splitlines()[-1]))


def test_import_bakeoff_core_loads_no_numpy_matplotlib_or_run_loop() -> None:
    assert _loaded_after("import bakeoff.core") == []


def test_a_plugin_authors_imports_load_no_numpy_matplotlib_or_run_loop() -> None:
    # every name bakeoff.core offers adapter authors, then every built-in and plugin adapter module
    code = ("import bakeoff.core as core\nfor name in core.__all__: getattr(core, name)\n"
            "import bakeoff.engines.llamacpp.adapter, bakeoff.engines.vllm.adapter, bakeoff.engines.exllama.adapter\n"
            "import bakeoff.engines.sim.adapter, bakeoff.engines.openai.adapter\n"
            "import bakeoff_ikllama.adapter, bakeoff_sglang.adapter")
    assert _loaded_after(code) == []


def test_the_probe_sees_a_heavy_import() -> None:
    assert "numpy" in _loaded_after("import numpy")


def test_a_launched_arm_needs_a_model_is_said_once_in_core(tmp_path: Path) -> None:
    from bakeoff.core import ConfigError

    binary = tmp_path / "llama-server"
    binary.write_text("")
    arm = Arm(name="a", engine="llamacpp", model="m.gguf", options={"binary": str(binary)})
    assert arm.launched_model == "m.gguf"
    bare = arm.model_copy(update={"model": None})  # a copy skips the schema's model-or-url check
    with pytest.raises(ConfigError, match="arm 'a': launching an engine needs 'model'"):
        build_launch(LlamaCppAdapter(), bare, 1, tmp_path)
    sources = [*ROOT.glob("engines/*/adapter.py"), *ROOT.glob("plugins/*/src/*/adapter.py")]
    assert not [p.name for p in sources if "arm.model is None" in p.read_text()]


def test_container_plumbing_mounts_read_only_and_passes_environment_by_name(tmp_path: Path) -> None:
    from bakeoff.core import Mounts, compose_service_spec, docker_run

    model = tmp_path / "m.gguf"
    model.write_text("")
    mounts = Mounts()
    assert mounts.place(model) == mounts.place(str(model)) == "/models/0/m.gguf"
    assert mounts.inside(str(model)) == "/models/0/m.gguf" and mounts.inside("--flag") == "--flag"
    service = compose_service_spec("img@sha256:x", ["serve"], 18000, 8080, ["CMD", "true"], mounts=mounts,
                                   env={"K": "v"}, gpus=True)
    assert service["volumes"] == [{"type": "bind", "source": str(model), "target": "/models/0/m.gguf",
                                   "read_only": True}]
    assert service["ports"][0]["host_ip"] == "127.0.0.1" and "deploy" in service
    argv = docker_run("c", "img", "127.0.0.1", 18000, 8000, volumes=[(str(model), "/m", True)],
                      env_names=["SECRET"], command=["serve"])
    assert argv == ["docker", "run", "--rm", "--name", "c", "-p", "127.0.0.1:18000:8000",
                    "-v", f"{model}:/m:ro", "-e", "SECRET", "img", "serve"]
