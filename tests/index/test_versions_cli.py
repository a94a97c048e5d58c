"""`hopgraph update` and `hopgraph jobs` as their users run them: the commands' output and errors,
an update stopped (killed, Ctrl-C) or refused by the storage and resumed, and an update whose job
another process ran."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from hopgraph.cli import main
from hopgraph.index import jobs, versions
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.retriever import Retriever
from tests.conftest import REPO, SAMPLE, SAMPLE_SETTINGS, file_size_limit
from tests.index.test_versions import NEW_DOCUMENTS, QUERIES


def test_cli_update_jobs_and_clean_errors(index, tmp_path):
    added = tmp_path / "new.jsonl"
    added.write_text("".join(json.dumps(r) + "\n" for r in NEW_DOCUMENTS), encoding="utf-8")
    runner = CliRunner()
    done = runner.invoke(main, ["update", str(index), "--add", str(added), "--delete", "press-2023", "-q"])
    assert done.exit_code == 0, done.output
    job_id = versions.list_jobs(index)[0]["id"]
    assert f"job {job_id} done: live version versions/{job_id}" in done.output and "+3 added, -1 deleted" in done.output
    listed = runner.invoke(main, ["jobs", str(index)])
    assert f"live version: {job_id}" in listed.output and "done" in listed.output
    assert f" by {jobs.login_name()}  +3 -1" in listed.output  # who submitted it
    unknown = runner.invoke(main, ["update", str(index), "--delete", "nope"])
    assert (
        unknown.exit_code == 2
        and "unknown document id(s) 'nope'" in unknown.output
        and "Traceback" not in unknown.output
    )
    assert runner.invoke(main, ["update", str(index), "--resume"]).output.strip() == "no pending jobs"
    inspected = runner.invoke(main, ["inspect", str(index)])
    assert f"version {job_id}" in inspected.output
    # Rebuilding the root with --overwrite makes the root live again.
    small = [arg for key, value in SAMPLE_SETTINGS.items() for arg in (f"--{key}", str(value))]
    rebuilt = runner.invoke(main, ["index", str(SAMPLE), "--out", str(index), "--overwrite", "-q", *small])
    assert rebuilt.exit_code == 0 and "live again" in rebuilt.output and LoadedIndex(index).version == ""


def test_an_update_the_storage_refuses_stays_queued_and_resumes(index, tmp_path):
    """On a full disk an update job ended "failed" for good (`--resume` said "no pending jobs"),
    though nothing was wrong with it. A file-size limit makes the storage refuse as a full disk does."""
    added = tmp_path / "new.jsonl"
    added.write_text("".join(json.dumps(r) + "\n" for r in NEW_DOCUMENTS), encoding="utf-8")
    command = [sys.executable, "-m", "hopgraph.cli", "update", str(index), "--add", str(added), "-q"]
    refused = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=file_size_limit(30_000)
    )
    assert refused.returncode == 2 and refused.stderr.startswith("error: the storage is "), refused.stderr
    [job] = versions.list_jobs(index)
    assert f"job {job['id']} stays queued and `hopgraph update {index} --resume` finishes it" in refused.stderr
    assert job["status"] == "running" and LoadedIndex(index).version == ""  # as a killed run leaves it
    resumed = CliRunner().invoke(main, ["update", str(index), "--resume", "-q"])
    assert resumed.exit_code == 0 and f"job {job['id']} done" in resumed.output, resumed.output


def test_an_update_whose_job_another_process_ran_says_it_is_done(index, tmp_path):
    """Two `hopgraph update` at once: the second one's job was run by the first, and it printed "no
    pending jobs", never that its job was done. Here this test is the other process: it holds the
    job lock, runs the job the command queued, and lets go."""
    added = tmp_path / "new.jsonl"
    added.write_text("".join(json.dumps(r) + "\n" for r in NEW_DOCUMENTS), encoding="utf-8")
    command = [sys.executable, "-m", "hopgraph.cli", "update", str(index), "--add", str(added), "-q"]
    with jobs.job_lock(index, jobs.RUN_LOCK):
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not versions.list_jobs(index) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        [job] = versions.list_jobs(index)
        versions._run(index, [job], None, False)  # what the other `hopgraph update` does under the lock
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert f"job {job['id']} done: live version versions/{job['id']}" in out and "no pending jobs" not in out


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT], ids=["kill", "ctrl-c"])
def test_a_stopped_cli_update_leaves_index_servable_and_resumes(index, tmp_path, stop):
    """After Ctrl-C the command said "run the same command again", which queued the job a second time
    (or refused its delete as unknown), and `hopgraph jobs` showed the dead job as running."""
    added = tmp_path / "new.jsonl"
    added.write_text("".join(json.dumps(r) + "\n" for r in NEW_DOCUMENTS), encoding="utf-8")
    command = [sys.executable, "-m", "hopgraph.cli", "update", str(index), "--add", str(added), "-q"]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # kill it inside the build, once the chunks stage is done
        manifests = list((index / "versions").glob("*/manifest.json"))
        if proc.poll() is not None or manifests and "chunks" in json.loads(manifests[0].read_text()).get("stages", {}):
            break
        time.sleep(0.005)
    os.kill(proc.pid, stop)
    _, stderr = proc.communicate(timeout=60)
    if stop == signal.SIGINT:
        job_id = versions.list_jobs(index)[0]["id"]
        assert f"job {job_id} stays queued and `hopgraph update {index} --resume` finishes it" in stderr, stderr
    [job] = versions.list_jobs(index)
    assert job["status"] == "running" and LoadedIndex(index).version == ""
    listed = CliRunner().invoke(main, ["jobs", str(index)])
    assert f"{job['id']}  stopped" in listed.output and "--resume" in listed.output, listed.output
    assert [j["status"] for j in json.loads(CliRunner().invoke(main, ["jobs", str(index), "--json"]).output)] == [
        "stopped"
    ]
    from hopgraph import Index

    assert [j.status for j in Index.open(index).jobs()] == ["stopped"]  # the Python API sees it as the CLI does
    assert Retriever(index).retrieve(QUERIES[0], method="ppr").evidence
    resumed = CliRunner().invoke(main, ["update", str(index), "--resume", "-q"])
    assert resumed.exit_code == 0, resumed.output
    assert LoadedIndex(index).version == job["id"] and LoadedIndex(index).documents["id"][-3:] == [
        r["id"] for r in NEW_DOCUMENTS
    ]
