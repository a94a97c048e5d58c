"""CUE-RAG indexing without the LLM: chunk selection (Alg. 2) and the chunk–unit–entity graph (Alg. 1).

Selection scores every chunk by how much it resembles the rest of the corpus (BLEU against all other
chunks, or cosine) and solves a 0-1 knapsack under the token budget ⌈α·W_total⌉: the paper sends
chunks *similar* to others to the LLM, because their sentences are the ones that become ambiguous
out of context (§1, §3.2). The caller extracts LLM units for the selected chunks and punkt sentences
for the rest; :func:`write_cue_graph` links units to their chunks and to their spaCy entities.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp

from hopgraph.artifacts import (
    CHUNKS,
    CUE_ENTITIES,
    CUE_ENTITY_VECTORS,
    CUE_MENTIONS,
    CUE_UNIT_ENTITIES,
    CUE_UNIT_VECTORS,
    CUE_UNITS,
)
from hopgraph.errors import InputError
from hopgraph.index.reuse import CUE_ENTITY_ROWS, CUE_UNIT_ROWS, CUE_UNIT_TOKENS, FIRST_BUILD, PreviousVersion
from hopgraph.kernels import cosine_topk, normalize_rows
from hopgraph.models import count_tokens
from hopgraph.ner import NameFinder, entity_names
from hopgraph.store import IndexStore

WORD = re.compile(r"[^\W_]+")
MAX_ORDER = 4  # BLEU-4, uniform weights
MAX_CELLS = 200_000_000  # largest exact knapsack table (bits, 25 MB); larger instances use the core method


# ------------------------------------------------------------------------------------ BLEU
def _max_over_others(holder: np.ndarray, gram: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """For each (text, n-gram) pair, the n-gram's largest count in any *other* text.

    Only the largest and second-largest count per n-gram are needed: the holder of the largest
    sees the second, every other text sees the largest.
    """
    if len(gram) == 0:
        return counts
    order = np.lexsort((-counts, gram))
    gram, counts, holder = gram[order], counts[order], holder[order]
    starts = np.flatnonzero(np.r_[True, gram[1:] != gram[:-1]])
    sizes = np.diff(np.r_[starts, len(gram)])
    group = np.repeat(np.arange(len(starts)), sizes)
    best, best_holder = counts[starts], holder[starts]
    second = np.where(sizes > 1, counts[np.minimum(starts + 1, len(gram) - 1)], 0)
    others = np.empty_like(counts)
    others[order] = np.where(holder == best_holder[group], second[group], best[group])
    return others


def bleu_scores(texts: Sequence[str]) -> np.ndarray:
    """Per text, standard BLEU-4 of the text against all *other* texts as references (Alg. 2 line 6).

    Modified n-gram precision clips each n-gram's count at its largest count in any single other
    text; the brevity penalty uses the closest other text's length (ties: the shorter); uniform
    weights, no smoothing, so a text sharing no 4-gram with the corpus scores 0. Higher = more like
    the rest of the corpus (an exact duplicate scores 1) = more worth an LLM call. Words are
    lower-cased ``\\w+`` runs.

    Exact and near-linear, never pairwise: n-grams get integer ids level by level (an n-gram is its
    (n-1)-gram's id plus the next word's id), then counts per (text, n-gram) come from one sort.
    """
    n = len(texts)
    tokens = [WORD.findall(t.lower()) for t in texts]
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=n)
    vocabulary: dict[str, int] = {}
    words = np.fromiter(
        (vocabulary.setdefault(w, len(vocabulary)) for doc in tokens for w in doc),
        dtype=np.int64,
        count=int(lengths.sum()),
    )
    owner = np.repeat(np.arange(n, dtype=np.int64), lengths)
    room = np.repeat(lengths, lengths) - (
        np.arange(len(words)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    )  # words left from p
    vocabulary_size = max(len(vocabulary), 1)
    ids, n_grams = words, vocabulary_size
    log_precision = np.zeros(n)
    for order in range(1, MAX_ORDER + 1):
        at = np.flatnonzero(room >= order)  # an n-gram starts here
        if order > 1:
            unique, ids_at = np.unique(ids[at] * vocabulary_size + words[at + order - 1], return_inverse=True)
            ids, n_grams = np.full(len(words), -1, dtype=np.int64), len(unique)
            ids[at] = ids_at
        total = np.bincount(owner[at], minlength=n)
        pairs, counts = np.unique(owner[at] * n_grams + ids[at], return_counts=True)
        holder = pairs // n_grams
        clipped = np.minimum(counts, _max_over_others(holder, pairs % n_grams, counts))
        matched = np.bincount(holder, weights=clipped, minlength=n)
        with np.errstate(divide="ignore"):
            log_precision += np.log(matched / np.maximum(total, 1)) / MAX_ORDER
    return np.exp(log_precision) * _brevity_penalty(lengths)


def _brevity_penalty(lengths: np.ndarray) -> np.ndarray:
    """exp(1 - r/c) when a text (length c) is shorter than r, its closest other text's length."""
    n = len(lengths)
    penalty = np.ones(n)
    if n < 2:
        return penalty
    order = np.argsort(lengths, kind="stable")
    sorted_len = lengths[order]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    below = np.where(rank > 0, sorted_len[np.maximum(rank - 1, 0)], -(10**12))
    above = np.where(rank < n - 1, sorted_len[np.minimum(rank + 1, n - 1)], 10**12)
    closest = np.where(lengths - below <= above - lengths, below, above)
    short = (lengths < closest) & (lengths > 0)
    penalty[short] = np.exp(1.0 - closest[short] / lengths[short])
    return penalty


