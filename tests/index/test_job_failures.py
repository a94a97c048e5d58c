"""Update jobs that fail on purpose: a build past its time limit, a damaged version to edit, and
what failed jobs leave on disk (the fixtures are test_versions.py's)."""

from __future__ import annotations

import pytest

from hopgraph.errors import HopgraphError, IndexFormatError
from hopgraph.index import garbage, versions
from hopgraph.store import JOBS
from tests.index.test_versions import new_documents


def test_a_build_past_its_time_limit_fails_its_jobs_and_publishes_nothing(index):  # noqa: F811 - the imported fixture
    """serve.job_seconds: one build may run so long (a 9.6 MB upload held the only worker for over
    seven minutes, every job behind it waiting). Past the limit the build fails like any failed
    build: a batch runs its jobs alone, the first failure alone is raised, the live version stays."""
    tem, lismore, _ = new_documents()
    first, second = (versions.submit_update(index, [doc], []) for doc in (tem, lismore))
    live = versions.live_version(index)
    with pytest.raises(HopgraphError, match=r"stopped after its time limit of 0\.01 s \(serve\.job_seconds\)"):
        versions.run_pending(index, seconds=0.01)  # no build takes 10 ms
    records = {j["id"]: j for j in versions.list_jobs(index)}
    assert records[first["id"]]["status"] == "failed" and "serve.job_seconds" in records[first["id"]]["error"]
    assert records[second["id"]]["status"] == "queued" and "time limit" in records[second["id"]]["alone"]
    assert versions.live_version(index) == live
    (done,) = versions.run_pending(index)  # no limit: the other job is built and published
    assert done["id"] == second["id"] and done["status"] == "done"


def test_only_the_newest_failed_jobs_keep_their_documents_on_disk(index):  # noqa: F811 - the imported fixture
    """A failed job's documents (up to an insert's 10 MB) stayed until its record was pruned, one of
    the newest serve.keep_jobs (1000): gigabytes. Now only the newest failed ones keep them; every
    record stays, saying why its job failed."""
    jobs = [versions.submit_update(index, [doc], []) for doc in new_documents()]
    for _ in jobs:  # each fails alone: no build takes 10 ms
        with pytest.raises(HopgraphError, match="serve.job_seconds"):
            versions.run_pending(index, seconds=0.01)
    payloads = [index / JOBS / f"{job['id']}.documents.jsonl" for job in jobs]
    assert all(path.is_file() for path in payloads)
    garbage.collect_garbage(index, keep_failed_payloads=1)
    assert [path.is_file() for path in payloads] == [False, False, True]
    assert [versions.read_job(index, job["id"])["status"] for job in jobs] == ["failed"] * 3


def test_an_update_of_a_version_with_a_flipped_byte_fails_instead_of_copying_it(index):  # noqa: F811 - the imported fixture
    """Opening an index compares file sizes only, so 40 bytes overwritten in the live version's unit
    vectors went unseen: an update copied the damaged rows into its new version and recorded fresh
    hashes of them, and no later check could find the damage. The update now hashes the version it
    edits (beside the build) and fails, publishing nothing."""
    path = index / "arrays" / "unit_vectors.npy"
    data = bytearray(path.read_bytes())
    data[200:240] = b"\xff" * 40  # same size: only the hash tells
    path.write_bytes(bytes(data))
    job = versions.submit_update(index, [new_documents()[0]], [])
    with pytest.raises(
        IndexFormatError, match=r"unit_vectors\.npy: contents differ .* \(written by stage embed_units\)"
    ):
        versions.run_pending(index)
    record = versions.read_job(index, job["id"])
    assert record["status"] == "failed" and "is damaged" in record["error"] and "--overwrite" in record["error"]
    assert versions.live_version(index) == ""  # the root index stays live


def test_a_version_that_cannot_be_removed_does_not_stop_the_collection(index, monkeypatch):  # noqa: F811 - the imported fixture
    """On a shared file system a version's folder can stay (a file another machine holds open is
    renamed to .nfsXXXX, not deleted, and its folder is "not empty"). That error ended the whole
    collection, so the server's job loop printed a traceback at every pass and never pruned a
    record again. Now that version is left with a warning and the rest is collected. The refusal is
    injected: permissions do not stop the root user these tests may run as, and no NFS is here."""
    import os

    jobs = []
    for doc in new_documents():
        jobs.append(versions.submit_update(index, [doc], []))
        versions.run_pending(index)
    stuck = index / "versions" / jobs[0]["id"]
    real_rmdir = os.rmdir

    def rmdir(path, *args, **kwargs):
        if str(path) == str(stuck):
            raise OSError(39, "Directory not empty", str(path))
        return real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", rmdir)
    with pytest.warns(RuntimeWarning, match=rf"could not remove old index version {jobs[0]['id']} .*not empty"):
        assert garbage.collect_garbage(index, keep=0, keep_jobs=1) == [jobs[1]["id"]]
    assert stuck.is_dir() and not (index / "versions" / jobs[1]["id"]).exists()
    assert [j["id"] for j in versions.list_jobs(index)] == [jobs[0]["id"], jobs[2]["id"]]  # its version is on disk
    monkeypatch.setattr(os, "rmdir", real_rmdir)
    assert garbage.collect_garbage(index, keep=0, keep_jobs=1) == [jobs[0]["id"]]  # the next collection
    assert [j["id"] for j in versions.list_jobs(index)] == [jobs[2]["id"]]
