import random

import numpy as np

from hopgraph.config import ChunkingConfig
from hopgraph.documents import Document
from hopgraph.index.chunking import Resume, TextLayers, build_layers, resume_point, split_equal, stream_groups
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


def _inside_a_word(stream_text: str, piece: str) -> bool:
    """Whether ``piece`` (a stripped slice of ``stream_text``) starts or ends in the middle of a word."""
    at = stream_text.index(piece)
    before = stream_text[at - 1] if at else " "
    after = stream_text[at + len(piece)] if at + len(piece) < len(stream_text) else " "
    return (before.isalnum() and piece[0].isalnum()) or (after.isalnum() and piece[-1].isalnum())


def test_no_piece_starts_or_ends_inside_a_word():
    rng = random.Random(7)
    names = ["Haddad", "Vellacourt", "Ermengarde", "Bosonid", "geologist", "Kestrelwood", "Anton", "Omar"]
    words_ = [rng.choice(names) + rng.choice(["", "s", "ian", "ogical"]) for _ in range(3000)]
    text = " ".join(words_)  # no sentence ends at all: every cut must find whitespace on its own
    docs = [Document(id="long", text=text)]
    for size, overlap in ((1200, 100), (150, 0), (97, 10)):
        layers = build_layers(docs, ChunkingConfig(size=size, overlap=overlap))
        pieces = layers.chunks.text + layers.units.text
        assert [p for p in pieces if _inside_a_word(text, p)] == []
        assert all(t <= size for t in layers.chunks.tokens)


def test_sub_chunks_end_at_sentences_where_one_is_near():
    docs = _docs(n=2, sentences=200)
    layers = build_layers(docs, ChunkingConfig(size=1200, overlap=100))
    assert len(layers.units) > 10
    assert all(text.endswith(".") for text in layers.units.text)


def test_short_passages_are_not_cut_into_tiny_sub_chunks():
    passages = [
        Document(id=f"p{i}", title=f"Bosonid {i}", text=f"Boso the Elder {i} ruled the march of Tuscany for years.")
        for i in range(20)
    ]
    layers = build_layers(passages, ChunkingConfig(size=1200, overlap=100, pack_documents=False))
    assert len(layers.units) == len(layers.chunks) == 20  # one sub-chunk per short passage, not 2^τ = 8
    assert layers.units.text == [p.text for p in passages]


def test_a_piece_names_only_the_documents_that_give_it_real_text():
    docs = [
        Document(id="a", text="Alpha beta gamma delta. " * 20),
        Document(id="stray", text="#"),
        Document(id="c", text="Epsilon zeta eta theta. " * 20),
    ]
    layers = build_layers(docs, ChunkingConfig(size=1200, overlap=100))
    assert layers.chunks.docs == [[0, 2]]


WORDS = (
    "river castle Ermengarde of Tours the king died in 1021 . Mr. Smith went to Washington ! "
    "a long-hyphenated-word and http://example.org/a/very/long/url?x=1"
).split()


def _random_document(rng: random.Random, name: str, acl=None) -> Document:
    sentences = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 25))).capitalize() + rng.choice([".", "!", "?", ""])
        for _ in range(rng.randint(0, 12))
    ]
    metadata = {"acl": acl} if acl else {}
    text = rng.choice([" ".join(sentences) or "x", " ".join(sentences) or "x", "", "  \n ", ".", " Lead space."])
    return Document(id=name, title=f"Title {name}", text=text, metadata=metadata)


def _columns(pieces) -> list[list]:
    return [pieces.text, pieces.tokens, pieces.docs, pieces.parent, pieces.starts, pieces.token_start]


def _resumed(old, new, config) -> tuple[Resume, TextLayers, TextLayers]:
    """The cut of ``new`` resumed from the cut of ``old`` (their common leading documents kept), and
    the cut of ``old``."""
    unchanged = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    before = build_layers(old, config)
    resume = resume_point(
        unchanged,
        list(stream_groups(new[:unchanged], config.pack_documents))[-1][0],
        np.asarray(before.document_tokens, dtype=np.int64),
        chunk_start=np.asarray(before.chunks.token_start),
        chunk_document=np.asarray([d[0] for d in before.chunks.docs]),
        unit_start=np.asarray(before.units.token_start),
        unit_chunk=np.asarray(before.units.parent),
        sentence_document=np.asarray([d[0] for d in before.sentences.docs]),
        size=config.size,
    )
    return resume, before, build_layers(new, config, resume=resume)


