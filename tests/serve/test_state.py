"""The server's index holder on real index files: the version it loads is in use (and spared by
garbage collection) from before its files are read, a version that failed to load is tried again, and
a root index rebuilt in place is opened again."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import pytest

from hopgraph.config import validate_config
from hopgraph.errors import IndexFormatError
from hopgraph.index import garbage, versions
from hopgraph.serve.replicas import Heartbeats
from hopgraph.serve.state import IndexHolder

OLD, NEW = "j000001-aaaaaa", "j000002-bbbbbb"


def add_version(root: Path, name: str) -> Path:
    """A complete version directory: a copy of the root index's own files."""
    target = root / versions.VERSIONS / name
    shutil.copytree(root, target, ignore=lambda folder, names: [versions.VERSIONS] if Path(folder) == root else [])
    return target


def publish(root: Path, name: str) -> None:
    (root / versions.CURRENT).write_text(f"{versions.VERSIONS}/{name}\n", encoding="utf-8")


def test_the_version_being_loaded_is_in_use_and_spared_by_garbage_collection(index_copy, serve_config):
    holder = IndexHolder(index_copy, serve_config)
    add_version(index_copy, OLD)
    add_version(index_copy, NEW)
    publish(index_copy, NEW)  # CURRENT has moved on while this process still loads OLD
    here = Heartbeats(index_copy, {"id": "here-1-abc", "host": "here", "pid": 1})
    leader = Heartbeats(index_copy, {"id": "leader-2-def", "host": "leader", "pid": 2})
    seen: dict[str, object] = {}

    def announce() -> None:  # the load has begun, no file of OLD read yet: the leader collects now
        seen["in_use"] = holder.versions_in_use()
        here.beat(holder.versions_in_use(), leader=False)  # any heartbeat written meanwhile names it
        seen["removed"] = garbage.collect_garbage(index_copy, keep=0, protect=lambda: leader.protected(60))

    assert holder.refresh(OLD, announce=announce)
    assert seen["in_use"] == {"", OLD} and seen["removed"] == []
    assert holder.current.version == OLD  # exactly the version recorded, not what CURRENT names by now
    assert holder.versions_in_use() == {OLD}
    assert (index_copy / versions.VERSIONS / OLD).is_dir()


def test_a_version_that_failed_to_load_is_tried_again_after_a_while(index_copy, serve_config):
    holder = IndexHolder(index_copy, serve_config)
    holder.retry_after = 1.0
    target = add_version(index_copy, NEW)
    table = next((target / "tables").glob("*.parquet"))
    saved = table.read_bytes()
    table.unlink()  # not yet fully on this machine's view of shared storage
    publish(index_copy, NEW)
    with pytest.raises(Exception, match=table.name):
        holder.refresh()
    table.write_bytes(saved)  # storage catches up; CURRENT does not move
    assert not holder.refresh() and holder.current.version == ""  # within the back-off: not tried
    time.sleep(holder.retry_after + 0.1)
    assert holder.refresh() and holder.current.version == NEW


def test_a_built_version_no_server_could_load_is_never_published(index_copy):
    from hopgraph.documents import Document
    from hopgraph.errors import IndexFormatError
    from hopgraph.serve.state import check_servable

    note = Document(id="ferry", text="The Sorvik ferry leaves Tem island at seven every morning.")
    job = versions.submit_update(index_copy, [note], [])
    [done] = versions.run_pending(index_copy, verify=check_servable)  # what the server's worker runs
    assert done["status"] == "done" and versions.live_version(index_copy) == job["id"]

    def damaged_then_checked(path: Path) -> None:
        # Fault injection: a version that cannot be loaded is no longer built from any input known,
        # so its chunk vectors are cut short between the build and the check.
        vectors = path / "arrays" / "chunk_vectors.npy"
        vectors.write_bytes(vectors.read_bytes()[:200])
        check_servable(path)

    second = versions.submit_update(index_copy, [], ["ferry"])
    with pytest.raises(IndexFormatError, match="was built but cannot be served, so it is not live"):
        versions.run_pending(index_copy, verify=damaged_then_checked)
    assert versions.live_version(index_copy) == job["id"]  # the good version stays live
    assert versions.read_job(index_copy, second["id"])["status"] == "failed"


