"""The web page at ``/`` in a real headless browser (Debian's chromium driven by Playwright), over a
real server on loopback, and the endpoints it adds (file upload, document list).

The browser is the system's chromium (``scripts/install_browser.sh`` installs it); where none can be
found the browser tests skip and say so. Every request the pages make is recorded: none may leave
the machine (the page, Swagger UI and ReDoc work offline). ``HOPGRAPH_SCREENSHOTS=1`` saves the
screenshots to ``scripts/results/webui_*.png``.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from hopgraph.documents import Document
from hopgraph.index.formats import DOCUMENT_SUFFIXES
from tests.conftest import REPO
from tests.serve.support import USERS, LiveServer, auth, wait_for_job
from tests.serve.test_api import down_llm

HOSTILE_TITLE = "<script>window.pwned = 'title'</script>Lantern log"
HOSTILE_TEXT = (
    "The lantern keeper of Tem island is Mara Lindqvist <img src=x onerror=\"window.pwned = 'text'\"> "
    "and she lights the Tem lantern every night. <script>window.pwned = 'script'</script>"
)
HOSTILE = Document(id="<b>lantern</b>.md", title=HOSTILE_TITLE, text=HOSTILE_TEXT, source="test")
LANTERN_QUESTION = "Who is the lantern keeper of Tem island?"


def chromium_path() -> str | None:
    for name in (os.environ.get("HOPGRAPH_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        found = name and shutil.which(name)
        if found:
            return found
    return None


def shot(page, name: str, tmp_path: Path) -> None:
    """A screenshot for the record: into scripts/results when HOPGRAPH_SCREENSHOTS=1, else the test's tmp dir."""
    folder = REPO / "scripts" / "results" if os.environ.get("HOPGRAPH_SCREENSHOTS") == "1" else tmp_path
    page.screenshot(path=str(folder / f"webui_{name}.png"), full_page=True)


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def webui_index(tmp_path_factory, acl_documents, sample_config):
    """The ACL corpus plus a document whose title and text are markup (it must show as text)."""
    from hopgraph.index.pipeline import build_index

    out = tmp_path_factory.mktemp("webui") / "index"
    build_index([*acl_documents, HOSTILE], out, sample_config, progress=False)
    return out


@pytest.fixture(scope="module")
def server(webui_index, serve_config, tmp_path_factory):
    """The page's server; its LLM is a closed port, so answers fall back to the retrieval evidence."""
    config = serve_config.model_copy(update={"llm": down_llm(serve_config, tmp_path_factory.mktemp("llm"))})
    with LiveServer(webui_index, config) as live:
        yield live


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    executable = chromium_path()
    if executable is None:
        pytest.skip("no chromium found: run scripts/install_browser.sh (or set HOPGRAPH_CHROMIUM)")
    with sync_playwright() as playwright:
        # --no-sandbox: chromium refuses to start its sandbox as root (CI runs as root).
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def site(browser, server):
    """The page's server, asked for once a browser is known to be there (no browser: skip before building)."""
    return server


@pytest.fixture()
def page(browser, site):
    """A fresh tab (its own session storage); fails the test if anything is fetched from elsewhere."""
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    elsewhere: list[str] = []
    blocked: list[str] = []  # refused by the page's Content-Security-Policy: never sent
    context.on("request", lambda r: elsewhere.append(r.url) if not local(r.url) else None)
    context.on("requestfailed", lambda r: blocked.append(r.url) if r.failure == "csp" else None)
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    errors: list[str] = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    yield tab
    context.close()
    sent = [url for url in elsewhere if url not in blocked]
    assert not sent, f"requests left the machine: {sent}"
    assert not errors, f"script errors on the page: {errors}"


def local(url: str) -> bool:
    parts = urlparse(url)
    return parts.scheme in ("blob", "data") or parts.hostname == "127.0.0.1"  # blob: ReDoc's own worker


def sign_in(page, url: str, user: str) -> None:
    page.goto(url + "/")
    page.fill("#token", USERS[user]["token"])
    page.click("#signin button[type=submit]")
    page.wait_for_selector("#app", state="visible")