def test_a_resumed_cut_is_the_cut_of_the_whole_corpus():
    """Random corpora (ACL runs, packing on and off, every τ, small ℓ) edited by appending, deleting
    or replacing documents: the kept rows of the earlier cut followed by the resumed cut are the
    cut of the whole edited corpus, column by column."""
    kept_any = 0
    for seed in range(700):
        rng = random.Random(seed)
        size = rng.choice([16, 24, 40, 80, 150])
        overlap, splits, pack = rng.randint(0, (size - 1) // 2), rng.randint(0, 3), rng.random() < 0.8
        config = ChunkingConfig(size=size, overlap=overlap, splits=splits, pack_documents=pack)

        def acl():
            return rng.choice([None, ["a"], ["b"]]) if rng.random() < 0.3 else None

        old = [_random_document(rng, f"d{i}", acl()) for i in range(rng.randint(1, 12))]
        new = list(old)
        if rng.random() < 0.4 and len(new) > 1:
            del new[rng.randrange(len(new))]
        elif rng.random() < 0.3:
            j = rng.randrange(len(new))
            new[j] = _random_document(rng, f"r{j}", new[j].acl)
        elif rng.random() < 0.3:  # the same text under another ACL: streams split or merge
            j = rng.randrange(len(new))
            new[j] = Document(id=new[j].id, title=new[j].title, text=new[j].text, metadata={"acl": ["c"]})
        new += [_random_document(rng, f"n{k}", acl()) for k in range(rng.randint(0, 3))]
        if new[:1] != old[:1]:
            continue
        resume, before, after = _resumed(old, new, config)
        whole = build_layers(new, config)
        for name in ("chunks", "units", "sentences"):
            kept = getattr(resume, name)
            joined = [a[:kept] + b for a, b in zip(_columns(getattr(before, name)), _columns(getattr(after, name)))]
            assert joined == _columns(getattr(whole, name)), (seed, name, resume)
        assert before.document_tokens[: resume.document] + after.document_tokens == whole.document_tokens, seed
        kept_any += resume.chunks > 0
    assert kept_any > 350  # most edits keep chunks


def test_an_appended_document_re_cuts_only_the_tail_of_the_stream():
    docs = _docs(n=12)
    config = ChunkingConfig(size=40, overlap=8, splits=1)
    resume, before, after = _resumed(docs, [*docs, Document(id="new", text="A new passage about river 3.")], config)
    assert resume.document == 11 and resume.chunks >= len(before.chunks) - 4
    assert len(after.document_tokens) == 2  # only the last two documents analysed


# A passage and one appended to it (from a random corpus) where a kept chunk's next start needs the slack.
BEFORE = (
    "And! Went mr. tours went tours washington of http://example.org/a/very/long/url?x=1 a king "
    "! and to to went of ! smith and . ermengarde died .? 1021 king . "
    "http://example.org/a/very/long/url?x=1 and washington washington mr. . tours! Washington "
    "http://example.org/a/very/long/url?x=1 mr. ermengarde . and of the. To in to in went the "
    "died a the the a castle in ermengarde. Went http://example.org/a/very/long/url?x=1 and "
    "smith castle mr. ! Castle in a the http://example.org/a/very/long/url?x=1 to "
    "http://example.org/a/very/long/url?x=1 1021 went of 1021 tours washington ermengarde 1021 "
    "washington . 1021 long-hyphenated-word http://example.org/a/very/long/url?x=1 of mr. mr. "
    "the !!"
)
ADDED = (
    "Long-hyphenated-word died . 1021 mr. of of castle a in . died in the! Mr. "
    "http://example.org/a/very/long/url?x=1 and the smith smith smith and to to 1021 of went in "
    "a ermengarde! Of mr. tours a the mr. died died 1021 king in? River king king tours in to "
    "and of went a ! went 1021 1021 and a the .! Ermengarde and "
    "http://example.org/a/very/long/url?x=1 to the king a a and? To a and. Castle in king ! ! "
    "tours ermengarde went A long-hyphenated-word and ermengarde smith long-hyphenated-word "
    "king tours king mr. king died long-hyphenated-word tours . went tours died died went "
    "washington in of mr."
)


def test_a_kept_chunk_decides_the_next_start_without_the_changed_text():
    """With an overlap below the slack, where the chunk after a kept one starts is searched up to
    size + slack - overlap tokens past the kept chunk's start: a chunk is kept only where that
    search ends before the changed text (here it would reach the appended document's first
    sentence, and the cut would differ from the whole corpus's)."""
    old = [Document(id="a", text=BEFORE)]
    new = [*old, Document(id="b", text=ADDED)]
    config = ChunkingConfig(size=80, overlap=7, splits=0)
    resume, before, after = _resumed(old, new, config)
    whole = build_layers(new, config)
    assert resume.chunks > 0
    assert before.chunks.text[: resume.chunks] + after.chunks.text == whole.chunks.text
