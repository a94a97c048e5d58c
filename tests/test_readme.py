"""The README's examples work as written: its `curl` request, sent with the headers it shows, is
answered (a JSON body without its Content-Type is refused with 422)."""

from __future__ import annotations

import re
import shlex

import httpx

from tests.conftest import REPO
from tests.serve.support import LiveServer, auth


def readme_curl() -> tuple[dict[str, str], str]:
    """Headers and body of the README's `curl .../v1/retrieve` example."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    command = re.search(r"^curl [^\n]*/v1/retrieve.*?(?<!\\)\n", text, re.S | re.M).group(0).replace("\\\n", " ")
    words = shlex.split(command)
    headers = dict(words[i + 1].split(": ", 1) for i, w in enumerate(words) if w == "-H")
    return headers, words[words.index("-d") + 1]


def test_the_readme_curl_example_is_answered(sample_index, sample_config):
    headers, body = readme_curl()
    headers["Authorization"] = auth("admin")["Authorization"]  # the test server's own token
    with LiveServer(sample_index, sample_config) as live:
        response = httpx.post(f"{live.url}/v1/retrieve", content=body.encode(), headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["evidence"]
