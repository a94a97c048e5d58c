"""Request validation over real HTTP: no non-finite numbers in or out, no empty questions, one
rule for indexable text shared with the corpus reader, 413 for chunked bodies, bounded filters,
short ids in messages, and ids with "/" that can be deleted like any other."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from hopgraph.index.ingest import read_corpus
from tests.ports import dead_port
from tests.serve.support import USERS, LiveServer, auth, refused, wait_for_job, wait_until

QUESTION = "Who was the first director of the Halvern Harbor Institute?"


@pytest.fixture(scope="module")
def server(acl_index, serve_config, tmp_path_factory):
    """A server over a private copy of the index (one test inserts and deletes a document)."""
    root = tmp_path_factory.mktemp("validation") / "index"
    shutil.copytree(acl_index, root)
    llm = serve_config.llm.model_copy(update={"base_url": f"http://127.0.0.1:{dead_port()}/v1", "cache": ""})
    with LiveServer(root, serve_config.model_copy(update={"llm": llm})) as live:
        yield live


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def post_raw(client, path: str, text: str, user: str = "guest") -> httpx.Response:
    return client.post(path, content=text.encode(), headers={**auth(user), "Content-Type": "application/json"})


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e999"])
@pytest.mark.parametrize("path", ["/v1/retrieve", "/v1/answer"])
def test_non_finite_numbers_in_params_are_refused(client, literal, path):
    # text_weight has no upper bound of its own; Python's JSON parser reads these literals as inf/nan.
    response = post_raw(
        client, path, f'{{"query": "{QUESTION}", "method": "ppr", "params": {{"ppr": {{"text_weight": {literal}}}}}}}'
    )
    assert response.status_code == 422, response.text
    assert (
        response.json()["error"]["code"] == "invalid_request"
        and "ppr.text_weight" in response.json()["error"]["message"]
    )
    assert "finite" in response.json()["error"]["message"]


def test_non_finite_numbers_in_a_filter_are_refused(client):
    response = post_raw(client, "/v1/retrieve", f'{{"query": "{QUESTION}", "where": {{"year": [2020, NaN]}}}}')
    assert response.status_code == 422 and "where: Value error, year.1" in response.json()["error"]["message"]


def test_scores_that_overflow_are_never_sent_as_null(client):
    body = {"query": QUESTION, "method": "ppr", "params": {"ppr": {"text_weight": 1e308, "graph_weight": 1e308}}}
    response = client.post("/v1/retrieve", json=body, headers=auth("guest"))
    # Either the settings are refused or the overflowing result is; never 200 with "score": null.
    assert response.status_code == 422, response.text[:300]
    assert response.json()["error"]["code"] in ("invalid_request", "non_finite_result", "over_limit")


@pytest.mark.parametrize("query", [" ", "\t\n  \r\n"])
def test_a_whitespace_only_query_is_refused(client, query):
    response = client.post("/v1/retrieve", json={"query": query}, headers=auth("guest"))
    assert response.status_code == 422 and "only whitespace" in response.json()["error"]["message"]


BAD_TEXTS = {
    "blank": " \n\t ",
    "nul": "harbour\x00records",
    "bell": "harbour \x07 records",
    "escape": "colour \x1b[31m red",
}


@pytest.mark.parametrize("name", sorted(BAD_TEXTS))
def test_text_the_corpus_reader_skips_is_refused_by_the_server(client, tmp_path, name):
    text = BAD_TEXTS[name]
    (tmp_path / "records.jsonl").write_text(
        json.dumps({"id": "bad", "text": text}) + "\n" + json.dumps({"id": "good", "text": "fine"}) + "\n"
    )
    (tmp_path / "bad.txt").write_text(text, encoding="utf-8")
    read = read_corpus([tmp_path])
    assert [d.id for d in read.documents] == ["good"]
    reasons = {p.reason for p in read.problems}
    response = client.post("/v1/documents", json={"documents": [{"id": "bad", "text": text}]}, headers=auth("admin"))
    assert response.status_code == 422, response.text
    served = response.json()["error"]["message"]
    # The same rule, the same words: the server's reason is the reader's.
    rule = "only whitespace" if name == "blank" else "control character"
    assert rule in served and any(rule in r for r in reasons)


def test_tabs_and_line_breaks_are_text():
    from hopgraph.documents import text_problem

    assert text_problem("line one\r\n\tline two\n") is None
    assert "U+0000" in text_problem("a\x00b") and "U+007F" in text_problem("a\x7fb")


def test_a_chunked_body_over_the_limit_gets_413(client, server):
    limit = server.app.state.holder.config.serve.max_body_bytes
    block = b"x" * 65536
    blocks = (limit + limit // 20) // len(block) + 1  # about 10.5 MB with the default 10 MB limit

    def chunks():
        for _ in range(blocks):
            yield block

    response = client.post(
        "/v1/documents", content=chunks(), headers={**auth("admin"), "Content-Type": "application/json"}
    )
    assert (
        "content-length" not in response.request.headers and response.request.headers["transfer-encoding"] == "chunked"
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"


def test_ids_echoed_in_messages_are_cut(client):
    long_id = "d" * 5000
    for response in (
        client.delete(f"/v1/documents/{long_id}", headers=auth("admin")),
        client.get(f"/v1/jobs/{long_id}", headers=auth("admin")),
        client.post("/v1/retrieve", json={"query": "x", "method": "m" * 5000}, headers=auth("guest")),
    ):
        assert response.status_code in (400, 404)
        message = response.json()["error"]["message"]
        assert "…" in message and len(message) < 300, message[:400]


def test_filters_are_bounded(client):
    many = client.post(
        "/v1/retrieve", json={"query": QUESTION, "where": {f"k{i}": i for i in range(17)}}, headers=auth("guest")
    )
    assert (
        many.status_code == 422
        and many.json()["error"]["code"] == "invalid_filter"
        and "at most 16" in many.json()["error"]["message"]
    )
    huge = client.post(  # refused by the count of values before the filter is read
        "/v1/retrieve", json={"query": QUESTION, "where": {f"k{i}": i for i in range(50_000)}}, headers=auth("guest")
    )
    assert huge.status_code == 422 and "more than 10,000 JSON values" in huge.json()["error"]["message"]
    nested = client.post(
        "/v1/retrieve", json={"query": QUESTION, "where": {"team": {"$in": ["a"]}}}, headers=auth("guest")
    )
    assert nested.status_code == 422 and nested.json()["error"]["code"] == "invalid_filter"
    flat = client.post(
        "/v1/retrieve",
        json={"query": QUESTION, "method": "text", "where": {"source": ["test", "nowhere"]}},
        headers=auth("admin"),
    )
    assert flat.status_code == 200


@pytest.mark.slow
def test_an_id_with_a_slash_can_be_inserted_and_deleted(client, server):
    doc = {
        "id": "reports/2024/tem",
        "text": "The Tem island survey of 2024 counted 412 grey seals on the northern rocks.",
    }
    inserted = client.post("/v1/documents", json={"documents": [doc]}, headers=auth("admin"))
    assert inserted.status_code == 202
    assert wait_for_job(client, inserted.json()["id"])["status"] == "done"
    wait_until(lambda: doc["id"] in server.app.state.holder.current.doc_ids)
    deleted = client.delete("/v1/documents/reports%2F2024%2Ftem", headers=auth("admin"))
    assert deleted.status_code == 202, deleted.text
    assert wait_for_job(client, deleted.json()["id"])["status"] == "done"
    wait_until(lambda: doc["id"] not in server.app.state.holder.current.doc_ids)


SURROGATE = "\\ud800"  # as JSON spells it: Python reads it into a str that no UTF-8 file can hold


@pytest.mark.parametrize(
    "document",
    [
        f'{{"id": "s{SURROGATE}", "text": "Harbour records."}}',
        f'{{"id": "s1", "title": "T{SURROGATE}", "text": "Harbour records."}}',
        f'{{"id": "s1", "source": "{SURROGATE}", "text": "Harbour records."}}',
        f'{{"id": "s1", "text": "Harbour {SURROGATE} records."}}',
        f'{{"id": "s1", "text": "Harbour records.", "metadata": {{"k": "x{SURROGATE}"}}}}',
        f'{{"id": "s1", "text": "Harbour records.", "metadata": {{"k{SURROGATE}": 1}}}}',
        f'{{"id": "s1", "text": "Harbour records.", "acl": ["team{SURROGATE}"]}}',
    ],
)
def test_a_lone_surrogate_anywhere_in_a_document_is_refused(client, document):
    """Before the check, a surrogate in metadata passed validation and failed as the job's documents
    were written: a 500 (the other fields were refused only by luck of later checks)."""
    response = post_raw(client, "/v1/documents", f'{{"documents": [{document}]}}', user="admin")
    assert response.status_code == 422, response.text[:300]
    message = response.json()["error"]["message"]
    assert "surrogate" in message or "unicode string" in message, message  # pydantic's own words for the id


def test_a_lone_surrogate_in_the_question_params_or_a_filter_is_refused(client):
    """A question is refused before its embedding shares a batch with other readers' (the tokenizer
    fails a whole model call on it)."""
    for path, body in (
        ("/v1/retrieve", f'{{"query": "{QUESTION}", "params": {{"ppr": {{"damping{SURROGATE}": 0.5}}}}}}'),
        ("/v1/retrieve", f'{{"query": "{QUESTION}", "where": {{"team": "a{SURROGATE}"}}}}'),
        ("/v1/retrieve", f'{{"query": "{QUESTION}{SURROGATE}"}}'),
        (
            "/v1/chat/completions",
            f'{{"model": "hopgraph-ppr", "messages": [{{"role": "user", "content": "{QUESTION}{SURROGATE}"}}]}}',
        ),
    ):
        response = post_raw(client, path, body)
        assert response.status_code == refused(path), response.text
        message = response.json()["error"]["message"]
        assert "surrogate" in message or "unicode string" in message, message  # ours, or pydantic's words


def test_a_huge_unknown_field_name_is_not_echoed(client):
    """A 1 MB field name came back twice in full (message and details): the reply was twice the request."""
    response = client.post("/v1/retrieve", json={"query": QUESTION, "k" * 1_000_000: 1}, headers=auth("guest"))
    assert response.status_code == 422 and len(response.content) < 2000, len(response.content)
    assert "…" in response.json()["error"]["message"]


def test_thousands_of_bad_settings_give_a_short_message(client):
    params = {"ppr": {f"setting_{i}": 1 for i in range(5000)}}
    response = client.post("/v1/retrieve", json={"query": QUESTION, "params": params}, headers=auth("guest"))
    assert response.status_code == 422 and len(response.content) < 5000, len(response.content)
    assert "and 4980 more" in response.json()["error"]["message"]


def reply_to_an_announced_body(server, path: str, authorization: str, expected: bytes) -> bytes:
    """What the server answers to a POST whose body is announced (5 MB) and never sent."""
    import socket

    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(
            (
                f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{authorization}"
                "Content-Type: application/json\r\nContent-Length: 5000000\r\n\r\n"
            ).encode()
        )
        reply = b""
        while expected not in reply:  # a timeout here: the server waits for the body
            received = connection.recv(4096)
            if not received:
                break
            reply += received
    return reply


def test_a_body_from_no_known_token_is_refused_before_it_is_read(server):
    """The app parses a JSON body before the endpoint checks the token: without the gate, anyone
    could make the server read and parse megabytes. Here the body is announced and never sent:
    the answer must come without it (before the gate, the server waited for the body)."""
    for authorization in ("", "Authorization: Bearer not-a-known-token-000\r\n"):
        reply = reply_to_an_announced_body(server, "/v1/retrieve", authorization, b"unauthenticated")
        assert reply.startswith(b"HTTP/1.1 401") and b"unauthenticated" in reply, reply[:300]


@pytest.mark.parametrize("path", ["/v1/documents", "/v1/documents/upload"])
def test_a_readers_body_to_an_admin_endpoint_is_refused_before_it_is_read(server, path):
    # Admin endpoints take bodies of up to serve.max_body_bytes: a reader's token must not buy their parse.
    authorization = f"Authorization: Bearer {USERS['guest']['token']}\r\n"
    reply = reply_to_an_announced_body(server, path, authorization, b"lacks the admin scope")
    assert reply.startswith(b"HTTP/1.1 403") and b"lacks the admin scope" in reply, reply[:300]


def test_a_question_body_has_its_own_smaller_limit(client, server):
    serve = server.app.state.holder.config.serve
    padding = "x" * (serve.max_question_body_bytes + 1000)
    assert len(padding) < serve.max_body_bytes
    response = client.post("/v1/retrieve", json={"query": QUESTION, "params": {"pad": padding}}, headers=auth("guest"))
    assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"
    documents = client.post(  # documents may be larger: refused for what they say, not for their size
        "/v1/documents", json={"documents": [{"id": "", "text": padding}]}, headers=auth("admin")
    )
    assert documents.status_code == 422, documents.text[:300]


def test_a_question_body_of_countless_values_is_refused_before_it_is_walked(client):
    """Under the size limit, 100,000 settings or 200,000 content parts each took a second or more of
    validation on the event loop, so any reader could stall the server with a few requests a second.
    Such bodies are refused after counting at most MAX_QUESTION_VALUES of their values."""
    from hopgraph.serve.schemas import MAX_QUESTION_VALUES

    too_many = f"more than {MAX_QUESTION_VALUES:,} JSON values"
    settings = {"query": QUESTION, "params": {"ppr": {f"k{i}": [0, 0, 0] for i in range(100_000)}}}
    parts = [{"type": "text"}] * 100_000  # (1.8 MB)
    chat = {
        "model": "hopgraph-text",
        "messages": [{"role": "assistant", "content": parts}, {"role": "user", "content": "tide"}],
    }
    for path, body in (("/v1/retrieve", settings), ("/v1/answer", settings), ("/v1/chat/completions", chat)):
        response = client.post(path, json=body, headers=auth("guest"))
        assert response.status_code == refused(path) and too_many in response.json()["error"]["message"], response.text
    # A conversation of the most messages, with a few parts each, is a question like any other.
    messages = [{"role": "user", "content": [{"type": "text", "text": f"part {n}"}] * 4} for n in range(256)]
    response = client.post("/v1/chat/completions", json={**chat, "messages": messages}, headers=auth("guest"))
    assert response.status_code == 503 and response.json()["error"]["code"] == "llm_unavailable", response.text[:300]


@pytest.mark.parametrize("setting", ["seed_entities", "bridge_entities"])
def test_entity_walk_sizes_are_bounded_per_request(client, setting):
    params = {"ppr": {setting: 1000}}
    response = client.post("/v1/retrieve", json={"query": QUESTION, "params": params}, headers=auth("guest"))
    assert response.status_code == 422 and response.json()["error"]["code"] == "over_limit", response.text


def test_readers_cannot_filter_on_server_file_paths_or_acls(client):
    """A range filter on a path answers yes or no per bound: a reader could spell out where the
    server keeps its files; and which other groups may read a document is the admins' business
    (an acl filter matches since list fields match by their items). Admins may filter on them."""
    for field in ("source", "source_path", "acl", "line"):  # line: where a readable record sits among others
        where = {field: {"gte": "/"}}
        refused = client.post("/v1/retrieve", json={"query": QUESTION, "where": where}, headers=auth("guest"))
        assert refused.status_code == 422 and "unknown filter field" in refused.json()["error"]["message"]
        listed = refused.json()["error"]["message"].split("filterable fields:")[1]
        assert not {"source", "source_path", "acl", "line"} & {name.strip(" .") for name in listed.split(",")}
    for where in ({"source": {"gte": ""}}, {"acl": "board"}):
        allowed = client.post(
            "/v1/retrieve", json={"query": QUESTION, "method": "text", "where": where}, headers=auth("admin")
        )
        assert allowed.status_code == 200, allowed.text


def test_huge_values_and_names_are_cut_in_every_refusal(client):
    """Each of these once came back whole in the 422 (a filter bound, a setting name with a value
    that is not a finite number, and an upload with thousands of unreadable records)."""
    bound = client.post(
        "/v1/retrieve", json={"query": QUESTION, "where": {"line": {"gte": "9" * 500_000}}}, headers=auth("admin")
    )
    setting = post_raw(
        client, "/v1/retrieve", f'{{"query": "{QUESTION}", "params": {{"ppr": {{"{"k" * 500_000}": NaN}}}}}}'
    )
    upload = client.post(
        "/v1/documents/upload",
        files=[("files", ("many.jsonl", b"{}\n" * 20_000, "application/jsonl"))],
        headers=auth("admin"),
    )
    for response in (bound, setting, upload):
        assert response.status_code == 422 and len(response.content) < 5000, (
            response.status_code,
            len(response.content),
        )
    assert "more" in upload.json()["error"]["message"]


@pytest.mark.parametrize(
    "control", ["\x7f", "\x85", "\x9b", "\u2028", "\u202e", "\u200e", "\u2066", "\u200b", "\u2060", "\ufeff"]
)
def test_no_way_in_takes_an_id_with_a_control_or_invisible_character(client, tmp_path, control):
    """DEL and the C1 controls (U+0085 is a line break to some readers, U+009B starts a terminal
    escape) passed the server's id rules, which refused only C0: an upload named ``ev\\x7fil.txt``
    became a document id. Files, records, inserts and uploads now share one rule, which also refuses
    what makes one id show as another: bidirectional controls ("memo\\u202e3202-sserp" listed as
    "memopress-2023"), the zero-width space and U+FEFF."""
    name = f"ev{control}il"
    code = f"U+{ord(control):04X}"
    (tmp_path / f"{name}.txt").write_text("A note.", encoding="utf-8")
    (tmp_path / "records.jsonl").write_text(json.dumps({"id": name, "text": "A note."}) + "\n", encoding="utf-8")
    (tmp_path / "good.txt").write_text("A note.", encoding="utf-8")
    read = read_corpus([tmp_path])
    assert [d.id for d in read.documents] == ["good.txt"] and len(read.problems) == 2
    assert all(f"control character {code}" in p.reason for p in read.problems)
    inserted = client.post(
        "/v1/documents", json={"documents": [{"id": name, "text": "A note."}]}, headers=auth("admin")
    )
    assert inserted.status_code == 422 and f"control character {code}" in inserted.text, inserted.text
    files = [("files", (f"{name}.txt", b"A note.", "text/plain"))]
    uploaded = client.post("/v1/documents/upload", files=files, headers=auth("admin"))
    assert uploaded.status_code == 422 and uploaded.json()["error"]["code"] == "invalid_file_name", uploaded.text
    assert f"control character {code}" in uploaded.json()["error"]["message"]


@pytest.mark.parametrize("name", [".", ".."])
def test_an_id_a_url_cannot_carry_is_refused(client, tmp_path, name):
    """Every URL parser removes the segments "." and "..": a browser deleting the document ".." sent
    ``DELETE /v1/`` (and "." ``DELETE /v1/documents/``), so such a document could not be deleted."""
    inserted = client.post(
        "/v1/documents", json={"documents": [{"id": name, "text": "A note."}]}, headers=auth("admin")
    )
    assert inserted.status_code == 422 and "a URL cannot carry" in inserted.text, inserted.text
    (tmp_path / "records.jsonl").write_text(json.dumps({"id": name, "text": "A note."}) + "\n", encoding="utf-8")
    (tmp_path / "good.txt").write_text("A note.", encoding="utf-8")
    read = read_corpus([tmp_path])
    assert [d.id for d in read.documents] == ["good.txt"]
    assert [p.reason for p in read.problems] == ["'id' is '.' or '..', which a URL cannot carry"]


def test_an_upload_of_too_many_files_is_named_as_such_not_as_bad_json(client):
    """The multipart reader refuses more than 1,000 files (a 400); every 400 was reported as "the
    request body is not valid UTF-8 JSON", which sent an admin looking for JSON in a form."""
    files = [("files", (f"n{i}.txt", b"x", "text/plain")) for i in range(1001)]
    refused = client.post("/v1/documents/upload", files=files, headers=auth("admin"))
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "malformed_form" and "Too many files" in error["message"], error
    broken = post_raw(client, "/v1/retrieve", "{nope")
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "malformed_json"


