"""Result files: machine-readable JSON, a readable Markdown table and a PNG chart per run."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from hopgraph.files import atomic_write


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "gpus": gpus(),
    }


def gpus() -> list[str]:
    """Names and memory of the NVIDIA GPUs here (empty where there is none or no driver)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def machine_line(info: dict[str, Any]) -> str:
    gpu = f", GPU {'; '.join(info['gpus'])}" if info.get("gpus") else ""
    cores = f"{info['cpu_count']} CPU cores ({info['processor']})"
    return f"{cores}, {info['memory_gb']} GiB RAM{gpu}, {info['platform']}, Python {info['python']}"


def git_commit() -> str:
    """HEAD, with "+dirty" when tracked files other than result outputs differ from it.

    Result files are left out of the check: a run that rewrites several of them would otherwise
    mark every file after the first as dirty.
    """
    here = Path(__file__).parent
    if not (here.parents[1] / ".git").exists() and os.environ.get("HOPGRAPH_SOURCE_COMMIT"):
        # A copy of the tree without its git history (shipped to another machine) names its commit.
        return os.environ["HOPGRAPH_SOURCE_COMMIT"] + " (copy)"
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, cwd=here)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ":/", ":(exclude,top)scripts/results"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=here,
        )
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance() -> dict[str, Any]:
    return {"git_commit": git_commit(), "command": " ".join(sys.argv), "machine": machine()}


def write_json(path: Path, payload: dict[str, Any]) -> None:
    text = json.dumps(payload, indent=2, sort_keys=False, default=str)
    atomic_write(path, lambda tmp: tmp.write_text(text + "\n", encoding="utf-8"))


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def bar_chart(path: Path, labels: list[str], values: list[float], title: str, ylabel: str) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(max(4, 1.1 * len(labels) + 2), 3.6))
    bars = ax.bar(labels, values, color="#4C72B0")
    ax.bar_label(bars, fmt="%.1f")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(0, max(100.0, max(values, default=0) * 1.1))
    ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
