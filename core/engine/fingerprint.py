"""An arm's configuration fingerprint (core/config/fingerprint.py) with what only the engine layer knows: the
adapter's declarations (build options, default variants, implied settings, its Options model) and the
identity of the model files.

A model is identified by its content, not its path, so the same GGUF in two caches is one model: a file by its
name, size and the SHA-256 of its first 16 MiB (a GGUF's header, metadata and tensor index, which tell
quantizations and conversions apart, read in milliseconds even for a 100 GB file); a directory (safetensors)
by its name and a hash of every file's relative path and size plus the content of its small JSON files
(config, tokenizer config). A reference that names no local file (a served model id) is kept as written.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from ..config.fingerprint import ArmFingerprint, canonical_arm, fingerprint_of
from ..config.prompts import resolve_prompts
from ..config.schema import Arm, Workload
from .contract import EngineAdapter
from .models import BUILTIN_MODELS, cached_builtin

__all__ = ["arm_fingerprint", "model_identity", "HEAD_BYTES"]

HEAD_BYTES = 16 << 20
_SMALL_JSON = 1 << 20


def _file_identity(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        digest.update(f.read(HEAD_BYTES))
    return {"name": path.name, "bytes": path.stat().st_size, "head_sha256": digest.hexdigest()[:16]}


def _dir_identity(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = item.relative_to(path).as_posix()
        size = item.stat().st_size
        digest.update(f"{rel}\0{size}\0".encode())
        if item.suffix == ".json" and size <= _SMALL_JSON:
            digest.update(item.read_bytes())
    return {"name": path.name, "tree_sha256": digest.hexdigest()[:16]}


@functools.lru_cache(maxsize=64)
def _identity_of(resolved: str, size: int, mtime_ns: int) -> dict[str, Any]:
    path = Path(resolved)
    return _dir_identity(path) if path.is_dir() else _file_identity(path)


def model_identity(reference: str) -> Any:
    """What identifies a model's content (see the module docstring); the reference itself when it names no
    local file or directory, or a built-in not fetched yet (nothing is downloaded for a fingerprint)."""
    if reference in BUILTIN_MODELS:
        path = cached_builtin(reference)
    else:
        local = Path(reference).expanduser()
        path = local if local.exists() else None
    if path is None:
        return reference
    try:
        stat = path.stat()
        return _identity_of(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    except OSError:
        return reference


def arm_fingerprint(adapter: EngineAdapter, arm: Arm, workload: Workload) -> ArmFingerprint:
    """The fingerprint of ``arm`` run by ``adapter`` with its effective ``workload`` (request overrides applied).

    :raises ConfigError: the arm's options or prompts do not validate (as at plan time).
    """
    caps = adapter.capabilities
    options = adapter.options(arm).model_dump(mode="json", exclude_defaults=True)
    canonical = canonical_arm(arm, workload, resolve_prompts(workload), engine_options=options,
                              build_options=caps.build_options, default_variants=caps.default_variants,
                              setting_defaults=caps.setting_defaults, model_identity=model_identity)
    return fingerprint_of(canonical)
