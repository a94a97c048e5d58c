"""The README's figures, generated from the committed result files so no number is copied by hand.

python3 scripts/summarize.py            # print the generated sections
python3 scripts/summarize.py --readme   # rewrite them in README.md (between the marker comments)
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "scripts" / "results"


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _coverage_cell(result: dict) -> str:
    """The papers' Coverage, with the whole-word Coverage in parentheses where the file records it
    (result files written before it was measured lack it)."""
    whole = result.get("coverage_whole_word")
    return f"{result['coverage']:.1f}" + (f" ({whole:.1f})" if whole is not None else "")


def coverage_tables(results: Path = RESULTS) -> str:
    runs = [
        json.loads(p.read_text(encoding="utf-8")) | {"file": p.name}
        for p in sorted(results.glob("coverage_*_l*.json"))
        if not p.name.startswith("coverage_misses_")  # why answers were missed: not a coverage table
    ]
    methods = list(dict.fromkeys(r["method"] for run in runs for r in run["results"]))
    head = "| dataset | ℓ | " + " | ".join(methods)
    cover = [head + " | file |", "|---|---|" + "---|" * (len(methods) + 1)]
    latency = [head + " |", "|---|---|" + "---|" * len(methods)]
    for run in runs:
        by = {r["method"]: r for r in run["results"]}
        cover.append(
            f"| {run['dataset']} | {run['chunk_size']} | "
            + " | ".join(_coverage_cell(by[m]) if m in by else "" for m in methods)  # a file may lack a method
            + f" | `{run['file']}` |"
        )
        latency.append(
            f"| {run['dataset']} | {run['chunk_size']} | "
            + " | ".join(
                f"{by[m]['latency_ms_p50']:.1f} / {by[m]['latency_ms_p95']:.1f}" if m in by else "" for m in methods
            )
            + " |"
        )
    whole_word = any("coverage_whole_word" in r for run in runs for r in run["results"])
    note = (
        '\n\nIn parentheses: whole-word Coverage (the answer found as whole words, so "no" is not found in '
        '"not"), where the file records it; the papers\' definition matches substrings.'
        if whole_word
        else ""
    )
    marked = [run for run in runs if any(r.get("supporting_recall_at_5") is not None for r in run["results"])]
    recall = [head + " |", "|---|---|" + "---|" * len(methods)]
    for run in marked:
        by = {r["method"]: r for r in run["results"]}
        recall.append(
            f"| {run['dataset']} | {run['chunk_size']} | "
            + " | ".join(
                f"{by[m]['supporting_recall_at_2']:.1f} / {by[m]['supporting_recall_at_5']:.1f}" if m in by else ""
                for m in methods
            )
            + " |"
        )
    recall_text = (
        "\n\nSupporting-passage recall@2 / @5 (passages counted in the order of the pieces that hold them), on "
        "the sets that mark supporting passages:\n\n" + "\n".join(recall)
        if marked
        else ""
    )
    return (
        "\n".join(cover)
        + note
        + recall_text
        + "\n\nQuery latency without query embedding, p50 / p95 ms (target p50 ≤ 30 ms):\n\n"
        + "\n".join(latency)
    )


def evidence() -> str:
    """Coverage before and after the change that cuts pieces at whole words and sentence starts."""
    result = _load("evidence_chunking.json")
    rows = result["rows"]
    first = rows[0]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    lines = [
        "| dataset | ℓ | " + " | ".join(methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for key in dict.fromkeys((r["dataset"], r["chunk_size"]) for r in rows):
        by = {r["method"]: r for r in rows if (r["dataset"], r["chunk_size"]) == key}
        cells = [f"{by[m]['coverage_before']:.1f} → {by[m]['coverage_after']:.1f}" if m in by else "" for m in methods]
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    return (
        f"Coverage at `{first['commit_before'][:7]}` → `{first['commit_after'][:7]}`, same machine, one sitting "
        f"(`evidence_chunking.json`, `python3 scripts/compare_evals.py`); smallest change: "
        f"{result['largest_drop']:+.1f} points.\n\n" + "\n".join(lines)
    )


def speed() -> str:
    s, p = _load("index_speed_musique_l1200.json"), _load("pagerank_vs_networkx.json")
    st = s["stage_seconds"]
    return (
        "Indexing MuSiQue-500 from scratch at ℓ=1200 with the vector cache off (`python3 "
        "scripts/bench_index_speed.py` → "
        f"`index_speed_musique_l1200.json`): {s['seconds_total']:.1f} s in all, of which "
        f"{s['seconds_embedding']:.1f} s embedding "
        f"{s['counts']['units']:,} sub-chunks and {s['counts']['sentences']:,} sentences, so the whole index costs "
        f"{s['total_over_embedding']:.2f}× its embedding time (target ≤ 1.5×); the KNN graph takes "
        f"{st['knn_graph']:.1f} s, the concept "
        f"graph {st['concept_graph']:.1f} s, and peak memory is {s['peak_memory_mb'] / 1024:.1f} GB.\n\n"
        f"PageRank on a {p['nodes']:,}-node, {p['edges']:,}-edge graph (`python3 scripts/bench_pagerank.py` → "
        f"`pagerank_vs_networkx.json`): {p['hopgraph_seconds']:.3f} s against {p['networkx_seconds']:.2f} s for "
        f"`networkx.pagerank`, {p['speedup']:.0f}× faster (target ≥ 20×), largest difference {p['max_abs_diff']:.1e}."
    )


def scale() -> str:
    d = _load("scale.json")
    w = d["warmup_one_replica"]
    rows = [
        "| chunks | sentences | index s | of which cache reads s | graphs s | peak MB |",
        "|---|---|---|---|---|---|",
    ]
    for r in d["runs"]:
        graphs = r["stage_seconds"]["knn_graph"] + r["stage_seconds"]["concept_graph"]
        rows.append(
            f"| {r['chunks']:,} | {r['sentences']:,} | {r['seconds_total']:.1f} | {r['seconds_model_stages']:.1f} "
            f"| {graphs:.1f} | {r['peak_memory_mb']:.0f} |"
        )
    slope = d["loglog_slope"]
    return (
        f"The warm-up replica ({w['chunks']:,} chunks) spent {w['seconds_model_stages']:.0f} s in the model and "
        f"{w['seconds_other_stages']:.1f} s in everything else.\n\n"
        + "\n".join(rows)
        + f"\n\nLog-log slopes over the three sizes: index time {slope['seconds_total']:.2f}, time without cache reads "
        f"{slope['seconds_other_stages']:.2f}, peak memory {slope['peak_memory_mb']:.2f} (target ≤ 1.2)."
    )


def incremental() -> str:
    parts = []
    for name in ("incremental_musique.json", "incremental_llm_musique.json"):
        if not (RESULTS / name).exists():
            continue
        d = _load(name)
        llm = bool(d.get("llm"))
        rows = [
            "| pack_documents | documents built + inserted − deleted | build s | insert s (share of build) | "
            "delete s (share of build) "
            + ("| LLM calls build / insert / delete / rebuild " if llm else "| texts embedded insert / delete ")
            + "| identical to a cold rebuild | identical to a rebuild from the same caches |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in d["runs"]:
            cold, warm = r["retrieval_vs_rebuild"], r.get("retrieval_vs_warm_cache_rebuild")
            same_as_warm = f"{warm['identical']}/{warm['total']}" if warm else "not measured"
            paid = (
                " / ".join(str(r[k].get("llm_calls")) for k in ("build", "insert", "delete", "rebuild"))
                if llm
                else f"{r['insert']['texts_embedded']:,} / {r['delete']['texts_embedded']:,}"
            )
            rows.append(
                f"| {str(r['pack_documents']).lower()} | {r['documents_initial']:,} + {r['documents_inserted']} − "
                f"{r['documents_deleted']} "
                f"| {r['build']['seconds']:.1f} | {r['insert']['seconds']:.1f} ({100 * r['insert_over_build']:.1f}%) "
                f"| {r['delete']['seconds']:.1f} ({100 * r['delete_over_build']:.1f}%) | {paid} "
                f"| {cold['identical']}/{cold['total']} (same pieces {cold['same_pieces_any_order']}) "
                f"| {same_as_warm} |"
            )
        what = (
            f"{d['n_documents']} paragraphs (`{d['dataset']}`), {d['n_questions']} question(s), methods "
            f"{', '.join(d['methods'])}; {d['llm']}"
            if llm
            else f"{d['n_documents']:,} paragraphs (`{d['dataset']}`), {d['n_questions']} questions, methods "
            f"{', '.join(d['methods'])}"
        )
        parts.append(f"`python3 {d['command']}` → `{name}`: {what}.\n\n" + "\n".join(rows))
    return "\n\n".join(parts)


def server() -> str:
    parts = []
    if (RESULTS / "serve_throughput.json").exists():
        d = _load("serve_throughput.json")
        rows = [
            "| phase | requests | errors | requests/s | p50 ms | p95 ms | p99 ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for label, r in d["phases"].items():
            rows.append(
                f"| {label} | {r['requests']:,} | {r['errors']} | {r['throughput_rps']} | {r['latency_ms_p50']} | "
                f"{r['latency_ms_p95']} | {r['latency_ms_p99']} |"
            )
        jobs = d["phases"]["with_inserts"].get("insert_jobs", [])
        parts.append(
            f"Throughput (`python3 {d['command']}` → `serve_throughput.json`): {d['clients']} clients, each with its "
            f"own token and one keep-alive connection, {d['seconds_per_phase']:g} s per phase, `/v1/retrieve` with "
            f"`{d['method']}` at λ={d['budget']} on {d['dataset']}; baseline = commit {d['baseline_commit']}'s "
            f"server, then this checkout's with `{d['serve_options'] or 'defaults'}`, in one run.\n\n"
            + "\n".join(rows)
            + f"\n\nRequests/s over the baseline: **{d['rps_over_baseline']}×** ({d['baseline_rps']} → {d['rps']}, "
            f"p99 {d['p99_ms']} ms, {d['errors']} errors); readers restricted to half the corpus by ACL / open "
            f"readers, p50: **{d['restricted_over_open']}×**; with insert jobs running / read-only, p50: "
            f"**{d['with_insert_over_read_only']}×** ({len(jobs)} insert jobs back to back, "
            f"{sum(j['documents'] for j in jobs)} documents in all, taking {', '.join(str(j['seconds']) for j in jobs)} s; "
            "the update worker lingers between jobs, so only the first starts a process and loads models)."
        )
    if (RESULTS / "serve_throughput_h100_machine.json").exists():
        d = _load("serve_throughput_h100_machine.json")
        phases, m = d["phases"], d["machine"]
        parts.append(
            f"The same benchmark on a {m['cpu_count']}-core machine (one GPU machine's CPUs; `python3 {d['command']}` "
            f"→ `serve_throughput_h100_machine.json`, {d['seconds_per_phase']:g} s per phase, commit "
            f"{d['git_commit'][:7]}, one socket shared by the processes, as by default; the data set and the "
            "baseline's files were copies carried with the working tree): the baseline's one process "
            f"{d['baseline_rps']} requests/s (fewer than on 2 cores, likely because it sets no limit on torch's and BLAS's "
            f"threads), this checkout's `{d['serve_options']}` **{d['rps']}** "
            f"(**{d['rps_over_baseline']}×**, {d['errors']} errors), but p50/p95/p99 "
            f"{phases['open']['latency_ms_p50']}/{phases['open']['latency_ms_p95']}/{d['p99_ms']} ms: the "
            "latencies split in two, as the connection spread below explains (with keep-alive, the clients "
            "of a crowded process wait, those of an idle one do not; `serve.socket_per_worker` spreads them, not "
            "yet measured on that machine). Restricted / open readers "
            f"{phases['restricted']['throughput_rps']} against {phases['acl_all_readable']['throughput_rps']} "
            f"requests/s, with inserts {phases['with_inserts']['throughput_rps']} against {d['rps']}; the p50 "
            f"ratios ({d['restricted_over_open']}×, {d['with_insert_over_read_only']}×) follow the same split."
        )
    if (RESULTS / "connection_spread.json").exists():
        d = _load("connection_spread.json")
        cells = []
        for workers, run in d["workers"].items():
            before, after = run["sides"]["shared_socket"], run["sides"]["socket_per_process"]
            load_before, load_after = before["keep_alive_load"], after["keep_alive_load"]
            cells.append(
                f"{workers} processes: the busiest held {before['busiest_share_mean']:.0%} of a burst with one shared "
                f"socket against {after['busiest_share_mean']:.0%} with a socket per process, and keep-alive readers "
                f"made {load_before['throughput_rps']} against {load_after['throughput_rps']} requests/s "
                f"(**{run['rps_ratio']}×**; p99 {load_before['latency_ms_p99']} against {load_after['latency_ms_p99']} ms)"
            )
        parts.append(
            f"New connections among worker processes (`python3 {d['command']}` → `connection_spread.json`, "
            f"{d['trials']} bursts of {d['connections']} connections opened together, then {d['clients']} keep-alive "
            f"readers for {d['seconds']:g} s, on {d['machine']['cpu_count']} cores shared with the load generator): "
            + "; ".join(cells)
            + ". On these 2 cores the requests/s moved by about the noise between runs, so the shared socket "
            "stays the default until a machine with cores to spread to has measured both."
        )
    if (RESULTS / "serve_floor.json").exists():
        d = _load("serve_floor.json")
        q = d["int8_embedding"]  # {} where the embedder is no torch model
        parts.append(
            f"The floor under one request (`python3 {d['command']}` → `serve_floor.json`, one thread, in process, "
            f"same index and questions): the query embedding takes {d['embed_ms_per_question']} ms per question "
            f"(groups of {d['group']}) and `{d['method']}` at λ={d['budget']} {d['retrieve_ms_per_request']} ms from "
            f"its vector, so {d['cores']} cores doing nothing else answer at most **{d['ceiling_rps']} requests/s** "
            f"({d['embedding_only_ceiling_rps']} if retrieval were free), {d['ceiling_over_baseline']}× the "
            f"baseline's {d['baseline_rps']}, against the 5× goal of {d['goal_rps']}; the server reaches "
            f"{d['server_rps']}."
            + (
                f" Quantising the embedder's Linear layers to int8 would embed in {q['embed_ms_per_question']} ms, "
                f"but its vectors move (cosine to the fp32 vector: median {q['cosine_to_fp32_median']}, min "
                f"{q['cosine_to_fp32_min']}), so it is not used."
                if q
                else ""
            )
        )
    if (RESULTS / "serve_replicas.json").exists():
        d = _load("serve_replicas.json")
        follow = d["insert_to_follower"]
        parts.append(
            f"Replicas (`python3 {d['command']}` → `serve_replicas.json`): {d['clients']} clients for "
            f"{d['seconds_per_phase']:g} s against one replica, then split over two on the same {d['cpu_cores']} "
            f"cores: {d['one_replica']['throughput_rps']} → {d['two_replicas']['throughput_rps']} requests/s "
            f"({d['two_over_one_rps']}×: one replica is one process, so it uses one core for most of its work), "
            f"{d['one_replica']['errors'] + d['two_replicas']['errors']} errors. An insert sent to the replica that "
            f"does not run jobs: both served the new version {follow['both_s']} s after it was published "
            f"(serve.refresh_seconds {d['refresh_seconds']:g}), {follow['submit_to_both_s']} s after submit."
        )
    if (RESULTS / "insert_cost.json").exists():
        d = _load("insert_cost.json")
        # The first code measured at each size, then this sitting's (the labels of its second round).
        sitting = list(d.get("second_round", {}).get("insert_seconds", {})) or ["after"]
        lines, earlier = [], 0
        for size, runs in d["sizes"].items():
            shown = [next(iter(runs)), *(label for label in sitting if label in runs)]
            earlier += len(runs) - len(set(shown))
            for label in dict.fromkeys(shown):
                r = runs[label]
                lines.append(
                    f"| {size} | {label} | {r['chunks']:,} | {r['insert_seconds']} | {r['build_seconds']:.0f}"
                    f"{' (warm caches)' if r.get('build_vectors_warm') else ''} | "
                    f"{r.get('insert_share_of_cold_build', r['insert_share_of_build']):.1%} | {r['embedder']} |"
                )
        parts.append(
            "Insert cost (`python3 scripts/bench_insert_cost.py` → `insert_cost.json`): one document inserted into "
            "an index, median of 3 inserts; code `after` is this checkout, the others earlier code (a commit id "
            "where the label is one)" + (f"; {d['sitting']}" if d.get("sitting") else "") + ". The table shows the "
            f"first code measured at each size and this sitting's first round; the {earlier} other rows are in "
            "`insert_cost.json`.\n\n"
            "| size | code | chunks | insert s | build s | share of a cold build | embedder |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(lines)
        )
    if (RESULTS / "crash_safety.json").exists():
        d = _load("crash_safety.json")
        s = d["summary"]
        stages = ", ".join(f"{k} {v}" for k, v in sorted(s["stages"].items()))
        parts.append(
            f"Crash safety (`python3 {d['command']}` → `crash_safety.json`): `{d['update_command']}` adding "
            f"{d['added_documents']} paragraphs "
            f"to a {d['base_documents']}-paragraph index ({d['reference_seconds']} s uninterrupted), SIGKILLed in "
            f"{s['trials']} trials "
            f"({s['random_delay_trials']} after a random delay, the rest the moment each step was reached; "
            f"{s['killed']} "
            f"really killed). Servable right after the kill: **{s['servable']}/{s['trials']}**; resumed to "
            "retrieval identical to the "
            f"uninterrupted run ({d['questions']} questions × 5 methods): **{s['resumed_equal']}/{s['trials']}**, "
            "vectors bitwise equal "
            f"{s['vectors_bitwise_equal']}/{s['trials']}. Where the kills landed: {stages}."
        )
    if (RESULTS / "acl_audit.json").exists():
        d = _load("acl_audit.json")
        r, a = d["retrieve"], d["answer"]
        parts.append(
            f"Access control (`python3 {d['command']}` → `acl_audit.json`): {d['corpus']['documents']} documents, "
            f"{d['corpus']['restricted']} "
            f"restricted, {len(d['users'])} users with overlapping groups; {r['queries']:,} random `/v1/retrieve` "
            "queries over all "
            f"{len(r['by_method'])} methods and {a['queries']} `/v1/answer` queries: "
            f"**{r['forbidden_chunks'] + a['forbidden_chunks']} "
            f"forbidden pieces, {r['leaked_codewords'] + a['leaked_codewords']} leaked codewords**, "
            f"{r['errors'] + a['errors']} errors."
        )
    parts += [text for text in (_hostile(), _memory(), _noninterference()) if text]
    return _relative("\n\n".join(parts))


def _relative(text: str) -> str:
    """Paths as a reader's checkout has them: data under ../shared, examples in the repository."""
    text = re.sub(r"[^\s`(]*/shared/data/", "../shared/data/", text)
    return re.sub(r"[^\s`(]*/(examples/[^\s`)]*)", r"\1", text)