# ------------------------------------------------------------------------------------ a reader
def test_sign_in_keeps_the_token_for_the_tab_and_refuses_a_wrong_one(page, site, tmp_path):
    page.goto(site.url + "/")
    shot(page, "signin", tmp_path)
    page.fill("#token", "not-a-token-of-anyone-here")
    page.click("#signin button[type=submit]")
    page.wait_for_selector("#signin-error", state="visible")
    assert "not accepted" in page.text_content("#signin-error") and page.is_hidden("#app")
    sign_in(page, site.url, "bo")
    assert page.evaluate("sessionStorage.getItem('hopgraph.token')") == USERS["bo"]["token"]
    # A server that is busy or restarting when the tab is reloaded is not a refused token: the page
    # signed out on any error. Its 503 is staged by the browser (a restart cannot be timed to a reload).
    page.route("**/v1/index", lambda route: route.fulfill(status=503, json={"error": {"message": "restarting"}}))
    page.reload()
    page.wait_for_selector("#signin-error", state="visible")
    assert page.evaluate("sessionStorage.getItem('hopgraph.token')") == USERS["bo"]["token"]
    page.unroute("**/v1/index")
    page.reload()  # the session survives a reload of the tab
    page.wait_for_selector("#app", state="visible")
    methods = page.eval_on_selector_all("#method option", "options => options.map(o => o.value)")
    info = httpx.get(site.url + "/v1/index", headers=auth("bo")).json()
    assert methods == info["methods"] and page.input_value("#method") == info["default_method"]
    page.click("#signout")
    page.wait_for_selector("#signin-panel", state="visible")
    assert page.evaluate("sessionStorage.getItem('hopgraph.token')") is None


def test_without_the_llm_the_page_shows_the_error_and_the_evidence_with_provenance(page, site, tmp_path):
    sign_in(page, site.url, "bo")
    page.fill("#question", "Who chairs the Orrin Basin Water Board?")
    page.select_option("#method", "ppr")
    page.fill("#budget", "600")
    page.click("#ask-button")
    page.wait_for_selector("#evidence li")
    error = page.text_content("#ask-error")
    assert "the answer model is down" in error and "evidence is shown below" in error
    used = page.text_content("#used")
    assert "method ppr" in used and "budget 600 tokens" in used
    expected = httpx.post(
        site.url + "/v1/retrieve",
        json={"query": "Who chairs the Orrin Basin Water Board?", "method": "ppr", "budget": 600},
        headers=auth("bo"),
    ).json()["evidence"]
    items = page.query_selector_all("#evidence li")
    assert len(items) == len(expected)
    first = items[0].inner_text()
    assert expected[0]["path"] in first and all(d in first for d in expected[0]["doc_ids"])
    items[0].query_selector("button").click()  # opens the passage
    page.wait_for_selector("#passage[open]")
    assert page.text_content("#passage-text") == expected[0]["text"]
    assert expected[0]["path"] in page.text_content("#passage-path")
    shot(page, "evidence", tmp_path)


def test_markup_in_a_document_is_shown_as_text_never_run(page, site, tmp_path):
    sign_in(page, site.url, "admin")
    page.fill("#question", LANTERN_QUESTION)
    page.select_option("#method", "text")
    page.click("#retrieve-button")
    page.wait_for_selector("#evidence li")
    assert HOSTILE_TEXT.split(" and she")[0] in page.inner_text("#evidence")  # the markup, as characters
    assert HOSTILE_TITLE in page.inner_text("#evidence")
    page.wait_for_selector(f"#documents tr[data-id='{HOSTILE.id}']")
    row = page.inner_text(f"#documents tr[data-id='{HOSTILE.id}']")
    assert HOSTILE.id in row and HOSTILE_TITLE in row
    page.query_selector("#evidence li button").click()
    page.wait_for_selector("#passage[open]")
    assert page.text_content("#passage-text") == HOSTILE_TEXT
    assert page.query_selector_all("main img, main script, #passage img, #passage script") == []
    assert page.evaluate("window.pwned") is None
    # And the page forbids inline script outright, should markup ever get through.
    assert "script-src 'self'" in httpx.get(site.url + "/").headers["content-security-policy"]


