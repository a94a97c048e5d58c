"""The HTTP API over real sockets: auth on every endpoint, input limits, errors, metrics, and
document updates as jobs. The LLM backend is a closed port here (a real connection refused), so
/v1/answer must answer 503 while /v1/retrieve keeps working; answers from the real stand-in are in
test_acl.py."""

from __future__ import annotations

import re

import httpx
import pytest

from hopgraph.retrieve.methods import LLM_FREE
from tests.ports import dead_port
from tests.serve.support import CODEWORDS, LiveServer, auth, token_book, wait_for_job, wait_until

ENDPOINTS = [
    ("GET", "/metrics"),
    ("GET", "/v1/index"),
    ("POST", "/v1/retrieve"),
    ("POST", "/v1/answer"),
    ("POST", "/v1/documents"),
    ("DELETE", "/v1/documents/sorvik"),
    ("GET", "/v1/jobs/j1"),
]
ADMIN_ONLY = [("POST", "/v1/documents"), ("DELETE", "/v1/documents/sorvik"), ("GET", "/v1/jobs/j1")]


def down_llm(config, tmp_path):
    return config.llm.model_copy(
        update={"base_url": f"http://127.0.0.1:{dead_port()}/v1", "cache": str(tmp_path / "llm.sqlite")}
    )


@pytest.fixture(scope="module")
def server(acl_index, serve_config, tmp_path_factory):
    config = serve_config.model_copy(update={"llm": down_llm(serve_config, tmp_path_factory.mktemp("llm"))})
    with LiveServer(acl_index, config) as live:
        yield live


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def test_health_needs_no_token_and_names_the_version(client):
    assert client.get("/healthz").json() == {"status": "ok", "version": ""}


