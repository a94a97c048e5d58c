"""Token records are checked strictly at start-up: a wrong type, an unknown key or the same token
twice stops the server with a ConfigError instead of granting something by accident."""

from __future__ import annotations

import hashlib
import os
import warnings

import pytest

from hopgraph.errors import ConfigError
from hopgraph.serve.auth import TokenBook

TOKEN = "a-long-random-token-0123"


def book(*records: dict) -> TokenBook:
    return TokenBook.from_records(list(records), "tokens.toml")


def test_admin_false_as_a_string_is_refused_not_truthy():
    with pytest.raises(ConfigError, match=r"tokens.toml: token 1: admin: Input should be a valid boolean"):
        book({"token": TOKEN, "user": "eve", "admin": "false"})
    assert book({"token": TOKEN, "user": "eve", "admin": False}).lookup(TOKEN).admin is False


@pytest.mark.parametrize(
    "record,problem",
    [
        ({"token": TOKEN, "user": "u", "groups": "legal"}, "groups"),  # a string is not a list of groups
        ({"token": TOKEN, "user": "u", "groups": ["legal", 3]}, "groups.1"),
        ({"token": TOKEN, "user": "u", "admin": 1}, "admin"),
        ({"token": TOKEN, "user": "u", "scope": "admin"}, "scope: Extra inputs are not permitted"),
        ({"token": TOKEN, "user": ""}, "user"),
        ({"token": "short", "user": "u"}, "token"),
        ({"sha256": "abc", "user": "u"}, "sha256"),
        ({"user": "u"}, "exactly one of token or sha256"),
        ({"token": TOKEN, "sha256": hashlib.sha256(b"x").hexdigest(), "user": "u"}, "exactly one of token or sha256"),
    ],
)
def test_bad_records_are_refused_with_the_field_named(record, problem):
    with pytest.raises(ConfigError) as failure:
        book({"token": "another-long-token-000", "user": "ok"}, record)
    assert "token 2" in str(failure.value) and problem in str(failure.value)


def test_the_same_token_twice_is_refused_as_token_or_as_digest():
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    for second in (
        {"token": TOKEN, "user": "mallory", "admin": True},
        {"sha256": digest.upper(), "user": "mallory", "admin": True},
    ):
        with pytest.raises(ConfigError, match=r"token 2: the same token as token 1"):
            book({"token": TOKEN, "user": "alice"}, second)


def test_a_sha256_entry_authenticates_its_token():
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    who = book({"sha256": digest, "user": "alice", "groups": ["legal"]}).lookup(TOKEN)
    assert who is not None and who.user == "alice" and who.groups == frozenset({"legal"}) and not who.admin


def test_load_refuses_a_string_admin_from_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv("HOPGRAPH_TOKENS", raising=False)
    path = tmp_path / "tokens.toml"
    path.write_text(f'[[tokens]]\ntoken = "{TOKEN}"\nuser = "eve"\nadmin = "false"\n', encoding="utf-8")
    os.chmod(path, 0o600)
    with pytest.raises(ConfigError, match=r"tokens.toml: token 1: admin"):
        TokenBook.load(str(path), "HOPGRAPH_TOKENS")


@pytest.mark.parametrize("mode,warns", [(0o600, False), (0o640, False), (0o620, True), (0o606, True)])
def test_a_tokens_file_others_may_write_is_warned_about(tmp_path, monkeypatch, mode, warns):
    monkeypatch.delenv("HOPGRAPH_TOKENS", raising=False)
    path = tmp_path / "tokens.toml"
    path.write_text(f'[[tokens]]\ntoken = "{TOKEN}"\nuser = "alice"\n', encoding="utf-8")
    os.chmod(path, mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert TokenBook.load(str(path), "HOPGRAPH_TOKENS").lookup(TOKEN).user == "alice"
    messages = [str(w.message) for w in caught if "writable by its group or by other users" in str(w.message)]
    assert bool(messages) == warns and all(str(path) in m and "chmod go-w" in m for m in messages)
