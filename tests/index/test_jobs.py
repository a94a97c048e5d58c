"""Job records on disk: small whatever the job, readable past a damaged one, and nothing left behind
by a killed submit (the fixtures are test_versions.py's)."""

from __future__ import annotations

import json
import os
import time

import pytest

from hopgraph.documents import Document
from hopgraph.errors import IndexFormatError
from hopgraph.index import garbage, jobs, versions
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.store import JOBS, REPLICAS
from tests.index.test_versions import new_documents


def test_a_record_names_its_first_ids_and_the_whole_lists_live_beside_it(index):  # noqa: F811 - the imported fixture
    """One insert of 1,000 long ids made a 6.1 MB record (pretty-printed, every character escaped),
    and a server re-reads every record each time it looks at the queue: 147 such records took an
    idle server 14.8 s of CPU in 20 s. A record now names its first ids with their counts; the job
    still adds and deletes every one."""
    long_ids = [f"{n:03d}-" + "é" * 300 for n in range(60)]
    added = [Document(id=i, title=f"Note {i[:3]}", text=f"Tide note number {i[:3]} for Sorvik pier.") for i in long_ids]
    job = versions.submit_update(index, added, [])
    record_bytes = jobs.job_path(index, job["id"]).stat().st_size
    assert record_bytes < 5000, record_bytes  # all 60 ids would be 18,000 characters
    assert job["add_count"] == 60 and job["add_first"] == long_ids[:3] and job["delete_count"] == 0
    assert "add" not in job  # older code reading "add" as the whole list fails instead of adding 3
    (done,) = versions.run_pending(index)
    assert done["status"] == "done" and done["documents"]["added"] == 60
    assert set(long_ids) <= set(LoadedIndex(index).documents["id"])
    delete = versions.submit_update(index, [], long_ids)
    assert delete["delete_count"] == 60 and len(delete["delete_first"]) == 3
    versions.run_pending(index)
    assert not set(long_ids) & set(LoadedIndex(index).documents["id"])
    garbage.collect_garbage(index)  # done: the documents and the id lists go, the short record stays
    assert sorted(p.name for p in (index / JOBS).glob("j*")) == [f"{job['id']}.json", f"{delete['id']}.json"]


def test_a_document_holding_unicode_line_separators_is_queued_and_indexed_whole(index):  # noqa: F811
    """U+2028, U+2029 and U+0085 (common in text pasted from web pages) break lines for
    str.splitlines but are not escaped by json.dumps: the job's documents were read back cut in two,
    and every update job holding one failed ("Unterminated string")."""
    text = "First line\u2028second line\u2029third\u0085fourth, at the Sorvik pier."
    added = Document(id="separators", title="A\u2028B", text=text, metadata={"note": "a\u2029b"})
    job = versions.submit_update(index, [added], [])
    (queued,) = jobs.job_documents(index, job["id"])
    assert (queued.text, queued.title, queued.metadata) == (text, "A B", {"note": "a\u2029b"})  # a title is one line
    (done,) = versions.run_pending(index)
    assert done["status"] == "done", done["error"]
    live = LoadedIndex(index).documents
    assert live["text"][live["id"].index("separators")] == text


def test_a_damaged_record_is_left_out_with_a_warning_and_the_queue_goes_on(index):  # noqa: F811 - the imported fixture
    """json.JSONDecodeError from one truncated record escaped every look at the queue: submits,
    job pages, the server's job loop and collection all failed until someone removed the file."""
    damaged = index / JOBS / "j000099-abcdef.json"
    damaged.parent.mkdir(exist_ok=True)
    damaged.write_text('{"id": "j000099-abcdef", "status": "qu', encoding="utf-8")
    with pytest.raises(IndexFormatError, match=r"j000099-abcdef\.json: damaged job record .* move it out of"):
        jobs.read_job(index, "j000099-abcdef")
    with pytest.warns(RuntimeWarning, match="damaged job record .* the queue goes on without it"):
        job = versions.submit_update(index, [new_documents()[0]], [])
    with pytest.warns(RuntimeWarning, match="damaged job record"):
        (done,) = versions.run_pending(index)
    assert done["id"] == job["id"] and done["status"] == "done"


def test_what_a_killed_submit_or_write_leaves_in_jobs_is_collected_once_stale(index):  # noqa: F811 - the imported fixture
    """A submit killed between its payload and its record left the payload (up to an insert's 10 MB)
    and a killed write its temporary file; nothing deleted them. They go once an hour old; younger
    ones may belong to a submit or a write still under way and stay."""
    folder, beats = index / JOBS, index / REPLICAS
    folder.mkdir(exist_ok=True)
    beats.mkdir(exist_ok=True)
    stale = [folder / "j000007-aaaaaa.documents.jsonl", folder / "j000007-aaaaaa.ids.json", folder / ".x.json.k2.tmp"]
    stale.append(beats / ".host-1-abc.json.k3.tmp")  # a heartbeat write killed midway (serving processes beat)
    young = [folder / "j000008-bbbbbb.documents.jsonl", folder / ".y.json.q9.tmp", beats / ".host-2-d.json.q1.tmp"]
    for path in stale + young:
        path.write_text("{}", encoding="utf-8")
    hour_ago = time.time() - garbage.STALE_SECONDS - 60
    for path in stale:
        os.utime(path, (hour_ago, hour_ago))
    job = versions.submit_update(index, [new_documents()[0]], [])  # a payload with its record stays
    os.utime(jobs.job_path(index, job["id"], jobs.DOCUMENTS), (hour_ago, hour_ago))
    garbage.collect_garbage(index)
    assert [p.exists() for p in stale] == [False] * 4 and all(p.exists() for p in young)
    assert (
        jobs.job_path(index, job["id"], jobs.DOCUMENTS).exists() and jobs.job_path(index, job["id"], jobs.IDS).exists()
    )