def test_a_reader_sees_no_admin_controls_and_the_admin_endpoints_refuse_them(page, site, tmp_path):
    sign_in(page, site.url, "guest")
    assert page.is_hidden("#admin") and page.is_hidden("#upload") and page.is_hidden("#documents")
    assert page.text_content("#who") == "signed in"
    shot(page, "reader", tmp_path)
    statuses = page.evaluate(
        """async () => {
            const headers = {Authorization: `Bearer ${sessionStorage.getItem('hopgraph.token')}`};
            const form = new FormData();
            form.append('files', new Blob(['The harbour of Tem.'], {type: 'text/plain'}), 'tem.txt');
            const calls = [
                fetch('/v1/documents', {headers}),
                fetch('/v1/documents/upload', {method: 'POST', headers, body: form}),
                fetch('/v1/documents/sorvik', {method: 'DELETE', headers}),
                fetch('/v1/jobs/j000001-abcdef', {headers}),
            ];
            return Promise.all(calls.map(async c => [(await c).status, (await (await c).json()).error.code]));
        }"""
    )
    assert statuses == [[403, "forbidden"]] * 4


# ------------------------------------------------------------------------------------ an admin
@pytest.mark.slow  # an update job: a worker process loads the models and builds the next version (~30 s)
def test_an_admin_uploads_a_file_and_finds_it_listed_after_the_job(page, site, tmp_path):
    sign_in(page, site.url, "admin")
    page.wait_for_selector("#stats b")
    assert "documents" in page.inner_text("#stats")
    # The stats and the document list are fetched apart: the count may come after the stats. A
    # selector, not wait_for_function: a string predicate that is false at its first check is
    # polled with eval, which the page's CSP (script-src 'self') refuses.
    page.wait_for_selector("#doc-count:has-text(' of ')")
    before = int(page.text_content("#doc-count").split(" of ")[1])
    note = tmp_path / "ferry-timetable.md"
    note.write_text("# Ferry timetable\n\nThe Sorvik ferry leaves Tem island at seven every morning.\n")
    page.set_input_files("#files", str(note))
    page.fill("#upload-acl", "operations, board")
    page.click("#upload button[type=submit]")
    page.wait_for_selector("#jobs li.done, #jobs li.failed", timeout=240_000)
    assert "done" in page.text_content("#jobs li"), page.text_content("#jobs li")
    page.wait_for_selector("#documents tr[data-id='ferry-timetable.md']")
    row = page.inner_text("#documents tr[data-id='ferry-timetable.md']")
    assert "Ferry timetable" in row and "operations, board" in row
    assert page.text_content("#doc-count").endswith(f"of {before + 1}")
    shot(page, "admin", tmp_path)


# ------------------------------------------------------------------------------------ answers
def ask_as(browser, url: str, user: str, question: str, method: str, budget: int):
    """A fresh tab signed in as ``user`` that has asked ``question`` and waited for the answer."""
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    page = context.new_page()
    page.set_default_timeout(180_000)
    sign_in(page, url, user)
    page.fill("#question", question)
    page.select_option("#method", method)
    page.fill("#budget", str(budget))
    page.click("#ask-button")
    page.wait_for_selector("#result[aria-busy=false]")
    return context, page


def test_citations_name_their_documents_and_open_the_cited_passage(browser, webui_index, serve_config, tmp_path):
    """Scripted LLM: the stand-in model (SmolLM2-135M) writes no citation marks (none in 20 answers over
    5 sample questions, 4 methods/budgets), so an answer that cites comes from a scripted
    OpenAI-shaped server on loopback; the page's handling of citations is what is tested here."""
    from tests.llm.support import ScriptedServer
    from tests.serve.test_api import scripted_llm

    with ScriptedServer(lambda body, n: (200, "Priya Anand [2] [1]", 0.0)) as llm:
        config = serve_config.model_copy(update={"llm": scripted_llm(serve_config, llm)})
        with LiveServer(webui_index, config) as live:
            context, page = ask_as(browser, live.url, "bo", "Who chairs the Orrin Basin Water Board?", "ppr", 500)
            expected = httpx.post(
                live.url + "/v1/retrieve",
                json={"query": "Who chairs the Orrin Basin Water Board?", "method": "ppr", "budget": 500},
                headers=auth("bo"),
            ).json()["evidence"]
            assert page.is_hidden("#ask-error") and page.text_content("#answer") == "Priya Anand"
            assert "method ppr" in page.text_content("#used") and "budget 500 tokens" in page.text_content("#used")
            citations = page.query_selector_all("#citations button")
            assert [c.get_attribute("data-evidence") for c in citations] == ["2", "1"]
            for button, n in zip(citations, (2, 1)):
                ev = expected[n - 1]
                assert button.text_content() == f"[{n}] " + "; ".join(t for t in ev["titles"] if t)
                button.click()
                page.wait_for_selector("#passage[open]")
                assert page.text_content("#passage-text") == ev["text"]
                assert page.text_content("#passage-title").startswith(f"[{n}]")
                assert all(d in page.text_content("#passage-meta") for d in ev["doc_ids"])
                assert ev["path"] in page.text_content("#passage-path")
                if n == 2:
                    shot(page, "answer", tmp_path)
                page.click("#passage .close")
            context.close()


