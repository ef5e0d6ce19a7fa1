"""How every table prints a number: fixed digits, and a dash for "not measured"."""

from __future__ import annotations

__all__ = ["DASH", "fmt"]

DASH = "–"


def fmt(v: float | None, digits: int = 1) -> str:
    return DASH if v is None else f"{v:.{digits}f}"
