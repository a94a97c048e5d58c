"""Bearer tokens → users, groups and scope.

Tokens come from a TOML file and/or an environment variable holding the same list as JSON::

    [[tokens]]
    token = "s3cret-for-alice"      # or: sha256 = "<hex digest of the token>"
    user = "alice"
    groups = ["legal", "staff"]
    admin = false                   # admin scope: insert and delete documents

Each record is checked against :class:`TokenRecord` with strict types (``admin = "false"`` is an
error, not a truthy string), unknown keys are refused, and the same token given twice (as a token
or as its digest) stops the start-up with a :class:`ConfigError`.

A plain ``token`` must have at least 16 characters. A ``sha256`` entry cannot be checked for
strength, since only its digest is known: the operator must hash a token of at least 16 random
characters (e.g. ``python -c "import secrets; print(secrets.token_urlsafe(24))"``).

Only SHA-256 digests are kept in memory, and a presented token is compared against every entry
with :func:`hmac.compare_digest`, so neither the comparison nor the lookup order tells an attacker
how close a guess was. A tokens file that its group or other users may write is reported with a
warning: whoever can write it can make themselves admin.

A server runs for months and tokens get revoked: the tokens file is read again when it changes, in
every worker process (checked at most once every :data:`RELOAD_CHECK_SECONDS`, once its last write
is :data:`SETTLED_SECONDS` old, so an editor's half-written file is not taken). A file that no
longer reads (a syntax error, a bad record, no tokens left, deleted) keeps the tokens read before in
force and says so once in the log.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import stat
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hopgraph.config import read_toml, validate_section
from hopgraph.errors import ConfigError
from hopgraph.files import Stamp, file_stamp
from hopgraph.serve.errors import APIError, shown

log = logging.getLogger("hopgraph.serve")
RELOAD_CHECK_SECONDS = 1.0
SETTLED_SECONDS = 1.0  # a tokens file written more recently may still be being written
CHECK_WAIT_SECONDS = 0.2  # what a request waits for a look at the tokens file it started (a local disk's is ~1 ms)


@dataclass(frozen=True)
class Principal:
    user: str
    groups: frozenset[str]
    admin: bool = False

    def require_admin(self) -> Principal:
        """Itself where it holds the admin scope; a 403 otherwise."""
        if not self.admin:
            raise APIError(
                403,
                "forbidden",
                f"user {shown(self.user)} lacks the admin scope needed for this (changing documents, index counts, "
                "metrics)",
            )
        return self


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenRecord(BaseModel):
    """One ``[[tokens]]`` entry: strict types, no unknown keys, exactly one of token and sha256."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    token: str | None = Field(
        None,
        min_length=16,
        # An Authorization header carries nothing else as the same bytes, and what surrounds the token is stripped.
        pattern=r"^[!-~](?:[ -~]*[!-~])?$",
        description="The bearer token itself: at least 16 printable ASCII characters, no space at either end.",
    )
    sha256: str | None = Field(
        None,
        pattern=r"^[0-9a-fA-F]{64}$",
        description="Hex SHA-256 digest of a token of at least 16 random characters.",
    )
    user: str = Field(min_length=1)
    groups: list[str] = Field(default_factory=list)
    admin: bool = False

    @model_validator(mode="after")
    def _one_secret(self) -> TokenRecord:
        if (self.token is None) == (self.sha256 is None):
            raise ValueError("give exactly one of token or sha256")
        return self

    def digest(self) -> bytes:
        return _digest(self.token) if self.token is not None else bytes.fromhex(self.sha256 or "")


