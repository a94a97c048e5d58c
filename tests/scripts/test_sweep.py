"""scripts/sweep.py, the one way retrieval settings are tuned: checked before it works, recorded
with the settings it measured under, and a stopped sweep goes on where it stopped."""

from __future__ import annotations

import json
import subprocess
import sys

from hopgraph.config import load_config
from hopgraph.evaluate.runner import evaluate
from tests.conftest import REPO, SAMPLE_SETTINGS
from tests.evaluate.test_runner import musique_file


def sweep(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "sweep.py"), *args], capture_output=True, text=True, check=False
    )


def test_a_sweep_is_checked_first_recorded_whole_and_goes_on_after_a_stop(tmp_path, sample_index):
    data, index = musique_file(tmp_path / "musique.jsonl"), tmp_path / "index"
    evaluate(data, index, load_config(None, SAMPLE_SETTINGS), ["text"], progress=False)  # the dataset's index
    out = tmp_path / "sweep.json"
    common = [str(data), "--index", str(index), "--method", "ppr", "--out", str(out)]
    # A grid value that is not a list failed with a traceback after every question was embedded.
    for grid, said in (('{"ppr.damping": 0.5}', "non-empty lists"), ('{"ppr.dampin": [0.5]}', "ppr.dampin")):
        refused = sweep(*common, "--grid", grid)
        assert refused.returncode == 1 and said in refused.stderr and "Traceback" not in refused.stderr
    # Another corpus's index scored 0 everywhere without a word.
    other = sweep(
        str(data),
        "--index",
        str(sample_index),
        "--method",
        "ppr",
        "--out",
        str(out),
        "--grid",
        '{"ppr.damping": [0.5]}',
    )
    assert other.returncode == 1 and "lacks" in other.stderr and not out.exists()
    assert sweep(*common, "--grid", '{"ppr.damping": [0.5]}').returncode == 0
    first = json.loads(out.read_text())
    assert first["index_build_settings"]["chunking"]["size"] == SAMPLE_SETTINGS["chunking.size"]
    assert first["base_retrieval"]["method"] and [r["ppr.damping"] for r in first["results"]] == [0.5]
    # The same sweep with one more value: the finished row is kept, only the new one runs.
    grown = sweep(*common, "--grid", '{"ppr.damping": [0.5, 0.85]}')
    assert grown.returncode == 0 and len(grown.stdout.splitlines()) == 1, grown.stdout
    assert [r["ppr.damping"] for r in json.loads(out.read_text())["results"]] == [0.5, 0.85]
