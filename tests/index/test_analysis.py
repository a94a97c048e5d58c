"""Per-text analysis is cached by content: an insert analyses the texts it brings, not the corpus."""

from __future__ import annotations

import shutil

from hopgraph.config import ExtractionConfig
from hopgraph.documents import Document
from hopgraph.index import versions
from hopgraph.index.pipeline import build_index
from hopgraph.store import IndexStore, version_dir

ADDED = Document(
    id="tem-observatory",
    title="Tem Observatory",
    text="The Tem Observatory opened in 1994 on the highest hill of Tem island. Its main telescope was designed by "
    "the optician Ilse Marwick. The observatory records the weather for the ferry company of Sorvik.",
)


def test_inserting_a_document_analyses_only_its_own_texts(tmp_path, sample_documents, sample_config):
    cache = tmp_path / "cache"
    config = sample_config.model_copy(
        update={
            "embedding": sample_config.embedding.model_copy(update={"cache": str(cache / "vectors.sqlite")}),
            "extraction": ExtractionConfig(cue_alpha=0.0),  # CUE without the LLM: punkt units, spaCy entities
        }
    )
    base = build_index(sample_documents[:5], tmp_path / "index", config, progress=False)
    assert base["stages"]["chunks"]["analysed_new"] == 5  # the first build analyses every document
    versions.submit_update(tmp_path / "index", [ADDED], [])
    [job] = versions.run_pending(tmp_path / "index")
    updated = IndexStore(version_dir(tmp_path / "index", job["id"]))
    stages = updated.read_manifest()["stages"]
    # Chunking tokenised and sentence-split the new document only, and read from the cache only the
    # document before it: the cut resumes there, the others' pieces are kept.
    assert (stages["chunks"]["analysed_new"], stages["chunks"]["analysed_cached"]) == (1, 1)
    # CUE split into sentences only the chunks whose text the base version did not have.
    old_chunks = set(IndexStore(tmp_path / "index").read_table("chunks")["text"])
    new_chunks = set(updated.read_table("chunks")["text"]) - old_chunks
    assert stages["cue_graph"]["analysed_new"] == len(new_chunks) > 0
    # The result is the index a build of the final corpus makes without any analysis cache.
    fresh = tmp_path / "fresh-cache"
    fresh.mkdir()
    for path in cache.glob("vectors.sqlite*"):  # the same vectors, so the comparison is exact
        shutil.copy(path, fresh / path.name)
    rebuilt = config.model_copy(
        update={"embedding": config.embedding.model_copy(update={"cache": str(fresh / "vectors.sqlite")})}
    )
    build_index([*sample_documents[:5], ADDED], tmp_path / "rebuilt", rebuilt, progress=False)
    compared, differ = updated.differences(IndexStore(tmp_path / "rebuilt"))
    assert compared > 20 and differ == []
