"""Update jobs through the server over real HTTP: the queue bound, coalesced builds, garbage
collection that spares versions in use, 'done' only once the server answers from the new version,
and a worker that keeps dying."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from hopgraph.index import versions
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import LLM_FREE
from hopgraph.store import JOBS
from tests.serve.support import LiveServer, auth, wait_for_job, wait_until

pytestmark = pytest.mark.slow  # every test runs real update jobs (index builds) through a live server


def configured(serve_config, **serve):
    return serve_config.model_copy(update={"serve": serve_config.serve.model_copy(update=serve)})


def version_dirs(root: Path) -> list[str]:
    folder = root / versions.VERSIONS
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def insert(client: httpx.Client, doc_id: str, text: str) -> httpx.Response:
    return client.post(
        "/v1/documents", json={"documents": [{"id": doc_id, "text": text, "title": doc_id}]}, headers=auth("admin")
    )


def test_queue_bound_answers_429_and_queued_jobs_are_one_build(index_copy, serve_config):
    with (
        LiveServer(index_copy, configured(serve_config, max_queued_jobs=2)) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        with versions.job_lock(index_copy, ".lock"):  # a job is running: the worker waits, the queue fills
            first = insert(
                client, "tem-observatory", "The Tem Observatory opened in 1994 on the highest hill of Tem island."
            )
            second = client.delete("/v1/documents/secret-ops", headers=auth("admin"))
            refused = insert(client, "aster-bridge", "The Aster Bridge in Castel Brun was rebuilt in 1958.")
        assert first.status_code == second.status_code == 202
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "queue_full"
        assert int(refused.headers["retry-after"]) >= 1 and "limit is 2" in refused.json()["error"]["message"]
        done = [wait_for_job(client, job.json()["id"], timeout=240) for job in (first, second)]
        assert [j["status"] for j in done] == ["done", "done"]
        assert done[0]["version"] == done[1]["version"] == second.json()["id"]  # one build published both
        assert version_dirs(index_copy) == [second.json()["id"]]
        ids = server.app.state.holder.current.doc_ids
        assert "tem-observatory" in ids and "secret-ops" not in ids


def test_deleted_document_is_gone_once_the_job_is_done(index_copy, serve_config):
    query = {"query": "research vessel Long Reach ran aground near Tem MARROWGLEN survey", "budget": 2000}
    with LiveServer(index_copy, serve_config) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        before = client.post("/v1/retrieve", json={**query, "method": "ppr"}, headers=auth("admin")).json()
        assert "secret-ops" in {d for ev in before["evidence"] for d in ev["doc_ids"]}
        submitted = time.monotonic()
        job = client.delete("/v1/documents/secret-ops", headers=auth("admin")).json()
        statuses = set()
        while True:  # poll as fast as a client could
            record = client.get(f"/v1/jobs/{job['id']}", headers=auth("admin")).json()
            statuses.add(record["status"])
            if record["status"] in ("done", "failed"):
                break
            assert time.monotonic() - submitted < 240
            time.sleep(0.02)
        to_done = time.monotonic() - submitted
        assert record["status"] == "done"
        for method in LLM_FREE:  # the very next requests answer from the new version
            body = client.post("/v1/retrieve", json={**query, "method": method}, headers=auth("admin")).json()
            assert body["version"] == job["id"] and "secret-ops" not in {
                d for ev in body["evidence"] for d in ev["doc_ids"]
            }
        # The server may switch (following CURRENT) before its worker has exited and been counted.
        wait_until(lambda: server.app.state.jobs.publish_seconds)
        [switch] = server.app.state.jobs.publish_seconds
        print(
            f"submit → done {to_done:.2f} s, worker exit → switch {switch['exit_to_switch']:.2f} s, statuses "
            f"{sorted(statuses)}"
        )
        assert switch["exit_to_switch"] < to_done


def test_deleting_the_last_document_says_so_and_an_unknown_one_is_404(index_copy, serve_config):
    """Deleting the one document left was answered 404 "no document … in the index", naming one that is there."""
    ids = list(LoadedIndex(index_copy).documents["id"])
    versions.submit_update(index_copy, [], ids[1:])  # queued: the index's last document is ids[0]
    with LiveServer(index_copy, serve_config) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        last = client.delete(f"/v1/documents/{ids[0]}", headers=auth("admin"))
        assert last.status_code == 409 and last.json()["error"]["code"] == "update_refused", last.text
        assert "without documents" in last.json()["error"]["message"]
        gone = client.delete(f"/v1/documents/{ids[1]}", headers=auth("admin"))
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "unknown_document", gone.text


def test_a_lingering_worker_builds_the_next_job_without_restarting(index_copy, serve_config):
    """With serve.worker_linger the worker that built one job stays and builds the next one submitted
    within that time (one run: no second process start or model loading), while the server switches
    to each version as it is published."""
    with (
        LiveServer(index_copy, configured(serve_config, worker_linger=120.0)) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        runner = server.app.state.jobs
        first = wait_for_job(client, insert(client, "note-a", "Note A about the Sorvik ferry timetable.").json()["id"])
        child = runner._child
        assert first["status"] == "done" and child is not None and child.poll() is None  # done, and still there
        assert "note-a" in server.app.state.holder.current.doc_ids
        second = wait_for_job(client, insert(client, "note-b", "Note B about the Tem lighthouse.").json()["id"])
        assert second["status"] == "done" and runner._child is child and child.poll() is None
        assert second["run"] == first["run"] and second["version"] != first["version"]
        assert {"note-a", "note-b"} <= server.app.state.holder.current.doc_ids
    assert child.returncode is not None  # stopping the server ended the lingering worker


def test_a_lingering_worker_whose_server_died_exits(index_copy):
    """The server that started a lingering worker dies: the orphaned worker takes no further job and
    exits (the server that takes over runs its own)."""
    spawn = (
        "import os, subprocess, sys; "
        "child = subprocess.Popen([sys.executable, '-m', 'hopgraph.serve.worker', sys.argv[1], "
        "'--linger', '300', '--poll', '0.2', '--parent', str(os.getpid())], "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(child.pid, flush=True)"
    )
    parent = subprocess.run([sys.executable, "-c", spawn, str(index_copy)], capture_output=True, text=True, check=True)
    worker = int(parent.stdout.strip())  # the parent exited at once: the worker is an orphan

    def gone() -> bool:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return True
        try:
            return Path(f"/proc/{worker}/stat").read_text().split(")")[1].split()[0] == "Z"  # exited, not reaped
        except FileNotFoundError:  # reaped in between
            return True

    wait_until(gone, timeout=60)  # long before its linger of 300 s


def test_server_collects_old_versions_but_spares_those_in_use(index_copy, serve_config):
    # One lingering worker builds all five jobs (models loaded once, not five times).
    with (
        LiveServer(index_copy, configured(serve_config, keep_versions=1, worker_linger=120.0)) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        holder = server.app.state.holder
        first = wait_for_job(
            client, insert(client, "note-0", "Note zero about the Sorvik ferry timetable.").json()["id"]
        )
        with holder.snapshot() as held:  # an in-flight request on the first version
            assert held.version == first["version"]
            for n in (1, 2):
                job = wait_for_job(
                    client, insert(client, f"note-{n}", f"Note {n} about the Sorvik ferry timetable.").json()["id"]
                )
                assert job["status"] == "done"
            assert first["version"] in version_dirs(index_copy)  # still read: not collected
            assert (
                "note-0" in held.doc_ids
                and held.retriever.retrieve("Sorvik ferry timetable", method="ppr", budget=200).evidence
            )
        for n in (3, 4):
            last = wait_for_job(
                client, client.delete(f"/v1/documents/note-{n - 3}", headers=auth("admin")).json()["id"]
            )
            assert last["status"] == "done"
        wait_until(lambda: len(version_dirs(index_copy)) <= 2)  # keep_versions + the live one
        assert first["version"] not in version_dirs(index_copy) and last["version"] in version_dirs(index_copy)
        assert holder.versions_in_use() == {last["version"]}


def test_a_worker_that_keeps_dying_ends_failed_and_the_server_keeps_serving(index_copy, serve_config):
    with (
        LiveServer(index_copy, configured(serve_config, job_attempts=2)) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        runner = server.app.state.jobs
        runner.backoff = 0.2
        # A corrupt job record is left out of the queue with a warning; the job loop goes on.
        corrupt = index_copy / JOBS / "j000099-abcdef.json"
        corrupt.parent.mkdir(exist_ok=True)
        corrupt.write_text("{not json")
        runner._wake.set()
        time.sleep(1.0)
        assert runner._thread.is_alive()
        corrupt.unlink()
        job = insert(client, "doomed", "A document whose update worker is killed every time.").json()
        killed: set[int] = set()
        deadline = time.monotonic() + 240
        while (record := client.get(f"/v1/jobs/{job['id']}", headers=auth("admin")).json())["status"] not in (
            "done",
            "failed",
        ):
            child = runner._child
            started = record["status"] == "running" and record.get("attempts", 0) > len(killed)
            if started and child is not None and child.poll() is None and child.pid not in killed:
                os.kill(child.pid, signal.SIGKILL)  # killed hard mid-build, as the kernel's OOM killer would
                killed.add(child.pid)
            assert time.monotonic() < deadline, "the job never ended"
            time.sleep(0.05)
        assert record["status"] == "failed" and len(killed) == 2 and record["attempts"] == 2
        assert "signal 9" in record["error"] and "2 attempts" in record["error"]
        assert runner._thread.is_alive() and client.get("/healthz").json()["version"] == ""
        ok = client.post("/v1/retrieve", json={"query": "Sorvik ferry", "method": "ppr"}, headers=auth("guest"))
        assert ok.status_code == 200 and ok.json()["version"] == ""
        # The queue works again afterwards.
        after = wait_for_job(
            client, insert(client, "survivor", "A later document about the Sorvik ferry.").json()["id"]
        )
        assert after["status"] == "done" and "survivor" in server.app.state.holder.current.doc_ids


@pytest.mark.parametrize(
    "death", ["raise OSError(28, 'No space left on device')", "raise SystemExit(4)"], ids=["traceback", "claims"]
)
def test_a_worker_that_dies_before_recording_anything_counts_as_a_crash(index_copy, serve_config, tmp_path, death):
    """A worker that ended with a traceback before writing a record (a full disk) read as one that had
    recorded its failure: the next started at once, forever; so did one whose status says it recorded
    one (an error before the job began) while no record changed. The worker's death is injected (a
    process that ends so at once): tests cannot fill a disk portably."""
    starts = tmp_path / "starts"
    dies = f"open({str(starts)!r}, 'a').write('x'); {death}"
    with (
        LiveServer(index_copy, configured(serve_config, job_attempts=2)) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        runner = server.app.state.jobs
        runner.backoff = 0.2
        runner.worker_command = lambda: [sys.executable, "-c", dies]
        job = insert(client, "memo", "The Sorvik pier was rebuilt in stone in 1911.").json()
        record = wait_for_job(client, job["id"], timeout=60)
    assert record["status"] == "failed" and "gave up after 2 attempts" in record["error"], record
    assert starts.read_text() == "xx"


def started(root: Path, job_id: str) -> int:
    """Runs of a job that began: attempts and those a shutdown interrupted."""
    record = versions.read_job(root, job_id)
    return record.get("attempts", 0) + record.get("interrupted", 0)


def test_stopping_the_server_during_a_job_is_not_a_crash_and_the_job_finishes_later(index_copy, serve_config):
    """Restarts (or deploys) during a build are not attempts: after three of them, one real crash of
    the worker still leaves the job a retry under serve.job_attempts=2, and it finishes."""
    config = configured(serve_config, job_attempts=2)
    job_id = ""
    for restart in range(3):  # three restarts (or deploys) while the worker builds the job
        with LiveServer(index_copy, config) as server, httpx.Client(base_url=server.url, timeout=60) as client:
            runner = server.app.state.jobs
            if not job_id:
                job_id = insert(client, "tem-observatory", "The Tem Observatory opened in 1994 on Tem.").json()["id"]
            wait_until(
                lambda: (
                    started(index_copy, job_id) > restart and runner._child is not None and runner._child.poll() is None
                ),
                timeout=120,
            )
            child = runner._child
        assert child.returncode == -signal.SIGTERM  # the shutdown ended the worker mid-build
        record = versions.read_job(index_copy, job_id)
        assert record["status"] in versions.UNFINISHED, record  # neither failed nor waited for
        assert record["attempts"] == 0, record  # an interrupted run is not an attempt ...
        assert record["interrupted"] == restart + 1, record  # ... it is counted apart
    with LiveServer(index_copy, config) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        runner = server.app.state.jobs
        runner.backoff = 0.2
        wait_until(
            lambda: started(index_copy, job_id) > 3 and runner._child is not None and runner._child.poll() is None,
            timeout=120,
        )
        runner._child.kill()  # a real crash mid-build (as the OOM killer would): the first attempt of two
        record = wait_for_job(client, job_id, timeout=240)
        assert record["status"] == "done", record
        assert (record["attempts"], record["interrupted"]) == (2, 3), record
        assert "tem-observatory" in server.app.state.holder.current.doc_ids


def test_a_job_loop_that_fails_every_pass_waits_longer_each_time_and_prints_one_traceback(
    index_copy, serve_config, capsys
):
    """On a full disk every pass failed alike: the loop waited 1 s each time, started a worker on
    each try (models loaded again) and printed a traceback every time, ~100 MB of log a day. The
    fault is injected (a pass that raises ENOSPC): tests cannot fill a disk portably."""
    import errno

    with LiveServer(index_copy, configured(serve_config)) as server:
        runner = server.app.state.jobs
        passes: list[float] = []

        def full_disk() -> None:
            passes.append(time.monotonic())
            raise OSError(errno.ENOSPC, "No space left on device")

        runner._pass = full_disk
        runner._wake.set()
        wait_until(lambda: len(passes) == 3, timeout=3 * runner.idle_wait + 10)
        runner._pass = lambda: None  # the disk has room again: the server goes on as before
    # After a failed pass the loop waits 1, 2, 4 … s (and then its usual idle wait): growing gaps.
    gaps = [round(b - a, 1) for a, b in zip(passes, passes[1:])]
    assert gaps[1] >= gaps[0] + 0.8, gaps
    err = capsys.readouterr().err
    assert err.count("Traceback") == 1 and err.count("No space left on device") >= 3, err
    assert "(2 in a row; retrying in 2 s)" in err


@pytest.mark.parametrize(
    "error,status,code", [("ENOSPC", 507, "storage_full"), ("EROFS", 503, "storage_read_only")], ids=["full", "ro"]
)
def test_an_insert_on_a_full_or_read_only_disk_says_so_instead_of_a_server_error(
    index_copy, serve_config, error, status, code
):
    """It was a 500 "server_error" with a traceback. The fault is injected where the job would be
    written (tests cannot fill or remount a disk portably); the server goes on after it."""
    import errno

    with LiveServer(index_copy, configured(serve_config)) as server:
        runner = server.app.state.jobs
        submit = runner.submit

        def no_room(add, delete, by):
            raise OSError(getattr(errno, error), os.strerror(getattr(errno, error)), str(index_copy / JOBS))

        runner.submit = no_room
        with httpx.Client(base_url=server.url, timeout=60) as client:
            refused = insert(client, "memo", "The Sorvik pier was rebuilt in stone in 1911.")
            runner.submit = submit
            body = refused.json()["error"]
            assert refused.status_code == status and body["code"] == code, refused.text
            assert str(index_copy) not in body["message"] and refused.headers["retry-after"] == "60"
            assert insert(client, "memo", "The Sorvik pier was rebuilt in stone in 1911.").status_code == 202


def test_an_insert_while_the_index_on_disk_is_half_built_is_refused_with_its_state_not_a_server_error(
    index_copy, serve_config
):
    """An `hopgraph index --overwrite` killed on the served folder leaves its manifest incomplete:
    an insert then answered 500 "server_error", the reason in the log only."""
    with LiveServer(index_copy, configured(serve_config)) as server:
        manifest = index_copy / "manifest.json"
        built = json.loads(manifest.read_text(encoding="utf-8"))
        manifest.write_text(json.dumps({**built, "complete": False}), encoding="utf-8")  # as the killed build left it
        with httpx.Client(base_url=server.url, timeout=60) as client:
            refused = insert(client, "memo", "The Sorvik pier was rebuilt in stone in 1911.")
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "index_unavailable", refused.text
            assert str(index_copy) not in refused.text and refused.headers["retry-after"] == "60"
            assert client.post("/v1/retrieve", json={"query": "Sorvik pier"}, headers=auth("admin")).status_code == 200


def test_an_update_worker_the_storage_refuses_leaves_its_jobs_waiting_not_failed(index_copy, serve_config):
    """On a full disk the worker ended in a traceback, counted as a crash: after serve.job_attempts
    the jobs ended "failed", their reason lost ("the update worker exited with 1"). A file-size
    limit on the worker makes the storage refuse its writes as a full disk does; the server's own
    loop runs it, and once the limit is gone the job finishes."""
    from hopgraph.documents import Document
    from tests.conftest import file_size_limit

    job = versions.submit_update(index_copy, [Document("memo", "The Sorvik pier was rebuilt in 1911.")], [])
    limited = {"on": True}
    spawn = subprocess.Popen

    def worker(command, **options):  # the same worker, under the limit while it is on
        return spawn(command, preexec_fn=file_size_limit(30_000) if limited["on"] else None, **options)

    subprocess.Popen = worker  # only the job loop starts processes here; the fault itself is real
    try:
        with LiveServer(index_copy, configured(serve_config, job_attempts=1)) as server:
            runner = server.app.state.jobs
            wait_until(lambda: runner._refusals >= 2, timeout=120)
            record = versions.read_job(index_copy, job["id"])
            assert record["status"] in ("queued", "running") and record.get("attempts", 0) == 0, record
            # The server's own storage refusing too (taking the attempt back writes the job record): the
            # loop still waits and tries again. Injected: this process's storage cannot be made to refuse
            # only this write.
            forgive = versions.forgive_interrupted

            def refused(*args, **kwargs):
                raise OSError(errno.EROFS, "Read-only file system", str(index_copy / "jobs"))

            versions.forgive_interrupted = refused
            seen = runner._refusals
            try:
                wait_until(lambda: runner._refusals >= seen + 1, timeout=120)
            finally:
                versions.forgive_interrupted = forgive
            limited["on"] = False
            wait_until(lambda: versions.read_job(index_copy, job["id"])["status"] == "done", timeout=300)
    finally:
        subprocess.Popen = spawn
