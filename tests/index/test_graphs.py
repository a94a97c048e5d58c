"""Graph builders on the indexed sample corpus, checked against their definitions computed by brute force."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from hopgraph.index import graphs
from hopgraph.kernels import normalize_rows
from hopgraph.store import IndexStore


@pytest.fixture(scope="module")
def parts(sample_index):
    store = IndexStore(sample_index)
    return store.read_array("chunk_vectors"), store.read_graph("postings_chunks"), store.read_array("keyword_vectors")


def brute_knn(
    vectors: np.ndarray, postings: sp.csr_matrix, k: int, max_df: float, max_postings: int
) -> set[tuple[int, int]]:
    """KET Alg. 3 lines 2–7 written out: top ⌈K/2⌉ by shared keywords, then top ⌊K/2⌋ by cosine not yet chosen."""
    binary = (postings > 0).astype(np.int64).toarray()
    df = binary.sum(axis=0)
    binary = binary[:, df <= max(min(max_df * len(binary), max_postings), 2)]
    shared = binary @ binary.T
    cosine = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    n, edges = len(vectors), set()
    for i in range(n):
        others = [j for j in range(n) if j != i]
        lexical = [j for j in sorted(others, key=lambda j: (-shared[i, j], j)) if shared[i, j] > 0][: (k + 1) // 2]
        semantic = [j for j in sorted(others, key=lambda j: (-cosine[i, j], j)) if j not in lexical][: k // 2]
        for j in lexical + semantic:
            edges |= {(i, j), (j, i)}
    return edges


@pytest.mark.parametrize("k", [1, 2, 4])
def test_knn_graph_matches_the_definition(parts, k):
    vectors, postings, _ = parts
    graph = graphs.knn_graph(vectors, postings, k, max_df=0.5, max_postings=500, exact_limit=10_000)
    rows, cols = graph.nonzero()
    assert set(zip(rows.tolist(), cols.tolist())) == brute_knn(vectors, postings, k, 0.5, 500)
    assert (graph != graph.T).nnz == 0 and graph.diagonal().sum() == 0


def test_max_postings_caps_common_keywords(parts):
    vectors, postings, _ = parts
    capped = graphs.knn_graph(vectors, postings, 2, max_df=1.0, max_postings=3, exact_limit=10_000)
    rows, cols = capped.nonzero()
    assert set(zip(rows.tolist(), cols.tolist())) == brute_knn(vectors, postings, 2, 1.0, 3)


def test_approximate_cosine_side_agrees_with_exact_on_clustered_vectors():
    pytest.importorskip("faiss")  # a core dependency; absent only on bare GPU test machines
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((40, 32))
    vectors = normalize_rows(centers[rng.integers(0, 40, 4000)] + 0.3 * rng.standard_normal((4000, 32)))
    no_words = sp.csr_matrix((4000, 1), dtype=np.float32)
    exact = graphs.knn_graph(vectors, no_words, 2, max_df=0.5, max_postings=500, exact_limit=10_000)
    approximate = graphs.knn_graph(vectors, no_words, 2, max_df=0.5, max_postings=500, exact_limit=100)
    agreement = exact.multiply(approximate).nnz / exact.nnz
    assert agreement > 0.98, agreement


def test_concept_graph_edges_and_dice_weights(parts):
    _, postings, keyword_vectors = parts
    keyword_chunks = postings.T.tocsr()
    theta_sem, theta_co = 0.3, 2
    graph = graphs.concept_graph(keyword_vectors, keyword_chunks, theta_sem=theta_sem, theta_co=theta_co)
    binary = (keyword_chunks > 0).astype(np.int64)
    co = (binary @ binary.T).toarray()
    sizes = np.asarray(binary.sum(axis=1)).ravel()
    cosine = keyword_vectors @ keyword_vectors.T
    expected = (co >= theta_co) & (cosine >= theta_sem)
    np.fill_diagonal(expected, False)
    assert expected.sum() > 0
    assert np.array_equal(graph.toarray() > 0, expected)
    i, j = np.nonzero(expected)
    np.testing.assert_allclose(graph.toarray()[i, j], 2 * co[i, j] / (sizes[i] + sizes[j]), rtol=1e-6)


def test_core_chunks_follow_concept_rank(parts):
    _, postings, keyword_vectors = parts
    concepts = graphs.concept_graph(keyword_vectors, postings.T.tocsr(), theta_sem=0.3, theta_co=2)
    rank = graphs.node_rank(concepts, 0.85)
    assert rank.sum() == pytest.approx(1.0)
    chunk_scores = graphs.chunk_rank_from_concepts(postings, rank)
    expected = [
        rank[postings.indices[postings.indptr[c] : postings.indptr[c + 1]]].sum() for c in range(postings.shape[0])
    ]
    np.testing.assert_allclose(chunk_scores, expected, rtol=1e-9)
    core = graphs.core_chunks(chunk_scores, 0.5)
    assert len(core) == int(np.ceil(0.5 * len(chunk_scores)))
    assert chunk_scores[core].min() >= np.delete(chunk_scores, core).max()


def _exact(vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return graphs.cosine_candidates(vectors, k, exact_limit=len(vectors))


def test_patched_cosine_candidates_are_an_exact_search_where_the_edited_ones_were():
    rng = np.random.default_rng(3)
    before = normalize_rows(rng.standard_normal((3000, 24)))
    old_scores, old_indices = _exact(before, 4)
    # The new version: 10 chunks deleted, the rest reordered, 25 new chunks and a repeat of an old one.
    kept = rng.permutation(np.setdiff1d(np.arange(3000), rng.choice(3000, 10, replace=False)))
    after = np.concatenate([before[kept], normalize_rows(rng.standard_normal((25, 24))), before[kept[:1]]])
    same_as = np.concatenate([kept, np.full(26, -1)])
    same_as[-1] = kept[0]  # the repeat maps to the same old row as its first copy
    patched = graphs.patched_cosine_candidates(after, same_as, old_scores, old_indices)
    assert patched is not None
    scores, indices, searched = patched
    exact_scores, exact_indices = _exact(after, 4)
    assert np.array_equal(indices, exact_indices)
    assert np.allclose(scores, exact_scores, atol=1e-6)
    # Searched again: the 26 rows not taken over and the rows that lost a candidate, not the rest.
    lost = np.isin(old_indices[kept], np.setdiff1d(np.arange(3000), kept)).any(axis=1).sum()
    assert 26 < searched == 26 + lost < graphs.PATCH_ROWS_PER_ROOT * np.sqrt(len(after))


def test_patching_gives_way_to_a_fresh_search_when_much_changed():
    rng = np.random.default_rng(4)
    before = normalize_rows(rng.standard_normal((200, 16)))
    old_scores, old_indices = _exact(before, 2)
    added = 300
    assert added > graphs.PATCH_ROWS_PER_ROOT * np.sqrt(200 + added)
    after = np.concatenate([before, normalize_rows(rng.standard_normal((added, 16)))])
    same_as = np.concatenate([np.arange(200), np.full(added, -1)])
    assert graphs.patched_cosine_candidates(after, same_as, old_scores, old_indices) is None
    # Candidates that do not fit the rows they are said to be of are not patched either.
    assert graphs.patched_cosine_candidates(before, np.arange(200), old_scores[:, :1], old_indices) is None
    assert graphs.patched_cosine_candidates(before, np.arange(200) + 1, old_scores, old_indices) is None


def test_a_patch_searches_rows_again_where_a_candidate_is_missing_and_sorts_ties_by_new_index():
    """Integer vectors (many exact ties) in reverse order: kept rows are sorted again by their new
    numbers, so the patch holds the scores of an exact search, and its indices wherever no tie
    straddles the last place; a row FAISS left a slot empty in (-1) is searched again."""
    vectors = np.random.default_rng(5).integers(-2, 3, size=(2000, 6)).astype(np.float32)
    old_scores, old_indices = _exact(vectors, 4)
    old_indices[11, -1] = -1
    after = vectors[::-1]
    patched = graphs.patched_cosine_candidates(after, np.arange(2000)[::-1].copy(), old_scores, old_indices)
    assert patched is not None
    scores, indices, searched = patched
    assert searched == 1  # the row with the empty slot
    exact_scores, exact_indices = graphs.cosine_candidates(after, 4, exact_limit=2000)
    np.testing.assert_array_equal(scores, exact_scores)
    full_scores = graphs.cosine_candidates(after, 6, exact_limit=2000)[0]  # two places past the last
    untied = full_scores[:, 3] > full_scores[:, 4]
    assert untied.sum() > 100
    np.testing.assert_array_equal(indices[untied], exact_indices[untied])


def _postings(rng: np.random.Generator, rows: int, words: int, per_row: int) -> sp.csr_matrix:
    """Random binary postings, a few frequent words (so some cross the max_postings line) and many rare ones."""
    weights = 1.0 / np.arange(1, words + 1) ** 0.9
    columns = [
        rng.choice(words, size=int(rng.integers(1, per_row)), replace=False, p=weights / weights.sum())
        for _ in range(rows)
    ]
    indptr = np.r_[0, np.cumsum([len(c) for c in columns])]
    return sp.csr_matrix((np.ones(indptr[-1], np.float32), np.concatenate(columns), indptr), shape=(rows, words))


@pytest.mark.parametrize("k", [2, 5])
def test_patched_lexical_neighbours_are_exactly_the_fresh_ones(k):
    """An update's lexical neighbours, patched from the edited version's lists, are the lists a
    rebuild counts: chunks deleted, changed and added, and keywords crossing the max_postings line
    (ties are many: counts are small integers)."""
    rng = np.random.default_rng(11)
    before = _postings(rng, 1500, 400, 9)
    kept = np.setdiff1d(np.arange(1500), rng.choice(1500, 12, replace=False))  # unchanged chunks keep their order
    changed = rng.choice(len(kept), 5, replace=False)
    rows = before[kept].tolil()
    fresh = _postings(rng, 5 + 30, 400, 9)
    for i, c in enumerate(changed):
        rows[c] = fresh[i].toarray()
    after = sp.vstack([rows.tocsr(), fresh[5:]]).tocsr()
    same_as = np.concatenate([kept, np.full(30, -1)])
    same_as[changed] = -1
    frequency_before = np.asarray((before > 0).sum(axis=0)).ravel()
    frequency = np.asarray((after > 0).sum(axis=0)).ravel()
    # The max_postings line: the lowest frequency above 20 that moved, so keywords cross it.
    moved = (frequency != frequency_before) & (np.minimum(frequency, frequency_before) > 20)
    line = int(np.minimum(frequency, frequency_before)[moved].min())
    assert ((frequency_before > line) != (frequency > line)).any()
    settings = {"max_df": 1.0, "max_postings": line}
    old_counts, old_indices = graphs.lexical_candidates(before, k, **settings)

    def patch(same_as: np.ndarray, k: int):
        return graphs.patched_lexical_candidates(
            after, same_as, old_counts, old_indices, frequency_before, k, **settings
        )

    patched = patch(same_as, k)
    assert patched is not None
    counts, indices, searched = patched
    fresh_counts, fresh_indices = graphs.lexical_candidates(after, k, **settings)
    np.testing.assert_array_equal(indices, fresh_indices)
    np.testing.assert_array_equal(counts, fresh_counts)
    assert 35 <= searched < len(same_as) / 4  # the changed and new chunks and a few more, not all
    # Lists that do not fit (another k, or unchanged chunks out of order) are not patched.
    assert patch(same_as, k + 2) is None
    assert patch(same_as[::-1].copy(), k) is None


def _edited_keywords(rng: np.random.Generator, chunks_added: int, vectors_changed: int):
    """An edited version's keyword × chunk postings and vectors, and an edit of them: keywords
    renumbered (some gone, some new), the last chunks replaced by others, some vectors changed. Returns
    (old postings, old vectors, new postings, new vectors, same_as) where ``same_as`` is what
    PreviousVersion.same_rows gives: the old keyword whose vector is bitwise the new one's."""
    old_keywords, chunks, dim = 400, 600, 3  # few dimensions: many pairs pass θ_sem
    old_postings = sp.random(old_keywords, chunks, density=0.0125, random_state=rng, format="csr", dtype=np.float32)
    old_postings.data[:] = 1.0
    old_vectors = normalize_rows(rng.standard_normal((old_keywords, dim)).astype(np.float32))
    kept = np.sort(rng.choice(old_keywords, 390, replace=False))
    new_keywords = len(kept) + 12
    order = rng.permutation(new_keywords)  # new numbers: a sorted vocabulary shifts them all
    new_of_kept, fresh = order[: len(kept)], order[len(kept) :]
    columns = old_postings[kept][:, :-2].toarray()  # the last two chunks cut again (an insert re-cuts the tail)
    added = (rng.random((new_keywords, chunks_added)) < 0.0125).astype(np.float32)
    dense = np.zeros((new_keywords, columns.shape[1]), np.float32)
    dense[new_of_kept] = columns
    new_postings = sp.csr_matrix(np.concatenate([dense, added], axis=1))
    new_vectors = np.zeros((new_keywords, dim), np.float32)
    new_vectors[new_of_kept] = old_vectors[kept]
    new_vectors[fresh] = normalize_rows(rng.standard_normal((len(fresh), dim)).astype(np.float32))
    changed = rng.choice(new_of_kept, vectors_changed, replace=False)
    new_vectors[changed] = normalize_rows(rng.standard_normal((vectors_changed, dim)).astype(np.float32))
    same_as = np.full(new_keywords, -1, dtype=np.int64)
    same_as[new_of_kept] = kept
    same_as[changed] = -1
    return old_postings, old_vectors, new_postings, new_vectors, same_as


