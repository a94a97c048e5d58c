"""Token records are checked strictly at start-up: a wrong type, an unknown key or the same token
twice stops the server with a ConfigError instead of granting something by accident. A changed
tokens file is read again while serving; one that no longer reads keeps the tokens in force."""

from __future__ import annotations

import hashlib
import os
import threading
import time
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


@pytest.mark.parametrize(
    "mode,in_clear,warned",
    [
        (0o600, True, ""),
        (0o640, True, ""),  # a service's group
        (0o620, True, "chmod go-w"),
        (0o606, True, "chmod go-w"),
        (0o644, True, "chmod o-r"),  # anyone may read the admin's token
        (0o644, False, ""),  # sha256 digests only
    ],
)
def test_a_tokens_file_others_may_write_or_read_in_clear_is_warned_about(tmp_path, monkeypatch, mode, in_clear, warned):
    monkeypatch.delenv("HOPGRAPH_TOKENS", raising=False)
    path = tmp_path / "tokens.toml"
    secret = f'token = "{TOKEN}"' if in_clear else f'sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"'
    path.write_text(f'[[tokens]]\n{secret}\nuser = "alice"\n', encoding="utf-8")
    os.chmod(path, mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert TokenBook.load(str(path), "HOPGRAPH_TOKENS").lookup(TOKEN).user == "alice"
    messages = [str(w.message) for w in caught if f"tokens file {path}" in str(w.message)]
    assert (bool(messages) and warned in messages[0]) if warned else not messages, messages


@pytest.mark.parametrize("token", ["pässwörd-token-0123456789", " token-with-a-space-before", "token-and-a-tab\t"])
def test_a_token_an_authorization_header_cannot_carry_is_refused(token):
    """A header is read as latin-1 and a token kept as UTF-8: "pässwörd…" could never sign in, nor
    a token with a space at an end (what surrounds the token in the header is stripped)."""
    with pytest.raises(ConfigError, match="tokens: token 1: token"):
        TokenBook.from_records([{"token": token, "user": "u"}], "tokens")
    inner = "a token with spaces 0123"  # signs in: only its ends are stripped
    assert TokenBook.from_records([{"token": inner, "user": "u"}], "tokens").lookup(inner).user == "u"


# ------------------------------------------------------------------------------------ read again on change
OTHER = "another-long-random-token-4567"


def tokens_file(path, *users: tuple[str, str]) -> None:
    """Writes ``path`` with one record per (token, user), dated in the past (a settled write)."""
    path.write_text("".join(f'[[tokens]]\ntoken = "{t}"\nuser = "{u}"\n' for t, u in users), encoding="utf-8")
    os.chmod(path, 0o600)
    past = path.stat().st_mtime - 10 + len(users)  # distinct per write, so each one is a change
    os.utime(path, (past, past))


@pytest.fixture
def following(tmp_path, monkeypatch):
    """A book loaded from a file, checked for changes at every lookup (not once a second)."""
    from hopgraph.serve import auth

    monkeypatch.delenv("HOPGRAPH_TOKENS", raising=False)
    monkeypatch.setattr(auth, "RELOAD_CHECK_SECONDS", 0.0)
    path = tmp_path / "tokens.toml"
    tokens_file(path, (TOKEN, "alice"), (OTHER, "ops"))
    return path, TokenBook.load(str(path), "HOPGRAPH_TOKENS")


def test_a_token_removed_from_the_file_is_refused_without_a_restart(following):
    """The file was read once at start-up: a revoked token kept working until the server restarted."""
    path, tokens = following
    assert tokens.lookup(TOKEN).user == "alice"
    tokens_file(path, (OTHER, "ops"))
    assert tokens.lookup(TOKEN) is None and tokens.lookup(OTHER).user == "ops"


def test_a_file_changed_a_moment_ago_is_read_only_once_it_settles(following):
    path, tokens = following
    path.write_text(f'[[tokens]]\ntoken = "{OTHER}"\nuser = "ops"\n', encoding="utf-8")  # mtime: now
    assert tokens.lookup(TOKEN).user == "alice"  # perhaps half-written: not read yet
    past = path.stat().st_mtime - 5
    os.utime(path, (past, past))
    assert tokens.lookup(TOKEN) is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda path: path.write_text('[[tokens]]\ntoken = "short"\nuser = "x"\n', encoding="utf-8"),
        lambda path: path.write_text("[[tokens]\n", encoding="utf-8"),
        lambda path: path.write_text("", encoding="utf-8"),  # no tokens left
        lambda path: path.unlink(),
    ],
    ids=["bad-record", "not-toml", "empty", "deleted"],
)
def test_a_file_that_no_longer_reads_keeps_the_tokens_in_force_and_says_so(following, damage, caplog):
    path, tokens = following
    damage(path)
    if path.exists():
        past = path.stat().st_mtime - 5
        os.utime(path, (past, past))
    with caplog.at_level("WARNING", logger="hopgraph.serve"):
        assert tokens.lookup(TOKEN).user == "alice" and tokens.lookup(OTHER).user == "ops"
        assert tokens.lookup(TOKEN).user == "alice"  # said once, not at every lookup
    (said,) = [r.getMessage() for r in caplog.records if "tokens read before stay in force" in r.getMessage()]
    assert str(path) in said
    tokens_file(path, (OTHER, "ops"))  # repaired: read
    assert tokens.lookup(TOKEN) is None


def test_worker_processes_follow_the_file_from_the_stamp_their_parent_read(following):
    """Worker processes get the parent's book as digests: they follow the same file from its stamp."""
    path, parent = following
    worker = TokenBook.from_records(parent.digest_records(), "parent").following(
        str(path), "HOPGRAPH_TOKENS", parent.stamp
    )
    assert worker.lookup(TOKEN).user == "alice"  # unchanged: not read again
    tokens_file(path, (OTHER, "ops"))
    assert worker.lookup(TOKEN) is None


def test_a_tokens_file_on_a_hung_file_system_holds_no_request_for_long(following, monkeypatch):
    """Lookups run on the event loop: a stat that never returns (an NFS server gone) stopped every
    request. A hung stat cannot be provoked here, so ``file_stamp`` is replaced by one that blocks
    until released (a fault injected, not a stand-in for a part)."""
    from hopgraph.serve import auth

    path, tokens = following
    released = threading.Event()

    def hung(_path: object) -> None:
        released.wait(30)

    monkeypatch.setattr(auth, "file_stamp", hung)
    started = time.monotonic()
    assert tokens.lookup(TOKEN).user == "alice"  # starts the look, waits CHECK_WAIT_SECONDS at most
    assert tokens.lookup(OTHER).user == "ops"  # the look still hangs: no other starts, nothing waits
    assert time.monotonic() - started < 1.0
    released.set()