def warn_if_open_to_others(path: Path, in_clear: bool) -> None:
    """Whoever may write the tokens file may grant themselves admin, and whoever may read tokens in
    clear (not their sha256) may use them: say so at start-up."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # read_toml reports a missing file
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        warnings.warn(
            f"tokens file {path} is writable by its group or by other users (mode {stat.filemode(mode)}); "
            f"run `chmod go-w {path}`",
            UserWarning,
            stacklevel=2,
        )
    if in_clear and mode & stat.S_IROTH:
        warnings.warn(
            f"tokens file {path} holds tokens in clear and every user may read it (mode {stat.filemode(mode)}); "
            f"run `chmod o-r {path}`, or list each token's sha256 instead",
            UserWarning,
            stacklevel=2,
        )


class TokenBook:
    """The known tokens; :meth:`lookup` is the only way in. A book loaded from a tokens file
    (:meth:`load`) follows the file's changes (see the module's docstring)."""

    def __init__(self, entries: list[tuple[bytes, Principal]]):
        if not entries:
            raise ConfigError(
                "no API tokens configured: set serve.tokens_file or the serve.tokens_env variable (see `hopgraph "
                "serve --help`)"
            )
        self._entries = entries
        self._source: tuple[str, str] | None = None  # (tokens_file, tokens_env) where the file is read again
        self._stamp: Stamp | None = None  # of the file as last read (or found unreadable)
        self._next_check = 0.0
        self._lock = threading.Lock()

    def following(self, tokens_file: str, tokens_env: str, stamp: Stamp | None) -> TokenBook:
        """This book, read again from ``tokens_file`` (with ``tokens_env``) once the file's stamp
        differs from ``stamp`` (what it was when these entries were read)."""
        if tokens_file:
            self._source, self._stamp = (tokens_file, tokens_env), stamp
        return self

    @property
    def stamp(self) -> Stamp | None:
        return self._stamp

    def _refresh(self) -> None:
        """Look at the tokens file at most every RELOAD_CHECK_SECONDS, in a thread of its own: a lookup
        runs on the server's event loop, which a hung file system (an NFS server gone) would stop
        for every request. The lookup that starts a look waits for it at most CHECK_WAIT_SECONDS
        (long enough for a local disk, so a change is seen at once); a look that hangs holds the lock,
        so no other starts meanwhile and every lookup goes on with the tokens in force."""
        now = time.monotonic()
        if self._source is None or now < self._next_check or not self._lock.acquire(blocking=False):
            return  # another thread is checking: its result is for everyone
        self._next_check = now + RELOAD_CHECK_SECONDS
        looked = threading.Event()

        def look() -> None:
            try:
                self._look()
            finally:
                self._lock.release()
                looked.set()

        threading.Thread(target=look, name="hopgraph-tokens-file", daemon=True).start()
        looked.wait(CHECK_WAIT_SECONDS)

    def _look(self) -> None:
        """Read the tokens file again if it changed and has settled (called with the lock held)."""
        if self._source is None:
            return
        tokens_file, tokens_env = self._source
        path = Path(tokens_file).expanduser()
        stamp = file_stamp(path)
        if stamp == self._stamp or (stamp is not None and time.time_ns() - stamp[2] < SETTLED_SECONDS * 1e9):
            return  # unchanged, or written a moment ago (perhaps still being written): looked at next time
        self._stamp = stamp
        try:
            fresh = TokenBook.load(tokens_file, tokens_env)
        except (ConfigError, OSError) as exc:  # OSError: e.g. no longer readable by this user
            kept = "the tokens read before stay in force"
            log.warning("tokens file %s changed but cannot be used (%s); %s", path, exc, kept)
            return
        self._entries = fresh._entries
        log.warning("tokens file %s read again: %d tokens in force", path, len(fresh._entries))

    @classmethod
    def from_records(cls, records: list[Any], source: str) -> TokenBook:
        entries: list[tuple[bytes, Principal]] = []
        first: dict[bytes, int] = {}
        for n, raw in enumerate(records, 1):
            where = f"{source}: token {n}"
            if not isinstance(raw, dict):
                raise ConfigError(f"{where}: expected a table with token (or sha256), user, groups")
            record = validate_section(TokenRecord, raw, where)
            digest = record.digest()
            if digest in first:
                raise ConfigError(
                    f"{where}: the same token as token {first[digest]} (each token, or its sha256, may appear once)"
                )
            first[digest] = n
            entries.append((digest, Principal(record.user, frozenset(record.groups), record.admin)))
        return cls(entries)

    @classmethod
    def load(cls, tokens_file: str, tokens_env: str) -> TokenBook:
        records: list[dict[str, Any]] = []
        sources = []
        stamp = None
        if tokens_file:
            path = Path(tokens_file).expanduser()
            stamp = file_stamp(path)  # before reading: a write meanwhile is read again
            listed = read_toml(path, "tokens file").get("tokens", [])
            if not isinstance(listed, list):
                raise ConfigError(f"{path}: 'tokens' must be an array of tables ([[tokens]])")
            warn_if_open_to_others(path, in_clear=any(isinstance(r, dict) and "token" in r for r in listed))
            records += listed
            sources.append(str(path))
        raw = os.environ.get(tokens_env, "") if tokens_env else ""
        if raw.strip():
            try:
                listed = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"environment variable {tokens_env}: not a JSON list of tokens ({exc})") from None
            if not isinstance(listed, list):
                raise ConfigError(f"environment variable {tokens_env}: not a JSON list of tokens")
            records += listed
            sources.append(f"${tokens_env}")
        return cls.from_records(records, " + ".join(sources) or "tokens").following(tokens_file, tokens_env, stamp)

    def digest_records(self) -> list[dict[str, Any]]:
        """The book as ``sha256`` token records (no token in clear): how worker processes receive it."""
        return [
            {"sha256": digest.hex(), "user": who.user, "groups": sorted(who.groups), "admin": who.admin}
            for digest, who in self._entries
        ]

    def lookup(self, token: str) -> Principal | None:
        self._refresh()
        presented = _digest(token)
        found = None
        for digest, principal in self._entries:  # no early exit: time does not depend on the match
            if hmac.compare_digest(presented, digest):
                found = principal
        return found
