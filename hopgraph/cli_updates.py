"""Commands that change and list an index's documents: ``hopgraph update | jobs | documents``.

Registered on the ``hopgraph`` group by :mod:`hopgraph.cli`; the same options, errors and messages
as every other command (:mod:`hopgraph.cli_options`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from hopgraph.cli_options import (
    ENGINE,
    INTERRUPTED_META,
    ROOT,
    SUMMARY_JSON,
    VERBOSE,
    Command,
    config_file_option,
    config_options,
    settings,
)
from hopgraph.cli_output import echo_llm_usage, read_inputs
from hopgraph.config import LLM_CONNECTION_FIELDS, apply_overrides
from hopgraph.errors import HopgraphError

UPDATE_SETTINGS = (*(f"llm.{name}" for name in LLM_CONNECTION_FIELDS), "cluster.")


@click.command(cls=Command)
@click.argument("index_dir", metavar="INDEX", type=click.Path(file_okay=False))
@click.option(
    "--add",
    "add_paths",
    multiple=True,
    type=click.Path(),
    help="Documents to add, read as by `index` (files, folders, JSONL, benchmark data); a document whose id exists "
    "replaces it. Repeatable.",
)
@click.option("--delete", "delete_ids", multiple=True, help="Id of a document to remove. Repeatable.")
@click.option("--resume", is_flag=True, help="Only run jobs that are queued or were interrupted.")
@click.option(
    "--keep",
    default=2,
    show_default=True,
    help="Newest finished versions kept on disk (the live one always is); older ones are deleted after the update.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
@ROOT
@VERBOSE
@SUMMARY_JSON
@ENGINE
@config_file_option(
    "TOML file: its [llm] connection settings and [cluster] section are used (the index keeps its own)."
)
@config_options(UPDATE_SETTINGS, exclude=("cluster.engine",))
def update(
    index_dir: str,
    add_paths: tuple[str, ...],
    delete_ids: tuple[str, ...],
    resume: bool,
    keep: int,
    quiet: bool,
    root: str | None,
    verbose: bool,
    as_json: bool,
    engine: str | None,
    config_file: str | None,
    **options: Any,
) -> None:
    """Add, replace or delete documents in INDEX, building a new version and switching to it when complete.

    Only new texts cost model time (vectors and LLM completions are cached by content); the
    graphs are recomputed, so the result equals a rebuild of the final corpus. Queries keep
    reading the old version until the new one is complete. A killed update leaves the old
    version live and is finished by `hopgraph update INDEX --resume`. The index's own settings
    are used; --llm.* options only say how to reach the LLM server. A file INDEX already holds keeps
    its id however its path is given; an edited copy elsewhere takes the original's id with --root.
    """
    from hopgraph.config import ClusterConfig, LLMConfig, validate_section  # noqa: PLC0415
    from hopgraph.index import versions  # noqa: PLC0415
    from hopgraph.index.jobs import id_counts  # noqa: PLC0415
    from hopgraph.store import IndexStore  # noqa: PLC0415

    if resume and (add_paths or delete_ids):
        raise click.UsageError("--resume runs the jobs already submitted; give --add/--delete without it")
    versions.live_version(index_dir)  # a clear error where INDEX is no index directory or CURRENT is garbage
    given = settings(config_file, options)  # the file read once (its retrieval.method only from the file)
    method = given.get("retrieval.method")
    if method is not None:  # the index keeps its own, but a method that cannot exist is a mistake to name now
        from hopgraph.retrieve.methods import check_method  # noqa: PLC0415

        check_method(str(method), source=config_file or "settings")
    overrides = {key: value for key, value in given.items() if key.startswith(UPDATE_SETTINGS)}
    llm_overrides = {k.removeprefix("llm."): v for k, v in overrides.items() if k.startswith("llm.")}
    llm = None
    if llm_overrides:
        stored = IndexStore(versions.live_root(index_dir)).require_complete()["config"].get("llm", {})
        llm = validate_section(LLMConfig, apply_overrides(dict(stored), llm_overrides), "--llm options")
    cluster_overrides = {k.removeprefix("cluster."): v for k, v in overrides.items() if k.startswith("cluster.")}
    if engine:
        cluster_overrides["engine"] = engine
    # How to build is this run's choice (never the stored one): the engine is not part of the index.
    cluster = validate_section(ClusterConfig, cluster_overrides, "--cluster options")
    corpus = None
    meta = click.get_current_context().meta
    resume_hint = f"`hopgraph update {index_dir} --resume` finishes"
    meta[INTERRUPTED_META] = f"; the jobs stay queued and {resume_hint} them"
    if not resume:
        meta[INTERRUPTED_META] = "; nothing was queued yet: run the same command again"
        documents = []
        if add_paths:
            corpus = read_inputs(add_paths, root, index_dir, progress=not quiet)
            documents = corpus.documents
        job = versions.submit_update(index_dir, documents, delete_ids)
        meta[INTERRUPTED_META] = (
            f"; job {job['id']} stays queued and {resume_hint} it (the same command again would queue it twice)"
        )
        if not as_json:
            added, deleted = id_counts(job)
            click.echo(f"submitted job {job['id']}: add {added}, delete {deleted}")
            for line in corpus.describe(verbose=verbose) if corpus else ():
                click.echo(line)
    done = versions.run_pending(index_dir, llm=llm, cluster=cluster, progress=not quiet)
    if not resume and job["id"] not in {j["id"] for j in done}:  # run by another `hopgraph update` meanwhile
        record = versions.read_job(index_dir, job["id"])
        if record["status"] == "failed":
            raise HopgraphError(f"update job {job['id']} failed: {record.get('error') or 'see `hopgraph jobs`'}")
        if record["status"] == "done":
            done.append(record)  # said as done, not as "no pending jobs"
    if as_json:
        summary = corpus.summary() if corpus else {"documents": 0, "ids": [], "skipped": []}
        click.echo(json.dumps({**summary, "jobs": done}, indent=2, default=str))
    elif not done:
        click.echo("no pending jobs")
    for job in [] if as_json else done:
        d, counts = job.get("documents", {}), ", ".join(f"{k}={v}" for k, v in sorted(job.get("counts", {}).items()))
        seconds = f"{job['seconds']:.1f} s" if "seconds" in job else "finished earlier"
        click.echo(
            f"job {job['id']} done: live version {versions.VERSIONS}/{job['version']} "
            f"(+{d.get('added', 0)} added, -{d.get('deleted', 0)} deleted, {d.get('replaced', 0)} replaced; "
            f"{counts}; {seconds})"
        )
        echo_llm_usage(job.get("llm", {}))
    from hopgraph.index import garbage  # noqa: PLC0415

    meta[INTERRUPTED_META] = "; the jobs are done, only removing old versions was cut short (the next update does it)"
    removed = garbage.collect_garbage(index_dir, keep=keep)
    if removed and not as_json:
        click.echo(f"removed old versions: {', '.join(removed)}")


@click.command(cls=Command)
@click.argument("index_dir", metavar="INDEX", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the job records as JSON.")
def jobs(index_dir: str, as_json: bool) -> None:
    """List the update jobs of INDEX, oldest first, and the live version."""
    from hopgraph.index import versions  # noqa: PLC0415
    from hopgraph.index.jobs import as_seen, id_counts, list_jobs  # noqa: PLC0415
    from hopgraph.store import IndexStore  # noqa: PLC0415

    IndexStore(index_dir).read_manifest()  # a clear error where INDEX is no index
    records = as_seen(Path(index_dir), list_jobs(index_dir))
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    click.echo(f"live version: {versions.live_version(index_dir) or 'root'}")
    for job in records:
        took = f", {job['seconds']:.1f} s" if "seconds" in job else ""
        error = f": {job['error']}" if job.get("error") else ""
        added, deleted = id_counts(job)
        by = f" by {job['submitted_by']}" if job.get("submitted_by") else ""  # absent from jobs of an earlier hopgraph
        click.echo(f"{job['id']}  {job['status']:<8} created {job['created']}{by}  +{added} -{deleted}{took}{error}")
    if any(job["status"] == "stopped" for job in records):
        click.echo(f"stopped jobs resume with `hopgraph update {index_dir} --resume` (or when a server over it starts)")


@click.command(cls=Command)
@click.argument("index_dir", metavar="INDEX", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the version and its documents as JSON.")
def documents(index_dir: str, as_json: bool) -> None:
    """List the documents of INDEX's live version: id, title, source, ACL and timestamp."""
    from hopgraph.index.catalog import list_documents  # noqa: PLC0415

    listing = list_documents(index_dir)
    if as_json:
        click.echo(json.dumps(listing, indent=2, ensure_ascii=False))
        return
    rows = listing["documents"]
    click.echo(f"{len(rows)} documents in version {listing['version']}")
    for row in rows:
        acl = ",".join(row["acl"]) if row["acl"] is not None else "-"
        click.echo(f"{row['id']}\t{row['title']}\t{row['source']}\tacl={acl}\t{row['timestamp'] or '-'}")