def cosine_scores(vectors: np.ndarray) -> np.ndarray:
    """Per chunk, cosine to its most similar other chunk (the COS variant of Table 3); higher = more
    confusable with another chunk = more worth an LLM call, the same orientation as BLEU."""
    if len(vectors) < 2:
        return np.zeros(len(vectors))
    rows = normalize_rows(np.asarray(vectors, dtype=np.float32))
    best, _ = cosine_topk(rows, rows, 1, exclude_self=True)
    return np.asarray(best[:, 0], dtype=np.float64)


# ------------------------------------------------------------------------------------ knapsack
def _table_fits(items: int, capacity: int) -> bool:
    return items * (capacity + 1) <= MAX_CELLS


def _dp(values: np.ndarray, weights: np.ndarray, capacity: int) -> list[int]:
    """Exact 0-1 knapsack by dynamic programming over capacities, one bit per (item, capacity) kept
    for the backtrack; weights are divided by their gcd first. Should the table still exceed
    MAX_CELLS, weights are rounded *up* to a coarser unit (always feasible, no longer exact)."""
    step = math.gcd(*map(int, weights)) or 1
    if not _table_fits(len(weights), capacity // step):
        step = -(-(capacity + 1) * len(weights) // MAX_CELLS) + 1
    cap = capacity // step
    w = -(-weights // step)
    best = np.zeros(cap + 1)
    taken = np.zeros((len(w), (cap + 8) // 8), dtype=np.uint8)
    row = np.zeros(cap + 1, dtype=bool)
    for i, (wi, vi) in enumerate(zip(w.tolist(), values.tolist())):
        if wi > cap:
            continue
        candidate = best[: cap + 1 - wi] + vi
        better = candidate > best[wi:]
        best[wi:] = np.where(better, candidate, best[wi:])
        row[:] = False
        row[wi:] = better
        taken[i] = np.packbits(row)
    chosen, c = [], cap
    for i in range(len(w) - 1, -1, -1):
        if (taken[i, c >> 3] >> (7 - (c & 7))) & 1:
            chosen.append(i)
            c -= int(w[i])
    return chosen


def knapsack_select(values: np.ndarray, weights: np.ndarray, capacity: int) -> np.ndarray:
    """Indices (ascending) of a 0-1 knapsack solution: total weight ≤ capacity, total value maximal.

    Exact (dynamic programming) whenever n·(capacity/g + 1) ≤ MAX_CELLS, g the gcd of the weights,
    which covers every small case. Larger instances (10k chunks, millions of tokens) use the core
    method: items sorted by value per token, those well before the greedy break point fixed in,
    those well after it fixed out, and the few hundred around it solved exactly on the remaining
    capacity. The result is never worse than greedy, hence within one item's value of the optimum,
    and in practice optimal. Items with value ≤ 0 are never chosen.
    """
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.int64)
    if values.shape != weights.shape or (weights < 0).any():
        raise ValueError("values and weights must have the same length and weights must be non-negative")
    capacity = max(int(capacity), 0)
    useful = np.flatnonzero((values > 0) & (weights <= capacity))
    if weights[useful].sum() <= capacity:
        return useful
    v, w = values[useful], weights[useful]
    if _table_fits(len(w), capacity // (math.gcd(*map(int, w)) or 1)):
        return np.sort(useful[_dp(v, w, capacity)])
    density = v / np.maximum(w, 1e-9)
    order = np.lexsort((np.arange(len(w)), -density))
    broken = int(np.searchsorted(np.cumsum(w[order]), capacity, side="right"))  # first item greedy cannot add
    half = 256
    while True:
        lo, hi = max(0, broken - half), min(len(w), broken + half)
        room = capacity - int(w[order[:lo]].sum())
        if half == 1 or _table_fits(hi - lo, room // (math.gcd(*map(int, w[order[lo:hi]])) or 1)):
            break
        half //= 2
    core = order[lo:hi]
    chosen = np.concatenate([order[:lo], core[_dp(v[core], w[core], room)]]).astype(np.int64)
    return np.sort(useful[chosen])


def select_chunks(
    texts: Sequence[str],
    tokens: Sequence[int] | np.ndarray,
    alpha: float,
    metric: Literal["bleu", "cosine"] = "bleu",
    vectors: np.ndarray | None = None,
) -> np.ndarray:
    """Chunk-Selection (Alg. 2): ids of the chunks whose LLM extraction fits ⌈α·Σ tokens⌉ and whose
    summed score (BLEU or cosine to the rest of the corpus) is largest.

    A tiny bonus proportional to each chunk's tokens breaks ties (e.g. many chunks with BLEU 0)
    toward spending the budget the user granted instead of leaving it idle.
    """
    weights = np.asarray(tokens, dtype=np.int64)
    if alpha <= 0 or len(weights) == 0:
        return np.zeros(0, dtype=np.int64)
    if metric == "bleu":
        scores = bleu_scores(texts)
    elif vectors is None:
        raise InputError("cue_metric=cosine needs the chunk vectors")
    else:
        scores = cosine_scores(vectors)
    total = int(weights.sum())
    capacity = math.ceil(alpha * total)
    values = np.maximum(scores, 0.0) + 1e-6 * weights / max(total, 1)
    return knapsack_select(values, weights, capacity)


# ------------------------------------------------------------------------------------ graph
def _unit_vectors(store: IndexStore, texts: list[str], embed: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """Unit vectors, embedding only texts the index has not embedded as sentences already.

    At α=0 the units are punkt sentences, nearly all identical to the index's own sentences, whose
    vectors the same embedder made (long texts as averaged windows, as ``embed`` does): embedding
    them again doubled the model work of an LLM-free build. A unit that a chunk boundary cut (or
    an LLM unit) is embedded here.
    """
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    known: dict[str, int] = {}
    if store.has("tables", "sentences") and store.has("arrays", "sentence_vectors"):
        known = {text: i for i, text in enumerate(store.read_table("sentences", ["text"])["text"])}
    row = np.array([known.get(text, -1) for text in texts], dtype=np.int64)
    reused = row >= 0
    stored = store.read_array("sentence_vectors", mmap=True) if reused.any() else None
    if stored is not None and reused.all():
        return normalize_rows(np.asarray(stored[row], dtype=np.float32))
    fresh = np.flatnonzero(~reused)
    computed = embed([texts[i] for i in fresh])
    vectors = np.zeros((len(texts), computed.shape[1]), dtype=np.float32)
    vectors[fresh] = computed
    if stored is not None:
        vectors[reused] = stored[row[reused]]
    return normalize_rows(vectors)


def most_said(entity: np.ndarray, label: np.ndarray, n_entities: int) -> np.ndarray:
    """Per entity, the label code it was said with most often, of equally frequent ones the first
    said, from one (entity, label code) pair per mention in order."""
    best = np.full(n_entities, -1, dtype=np.int64)
    if len(entity) == 0:
        return best
    width = int(label.max()) + 1
    pairs, first, count = np.unique(entity * width + label, return_index=True, return_counts=True)
    owner = pairs // width
    order = np.lexsort((first, -count, owner))  # per entity: most said first, then first said
    leads = order[np.r_[True, owner[order][1:] != owner[order][:-1]]]
    best[owner[leads]] = pairs[leads] % width
    return best


def kept_chunks(previous: PreviousVersion, chunk_texts: Sequence[str], chosen: np.ndarray) -> np.ndarray:
    """Per chunk, the edited version's chunk of the same text whose sentence units and their spaCy
    names an update takes over (-1 where they are computed).

    Sentence units and their names are a function of the chunk's text alone, so they are taken
    for chunks not chosen for the LLM now whose namesake was not chosen then either; and only from
    a version that kept each mention's label (:data:`~hopgraph.artifacts.CUE_MENTIONS`), so each
    entity's "most said" label is counted again over the whole corpus as a rebuild counts it.
    """
    kept = np.full(len(chunk_texts), -1, dtype=np.int64)
    store = previous.holding(
        ("tables", CHUNKS),
        ("tables", CUE_UNITS),
        ("tables", CUE_MENTIONS),
        ("graphs", CUE_UNIT_ENTITIES),
        stage="cue_graph",
    )
    if store is None or not len(chunk_texts):
        return kept
    units = store.read_table(CUE_UNITS, ["chunk", "source"])
    old_texts = store.read_table(CHUNKS, ["text"])["text"]
    asked = np.zeros(len(old_texts), dtype=bool)  # chunks whose units came from the LLM (or its fallback)
    asked[np.asarray(units["chunk"], dtype=np.int64)[np.asarray(units["source"]) != "sentence"]] = True
    first: dict[str, int] = {}
    for row, text in enumerate(old_texts):
        if not asked[row]:
            first.setdefault(text, row)
    kept[:] = [first.get(text, -1) for text in chunk_texts]
    kept[np.asarray(chosen, dtype=np.int64)] = -1
    return kept


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenation of range(start, end) for each pair."""
    sizes = ends - starts
    return np.repeat(starts - np.r_[0, np.cumsum(sizes)[:-1]], sizes) + np.arange(int(sizes.sum()))


def _codes(values: Sequence[str], space: dict[str, int]) -> np.ndarray:
    """The code of each value in ``space``, a value not in it yet taking the next code."""
    return np.fromiter((space.setdefault(v, len(space)) for v in values), dtype=np.int64, count=len(values))


def write_cue_graph(
    store: IndexStore,
    chunk_units: Sequence[Sequence[str]],
    unit_source: Sequence[str],
    embed: Callable[[list[str]], np.ndarray],
    find_names: NameFinder = entity_names,
    previous: PreviousVersion = FIRST_BUILD,
    kept: np.ndarray | None = None,
) -> dict[str, int]:
    """Store the multi-partite graph of Alg. 1 (lines 4–14): units → chunks, units × entities.

    ``chunk_units[c]`` are chunk c's knowledge units (LLM units or sentences), ``unit_source`` the
    origin of each unit in flattened order. Blank units are dropped with their source label.
    Writes tables cue_units, cue_entities and cue_mentions, graph cue_unit_entities and both vector
    arrays; a unit that is one of the index's sentences takes its stored vector.
    ``find_names`` gives spaCy's entities per unit (a build's goes through its entity cache, so a
    rebuild runs NER only on new units). A chunk whose ``kept`` row (:func:`kept_chunks`) is set
    takes its units, their names and vectors from the version an update edits (``previous``) and
    has no units in ``chunk_units``; other vectors and token counts it holds are taken by text.
    """
    chunk_docs = store.read_table("chunks", ["docs"])["docs"]
    if len(chunk_units) != len(chunk_docs):
        raise InputError(f"got knowledge units for {len(chunk_units)} chunks, the index has {len(chunk_docs)}")
    flat = [(c, text.strip()) for c, units in enumerate(chunk_units) for text in units]
    if len(flat) != len(unit_source):
        raise InputError(f"{len(flat)} knowledge units but {len(unit_source)} source labels")
    fresh = [(c, text, src) for (c, text), src in zip(flat, unit_source) if text]
    fresh_texts = [t for _, t, _ in fresh]
    name_codes: dict[str, int] = {}  # one code space for the names (and one for the labels) of all units
    label_codes: dict[str, int] = {}
    # Mentions of the computed units: (unit among them, name code, label code).
    said = [(u, name, label) for u, names in enumerate(find_names(fresh_texts)) for name, label in names]
    fresh_mentions = (
        np.fromiter((u for u, _, _ in said), dtype=np.int64, count=len(said)),
        _codes([name for _, name, _ in said], name_codes),
        _codes([label for _, _, label in said], label_codes),
    )
    old = _kept_units(previous, kept, name_codes, label_codes)
    # Units in chunk order: a chunk's units are all kept or all computed, so a stable sort by chunk
    # puts each chunk's units where a rebuild puts them, in their own order.
    owner_of = np.concatenate([old.owner, np.fromiter((c for c, _, _ in fresh), dtype=np.int64, count=len(fresh))])
    order = np.argsort(owner_of, kind="stable")
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    n_old = len(old.owner)
    texts = [old.texts[i] if i < n_old else fresh_texts[i - n_old] for i in order.tolist()]
    sources = ["sentence" if i < n_old else fresh[i - n_old][2] for i in order.tolist()]  # kept: sentences
    owner = owner_of[order]
    unit, name, label = (
        np.concatenate([position[old.unit], position[n_old + fresh_mentions[0]]]),
        np.concatenate([old.name, fresh_mentions[1]]),
        np.concatenate([old.label, fresh_mentions[2]]),
    )
    by_unit = np.argsort(unit, kind="stable")
    unit, name, label = unit[by_unit], name[by_unit], label[by_unit]
    # Entities in order of first mention, as a rebuild numbers them.
    codes, first = np.unique(name, return_index=True)
    ranked = codes[np.argsort(first, kind="stable")]
    column = np.empty(len(name_codes), dtype=np.int64)
    column[ranked] = np.arange(len(ranked))
    every_name, every_label = list(name_codes), list(label_codes)
    names = [every_name[c] for c in ranked.tolist()]
    graph = sp.csr_matrix(
        (
            np.ones(len(unit), dtype=np.float32),
            column[name],
            np.r_[0, np.cumsum(np.bincount(unit, minlength=len(texts)))].astype(np.int64),
        ),
        shape=(len(texts), len(names)),
    )
    old_rows = np.full(len(texts), -1, dtype=np.int64)
    old_rows[position[:n_old]] = old.rows
    rows = old_rows if n_old else None
    unit_vectors = previous.take(CUE_UNIT_ROWS, texts, lambda rest: _unit_vectors(store, rest, embed), rows)
    entity_vectors = (
        previous.take(CUE_ENTITY_ROWS, names, lambda rest: normalize_rows(embed(rest)))
        if names
        else np.zeros((0, unit_vectors.shape[1]), dtype=np.float32)
    )
    tokens = previous.take(CUE_UNIT_TOKENS, texts, lambda rest: [count_tokens(t) for t in rest], rows)
    store.write_table(
        CUE_UNITS,
        {
            "text": texts,
            "tokens": tokens.tolist(),
            "docs": [chunk_docs[c] for c in owner],
            "chunk": owner.tolist(),
            "source": sources,
        },
    )
    best = most_said(column[name], label, len(names))
    store.write_table(CUE_ENTITIES, {"name": names, "label": [every_label[b] for b in best.tolist()]})
    store.write_table(CUE_MENTIONS, {"label": [every_label[b] for b in label.tolist()]})
    store.write_graph(CUE_UNIT_ENTITIES, graph)
    store.write_array(CUE_UNIT_VECTORS, unit_vectors)
    store.write_array(CUE_ENTITY_VECTORS, entity_vectors)
    return {"cue_units": len(texts), "cue_entities": len(names), "cue_llm_units": sum(s == "llm" for s in sources)}


@dataclass
class _KeptUnits:
    """Units of kept chunks (sentences, see :func:`kept_chunks`), taken from the edited version,
    with their mentions coded in the caller's name and label spaces."""

    owner: np.ndarray  # chunk of this version per unit
    rows: np.ndarray  # the unit's row in the edited version
    texts: list[str]
    unit: np.ndarray  # per mention: the unit among these
    name: np.ndarray  # per mention: name code
    label: np.ndarray  # per mention: label code


def _kept_units(
    previous: PreviousVersion, kept: np.ndarray | None, name_codes: dict[str, int], label_codes: dict[str, int]
) -> _KeptUnits:
    none = np.zeros(0, dtype=np.int64)
    chunks = np.flatnonzero(kept >= 0) if kept is not None else none
    if kept is None or not len(chunks) or previous.store is None:
        return _KeptUnits(none, none, [], none, none, none)
    store = previous.store
    units = store.read_table(CUE_UNITS, ["text", "chunk"])
    unit_chunk = np.asarray(units["chunk"], dtype=np.int64)  # ascending: units are stored in chunk order
    old_chunks = kept[chunks]
    starts = np.searchsorted(unit_chunk, old_chunks, side="left")
    ends = np.searchsorted(unit_chunk, old_chunks, side="right")
    rows = _ranges(starts, ends)
    graph = store.read_graph(CUE_UNIT_ENTITIES)
    at = _ranges(graph.indptr[rows], graph.indptr[rows + 1])  # their mentions, in order
    old_names = store.read_table(CUE_ENTITIES, ["name"])["name"]
    old_labels = store.read_table(CUE_MENTIONS, ["label"])["label"]
    old_name_codes = _codes(old_names, name_codes)
    distinct, label_of = np.unique(np.asarray(old_labels, dtype=object)[at].astype(str), return_inverse=True)
    old_label_codes = _codes(distinct.tolist(), label_codes)
    return _KeptUnits(
        owner=np.repeat(chunks, ends - starts),
        rows=rows,
        texts=[units["text"][r] for r in rows.tolist()],
        unit=np.repeat(np.arange(len(rows)), np.diff(graph.indptr)[rows]),
        name=old_name_codes[graph.indices[at]],
        label=old_label_codes[label_of.ravel()] if len(at) else np.zeros(0, dtype=np.int64),
    )
