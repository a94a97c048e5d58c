"""Uploads read by the same rules as ``hopgraph index``, with the upload form's acl on every document."""

from __future__ import annotations

from hopgraph.config import ServeConfig
from hopgraph.serve.documents import documents_of

SERVE = ServeConfig()  # the defaults: 60 s, 10 MB of text, 1000 documents, 1024 MiB


def test_the_forms_acl_is_set_on_every_uploaded_document_whatever_a_record_says() -> None:
    records = (
        b'{"id": "open", "text": "Tide tables for Tem.", "acl": null}\n'
        b'{"id": "moved", "text": "Crane log of Tem.", "acl": "x"}\n'
        b'{"id": "nested", "text": "Pier rota.", "metadata": {"acl": ["press"]}}\n'
    )
    documents = documents_of([("batch.jsonl", records), ("note.txt", b"Harbour note.")], ["board"], SERVE)
    assert {d.id: d.metadata["acl"] for d in documents} == {
        "open": ["board"],
        "moved": ["board"],
        "nested": ["board"],
        "note.txt": ["board"],
    }
    assert all("source_path" not in d.metadata for d in documents)  # no server path
    # Without a form acl, each record keeps its own (a record's null stays open).
    kept = {d.id: d.metadata.get("acl") for d in documents_of([("batch.jsonl", records)], None, SERVE)}
    assert kept == {"open": None, "moved": ["x"], "nested": ["press"]}


def test_hostile_html_is_refused_fast_saying_what_and_where_while_the_server_answers(acl_index, serve_config) -> None:
    """A small HTML file can be a huge tree: nesting past 512 levels or more than 100,000 elements is
    refused (422, naming the file, the limit and the line and column), in seconds, and the upload is
    parsed off the event loop, so /healthz answers meanwhile. Before, reading a page edited its
    tree once per block, in time quadratic in the page: these two took hours."""
    import threading
    import time

    import httpx

    from tests.serve.support import LiveServer, auth

    deep = b"<html><body>" + b"<div>" * 200_000 + b"deep"  # 1 MB; the 511th <div> is the 513th level
    wide = b"<p>x</p>" * 150_000  # 1.2 MB
    latencies: list[float] = []
    with LiveServer(acl_index, serve_config) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        done = threading.Event()

        def ask_health() -> None:
            with httpx.Client(base_url=server.url, timeout=60) as other:
                while not done.is_set():
                    started = time.monotonic()
                    assert other.get("/healthz").status_code == 200
                    latencies.append(time.monotonic() - started)
                    time.sleep(0.05)

        prober = threading.Thread(target=ask_health)
        prober.start()
        try:
            for name, data, what in [
                ("deep.html", deep, "HTML nests elements deeper than 512 levels (<div> at line 1, column 2563)"),
                ("wide.html", wide, "HTML has more than 100000 elements (the next one is <p> at line 1, column"),
            ]:
                started = time.monotonic()
                response = client.post(
                    "/v1/documents/upload", files=[("files", (name, data, "text/html"))], headers=auth("admin")
                )
                seconds = time.monotonic() - started
                assert response.status_code == 422, response.text
                error = response.json()["error"]
                assert error["code"] == "unreadable_upload" and error["message"].startswith(f"{name}: {what}"), error
                assert seconds < 30, f"{name} took {seconds:.1f} s to refuse"
        finally:
            done.set()
            prober.join(timeout=60)
        assert client.get("/v1/jobs/j000001-000000", headers=auth("admin")).status_code == 404  # nothing queued
    assert latencies and max(latencies) < 2.0, f"/healthz waited {max(latencies):.1f} s during the parse"


def test_a_long_html_page_is_read_in_linear_time() -> None:
    """90,000 paragraphs (under the element limit): read in seconds. Before, each block's boundary was
    inserted into the tree, a scan of its siblings each time: about 1 s for 8,000, minutes for these."""
    import time

    page = b"".join(b"<p>Paragraph %d of the harbour manual.</p>" % n for n in range(90_000))
    started = time.monotonic()
    (document,) = documents_of([("manual.html", page)], None, SERVE)
    seconds = time.monotonic() - started
    assert document.text.count("\n\n") == 89_999 and document.text.endswith("Paragraph 89999 of the harbour manual.")
    assert seconds < 30, f"read in {seconds:.1f} s"