def test_a_patched_concept_graph_is_bitwise_the_fresh_one():
    """An update counts again only the pairs of keywords whose chunks or vectors changed; the rest
    keep the edited version's edges, renumbered, and the result is the fresh graph bit for bit."""
    theta = {"theta_sem": 0.5, "theta_co": 2}
    for seed in range(5):
        old_postings, old_vectors, postings, vectors, same_as = _edited_keywords(np.random.default_rng(seed), 4, 10)
        old_graph = graphs.concept_graph(old_vectors, old_postings, **theta)
        fresh = graphs.concept_graph(vectors, postings, **theta)
        result = graphs.patched_concept_graph(vectors, postings, same_as, old_graph, old_postings, **theta)
        assert result is not None and fresh.nnz > 50
        patched, counted_again = result
        assert 0 < counted_again < len(vectors) // 4
        assert patched.shape == fresh.shape and (patched != fresh).nnz == 0
        patched.sort_indices()
        fresh.sort_indices()
        assert patched.indices.tobytes() == fresh.indices.tobytes() and patched.data.tobytes() == fresh.data.tobytes()
        # Not the edited version's edges renumbered: the edit changed some of them.
        number = np.full(old_graph.shape[0], -1)
        number[same_as[same_as >= 0]] = np.flatnonzero(same_as >= 0)
        old = old_graph.tocoo()
        carried = {(number[r], number[c]) for r, c in zip(old.row, old.col) if number[r] >= 0 and number[c] >= 0}
        assert carried != set(zip(*fresh.nonzero()))


def test_a_concept_graph_is_made_afresh_when_most_keywords_changed():
    old_postings, old_vectors, postings, vectors, same_as = _edited_keywords(np.random.default_rng(0), 300, 10)
    old_graph = graphs.concept_graph(old_vectors, old_postings, theta_sem=0.5, theta_co=2)
    assert (
        graphs.patched_concept_graph(vectors, postings, same_as, old_graph, old_postings, theta_sem=0.5, theta_co=2)
        is None
    )
