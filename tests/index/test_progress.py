"""Whole-run progress of a build: one bar from 0 to 100% naming the corpus's documents and tokens,
with an estimate of the time left, that moves within a stage as its texts are embedded."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hopgraph.index import context, pipeline
from tests.conftest import SAMPLE
from tests.test_cli import SMALL

LINE = re.compile(r"^index:\s+(\d+)%\|[^|]*\| (\d\d:\d\d)<([0-9:?]+), (.*)$")


def index_lines(stderr: str) -> list[tuple[int, str, str]]:
    """(percent, time left, postfix) of every display of the build's bar, in order."""
    found = []
    for segment in re.split(r"[\r\n]", stderr):
        match = LINE.match(segment.strip())
        if match:
            found.append((int(match[1]), match[3], match[4].strip()))
    return found


def test_cli_index_shows_documents_tokens_and_time_left_over_the_whole_run(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hopgraph.cli", "index", str(SAMPLE), "--out", str(tmp_path / "idx"), *SMALL],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    tokens = int(re.search(r"\btokens=(\d+)", out.stdout)[1])  # type: ignore[index]
    shown = index_lines(out.stderr)
    assert len(shown) >= 8, out.stderr
    percents = [p for p, _, _ in shown]
    assert percents == sorted(percents) and percents[-1] == 100, "the bar runs once, from 0 to 100%"
    assert all("documents=7, tokens=" in postfix for _, _, postfix in shown)
    assert shown[-1][2] == f"done, documents=7, tokens={tokens:,}"
    assert any(re.fullmatch(r"stage 4/\d+ embed_units, .*", postfix) for _, _, postfix in shown)
    assert any(left != "?" for _, left, _ in shown[:-1]), "an estimate of the time left is shown while it runs"


def test_bar_moves_within_a_stage_as_texts_are_embedded(
    tmp_path: Path, sample_documents, sample_config, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(context, "EMBED_SLICE", 4)  # a slice per 4 texts: the sample's sentences take many
    pipeline.build_index(sample_documents, tmp_path / "idx", sample_config, progress=True)
    names = [name for name, _ in pipeline.planned_stages(sample_config)]
    stage, share = names.index("embed_sentences"), 100 / len(names)
    inside = {p for p, _, postfix in index_lines(capsys.readouterr().err) if "embed_sentences" in postfix}
    assert any(stage * share < p < (stage + 1) * share for p in inside), inside


def test_a_resumed_build_counts_only_the_work_left(tmp_path: Path, sample_documents, sample_config, capsys) -> None:
    pipeline.build_index(sample_documents, tmp_path / "idx", sample_config, progress=False, stop_after="embed_units")
    pipeline.build_index(sample_documents, tmp_path / "idx", sample_config, progress=True)
    shown = index_lines(capsys.readouterr().err)
    first_run = next(i for i, (_, _, postfix) in enumerate(shown) if re.match(r"stage 5/\d+ embed_sentences,", postfix))
    assert all("(done earlier)" in postfix for _, _, postfix in shown[1:first_run])
    assert shown[first_run][0] == 0, "stages done earlier take no share of the bar"
    assert shown[-1][0] == 100 and shown[-1][2].startswith("done,")
    pipeline.build_index(sample_documents, tmp_path / "idx", sample_config, progress=True)  # nothing left to do
    assert index_lines(capsys.readouterr().err)[-1][:1] == (100,)