def test_an_upload_slower_to_read_than_upload_seconds_is_stopped_and_refused(index_copy, serve_config) -> None:
    """Files are read in a child process killed after serve.upload_seconds, so a file slow to read
    in a way no reader's bound knows of yet cannot hold the server: here three HTML pages just under
    the element limit (about 3 s each to read) against a 3.5 s limit. A small file is still read (the
    limit leaves room for the reader's own start, ~0.5 s, on a busy machine)."""
    import time

    import httpx
    import psutil

    from tests.serve.support import LiveServer, auth, wait_for_job

    config = serve_config.model_copy(update={"serve": serve_config.serve.model_copy(update={"upload_seconds": 3.5})})
    page = b"<html><body>" + b"<p>word and more words</p>" * 99_000 + b"</body></html>"
    slow = [("files", (f"manual-{n}.html", page, "text/html")) for n in range(3)]
    with LiveServer(index_copy, config) as server, httpx.Client(base_url=server.url, timeout=120) as client:
        started = time.monotonic()
        refused = client.post("/v1/documents/upload", files=slow, headers=auth("admin"))
        assert time.monotonic() - started < 10  # about the limit, not the ~10 s the three pages take to read
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "unreadable_upload" and "longer than 3.5 s (serve.upload_seconds)" in error["message"]
        readers = [p for p in psutil.Process().children(recursive=True) if "hopgraph.serve.parsing" in p.cmdline()]
        assert not readers  # the reader was killed and reaped
        small = [("files", ("tide-note.txt", b"High tide at Sorvik pier is at noon.", "text/plain"))]
        accepted = client.post("/v1/documents/upload", files=small, headers=auth("admin"))
        assert accepted.status_code == 202, accepted.text
        assert wait_for_job(client, accepted.json()["id"])["status"] == "done"


def test_uploads_read_the_same_in_any_locale_and_the_reader_bounds_itself(monkeypatch) -> None:
    """The reader process answers in ASCII JSON whatever its locale (with PYTHONIOENCODING=ascii,
    "ü" refused the upload), and ends itself after the seconds it is given, so a server killed
    while it waits leaves no reader running (it ran on, re-parented, for as long as the file took)."""
    import base64
    import json
    import subprocess
    import sys
    import time

    monkeypatch.setenv("PYTHONIOENCODING", "ascii")
    (document,) = documents_of([("grüße.txt", "Grüße aus Sorvik: 5 €.".encode())], None, SERVE)
    assert (document.id, document.text) == ("grüße.txt", "Grüße aus Sorvik: 5 €.")
    page = b"<html><body>" + b"<p>word and more words</p>" * 99_000 + b"</body></html>"
    files = json.dumps([[f"m{n}.html", base64.b64encode(page).decode()] for n in range(3)])
    started = time.monotonic()
    reader = subprocess.run(
        [sys.executable, "-m", "hopgraph.serve.parsing", "1"], input=files.encode(), capture_output=True, timeout=60
    )
    assert reader.returncode != 0 and time.monotonic() - started < 6  # ended by itself, not after ~12 s of reading


def test_an_upload_whose_text_passes_the_body_bound_is_refused() -> None:
    """A 268 kB DOCX unzips to 97 MB of text: the body bound (serve.max_body_bytes) holds for the
    upload's text in all, or five such files queued a 480 MB job."""
    import pytest

    from hopgraph.serve.errors import APIError

    files = [("a.txt", b"x" * 600), ("b.txt", b"y" * 600), ("c.txt", b"z" * 600)]
    small = SERVE.model_copy(update={"max_body_bytes": 1024})
    assert len(documents_of(files[:1], None, small)) == 1
    with pytest.raises(APIError) as refused:
        documents_of(files, None, small)
    assert refused.value.status == 422
    assert "b.txt: the upload's text passes 1,024 characters (serve.max_body_bytes)" in str(refused.value)


def test_an_upload_of_more_documents_than_max_documents_is_refused_by_the_reader() -> None:
    """761,538 one-letter JSONL records (9.9 MB) came back from the reader whole: the server decoded
    them into objects (~2 GB) and refused them only then. The reader now stops one document past
    serve.max_documents, and the upload gets the 413 a JSON insert of as many gets."""
    import json

    import pytest

    from hopgraph.serve.errors import APIError
    from hopgraph.serve.parsing import read_files

    records = b"".join(json.dumps({"text": "a", "id": str(n)}).encode() + b"\n" for n in range(50_000))
    files = [("tiny.jsonl", records), ("after.txt", b"Never read.")]
    reads = read_files(files, SERVE)
    assert [len(documents) for documents, _, _ in reads] == [1001]  # the second file was not even read
    with pytest.raises(APIError) as refused:
        documents_of(files, None, SERVE)
    assert refused.value.status == 413 and refused.value.code == "too_many_documents"
    assert "more than 1000 documents (serve.max_documents)" in str(refused.value)
    one = SERVE.model_copy(update={"max_documents": 1})
    assert len(documents_of([("few.jsonl", records[: records.index(b"\n") + 1])], None, one)) == 1


