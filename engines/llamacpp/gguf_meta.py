"""Read the few GGUF facts bakeoff's preflight needs from the file's header (key/values + tensor names).

llama.cpp decides which speculative path it can run from these: MTP needs
``<arch>.nextn_predict_layers > 0`` (or a ``blk.N.nextn.eh_proj.weight`` tensor in a separate MTP
file); DFlash/DSpark drafts have architecture ``dflash`` (DSpark adds ``markov_w1.weight``; DFlash2 sets
``dflash.selector_top_k > 0``); EAGLE3 drafts have architecture ``eagle3``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bakeoff.core import read_gguf_header

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


def read_gguf_facts(path: str | Path) -> GgufFacts:
    """Header facts of a GGUF file.

    :raises ValueError: the file is not a readable GGUF.
    """
    header = read_gguf_header(path)
    p = Path(path).resolve()
    arch = str(header.get("general.architecture") or "")
    names = [t.name for t in header.tensors]
    try:
        nextn, top_k, block_size = (header.count(f"{arch}.{key}")
                                    for key in ("nextn_predict_layers", "selector_top_k", "block_size"))
    except ValueError as exc:
        raise ValueError(f"{p} is not a readable GGUF file: {exc}") from exc
    return GgufFacts(
        path=p,
        architecture=arch,
        nextn_layers=nextn or 0,
        has_nextn_tensor=any(n.endswith(".nextn.eh_proj.weight") for n in names),
        has_markov_head=any(n.startswith("markov_w1") or ".markov_w1" in n for n in names),
        selector_top_k=top_k or 0,
        block_size=block_size,
    )
