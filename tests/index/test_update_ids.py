"""Ids an update names: in one Unicode spelling (composed, NFC) whatever the way in, and indexes
built before ids were normalised still updated by either spelling (the fixtures are test_versions.py's)."""

from __future__ import annotations

import pytest

from hopgraph.documents import Document
from hopgraph.errors import InputError
from hopgraph.index import jobs, versions
from hopgraph.index.pipeline import build_index
from hopgraph.retrieve.loaded import LoadedIndex


def test_ids_are_compared_in_one_unicode_spelling(tmp_path, built, sample_documents, sample_config):  # noqa: F811
    """An id stored decomposed ("e" + U+0301, as macOS names files; indexes built before ids were
    normalised hold such ids) is replaced and deleted by its composed spelling, and the other way
    round; where both spellings are stored (a re-upload added the second), a delete takes the one named."""
    composed, decomposed = "caf\u00e9-notes", "cafe\u0301-notes"
    config = sample_config.model_copy(
        update={"embedding": sample_config.embedding.model_copy(update={"cache": str(built / "cache.sqlite")})}
    )
    old = [
        Document(id=decomposed, text=sample_documents[0].text),
        Document(id=composed, text=sample_documents[2].text),
        sample_documents[1],
    ]
    build_index(old, tmp_path / "index", config, progress=False)  # as an older hopgraph stored them
    index = tmp_path / "index"
    versions.submit_update(index, [], [composed])
    versions.run_pending(index)
    assert LoadedIndex(index).documents["id"] == [decomposed, sample_documents[1].id]  # exactly the one named
    job = versions.submit_update(index, [Document(id=composed, text="The cafe notes were rewritten in 2026.")], [])
    versions.run_pending(index)
    assert jobs.id_counts(job) == (1, 1)  # the new spelling added, the old one replaced
    assert LoadedIndex(index).documents["id"] == [sample_documents[1].id, composed]
    versions.submit_update(index, [], [decomposed])  # a decomposed delete names the composed id
    versions.run_pending(index)
    assert LoadedIndex(index).documents["id"] == [sample_documents[1].id]
    with pytest.raises(InputError, match="a URL cannot carry"):  # the Python API's way in has the id rule too
        versions.submit_update(index, [Document(id="..", text="Dots.")], [])