def _hostile() -> str:
    if not (RESULTS / "serve_hostile.json").exists():
        return ""
    d = _load("serve_hostile.json")
    alone, beside = d["alone"], d["with_hostile"]
    hostile = beside.get("hostile", {})
    return (
        f"Hostile reader (`python3 {d['command']}` → `serve_hostile.json`, {d['dataset']}): {d['clients']} ordinary "
        f"readers (`{d['method']}`, λ={d['budget']}) for {d['seconds_per_phase']:g} s alone, then beside one client "
        f"sending the costliest request the server accepts back to back: ordinary p99 {alone['latency_ms_p99']} → "
        f"{beside['latency_ms_p99']} ms, **{d['ordinary_p99_ratio']}×** (goal ≤ 2×), **{d['ordinary_errors']} errors**; "
        f"the hostile client's {hostile.get('requests', 0)} requests all ended by the {d['request_deadline']:g} s "
        f"deadline (statuses {hostile.get('statuses', {})}, at most {hostile.get('seconds_max', 0)} s each). SIGTERM "
        f"stopped the server in {d['shutdown_seconds']} s."
    )


def _memory() -> str:
    if not (RESULTS / "serve_memory.json").exists():
        return ""
    d = _load("serve_memory.json")
    return (
        f"Memory over months of updates (`python3 {d['command']}` → `serve_memory.json`, {d['index']}): {d['jobs']} "
        f"insert/delete jobs through HTTP, one after another; server RSS {d['rss_mb_after_first']} MB after the first, "
        f"{d['rss_mb_after_last']} MB after the last: **rss_ratio {d['rss_ratio']}**; {d['failed_jobs']} failed jobs; "
        f"{d['versions_left_on_disk']} versions left on disk (serve.keep_versions = {d['keep_versions']})."
    )


