"""Request logs over real HTTP: one JSON line per request with who, what, how long and which
pieces, never text or tokens; with serve.trace, the seeds and graph paths of each retrieval."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.serve.support import USERS, LiveServer, auth, log_lines, wait_until

QUESTION = "Who founded the laboratory that the first director of the Halvern Harbor Institute had previously led?"


def served(acl_index, serve_config, log, **settings):
    config = serve_config.model_copy(
        update={"serve": serve_config.serve.model_copy(update={"request_log": str(log), **settings})}
    )
    return LiveServer(acl_index, config)


def test_each_request_writes_one_line_with_ids_and_no_text_or_token(acl_index, serve_config, tmp_path):
    log = tmp_path / "logs" / "requests.jsonl"
    with served(acl_index, serve_config, log) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        response = client.post(
            "/v1/retrieve", json={"query": QUESTION, "method": "ppr", "budget": 300}, headers=auth("ops")
        )
        assert response.status_code == 200
        wait_until(lambda: len(log_lines(log)) == 1, timeout=10)
        refused = client.post("/v1/retrieve", json={"query": QUESTION}, headers={"Authorization": "Bearer not-a-t0ken"})
        assert refused.status_code == 401
        deleted = client.delete("/v1/documents/private%2Fpayroll-2026", headers=auth("ops"))
        assert deleted.status_code == 403
        # Refused before an endpoint ran (a reader's admin write) was logged as no one: the audit lost who tried.
        inserted = client.post("/v1/documents", json={"documents": []}, headers=auth("ops"))
        invalid = client.post("/v1/retrieve", json={"query": 7}, headers=auth("ops"))
        assert (inserted.status_code, invalid.status_code) == (403, 422)
        wait_until(lambda: len(log_lines(log)) == 5, timeout=10)
    first, unknown, forbidden, *refused_early = log_lines(log)
    assert [line["user"] for line in (forbidden, *refused_early)] == ["ops"] * 3
    result = response.json()
    assert first["user"] == "ops" and first["endpoint"] == "/v1/retrieve" and first["http_method"] == "POST"
    assert first["method"] == "ppr" and first["status"] == 200 and first["version"] == result["version"]
    assert 0 < first["ms"] < 60_000 and first["time"].endswith("Z") and first["server"]
    assert first["pieces"] == [f"{e['kind']}:{e['index']}" for e in result["evidence"]] and first["pieces"]
    assert "trace" not in first  # serve.trace is off by default
    assert unknown["status"] == 401 and unknown["user"] is None and unknown["pieces"] == []
    assert forbidden["status"] == 403 and forbidden["endpoint"] == "/v1/documents/{id}"
    text = log.read_text(encoding="utf-8")
    assert text.count("\n") == 5
    for secret in [QUESTION, "Halvern", "not-a-t0ken", "payroll", *(u["token"] for u in USERS.values())]:
        assert secret not in text, secret
    for evidence in result["evidence"]:
        assert evidence["text"][:40] not in text


def test_trace_records_seeds_paths_and_chunks(acl_index, serve_config, tmp_path):
    log = tmp_path / "requests.jsonl"
    with (
        served(acl_index, serve_config, log, trace=True) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        response = client.post(
            "/v1/retrieve", json={"query": QUESTION, "method": "ppr", "budget": 300}, headers=auth("ops")
        )
        assert response.status_code == 200
        # A word only a forbidden document holds is never a seed or a path of this reader's trace.
        guess = client.post(
            "/v1/retrieve", json={"query": "What is the plan VELLUMTIDE?", "method": "ppr"}, headers=auth("ops")
        )
        assert guess.status_code == 200
        wait_until(lambda: len(log_lines(log)) == 2, timeout=10)
    line, guessed = log_lines(log)
    assert guessed["trace"]["pieces"] and "vellumtide" not in json.dumps(guessed).lower()
    evidence = response.json()["evidence"]
    trace = line["trace"]
    assert trace["seeds"] and all(s.startswith(("keyword:", "entity:", "bridge:")) for s in trace["seeds"])
    assert [(p["piece"], p["path"], p["chunk"], p["docs"]) for p in trace["pieces"]] == [
        (f"{e['kind']}:{e['index']}", e["path"], e["chunk"], e["doc_ids"]) for e in evidence
    ]
    assert any(p["path"].startswith("ppr via ") for p in trace["pieces"])
    text = log.read_text(encoding="utf-8")
    assert QUESTION not in text and all(e["text"][:40] not in text for e in evidence)


def test_long_lines_of_several_writers_sharing_a_file_never_interleave(tmp_path):
    """Several server processes may share one log file: each line is one append."""
    import threading

    from hopgraph.serve.logs import RequestLog

    path = tmp_path / "shared.jsonl"
    writers = [RequestLog(str(path)) for _ in range(3)]
    pieces = [f"unit:{i}" for i in range(20_000)]  # a line of about 200 kB, as a long trace makes

    def write(n: int) -> None:
        for i in range(20):
            writers[n].write({"writer": n, "i": i, "pieces": pieces})

    threads = [threading.Thread(target=write, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for log in writers:
        log.close()
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((e["writer"], e["i"]) for e in entries) == [(n, i) for n in range(3) for i in range(20)]
    assert all(e["pieces"] == pieces for e in entries)


def test_lines_the_log_drops_are_counted_in_the_metrics(acl_index, serve_config, tmp_path):
    """An operator sees lost log lines in /metrics: lines come faster than the log writes them."""
    import re

    path = tmp_path / "requests.jsonl"
    with served(acl_index, serve_config, path) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        log = server.app.state.service.request_log
        scraped = client.get("/metrics", headers=auth("admin")).text
        assert "hopgraph_request_log_dropped_total 0.0" in scraped  # declared before anything is lost
        while log.dropped < 100:  # queued far faster than one thread writes them: the bounded queue overflows
            log.write({"endpoint": "/healthz", "pieces": ["x" * 200]})
        before = log.dropped
        scraped = client.get("/metrics", headers=auth("admin")).text
        value = re.search(r"^hopgraph_request_log_dropped_total (\S+)$", scraped, re.MULTILINE)
        assert value is not None and before <= float(value.group(1)) <= log.dropped
    # once the log keeps up again, it says how many lines it lost
    assert sum(line.get("dropped_before", 0) for line in log_lines(path)) == log.dropped


def test_a_log_that_cannot_keep_up_drops_lines_counted_instead_of_growing(tmp_path):
    import os
    import threading

    from hopgraph.serve.logs import RequestLog

    fifo = tmp_path / "stalled.log"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # nobody reads yet: the pipe fills, writes stall
    log = RequestLog(str(fifo), max_queued=10)
    line = {"endpoint": "/v1/retrieve", "pieces": ["x" * 200]}
    for _ in range(2000):
        log.write(line)
    assert log._queue.qsize() <= 10 and log.dropped >= 2000 - 10 - 64 * 1024 // 200
    os.set_blocking(reader, True)
    received = bytearray()
    drained = threading.Thread(target=lambda: [received.extend(c) for c in iter(lambda: os.read(reader, 65536), b"")])
    drained.start()
    log.write(line)
    log.close()
    drained.join(timeout=10)
    os.close(reader)
    written = [json.loads(x) for x in received.decode().splitlines()]
    assert len(written) == 2001 - log.dropped
    assert sum(x.get("dropped_before", 0) for x in written) == log.dropped  # the log says what it lost


def test_idle_rate_limit_buckets_are_dropped():
    from hopgraph.serve.ratelimit import RateLimiter

    now = [100.0]  # a clock the test steps, so the figures do not depend on the machine's speed
    limiter = RateLimiter(rate=1000.0, burst=2, clock=lambda: now[0])  # an empty bucket refills in 2 ms
    for n in range(5000):  # unknown tokens from many addresses, 0.1 ms apart
        limiter.allow(f"unknown-token@10.0.{n // 256}.{n % 256}")
        now[0] += 0.0001
    assert 0 < len(limiter) <= 40  # only the keys seen within the last refill time or two are kept
    now[0] += 0.05
    assert limiter.allow("unknown-token@10.9.9.9") == 0.0
    assert len(limiter) == 1  # every idle bucket was full again, and dropped
    assert limiter.allow("unknown-token@10.9.9.9") == 0.0 and limiter.allow("unknown-token@10.9.9.9") > 0


def test_a_rotated_or_deleted_log_file_is_opened_again_at_the_next_line(tmp_path):
    """logrotate renames the file and leaves a fresh one (or none): the log writes on at its path. It
    wrote on into the renamed file for the server's life, and into a deleted one nobody could read."""
    from hopgraph.serve.logs import RequestLog

    folder = tmp_path / "logs"
    path = folder / "requests.jsonl"
    log = RequestLog(str(path), reopen_seconds=0)  # (the server looks once a second)
    log.write({"n": 1})
    wait_until(lambda: len(log_lines(path)) == 1, timeout=10)
    path.rename(tmp_path / "requests.jsonl.1")  # rotated: renamed, nothing at the path yet
    log.write({"n": 2})
    wait_until(lambda: len(log_lines(path)) == 1, timeout=10)
    path.unlink()  # deleted
    log.write({"n": 3})
    wait_until(lambda: len(log_lines(path)) == 1, timeout=10)
    # Where the path cannot be opened again (its folder is gone), lines go on to the file open before.
    kept = tmp_path / "requests.jsonl.2"
    path.rename(kept)
    folder.rmdir()
    log.write({"n": 4})
    log.write({"n": 5})
    log.close()
    assert [line["n"] for line in log_lines(tmp_path / "requests.jsonl.1")] == [1]
    assert [line["n"] for line in log_lines(kept)] == [3, 4, 5]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full (it fails every write as a full disk does)")
def test_lines_a_full_disk_refuses_are_counted_said_once_and_reported_when_it_has_room(tmp_path, capsys):
    """A failed write printed one stderr line per request and was not counted: the metric said 0
    lines lost while the log lost every one, and stderr grew on the disk that was full."""
    from hopgraph.serve.logs import RequestLog

    log_path = tmp_path / "requests.log"
    log_path.symlink_to("/dev/full")  # every write fails with ENOSPC, as on a full disk
    log = RequestLog(str(log_path), reopen_seconds=0.0)
    line = {"endpoint": "/v1/retrieve", "pieces": ["c1"]}
    for _ in range(50):
        log.write(line)
    wait_until(lambda: log.dropped == 50, timeout=10)
    log_path.unlink()
    log_path.symlink_to(tmp_path / "room.log")  # room again: the next line goes there
    log.write(line)
    log.close()
    (written,) = log_lines(tmp_path / "room.log")
    assert written["dropped_before"] == 50
    err = capsys.readouterr().err
    assert err.count("cannot write the request log") == 1 and "No space left on device" in err
