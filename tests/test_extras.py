"""Extras that messages and docs tell users to install exist in pyproject.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from hopgraph.index.cluster import MISSING_RAY

REPO = Path(__file__).resolve().parents[1]


def test_the_extra_named_by_the_ray_engine_exists_and_brings_ray_data() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    named = re.findall(r"hopgraph\[(\w+)\]", MISSING_RAY)
    assert named == ["cluster"]
    requirements = " ".join(extras["cluster"])
    assert "ray[data,client]" in requirements and "aiohttp" in requirements  # client: ray:// addresses
