"""Code checks the test command runs: one-way layers (import-linter), ruff (lint and format), mypy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


def tool(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(found).exists():
        pytest.fail(f"{name} is not installed: it comes with the dev extra (pip install -e '.[dev]')")
    return found


def test_layers_point_one_way():
    out = run(tool("lint-imports"), "--no-cache")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_ruff_lint_is_clean():
    out = run(sys.executable, "-m", "ruff", "check", "hopgraph", "tests", "scripts")
    assert out.returncode == 0, out.stdout[-4000:]


def test_ruff_format_is_applied():
    out = run(sys.executable, "-m", "ruff", "format", "--check", "hopgraph")
    assert out.returncode == 0, out.stdout[-4000:]


def test_mypy_is_clean():
    out = run(sys.executable, "-m", "mypy")
    assert out.returncode == 0, out.stdout[-4000:]
