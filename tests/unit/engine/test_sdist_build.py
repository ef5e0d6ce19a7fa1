"""core.sdist_build: one CMake target out of a (tiny, local) sdist, cached by version and backend; a failed
build names the compiler's error and the full log instead of pouring the compiler's output on the terminal."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from bakeoff.core import EngineUnavailable
from bakeoff.core.engine import sdist_build
from bakeoff.core.engine.sdist_build import SdistBuild, build_from_sdist, cached_binary

pytestmark = pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("cc"), reason="needs cmake and cc")

CMAKE = """cmake_minimum_required(VERSION 3.14)
project(tiny C)
add_executable(tiny-server main.c)
add_executable(other-tool other.c)
set_target_properties(tiny-server other-tool PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
"""


def make_sdist(tmp_path: Path, main_c: str) -> Path:
    sdist = tmp_path / "pypi" / "tiny_project-1.0.tar.gz"
    sdist.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist, "w:gz") as tar:
        for name, text in {"CMakeLists.txt": CMAKE, "main.c": main_c, "other.c": "int main(void){return 0;}\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"tiny_project-1.0/vendor/tiny/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return sdist


@pytest.fixture
def pypi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """PyPI replaced by a directory; records each download."""
    fetched: list[str] = []

    def download(project: str, filename: str, dest: Path) -> Path:
        fetched.append(f"{project}/{filename}")
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(tmp_path / "pypi" / filename, dest / filename))

    monkeypatch.setattr(sdist_build, "download", download)
    monkeypatch.setenv("BAKEOFF_CACHE", str(tmp_path / "cache"))
    return fetched


def tiny(backend: str = "cpu") -> SdistBuild:
    return SdistBuild(project="tiny-project", version="1.0", source="tiny_project-*/vendor/tiny",
                      target="tiny-server", cache_name="tiny-server", backend=backend,
                      cmake_flags=("-DCMAKE_BUILD_TYPE=Release",))


def test_builds_only_the_target_once_and_caches_it_by_version_backend_and_cpu(
        tmp_path: Path, pypi: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    make_sdist(tmp_path, '#include <stdio.h>\nint main(void){puts("tiny ok");return 0;}\n')
    monkeypatch.setattr(sdist_build, "PROGRESS_EVERY_S", 0.0)
    lines: list[str] = []
    binary = build_from_sdist(tiny(), log=lines.append, jobs=1)
    assert binary == tmp_path / "cache" / "tiny-server" / f"1.0-cpu-{sdist_build.cpu_key()}" / "bin" / "tiny-server"
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == "tiny ok\n"
    assert not (binary.parent / "other-tool").exists(), "only the named target is built"
    assert any("tiny_project-1.0.tar.gz" in line for line in lines)
    assert any(line.startswith("step 1 of ") for line in lines), lines  # progress, not the compiler's output
    assert pypi == ["tiny-project/tiny_project-1.0.tar.gz"]
    assert build_from_sdist(tiny(), log=lines.append) == binary and len(pypi) == 1, "cached: no second download"
    assert cached_binary(tiny("cuda")) is None, "another backend is another cache entry"


def test_a_failed_build_quotes_the_compiler_error_and_the_log_and_caches_nothing(tmp_path: Path,
                                                                                 pypi: list[str]) -> None:
    make_sdist(tmp_path, "int main(void){ return undefined_symbol_here; }\n")
    with pytest.raises(EngineUnavailable) as caught:
        build_from_sdist(tiny(), log=lambda _: None, jobs=1)
    message = str(caught.value)
    assert "building tiny-server from tiny_project-1.0.tar.gz failed" in message
    assert "undefined_symbol_here" in message
    log = Path(message.split("Full log: ")[1].split(". ")[0])
    assert log.is_file() and "undefined_symbol_here" in log.read_text()
    assert cached_binary(tiny()) is None


def test_a_retry_resumes_the_failed_build_without_downloading_again(tmp_path: Path, pypi: list[str]) -> None:
    make_sdist(tmp_path, "int main(void){ return undefined_symbol_here; }\n")
    with pytest.raises(EngineUnavailable):
        build_from_sdist(tiny(), log=lambda _: None, jobs=1)
    work = tiny().install_dir.with_name(tiny().install_dir.name + ".work")
    assert (work / "build").is_dir(), "the failed build's objects are kept for the retry"
    next(work.glob("src/*/vendor/tiny/main.c")).write_text("int main(void){ return 0; }\n")  # what a fix would do
    lines: list[str] = []
    binary = build_from_sdist(tiny(), log=lines.append, jobs=1)
    assert binary.is_file() and any("resuming" in line for line in lines)
    assert len(pypi) == 1, "the retry did not download the sdist again"
    assert not work.exists(), "the work directory goes once the binary is cached"


def test_extra_files_supply_what_an_sdist_left_out(tmp_path: Path, pypi: list[str]) -> None:
    make_sdist(tmp_path, '#include "generated.h"\nint main(void){ return GENERATED; }\n')
    build = SdistBuild(project="tiny-project", version="1.0", source="tiny_project-*/vendor/tiny",
                       target="tiny-server", cache_name="tiny-server",
                       extra_files=(("generated.h", "#define GENERATED 0\n"),))
    assert build_from_sdist(build, log=lambda _: None, jobs=1).is_file()


def test_an_sdist_without_the_source_tree_is_a_clear_error(tmp_path: Path, pypi: list[str]) -> None:
    make_sdist(tmp_path, "int main(void){return 0;}\n")
    wrong = SdistBuild(project="tiny-project", version="1.0", source="tiny_project-*/vendor/absent",
                       target="tiny-server", cache_name="tiny-server")
    with pytest.raises(EngineUnavailable, match="has no tiny_project-\\*/vendor/absent"):
        build_from_sdist(wrong, log=lambda _: None)


def test_a_binary_whose_shared_library_stays_in_the_build_tree_is_not_cached(tmp_path: Path, pypi: list[str]) -> None:
    sdist = tmp_path / "pypi" / "tiny_project-1.0.tar.gz"
    sdist.parent.mkdir(parents=True, exist_ok=True)
    files = {"CMakeLists.txt": "cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\n"
                               "add_library(helper SHARED helper.c)\nadd_executable(tiny-server main.c)\n"
                               "target_link_libraries(tiny-server helper)\n"
                               "set_target_properties(tiny-server PROPERTIES"
                               " RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin SKIP_BUILD_RPATH ON)\n",
             "helper.c": "int helper(void){return 0;}\n",
             "main.c": "int helper(void);\nint main(void){return helper();}\n"}
    with tarfile.open(sdist, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"tiny_project-1.0/vendor/tiny/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(EngineUnavailable, match=r"needs libhelper\.so, which the build did not put next to it"):
        build_from_sdist(tiny(), log=lambda _: None, jobs=1)
    assert cached_binary(tiny()) is None