def _noninterference() -> str:
    if not (RESULTS / "acl_noninterference.json").exists():
        return ""
    d = _load("acl_noninterference.json")
    modes = d["modes"]

    def row(mode: str) -> str:
        return ", ".join(f"{m} {n}" for m, n in modes[mode]["differences"].items())

    return (
        f"Non-interference (`python3 {d['command']}` → `acl_noninterference.json`): questions (of {d['questions']}) "
        "whose results for a groupless reader differ between the full index and an index of the unrestricted "
        f"documents alone. Default mode: {row('default')}. Isolation mode: {row('isolation')}."
    )


def _ner(name: str = "ner_parallel.json") -> str:
    d = _load(name)
    one, many, ray = (d["runs"][name] for name in ("one_process", "processes", "ray_tasks"))
    same = "same names" if many["same_names"] and ray["same_names"] else "NOT the same names"
    return (
        f"spaCy's NER, the entity layer's per-text work, over MuSiQue-500's {d['texts']:,} sentences (`python3 "
        f"scripts/bench_ner.py` → `{name}`): {one['seconds']:.1f} s in one process, "
        f"{many['seconds']:.1f} s in {many['processes']} (**{many['speedup']:.2f}×**, the local engine's default), "
        f"{ray['seconds']:.1f} s as Ray tasks on {ray['cpus']} CPUs (**{ray['speedup']:.2f}×**), {same}."
        + (
            f" Called again on the same Ray instance, its workers started and holding spaCy: "
            f"{d['runs']['ray_tasks_warm']['seconds']:.1f} s (a build's one entities stage pays the first figure)."
            if "ray_tasks_warm" in d["runs"]
            else ""
        )
    )