def test_a_heartbeat_read_before_a_load_was_announced_is_not_written_after_it(index_copy, serve_config):
    """The beat thread reads what is in use, then a load is announced (its heartbeat names the new
    version), then the beat thread writes what it read: that dropped the version being loaded from
    the heartbeat, so the leader could collect it mid-load. Heartbeats are now written one at a time,
    each from what is in use when it is written. The pause between reading and writing is injected
    (a wrapper that holds the beat thread's read for up to 2 s): a thread switch there cannot be
    provoked on demand."""
    import json
    import threading

    from hopgraph.serve.replicas import Replica
    from hopgraph.serve.state import JobRunner

    holder = IndexHolder(index_copy, serve_config)
    add_version(index_copy, NEW)
    replica = Replica(index_copy, holder, JobRunner(index_copy, holder, serve_config), serve_config.serve)
    read, announced = threading.Event(), threading.Event()
    in_use = holder.versions_in_use

    def slow_read() -> set[str]:
        found = in_use()
        if threading.current_thread().name == "beat":
            read.set()
            announced.wait(2)  # the announce comes meanwhile, unless it has to wait for this beat
        return found

    holder.versions_in_use = slow_read  # type: ignore[method-assign]
    beat = threading.Thread(target=replica._beat, name="beat")
    beat.start()
    assert read.wait(10)

    def announce() -> None:
        replica._beat()
        announced.set()

    assert holder.refresh(NEW, announce=announce)
    beat.join()
    assert NEW in json.loads(replica.heartbeats.path.read_text(encoding="utf-8"))["versions"]
    replica.heartbeats.remove()


def test_a_root_index_rebuilt_in_place_is_opened_again(index_copy, serve_config, acl_documents):
    from hopgraph.index.pipeline import build_index
    from hopgraph.store import IndexStore

    holder = IndexHolder(index_copy, serve_config)
    assert holder.serves("") and not holder.refresh()  # the same files: nothing to do
    before = holder.current.doc_ids
    stored = IndexStore(index_copy).read_manifest()["config"]
    another = [dataclasses.replace(d, id=f"rebuilt-{d.id}") for d in acl_documents]
    build_index(another, index_copy, validate_config(stored, "stored"), progress=False, overwrite=True)

    assert not holder.serves("")
    with pytest.raises(IndexFormatError, match="rebuilt while it was open"):  # a part loaded from now on
        holder.current.index.memo("scope", "a group set not seen yet", lambda: None)
    assert holder.refresh() and holder.serves("")
    assert holder.current.doc_ids == {f"rebuilt-{i}" for i in before}
    assert holder.current.index.memo("scope", "a group set not seen yet", lambda: 1) == 1


def test_a_rebuild_in_place_under_way_keeps_the_loaded_index_and_says_so_once(
    index_copy, serve_config, acl_documents, capsys
):
    from hopgraph.index.pipeline import build_index
    from hopgraph.store import IndexStore

    holder = IndexHolder(index_copy, serve_config)
    stored = validate_config(IndexStore(index_copy).read_manifest()["config"], "stored")
    again = [dataclasses.replace(d, id=f"half-{d.id}") for d in acl_documents]
    build_index(again, index_copy, stored, progress=False, overwrite=True, stop_after="documents")  # left unfinished
    assert all(holder.serves("") for _ in range(3)) and not holder.refresh()  # nothing to open yet: no error
    assert capsys.readouterr().err.count("serving what was loaded until this completes") == 1


def test_an_isolated_root_index_rebuilt_in_place_is_opened_again(acl_documents, serve_config, tmp_path):
    from hopgraph.index.pipeline import build_index

    config = serve_config.model_copy(update={"access": serve_config.access.model_copy(update={"isolation": True})})
    build_index(acl_documents, tmp_path / "isolated", config, progress=False)
    holder = IndexHolder(tmp_path / "isolated", config)
    another = [dataclasses.replace(d, id=f"rebuilt-{d.id}") for d in acl_documents]
    build_index(another, tmp_path / "isolated", config, progress=False, overwrite=True)
    assert not holder.serves("") and holder.refresh()
    assert holder.current.doc_ids == {d.id for d in another}


def test_the_update_worker_runs_no_module_from_the_server_s_working_folder(index_copy, serve_config, tmp_path):
    """The worker started as `python -m` from the server's working folder: a file there named like a
    module it imports (argparse.py, left in /tmp by anyone) ran as the server's user at the next job."""
    import subprocess

    from hopgraph.serve.state import JobRunner

    holder = IndexHolder(index_copy, serve_config)
    folder = tmp_path / "cwd"
    folder.mkdir()
    marker = tmp_path / "ran"
    (folder / "argparse.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    command = JobRunner(index_copy, holder, serve_config).worker_command()
    done = subprocess.run([*command[: command.index("hopgraph.serve.worker") + 1], "--help"], cwd=folder, check=False)
    assert done.returncode == 0 and not marker.exists()