@pytest.mark.parametrize("verb,path", ENDPOINTS)
@pytest.mark.parametrize("header", [None, "Bearer not-a-known-token-xyz", "Basic YWxpY2U6c2VjcmV0", "Bearer"])
def test_every_endpoint_refuses_a_missing_or_unknown_token(client, verb, path, header):
    response = client.request(verb, path, headers={"Authorization": header} if header else {}, json={"query": "x"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated" and response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("verb,path", ADMIN_ONLY)
def test_changing_documents_needs_the_admin_scope(client, verb, path):
    response = client.request(verb, path, headers=auth("bo"), json={"documents": [{"id": "x", "text": "y"}]})
    assert response.status_code == 403 and "admin" in response.json()["error"]["message"]


def test_retrieve_returns_evidence_with_provenance(client):
    body = client.post(
        "/v1/retrieve",
        json={"query": "Who was the first director of the Halvern Harbor Institute?", "method": "ppr", "budget": 300},
        headers=auth("guest"),
    ).json()
    assert body["method"] == "ppr" and body["budget"] == 300 and 0 < body["tokens"] <= 300 and body["version"] == ""
    assert body["evidence"] and all({"doc_ids", "chunk", "path", "text", "score"} <= set(ev) for ev in body["evidence"])
    assert "Mirela Tasch" in " ".join(ev["text"] for ev in body["evidence"])


@pytest.mark.parametrize("method", LLM_FREE)
def test_a_reader_without_the_group_never_sees_a_restricted_document(client, method):
    for user, visible in (("guest", set()), ("bo", {"secret-board"}), ("legal", {"secret-legal", "secret-ops"})):
        body = client.post(
            "/v1/retrieve",
            json={
                "query": "QUARTZFERN VELLUMTIDE MARROWGLEN settlement succession vessel incident",
                "method": method,
                "budget": 4000,
            },
            headers=auth(user),
        ).json()
        docs = {d for ev in body["evidence"] for d in ev["doc_ids"]}
        assert docs & set(CODEWORDS) == visible & docs
        text = " ".join(ev["text"] for ev in body["evidence"])
        assert not [w for d, w in CODEWORDS.items() if d not in visible and w in text]
    # with the group, the restricted document is found
    body = client.post(
        "/v1/retrieve",
        json={"query": "settlement with the ferry company QUARTZFERN", "method": method, "budget": 4000},
        headers=auth("legal"),
    ).json()
    assert "secret-legal" in {d for ev in body["evidence"] for d in ev["doc_ids"]}


def test_per_request_parameters_are_validated(client):
    ok = client.post(
        "/v1/retrieve",
        json={"query": "Sorvik mayor", "method": "ppr", "params": {"ppr": {"damping": 0.6}}},
        headers=auth("guest"),
    )
    assert ok.status_code == 200
    bad = client.post(
        "/v1/retrieve",
        json={"query": "Sorvik mayor", "method": "ppr", "params": {"ppr": {"damping": 7}}},
        headers=auth("guest"),
    )
    assert bad.status_code == 422 and "damping" in bad.json()["error"]["message"]
    unknown = client.post(
        "/v1/retrieve", json={"query": "Sorvik mayor", "params": {"no_such": 1}}, headers=auth("guest")
    )
    assert unknown.status_code == 422 and "no_such" in unknown.json()["error"]["message"]


@pytest.mark.parametrize(
    "body,status,code",
    [
        ({"query": "x", "method": "no-such-method"}, 400, "unknown_method"),
        ({"query": "x", "method": "kg"}, 400, "unsupported_method"),  # this index has no LLM graph
        ({"query": "x" * 2001}, 422, "query_too_long"),
        ({"query": "x", "budget": 10_000_000}, 422, "budget_too_large"),
        ({"query": "x", "budget": 3}, 422, "invalid_request"),
        ({"query": ""}, 422, "invalid_request"),
        ({"question": "x"}, 422, "invalid_request"),
        ({"query": "x", "extra": 1}, 422, "invalid_request"),
        ({"query": 5}, 422, "invalid_request"),
    ],
)
def test_bad_requests_get_clear_json_errors(client, body, status, code):
    response = client.post("/v1/retrieve", json=body, headers=auth("guest"))
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code and response.json()["error"]["message"]
    setting = {"query_too_long": "serve.max_query_chars", "budget_too_large": "serve.max_budget"}.get(code)
    assert setting is None or f"({setting})" in response.json()["error"]["message"]  # what an operator raises


@pytest.mark.parametrize("content", [b"{not json", b'{"query": "\xff\xfe caf\xe9"}', b"", b"[1, 2]"])
def test_malformed_or_non_utf8_bodies_are_refused(client, content):
    response = client.post(
        "/v1/retrieve", content=content, headers={**auth("guest"), "Content-Type": "application/json"}
    )
    assert response.status_code in (400, 422)
    assert response.json()["error"]["code"] in ("malformed_json", "invalid_request")


def test_unknown_paths_and_verbs_get_json_errors(client):
    assert client.get("/v1/nothing", headers=auth("guest")).json()["error"]["code"] == "not_found"
    assert client.get("/v1/retrieve", headers=auth("guest")).json()["error"]["code"] == "method_not_allowed"


def test_a_trailing_slash_is_a_404_not_a_redirect_to_the_callers_host(client):
    """The redirect was built from the request's Host header (a cache in front could then store a
    redirect to any host for everyone)."""
    moved = client.post("/v1/retrieve/", json={"query": "x"}, headers={**auth("guest"), "Host": "evil.example"})
    assert moved.status_code == 404 and "location" not in moved.headers, moved.headers


def test_health_and_the_page_answer_head_and_every_response_says_nosniff(client):
    """Uptime checkers send HEAD (it was a 405); browsers must never guess a type (JSON sent as HTML)."""
    for path in ("/healthz", "/"):
        head = client.head(path)
        assert head.status_code == 200 and head.content == b"", path
    for path, headers in [
        ("/v1/index", auth("guest")),
        ("/v1/nothing", auth("guest")),
        ("/static/web/app.js", {}),
        ("/docs", {}),
        ("/openapi.json", {}),
    ]:
        assert client.get(path, headers=headers).headers.get_list("x-content-type-options") == ["nosniff"], path


def test_an_oversized_body_is_refused_before_it_is_read(client, server):
    limit = server.app.state.holder.config.serve.max_body_bytes
    response = client.post(
        "/v1/documents", content=b"x" * (limit + 1), headers={**auth("admin"), "Content-Type": "application/json"}
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"


def test_unknown_ids_are_404(client):
    assert client.delete("/v1/documents/no-such-doc", headers=auth("admin")).status_code == 404
    assert client.get("/v1/jobs/j-nope", headers=auth("admin")).json()["error"]["code"] == "unknown_job"
    assert client.get("/v1/jobs/..%2F..%2Fmanifest", headers=auth("admin")).status_code == 404
    # A job id of 300 digits was a file name too long for the file system: a 500 and a traceback.
    # Digits of other scripts ("٠") were job ids too.
    for job in (f"j{'0' * 300}1-abcdef", "j٠٠٠٠٠١-abcdef"):
        assert client.get(f"/v1/jobs/{job}", headers=auth("admin")).json()["error"]["code"] == "unknown_job"


def test_bad_documents_are_refused_with_the_document_named(client):
    bad_acl = client.post(
        "/v1/documents", json={"documents": [{"id": "d1", "text": "t", "acl": "board"}]}, headers=auth("admin")
    )
    assert bad_acl.status_code == 422  # acl must be a list
    stamp = client.post(
        "/v1/documents",
        json={"documents": [{"id": "d1", "text": "t", "metadata": {"timestamp": "yesterday"}}]},
        headers=auth("admin"),
    )
    assert stamp.status_code == 422 and "d1" in stamp.json()["error"]["message"]
    twice = client.post(
        "/v1/documents",
        json={"documents": [{"id": "d1", "text": "a"}, {"id": "d1", "text": "b"}]},
        headers=auth("admin"),
    )
    assert twice.status_code == 422 and twice.json()["error"]["code"] == "duplicate_ids"
    composed = [{"id": "caf\u00e9", "text": "a"}, {"id": "cafe\u0301", "text": "b"}]  # one id, two spellings
    twice = client.post("/v1/documents", json={"documents": composed}, headers=auth("admin"))
    assert twice.status_code == 422 and twice.json()["error"]["code"] == "duplicate_ids"
    assert twice.json()["error"]["message"] == "the document id 'cafe\u0301' appears twice in the request"
    assert client.post("/v1/documents", json={"documents": []}, headers=auth("admin")).status_code == 422


def test_answer_is_503_when_the_llm_is_down_while_retrieval_keeps_working(client):
    question = {"query": "Who chairs the Orrin Basin Water Board?", "method": "text", "budget": 400}
    down = client.post("/v1/answer", json=question, headers=auth("guest"))
    assert (
        down.status_code == 503 and down.json()["error"]["code"] == "llm_unavailable" and "Retry-After" in down.headers
    )
    assert client.post("/v1/retrieve", json=question, headers=auth("guest")).status_code == 200


def test_index_info_and_metrics(client):
    info = client.get("/v1/index", headers=auth("admin")).json()
    assert info["methods"] == list(LLM_FREE) and info["counts"]["documents"] == 10 and info["jobs_pending"] == 0
    client.post("/v1/retrieve", json={"query": "Sorvik", "method": "knng"}, headers=auth("guest"))
    text = client.get("/metrics", headers=auth("admin")).text
    assert 'hopgraph_requests_total{endpoint="/v1/retrieve",method="knng",status="200"}' in text
    assert "hopgraph_request_seconds_bucket" in text and "hopgraph_job_queue_depth 0.0" in text
    assert 'endpoint="other"' not in text or "/v1/jobs/j-nope" not in text  # ids never become labels


@pytest.mark.parametrize(
    "path, label",
    [
        ("/v1/documents/upload", "/v1/documents/upload"),
        ("/v1/documents/a/b.md", "/v1/documents/{id}"),
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/v1/models", "/v1/models"),
        ("/v1/models/hopgraph-ppr", "/v1/models/{id}"),
        ("/v1/jobs/j-1", "/v1/jobs/{id}"),
        ("/v1/jobs/j-1/x", "other"),
        ("/", "/"),
        ("/docs", "/docs"),
        ("/redoc", "/redoc"),
        ("/nowhere", "other"),
    ],
)
def test_every_endpoint_has_its_own_metrics_label(path, label):
    from hopgraph.serve.middleware import endpoint_label

    assert endpoint_label(path) == label


def test_the_metrics_label_the_upload_and_openai_endpoints_apart(client):
    client.post("/v1/documents/upload", files=[("files", ("t.txt", b"hi", "text/plain"))])  # 401: no token
    client.get("/v1/models", headers=auth("guest"))
    text = client.get("/metrics", headers=auth("admin")).text
    assert 'endpoint="/v1/documents/upload",method="",status="401"' in text
    assert 'endpoint="/v1/models",method="",status="200"' in text


def test_the_rate_limit_is_per_token(acl_index, serve_config):
    config = serve_config.model_copy(
        update={"serve": serve_config.serve.model_copy(update={"rate_limit": 1.0, "rate_burst": 3})}
    )
    with LiveServer(acl_index, config) as live, httpx.Client(base_url=live.url, timeout=30) as c:
        codes = [c.get("/v1/index", headers=auth("guest")).status_code for _ in range(5)]
        assert codes[:3] == [200, 200, 200] and codes[-1] == 429
        assert c.get("/v1/index", headers=auth("bo")).status_code == 200  # another token has its own bucket
        # A body is counted before it is read: bodies refused for what they hold came at any rate.
        bad = {"query": "tide", "params": {"ppr": [1] * 20_000}}
        bodies = [c.post("/v1/retrieve", json=bad, headers=auth("legal")).status_code for _ in range(5)]
        assert bodies[:3] == [422, 422, 422] and bodies[-1] == 429, bodies
        # Guessing tokens is limited too: unknown tokens from one address share a bucket.
        guesses = [c.get("/v1/index", headers={"Authorization": f"Bearer guess-{n:020d}"}) for n in range(5)]
        assert [r.status_code for r in guesses[:3]] == [401, 401, 401] and guesses[-1].status_code == 429
        assert guesses[-1].json()["error"]["code"] == "rate_limited" and "Retry-After" in guesses[-1].headers


def test_x_forwarded_for_is_believed_from_the_named_proxies_only(acl_index, serve_config):
    """Unknown tokens are rate-limited per client address: a client that names a new address per
    request in X-Forwarded-For would never be limited, unless the header comes from a named proxy."""
    limited = {"rate_limit": 1.0, "rate_burst": 3}

    def guesses(serve: dict) -> list[int]:
        config = serve_config.model_copy(update={"serve": serve_config.serve.model_copy(update=serve)})
        with LiveServer(acl_index, config) as live, httpx.Client(base_url=live.url, timeout=30) as c:
            return [
                c.get(
                    "/v1/index",
                    headers={"Authorization": f"Bearer guess-{n:020d}", "X-Forwarded-For": f"203.0.113.{n}"},
                ).status_code
                for n in range(6)
            ]

    assert guesses(limited)[-1] == 429  # from loopback, not named: the header is ignored
    assert guesses({**limited, "forwarded_allow_ips": ["127.0.0.1"]}) == [401] * 6  # the proxy names six clients


def test_a_bug_is_still_a_json_error(acl_index, serve_config):
    """An unexpected exception (not a HopgraphError) answers 500 JSON that tells nothing of it.
    A route that raises stands in for a bug: a fault that cannot be provoked otherwise on purpose."""
    from hopgraph.serve.app import create_app

    app = create_app(acl_index, serve_config, token_book(), start_jobs=False)

    @app.get("/v1/boom")
    def boom() -> None:
        raise KeyError("secret-internal-detail")

    with LiveServer(acl_index, serve_config, app=app) as live, httpx.Client(base_url=live.url, timeout=30) as c:
        response = c.get("/v1/boom", headers=auth("guest"))
    assert response.status_code == 500 and response.json()["error"]["code"] == "server_error"
    assert "secret-internal-detail" not in response.text
    assert response.headers.get_list("x-content-type-options") == ["nosniff"]  # like every other response


@pytest.mark.slow
def test_insert_and_delete_run_as_jobs_and_publish_a_new_version(index_copy, serve_config):
    new = {
        "id": "lighthouse",
        "title": "Orrin lighthouse",
        "text": "The Orrin lighthouse on Tem island was built in 1894 by the engineer Sela Varro.",
        "acl": ["press"],
    }
    question = {"query": "Who built the Orrin lighthouse?", "method": "text", "budget": 300}

    def docs_seen(c, user):
        return {
            d
            for ev in c.post("/v1/retrieve", json=question, headers=auth(user)).json()["evidence"]
            for d in ev["doc_ids"]
        }

    with LiveServer(index_copy, serve_config) as live, httpx.Client(base_url=live.url, timeout=60) as c:
        job = c.post("/v1/documents", json={"documents": [new]}, headers=auth("admin"))
        assert job.status_code == 202 and job.json()["status"] in ("queued", "running")
        done = wait_for_job(c, job.json()["id"])
        assert done["status"] == "done", done
        assert job.json()["submitted_by"] == done["submitted_by"] == "admin"  # who changed the index
        wait_until(lambda: "lighthouse" in live.app.state.holder.current.doc_ids)  # switched once loaded
        assert c.get("/healthz").json()["version"] != ""
        assert "lighthouse" in docs_seen(c, "press") and "lighthouse" not in docs_seen(c, "guest")
        assert (
            wait_for_job(c, c.delete("/v1/documents/lighthouse", headers=auth("admin")).json()["id"])["status"]
            == "done"
        )
        wait_until(lambda: "lighthouse" not in live.app.state.holder.current.doc_ids)
        assert "lighthouse" not in docs_seen(c, "press")


# ------------------------------------------------------------------------------------ what non-admins learn
def test_counts_and_metrics_are_for_admins_only(client):
    info = client.get("/v1/index", headers=auth("guest"))
    assert info.status_code == 200 and "counts" not in info.json() and "jobs_pending" not in info.json()
    assert info.json()["methods"] == list(LLM_FREE) and info.json()["limits"]["max_filter_keys"] > 0
    metrics = client.get("/metrics", headers=auth("guest"))
    assert metrics.status_code == 403 and metrics.json()["error"]["code"] == "forbidden"
    assert client.get("/metrics", headers=auth("admin")).status_code == 200


def test_llm_errors_name_no_internal_address(client, server):
    down = client.post(
        "/v1/answer", json={"query": "Who chairs the Orrin Basin Water Board?", "method": "text"}, headers=auth("guest")
    )
    assert down.status_code == 503
    llm_url = server.app.state.holder.config.llm.base_url  # the index's own setting; the server's is the closed port
    text = down.text
    assert "127.0.0.1" not in text and "http://" not in text and llm_url not in text


def test_only_health_the_api_description_and_the_web_page_are_open(client, server):
    from tests.conftest import REPO

    # The README's table rows, and a path each stands for (the page's assets live under /static/).
    open_rows = {
        "/healthz": "/healthz",
        "/docs": "/docs",
        "/redoc": "/redoc",
        "/openapi.json": "/openapi.json",
        "/": "/",
        "/static/...": "/static/web/app.js",
    }
    assets = ["/static/web/index.html", "/static/web/app.css", "/static/docs/swagger-ui-bundle.js"]
    assets += ["/static/docs/swagger-ui.css", "/static/docs/redoc.standalone.js"]
    for path in [*open_rows.values(), *assets]:
        assert client.get(path).status_code == 200, path
    for path in ["/", "/docs", "/redoc", "/openapi.json"]:  # no index data in what anyone may read
        assert not any(word in client.get(path).text for word in CODEWORDS.values()), path
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["bearer"]["description"],
    }
    # Every operation the API describes (routers included) refuses a caller without a token, and says
    # so in the schema (so "Authorize" in /docs sends the token).
    for path, operations in spec["paths"].items():
        if path in open_rows:
            continue
        for verb, operation in operations.items():
            assert operation.get("security") == [{"bearer": []}], (verb, path)
            assert client.request(verb.upper(), re.sub(r"\{[^}]+\}", "x", path)).status_code == 401, (verb, path)
    assert "/healthz" in spec["paths"] and "security" not in spec["paths"]["/healthz"]["get"]
    description = spec["info"]["description"]
    assert all(p.rstrip(".") in description for p in open_rows)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    server_section = readme[readme.index("## Query server") : readme.index("## Incremental updates")]
    for p in open_rows:
        assert f"`GET {p}` | nobody needs a token" in server_section, p


# ------------------------------------------------------------------------------------ the LLM behind /v1/answer
ANSWER_QUESTION = {"query": "Who chairs the Orrin Basin Water Board?", "method": "text", "budget": 400}


def scripted_llm(config, server):
    return config.llm.model_copy(update={"base_url": server.base_url, "model": "scripted", "cache": ""})


def test_a_request_the_llm_refuses_is_refused_without_retry_after(acl_index, serve_config):
    from tests.llm.support import ScriptedServer

    reason = '{"error": {"message": "the request exceeds the available context size"}}'
    with ScriptedServer(lambda body, n: (400, reason, 0)) as llm:  # scripted: a backend that rejects the prompt
        config = serve_config.model_copy(update={"llm": scripted_llm(serve_config, llm)})
        with LiveServer(acl_index, config) as live, httpx.Client(base_url=live.url, timeout=30) as c:
            response = c.post("/v1/answer", json=ANSWER_QUESTION, headers=auth("guest"))
            # Streamed, the refusal is a status too, not an error event after a 200: the stream
            # starts only once the LLM has accepted the request.
            chat = {"model": "hopgraph-text", "messages": [{"role": "user", "content": ANSWER_QUESTION["query"]}]}
            streamed = c.post("/v1/chat/completions", json={**chat, "stream": True}, headers=auth("guest"))
        assert len(llm.bodies) == 2  # asked once each: retrying cannot help
    for answer, status in ((response, 422), (streamed, 400)):  # the OpenAI-compatible endpoint says 400
        assert answer.status_code == status and answer.json()["error"]["code"] == "llm_rejected", answer.text
        assert "retry-after" not in answer.headers and llm.base_url not in answer.text


@pytest.mark.slow
def test_slow_answers_do_not_take_capacity_from_retrieval_or_health(acl_index, serve_config):
    # Scripted: an LLM that takes 6 s per answer (the real stand-in cannot be slowed on demand).
    # 40 answers at once with 2 answer slots: on the thread pool alone they would hold all 40
    # worker threads for seconds and /healthz and /v1/retrieve would queue behind them.
    import threading
    import time

    from tests.llm.support import InFlight, ScriptedServer

    slow_answer = InFlight(6.0, "Sela Varro [1]")  # counts the LLM calls in flight
    with ScriptedServer(slow_answer) as llm:
        # One reader asks them all: no bound of its own here, the shared slots are under test.
        slots = {"answer_concurrency": 2, "answer_slots_per_user": 40, "answer_timeout": 8.0}
        serve = serve_config.serve.model_copy(update=slots)
        config = serve_config.model_copy(update={"llm": scripted_llm(serve_config, llm), "serve": serve})
        with LiveServer(acl_index, config) as live, httpx.Client(base_url=live.url, timeout=60) as probe:
            answers: list[httpx.Response] = []

            def ask() -> None:
                with httpx.Client(base_url=live.url, timeout=60) as c:
                    answers.append(c.post("/v1/answer", json=ANSWER_QUESTION, headers=auth("guest")))

            threads = [threading.Thread(target=ask) for _ in range(40)]
            for t in threads:
                t.start()
            time.sleep(2.0)  # the answers' own retrievals are done; every slot waits on the slow LLM
            waits = []
            for _ in range(3):
                for request in (
                    lambda: probe.get("/healthz"),
                    lambda: probe.post("/v1/retrieve", json=ANSWER_QUESTION, headers=auth("guest")),
                ):
                    started = time.perf_counter()
                    assert request().status_code == 200
                    waits.append(time.perf_counter() - started)
                time.sleep(0.5)
            for t in threads:
                t.join()
    print(f"/healthz and /v1/retrieve waits during 40 slow answers: max {max(waits):.3f} s")
    assert max(waits) < 2.0, waits
    assert slow_answer.most == 2  # the slots bound the calls the LLM sees at once (and both were used)
    codes = sorted(r.status_code for r in answers)
    assert len(codes) == 40 and 200 in codes and set(codes) <= {200, 503}
    busy = [r for r in answers if r.status_code == 503]
    assert busy and all(r.json()["error"]["code"] == "answers_busy" and r.headers["retry-after"] == "8" for r in busy)


@pytest.mark.parametrize("path", ["/static/web/index.html", "/static/web//index.html", "/static/web/./index.html"])
def test_the_page_carries_its_policy_on_every_path_that_serves_it(client, path):
    page = client.get("/")
    same = client.get(path)
    assert same.status_code == 200 and same.content == page.content
    policy = same.headers.get("content-security-policy", "")
    assert policy == page.headers["content-security-policy"] and "frame-ancestors 'none'" in policy
    assert same.headers["x-content-type-options"] == "nosniff" and same.headers["referrer-policy"] == "no-referrer"
    assert "content-security-policy" not in client.get("/static/web/app.js").headers  # assets need none


def test_a_server_refuses_the_in_process_vllm_engine_before_loading_anything(acl_index, serve_config):
    """llm.backend=vllm would load the model on the GPU in every worker process, and one engine steps
    one batch at a time: concurrent answers would queue behind each other."""
    from hopgraph.errors import ConfigError
    from hopgraph.serve.app import create_app

    config = serve_config.model_copy(update={"llm": serve_config.llm.model_copy(update={"backend": "vllm"})})
    with pytest.raises(ConfigError, match=r"start `vllm serve MODEL_DIR` and pass --llm.backend http"):
        create_app(acl_index, config, token_book(), start_jobs=False)