def test_an_answer_from_the_standin_llm_is_shown_with_its_evidence(
    browser, webui_index, serve_config, llm_config, tmp_path
):
    """The real stand-in LLM (llama.cpp) answers through the page."""
    serve = serve_config.serve.model_copy(update={"answer_timeout": 300.0})  # the stand-in on a busy machine
    config = serve_config.model_copy(update={"llm": llm_config, "serve": serve})
    with LiveServer(webui_index, config) as live:
        context, page = ask_as(browser, live.url, "bo", "Who chairs the Orrin Basin Water Board?", "text", 300)
        assert page.is_hidden("#ask-error"), page.text_content("#ask-error")
        assert page.text_content("#answer").strip() and "method text" in page.text_content("#used")
        assert page.query_selector_all("#evidence li")
        page.click("#evidence-1 button")
        page.wait_for_selector("#passage[open]")
        assert page.text_content("#passage-text").strip()
        shot(page, "answer_standin", tmp_path)
        context.close()


# ------------------------------------------------------------------------------------ API description pages
def test_swagger_and_redoc_load_from_the_server_and_authorize_sends_the_token(page, site, tmp_path):
    page.goto(site.url + "/docs")
    page.wait_for_selector("button.authorize")
    page.click("button.authorize")
    page.fill(".auth-container input", USERS["admin"]["token"])
    page.click(".auth-btn-wrapper button.authorize")
    page.click("button.btn-done")
    page.click("#operations-index-index_info_v1_index_get button.opblock-summary-control")
    # "Try it out" is on from the start (tryItOutEnabled).
    with page.expect_response(lambda r: r.url.endswith("/v1/index")) as answer:
        page.click("#operations-index-index_info_v1_index_get button.execute")
    assert answer.value.status == 200 and "counts" in answer.value.json()
    shot(page, "swagger", tmp_path)
    page.goto(site.url + "/redoc")
    page.wait_for_selector("text=Multi-hop retrieval")


# ------------------------------------------------------------------------------------ the endpoints behind the page
@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def test_the_upload_picker_offers_exactly_the_formats_the_server_reads():
    """The picker offered .json, which an upload refuses, and hid .pdf, .docx and .html."""
    page = (REPO / "hopgraph" / "serve" / "web" / "index.html").read_text(encoding="utf-8")
    (offered,) = re.findall(r'id="files"[^>]* accept="([^"]*)"', page)
    assert offered.split(",") == [*DOCUMENT_SUFFIXES, ".jsonl"]


def test_the_document_list_pages_within_bounds(client):
    everything = client.get("/v1/documents", params={"limit": 1000}, headers=auth("admin")).json()
    ids = [d["id"] for d in everything["documents"]]
    assert everything["total"] == len(ids) and HOSTILE.id in ids and "secret-legal" in ids
    secret = next(d for d in everything["documents"] if d["id"] == "secret-legal")
    assert secret["acl"] == ["legal"] and secret["title"] == "Settlement terms"
    page = client.get("/v1/documents", params={"offset": 2, "limit": 3}, headers=auth("admin")).json()
    assert [d["id"] for d in page["documents"]] == ids[2:5]
    for params in ({"limit": 0}, {"limit": 1001}, {"offset": -1}):
        assert client.get("/v1/documents", params=params, headers=auth("admin")).status_code == 422, params
    assert client.get("/v1/documents", headers=auth("ops")).status_code == 403