def test_a_job_queued_by_older_code_with_its_whole_id_lists_in_the_record_still_runs(index):  # noqa: F811
    """Records written before the lists moved beside them hold every id as ``add`` and ``delete``
    and no counts: a queue left by the previous version is run as it was submitted."""
    import json

    tem, lismore, _ = new_documents()
    job = versions.submit_update(index, [tem, lismore], ["press-2023"])
    record = jobs.read_job(index, job["id"])
    old = {k: v for k, v in record.items() if k not in ("add_first", "add_count", "delete_first", "delete_count")}
    old.update(add=[tem.id, lismore.id], delete=["press-2023"])
    jobs.job_path(index, job["id"]).write_text(json.dumps(old, indent=2), encoding="utf-8")
    jobs.job_path(index, job["id"], jobs.IDS).unlink()
    assert jobs.first_ids(old) == ([tem.id, lismore.id], ["press-2023"]) and jobs.id_counts(old) == (2, 1)
    (done,) = versions.run_pending(index)
    ids = LoadedIndex(index).documents["id"]
    assert done["status"] == "done" and {tem.id, lismore.id} <= set(ids) and "press-2023" not in ids


def test_numbering_goes_on_past_job_999999(index):  # noqa: F811 - the imported fixture
    """Job 1,000,000 got the id "j1000000-…", which the id pattern did not match: its record was
    never listed, so the update was accepted and silently never ran, and every later job reused its
    number. Ids now grow a digit and sort by their number."""
    first = versions.submit_update(index, [new_documents()[0]], [])
    versions.run_pending(index)
    old = jobs.read_job(index, first["id"])
    long_ago = {**old, "id": "j999999-abcdef", "status": "failed", "error": "stands for 999,999 earlier jobs"}
    jobs.job_path(index, long_ago["id"]).write_text(json.dumps(long_ago), encoding="utf-8")
    job = versions.submit_update(index, [new_documents()[1]], [])
    assert job["id"].startswith("j1000000-")
    assert [j["id"] for j in jobs.list_jobs(index)] == [first["id"], "j999999-abcdef", job["id"]]  # oldest first
    (done,) = versions.run_pending(index)
    assert done["id"] == job["id"] and done["status"] == "done"
    assert LoadedIndex(index).version == job["id"] and new_documents()[1].id in LoadedIndex(index).documents["id"]
    assert versions.submit_update(index, [], [new_documents()[1].id])["id"].startswith("j1000001-")


def test_a_version_folder_is_not_an_index_to_update(index):  # noqa: F811 - the imported fixture
    """A version opened as if it were an index root took update jobs: jobs/ was created inside a
    version, which never changes once complete."""
    from hopgraph.errors import InputError

    first = versions.submit_update(index, [new_documents()[0]], [])
    versions.run_pending(index)
    version = index / "versions" / first["id"]
    for touch in (
        lambda: versions.submit_update(version, [new_documents()[1]], []),
        lambda: versions.run_pending(version),  # `hopgraph update VERSION --resume`
        lambda: garbage.collect_garbage(version),
    ):
        with pytest.raises(InputError, match=r"is a version of the index .*, which never changes once complete"):
            touch()
    assert not (version / JOBS).exists()


def test_a_listing_reads_again_every_record_that_changed_since_the_last(index):  # noqa: F811
    """Records are kept by their file's stamp between looks at the queue (a server looks every few
    seconds): a record rewritten, even in place with the same size, is read again."""
    job = versions.submit_update(index, [new_documents()[0]], [])
    assert [j["status"] for j in jobs.list_jobs(index)] == ["queued"]
    jobs.write_job(index, {**job, "status": "failed", "error": "x"})  # atomic: a new file
    assert [j["status"] for j in jobs.list_jobs(index)] == ["failed"]
    path = jobs.job_path(index, job["id"])
    same_size = path.read_text(encoding="utf-8").replace('"error": "x"', '"error": "y"')
    path.write_text(same_size, encoding="utf-8")  # in place: the same inode and size, a later mtime
    assert [j["error"] for j in jobs.list_jobs(index)] == ["y"]
    path.unlink()
    assert jobs.list_jobs(index) == [] and not jobs._RECORDS.folders[str(index / JOBS)]  # nothing held for it