def test_a_file_that_needs_more_memory_to_read_than_upload_memory_mb_is_refused() -> None:
    """The reader's memory had no bound: a 9 MB JSONL of 300,000 records takes it ~215 MB, and a
    reader bug or a larger max_body_bytes could take the machine's. Past serve.upload_memory_mb its
    allocation fails and the upload is refused (422), saying which setting; with the default it is read."""
    import json

    import pytest
    from pydantic import ValidationError

    from hopgraph.serve.errors import APIError

    records = b"".join(json.dumps({"text": "a", "id": str(n)}).encode() + b"\n" for n in range(300_000))
    with pytest.raises(APIError) as refused:  # it needs 129-192 MiB
        documents_of([("many.jsonl", records)], None, ServeConfig(upload_memory_mb=104))
    assert refused.value.status == 422 and refused.value.code == "unreadable_upload"
    assert "more than 104 MiB of memory (serve.upload_memory_mb)" in str(refused.value)
    with pytest.raises(ValidationError, match="no room to be read: 0 .no limit. or at least 102"):
        ServeConfig(upload_memory_mb=8)  # the reader could not even start
    with pytest.raises(APIError, match="more than 1000 documents"):  # read whole, then refused for its count
        documents_of([("many.jsonl", records)], None, SERVE)


def test_of_an_uploads_many_problems_the_first_come_back_with_their_count() -> None:
    """100,000 empty records after a good one came back as 5.7 MB of messages for the server to
    decode, of which its refusal shows 20: now the first 20 come back, with the count."""
    import pytest

    from hopgraph.errors import SHOWN_PROBLEMS
    from hopgraph.serve.errors import APIError
    from hopgraph.serve.parsing import read_files

    records = b'{"text": "A note."}\n' + b'{"text": ""}\n' * 100_000
    ((documents, problems, count),) = read_files([("mixed.jsonl", records)], SERVE)
    assert (len(documents), len(problems), count) == (1, SHOWN_PROBLEMS, 100_000)
    with pytest.raises(APIError) as refused:
        documents_of([("mixed.jsonl", records)], None, SERVE)
    assert refused.value.status == 422 and str(refused.value).endswith(f"; and {100_000 - SHOWN_PROBLEMS} more")


def test_uploads_beyond_max_uploads_get_503_and_never_take_the_threads_healthz_needs(acl_index, serve_config) -> None:
    """Each upload held a pool thread while its child read it, and /healthz (its dependencies were
    plain functions, run in that pool) waited 51 s behind 45 uploads. Now uploads beyond
    serve.max_uploads get 503 at once, and /healthz needs no pool thread: every thread of the pool
    is taken here (held on the server's own loop), and /healthz still answers."""
    import asyncio

    import anyio.to_thread
    import httpx

    from tests.serve.support import LiveServer, auth

    with LiveServer(acl_index, serve_config) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        service = server.app.state.service
        assert service.upload_slots.acquire(blocking=False)  # one upload being read...
        assert service.upload_slots.acquire(blocking=False)  # ...and a second: serve.max_uploads = 2
        try:
            busy = client.post(
                "/v1/documents/upload", files=[("files", ("a.txt", b"Text.", "text/plain"))], headers=auth("admin")
            )
            assert busy.status_code == 503 and busy.json()["error"]["code"] == "uploads_busy"
            assert busy.headers["Retry-After"] == "5"
        finally:
            service.upload_slots.release()
            service.upload_slots.release()
        loop = server.server.servers[0].get_loop()
        borrowers = [object() for _ in range(1000)]

        async def take_every_thread() -> int:
            limiter = anyio.to_thread.current_default_thread_limiter()
            taken = int(limiter.total_tokens)
            for borrower in borrowers[:taken]:
                await limiter.acquire_on_behalf_of(borrower)
            return taken

        async def give_them_back(taken: int) -> None:
            limiter = anyio.to_thread.current_default_thread_limiter()
            for borrower in borrowers[:taken]:
                limiter.release_on_behalf_of(borrower)

        taken = asyncio.run_coroutine_threadsafe(take_every_thread(), loop).result(10)
        try:
            assert client.get("/healthz", timeout=5).status_code == 200
        finally:
            asyncio.run_coroutine_threadsafe(give_them_back(taken), loop).result(10)
