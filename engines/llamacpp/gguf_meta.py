"""Read the few GGUF facts bakeoff's preflight needs, with the ``gguf`` reader (header + tensor names).

llama.cpp decides which speculative path it can run from these: MTP needs
``<arch>.nextn_predict_layers > 0`` (or a ``blk.N.nextn.eh_proj.weight`` tensor in a separate MTP
file); DFlash/DSpark drafts have architecture ``dflash`` (DSpark adds ``markov_w1.weight``; DFlash2 sets
``dflash.selector_top_k > 0``); EAGLE3 drafts have architecture ``eagle3``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["GgufFacts", "read_gguf_facts"]


@dataclass(frozen=True)
class GgufFacts:
    path: Path
    architecture: str
    nextn_layers: int
    has_nextn_tensor: bool
    has_markov_head: bool
    selector_top_k: int
    block_size: int | None

    @property
    def has_mtp(self) -> bool:
        return self.nextn_layers > 0 or self.has_nextn_tensor

    @property
    def draft_kind(self) -> str:
        """What llama.cpp would take this file for as a draft: dspark, dflash2, dflash, eagle3, mtp or plain."""
        if self.architecture == "dflash":
            if self.has_markov_head:
                return "dspark"
            return "dflash2" if self.selector_top_k > 0 else "dflash"
        if self.architecture == "eagle3":
            return "eagle3"
        return "mtp" if self.has_nextn_tensor else "plain"


def _scalar(reader: object, key: str) -> object | None:
    field = reader.get_field(key)  # type: ignore[attr-defined]
    return field.contents() if field is not None else None


def read_gguf_facts(path: str | Path) -> GgufFacts:
    """Header facts of a GGUF file (cached per file version: the reader parses every tokenizer string,
    about 2 s for a 49k vocabulary, and a plan reads the same model for several arms).

    :raises ValueError: the file is not a readable GGUF.
    """
    p = Path(path).resolve()
    try:
        st = p.stat()
    except OSError as exc:
        raise ValueError(f"{p} is not a readable GGUF file: {exc.strerror}") from exc
    return _read_facts(p, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _read_facts(p: Path, size: int, mtime_ns: int) -> GgufFacts:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(p)
    except Exception as exc:  # the reader raises ValueError/struct.error/OSError on bad files
        raise ValueError(f"{p} is not a readable GGUF file: {exc}") from exc
    arch = str(_scalar(reader, "general.architecture") or "")
    names = [t.name for t in reader.tensors]
    block_size = _scalar(reader, f"{arch}.block_size")
    return GgufFacts(
        path=p,
        architecture=arch,
        nextn_layers=int(_scalar(reader, f"{arch}.nextn_predict_layers") or 0),  # type: ignore[call-overload]
        has_nextn_tensor=any(n.endswith(".nextn.eh_proj.weight") for n in names),
        has_markov_head=any(n.startswith("markov_w1") or ".markov_w1" in n for n in names),
        selector_top_k=int(_scalar(reader, f"{arch}.selector_top_k") or 0),  # type: ignore[call-overload]
        block_size=int(block_size) if block_size is not None else None,  # type: ignore[call-overload]
    )