@pytest.mark.parametrize("acl", [",", " , ,", " "])
def test_an_upload_acl_of_separators_only_is_refused_not_read_as_public(client, acl):
    """ ", ," named no group and was read as no acl: the documents were queued readable by everyone."""
    files = [("files", ("memo.txt", b"A board memo.", "text/plain"))]
    refused = client.post("/v1/documents/upload", files=files, data={"acl": acl}, headers=auth("admin"))
    assert refused.status_code == 422 and "names no group" in refused.json()["error"]["message"], refused.text


def test_the_value_bound_read_from_a_bodys_bytes_never_refuses_a_body_within_it():
    """surely_too_many_values refuses only what the parsed count refuses too (seeded random bodies,
    strings full of commas, quotes and backslashes among them), and catches the dense ones."""
    import random

    from hopgraph.documents import more_values_than
    from hopgraph.serve.schemas import surely_too_many_values

    rng = random.Random(7)
    pieces = [",", '"', "\\", ",,,", 'a\\"b', "\\\\", "x"]

    def value(depth: int):
        kind = rng.random()
        if depth > 3 or kind < 0.4:
            return rng.choice([1, 2.5, True, None, "".join(rng.choices(pieces, k=rng.randint(0, 30)))])
        if kind < 0.7:
            return [value(depth + 1) for _ in range(rng.randint(0, 12))]
        return {"".join(rng.choices(pieces, k=rng.randint(0, 8))) + str(n): value(depth + 1) for n in range(8)}

    for limit in (5, 20, 100):
        refused = 0
        for _ in range(300):
            data = value(0)
            body = json.dumps(data).encode()
            if surely_too_many_values(body, limit):
                refused += 1
                assert more_values_than(data, limit), body[:200]
        assert refused  # the bound is not vacuous on these
    assert surely_too_many_values(("[" + ",".join(["1e5"] * 20_000) + "]").encode())
    assert surely_too_many_values(("[" + ",".join(['""'] * 25_000) + "]").encode())
    assert not surely_too_many_values(json.dumps({"query": "a, b, " * 50_000}).encode())  # commas in a string
    # UTF-16 (which the JSON reader accepts): "Ь" is 2C 04, a comma's byte, and "Т" 22 04, a quote's.
    utf16 = json.dumps({"query": "Т" + "Ь" * 25_000}, ensure_ascii=False).encode("utf-16-le")
    assert not surely_too_many_values(utf16) and not more_values_than(json.loads(utf16), 10_000)