def cluster() -> str:
    build, llm, graphs = _load("cluster_musique.json"), _load("cluster_llm_replicas.json"), _load("graph_scale.json")
    one, two = llm["runs"]
    rows = ["| chunks | " + " | ".join(graphs["runs"][0]["stages"]) + " | total s | peak MB |"]
    rows.append("|---|" + "---|" * (len(graphs["runs"][0]["stages"]) + 2))
    for run in graphs["runs"]:
        cells = [
            f"{stage['seconds']:.1f}" if stage.get("status") == "ok" else str(stage.get("status", "—"))
            for stage in run["stages"].values()
        ]
        rows.append(
            f"| {run['chunks']:,} | " + " | ".join(cells) + f" | {run['graph_seconds_total']:.0f} | "
            f"{run['peak_mb_max']:.0f} |"
        )
    slope = graphs["slope_time"]
    slope_text = ", ".join(f"{k} {v:.2f}" for k, v in slope.items() if isinstance(v, (int, float)))
    return (
        f"MuSiQue-500 LLM-free, embedded engine against `--engine ray` on the same machine (`python3 "
        f"scripts/bench_cluster.py` → `cluster_musique.json`): {build['local']['wall_seconds']:.0f} s against "
        f"{build['ray']['wall_seconds']:.0f} s, a wall-time ratio of **{build['wall_ratio']:.2f}** (goal ≤ 1.2), "
        f"index {'identical' if build['identical'] else 'NOT identical'} ({build['artifacts_compared']} artifacts "
        "compared).\n\n"
        f"LLM extraction through Ray with one and two stand-in replicas, each pinned to its own core (`python3 "
        f"scripts/bench_cluster_llm.py` → `cluster_llm_replicas.json`): {one['calls_per_second']:.3f} against "
        f"{two['calls_per_second']:.3f} calls/s, a ratio of **{llm['throughput_ratio']:.2f}** (goal ≥ 1.6), outputs "
        f"{'identical' if llm['identical'] else 'NOT identical'}.\n\n"
        f"{_ner()}\n\n"
        "Graph stages on a synthetic corpus, seconds per stage in its own process (`python3 "
        "scripts/bench_graph_scale.py` → `graph_scale.json`):\n\n" + "\n".join(rows) + f"\n\nLog-log slopes of time: "
        f"{slope_text}."
    )


