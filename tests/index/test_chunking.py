from hopgraph.config import ChunkingConfig
from hopgraph.documents import Document
from hopgraph.index.chunking import build_layers, cut_points, split_equal
from hopgraph.models import count_tokens


def _docs(n=4, sentences=40, acl=None):
    return [
        Document(
            id=f"d{i}",
            text=" ".join(f"Passage {i} sentence {j} mentions river {j % 7}." for j in range(sentences)),
            metadata={} if acl is None else {"acl": acl[i]},
        )
        for i in range(n)
    ]


def test_cut_points_cover_the_stream_with_overlap():
    windows = cut_points(1000, 300, 50)
    assert windows[0] == (0, 300) and windows[-1][1] == 1000
    assert all(b[0] == a[0] + 250 for a, b in zip(windows, windows[1:]))
    assert cut_points(0, 300, 50) == []


def test_split_equal_makes_two_to_the_tau_pieces():
    assert split_equal(0, 1200, 8) == [(i * 150, (i + 1) * 150) for i in range(8)]


def test_layers_are_consistent():
    docs = _docs()
    layers = build_layers(docs, ChunkingConfig(size=300, overlap=30, splits=2))
    assert len(layers.units) == 4 * len(layers.chunks) or len(layers.units) >= 3 * len(layers.chunks)
    assert all(t <= 300 for t in layers.chunks.tokens)
    # sub-chunks tile their chunk exactly (token counts add up)
    for c in range(len(layers.chunks)):
        parts = [t for t, p in zip(layers.units.tokens, layers.units.parent) if p == c]
        assert sum(parts) == layers.chunks.tokens[c]
    # packing lets a chunk span documents, and each piece names the documents it covers
    assert any(len(d) > 1 for d in layers.chunks.docs)
    # every sentence is whole, belongs to a document and to a sub-chunk that contains its start
    assert len(layers.sentences) == 4 * 40
    for text, docs_, unit in zip(layers.sentences.text, layers.sentences.docs, layers.sentences.parent):
        assert text in docs[docs_[0]].text and unit >= 0
        assert text.split(" sentence")[0] in layers.units.text[unit] or docs_[0] in layers.units.docs[unit]
    assert (
        abs(sum(layers.chunks.tokens) - count_tokens("\n\n".join(d.text for d in docs))) < 30 * len(layers.chunks) + 10
    )


def test_different_acls_never_share_a_chunk():
    docs = _docs(acl=[["a"], ["a"], ["b"], None])
    layers = build_layers(docs, ChunkingConfig(size=500, overlap=0, splits=0))
    for covered in layers.chunks.docs:
        keys = {tuple(docs[d].acl or ["<none>"]) for d in covered}
        assert len(keys) == 1


def test_no_packing_starts_each_document_fresh():
    layers = build_layers(_docs(), ChunkingConfig(size=2000, overlap=0, pack_documents=False))
    assert [d for d in layers.chunks.docs] == [[0], [1], [2], [3]]