def test_a_body_of_countless_values_is_refused_before_it_is_parsed(client):
    """3 MB of numbers took json.loads ~150 ms on the event loop before their count refused them, so a
    reader sending a few a second slowed every request ~80 times; the bytes now refuse it first (the
    same body made invalid JSON at its end is refused for its values, not as malformed JSON)."""
    numbers = ('{"query": "tide", "params": {"a": [' + ",".join(["1e5"] * 700_000) + "]}}").encode()
    for path in ("/v1/retrieve", "/v1/chat/completions"):
        response = post_raw(client, path, (numbers[:-1] + b"!").decode())
        assert response.status_code == refused(path), response.text[:300]
        assert "more than 10,000 JSON values" in response.json()["error"]["message"]


def test_a_question_whose_client_leaves_mid_body_is_not_answered(client, server):
    """The body is read whole before it is scanned: a client gone after part of it had the part
    replayed as a whole body (its complete JSON would have been answered for nobody)."""
    import socket

    host, port = server.url.removeprefix("http://").split(":")
    before = client.get("/metrics", headers=auth("admin")).text.count('endpoint="/v1/retrieve",method="",status="499"')
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(
            (
                f"POST /v1/retrieve HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {USERS['guest']['token']}\r\n"
                'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"query": "tide"}'
            ).encode()
        )
    wait_until(
        lambda: 'endpoint="/v1/retrieve",method="",status="499"' in client.get("/metrics", headers=auth("admin")).text
    )
    assert before == 0
