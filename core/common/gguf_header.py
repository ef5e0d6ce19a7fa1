"""The key/value section and tensor table of a GGUF file, read from its bytes without decoding its vocabulary.

The ``gguf`` package's reader decodes every array, tokenizer strings and merges included: 2-6 s per file on
SmolLM2's 49k vocabulary on a 2-core box, more on 150k vocabularies, and a run reads each arm's target and draft
(preflight, roofline). What bakeoff needs is a few scalars, short per-layer arrays and the tensor table, so
string arrays and long arrays are stepped over, never built.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["GgufHeader", "GgufTensor", "read_gguf_header"]

# GGUF value types (the format's numbering) and the struct codes of the fixed-size ones
_STRING, _ARRAY = 8, 9
_FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_SHORT_ARRAY = 4096  # numeric arrays up to this length are kept (per-layer head counts); longer ones are skipped


@dataclass(frozen=True)
class GgufTensor:
    name: str
    shape: tuple[int, ...]  # in file order (ne0 first), as the gguf package reports it
    ggml_type: int

    @property
    def n_bytes(self) -> int:
        """Bytes of the tensor's data: elements over the type's block size, times the block's bytes.

        :raises ValueError: a type this gguf package does not know."""
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        try:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(self.ggml_type)]
        except ValueError as exc:
            raise ValueError(f"tensor {self.name} has unknown ggml type {self.ggml_type}") from exc
        elements = 1
        for n in self.shape:
            elements *= n
        return elements * size // block


@dataclass(frozen=True)
class GgufHeader:
    values: dict[str, Any]  # None for a string array or a long array (stepped over)
    tensors: tuple[GgufTensor, ...]

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def count(self, key: str) -> int | None:
        """An integer header value; None when the key is absent.

        :raises ValueError: the value is not an integer (the file is then not a GGUF llama.cpp would read).
        """
        value = self.values.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{key} is {str(value)[:40]!r}, not an integer")
        return value


class _Cursor:
    def __init__(self, buf: memoryview) -> None:
        if bytes(buf[:4]) != b"GGUF":
            raise ValueError("no GGUF magic")
        (version,) = struct.unpack_from("<I", buf, 4)
        self.order = ">" if version & 0xFFFF == 0 else "<"  # a big-endian file's version reads byte-swapped
        self.buf, self.pos = buf, 8
        self.length = struct.Struct(self.order + "Q").unpack_from

    def unpack(self, codes: str) -> tuple[Any, ...]:
        fmt = self.order + codes
        out = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return out

    def string(self) -> str:
        (n,) = self.unpack("Q")
        if self.pos + n > len(self.buf):
            raise ValueError("a string runs past the end of the file")
        text = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return text

    def value(self, kind: int) -> Any:
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            return self.array()
        if kind not in _FIXED:
            raise ValueError(f"unknown value type {kind}")
        return self.unpack(_FIXED[kind])[0]

    def array(self) -> list[Any] | None:
        item, count = self.unpack("IQ")
        if item in _FIXED:
            if count <= _SHORT_ARRAY:
                return list(self.unpack(_FIXED[item] * count))
            self.pos += struct.calcsize(_FIXED[item]) * count
        elif item == _STRING:  # each string is length-prefixed: walk the lengths only
            buf, pos, length = self.buf, self.pos, self.length
            for _ in range(count):
                pos += 8 + length(buf, pos)[0]
            self.pos = pos
        else:
            for _ in range(count):
                self.value(item)
        return None


def _parse(buf: memoryview) -> GgufHeader:
    cur = _Cursor(buf)
    n_tensors, n_kv = cur.unpack("QQ")
    values: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        values[key] = cur.value(cur.unpack("I")[0])
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        (dims,) = cur.unpack("I")
        shape = cur.unpack("Q" * dims)
        ggml_type, _offset = cur.unpack("IQ")
        tensors.append(GgufTensor(name, tuple(shape), ggml_type))
    return GgufHeader(values, tuple(tensors))


def read_gguf_header(path: str | Path) -> GgufHeader:
    """The header of a GGUF file (cached per file version: a plan reads the same model for several arms).

    :raises ValueError: the file is not a readable GGUF (the message names the file and why).
    """
    p = Path(path).resolve()
    try:
        st = p.stat()
    except OSError as exc:
        raise ValueError(f"{p} is not a readable GGUF file: {exc.strerror}") from exc
    return _read(p, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _read(p: Path, size: int, mtime_ns: int) -> GgufHeader:
    try:
        with (p.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
              memoryview(mapped) as buf):
            return _parse(buf)
    except (OSError, ValueError, struct.error) as exc:
        raise ValueError(f"{p} is not a readable GGUF file: {exc}") from exc