def gpu() -> str:
    check, build = _load("gpu_check.json"), _load("cluster_musique_gpu.json")
    if not check.get("cuda"):
        return (
            "No GPU has run these paths yet: the committed `gpu_check.json` is a CPU machine's run, where every "
            'path says "skipped: no CUDA device".'
        )
    paths = check["paths"]
    rows = ["| path | problem | CPU s | GPU s | speedup | agrees |", "|---|---|---|---|---|---|"]
    for name in ("cosine_topk", "cooccurrence", "pagerank", "ppr", "embeddings_fp16"):
        path = paths[name]
        if path["status"] != "ran":
            rows.append(f"| {name} | {path.get('reason') or path.get('error')} | | | | |")
            continue
        shape = ", ".join(f"{k} {v:,}" for k, v in path.get("shape", {"texts": path.get("texts", 0)}).items())
        rows.append(
            f"| {name} | {shape} | {path['cpu_seconds']:.3f} | {path['gpu_seconds']:.3f} | {path['speedup']:.1f}× | "
            f"{'yes' if path['agree'] else 'NO'} |"
        )
    stages, ray, tests, faiss = (paths[n] for n in ("pipeline_stages", "ray_index", "gpu_tests", "faiss_knn"))
    local, on_ray = build["local"], build["ray"]
    # The embedded build ran first and paid CuPy's kernel compilation in knn_graph; the Ray build found it cached.
    warm_local = local["wall_seconds"] - local["stage_seconds"]["knn_graph"] + on_ray["stage_seconds"]["knn_graph"]
    lines = [
        f"Every GPU path against its CPU counterpart on one {check['device'].split(',')[0]} with "
        f"{check['machine']['cpu_count']} cores (`bash scripts/gpu_check.sh` → `gpu_check.json`; ran: "
        f"{', '.join(check['summary']['ran'])}; disagreeing: {', '.join(check['summary']['disagree']) or 'none'}):",
        "",
        *rows,
        "",
        f"The pipeline's graph stages on cuda and on cpu ({stages['documents']} MuSiQue paragraphs, the same vectors): "
        f"{sum(stages['differing_edges'].values())} differing graph edges, rankings within "
        f"{max(stages['max_rank_diff'].values()):.0e}, and PPR retrieval returned the CPU's evidence for "
        f"{stages['ppr_identical_evidence']:.0%} of {stages['ppr_questions']} questions. MuSiQue-500 through "
        f"`--engine ray` with the embedder on the GPU: {'complete' if ray.get('complete') else 'NOT complete'} in "
        f"{ray['index_seconds']:.0f} s. The GPU tests: {tests['summary']}. FAISS on the GPU: {faiss.get('reason')}.",
        "",
        f"Embedded engine against `--engine ray` on that machine, embedder on the GPU (`python3 "
        f"scripts/bench_cluster.py --device cuda` → `cluster_musique_gpu.json`): {local['wall_seconds']:.0f} s "
        f"against {on_ray['wall_seconds']:.0f} s, a ratio of **{build['wall_ratio']:.2f}**, index "
        f"{'identical' if build['identical'] else 'NOT identical'}, vectors bitwise equal: "
        f"{'yes' if build['vectors_bitwise_equal'] else 'no'}. Note: {build['cold_start']}; with that stage as the Ray "
        f"build had it, the ratio is about {on_ray['wall_seconds'] / warm_local:.2f}. The Ray build's slowest stage is "
        f"spaCy's NER on the CPU (`entities`, {local['stage_seconds']['entities']:.0f} s embedded, "
        f"{on_ray['stage_seconds']['entities']:.0f} s through Ray). On the same machine, {_ner('ner_parallel_h100_machine.json')}",
        "",
        f"Setup: {check['setup']}.",
    ]
    return "\n".join(lines)


SECTIONS = {
    "coverage": coverage_tables,
    "speed": speed,
    "scale": scale,
    "incremental": incremental,
    "server": server,
    "evidence": evidence,
    "cluster": cluster,
    "gpu": gpu,
}


def rewrite_readme(path: Path = REPO / "README.md") -> None:
    text = path.read_text(encoding="utf-8")
    for name, make in SECTIONS.items():
        pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"README.md lacks the <!-- {name}:start/end --> markers")
        text = pattern.sub(lambda m, body=make(): m.group(1) + body + "\n" + m.group(2), text)  # noqa: B008 (once per section)
    path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readme", action="store_true", help="Rewrite the generated sections of README.md.")
    if parser.parse_args().readme:
        rewrite_readme()
    else:
        print("\n\n".join(make() for make in SECTIONS.values()))