@pytest.mark.parametrize(
    "files, code",
    [
        ([("files", ("blob.bin", b"\x00\x01", "application/octet-stream"))], "unreadable_upload"),
        ([("files", ("empty.txt", b"   \n", "text/plain"))], "unreadable_upload"),
        ([("files", ("bad.jsonl", b'{"text": "ok"}\nnot json\n', "application/x-ndjson"))], "unreadable_upload"),
        (
            [("files", ("nan.jsonl", b'{"id": "n", "text": "ok", "metadata": {"x": NaN}}\n', "text/plain"))],
            "unreadable_upload",  # refused where it is read, as `hopgraph index` refuses it
        ),
        (
            [("files", ("a.txt", b"one", "text/plain")), ("files", ("dir/a.txt", b"two", "text/plain"))],
            "duplicate_files",
        ),
        (  # one name composed, one decomposed (as macOS writes it): one document id
            [
                ("files", ("caf\u00e9.txt", b"one", "text/plain")),
                ("files", ("cafe\u0301.txt", b"two", "text/plain")),
            ],
            "duplicate_files",
        ),
        ([("files", ("..", b"one", "text/plain"))], "invalid_file_name"),
    ],
)
def test_an_upload_that_cannot_be_read_whole_is_refused_naming_why(client, files, code):
    response = client.post("/v1/documents/upload", files=files, headers=auth("admin"))
    assert response.status_code == 422 and response.json()["error"]["code"] == code, response.text
    assert "/tmp" not in response.text and "hopgraph-upload" not in response.text  # no server paths


def test_an_upload_is_bounded_like_a_json_insert(server, client):
    limit = server.app.state.service.serve.max_documents
    lines = b"".join(b'{"id": "d%d", "text": "Tem harbour note %d."}\n' % (i, i) for i in range(limit + 1))
    response = client.post(
        "/v1/documents/upload", files=[("files", ("many.jsonl", lines, "text/plain"))], headers=auth("admin")
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_many_documents"
    huge = b"x" * (server.app.state.service.serve.max_body_bytes + 1)
    response = client.post(
        "/v1/documents/upload", files=[("files", ("big.txt", huge, "text/plain"))], headers=auth("admin")
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"
    assert client.post("/v1/documents/upload", files=[("files", ("t.txt", b"hi", "text/plain"))]).status_code == 401


@pytest.mark.slow  # an update job (~30 s)
def test_an_uploaded_jsonl_file_becomes_documents_with_their_metadata(index_copy, serve_config):
    records = (
        b'{"id": "tide-1", "title": "Tide table", "text": "High tide at Tem is at noon.", "timestamp": "2026-01-02"}\n'
        b'{"id": "tide-2", "text": "Low tide at Tem is at six.", "metadata": {"acl": ["press"]}}\n'
        b'{"id": "tide-3", "text": "Spring tides at Tem are high.", "acl": null}\n'
    )
    with LiveServer(index_copy, serve_config) as live, httpx.Client(base_url=live.url, timeout=60) as c:
        job = c.post(
            "/v1/documents/upload",
            files=[
                ("files", ("tides.jsonl", records, "text/plain")),
                ("files", ("moon.txt", b"Moon at Tem.", "text/plain")),
            ],
            data={"acl": "board"},
            headers=auth("admin"),
        )
        assert job.status_code == 202 and job.json()["add_first"] == ["tide-1", "tide-2", "tide-3", "moon.txt"]
        assert wait_for_job(c, job.json()["id"])["status"] == "done"
        listed = {
            d["id"]: d
            for d in c.get("/v1/documents", params={"limit": 1000}, headers=auth("admin")).json()["documents"]
        }
    assert listed["tide-1"] == {
        "id": "tide-1",
        "title": "Tide table",
        "source": "tides.jsonl",
        "acl": ["board"],
        "timestamp": "2026-01-02",
    }
    # The form's acl is set on every document: a record can neither move (tide-2) nor drop (tide-3) it.
    assert listed["tide-2"]["acl"] == listed["tide-3"]["acl"] == listed["moon.txt"]["acl"] == ["board"]
    assert listed["moon.txt"]["timestamp"]  # a file's modification time, as `hopgraph documents` lists it
