"""Bearer tokens → users, groups and scope.

Tokens come from a TOML file and/or an environment variable holding the same list as JSON::

    [[tokens]]
    token = "s3cret-for-alice"      # or: sha256 = "<hex digest of the token>"
    user = "alice"
    groups = ["legal", "staff"]
    admin = false                   # admin scope: insert and delete documents

Only SHA-256 digests are kept in memory, and a presented token is compared against every entry
with :func:`hmac.compare_digest`, so neither the comparison nor the lookup order tells an attacker
how close a guess was.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgraph.config import read_toml
from hopgraph.errors import ConfigError


@dataclass(frozen=True)
class Principal:
    user: str
    groups: frozenset[str]
    admin: bool = False


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenBook:
    """The known tokens; :meth:`lookup` is the only way in."""

    def __init__(self, entries: list[tuple[bytes, Principal]]):
        if not entries:
            raise ConfigError("no API tokens configured: set serve.tokens_file or the serve.tokens_env variable (see `hopgraph serve --help`)")
        self._entries = entries

    @classmethod
    def from_records(cls, records: list[dict[str, Any]], source: str) -> "TokenBook":
        entries = []
        for n, record in enumerate(records, 1):
            where = f"{source}: token {n}"
            if not isinstance(record, dict):
                raise ConfigError(f"{where}: expected a table with token, user, groups")
            unknown = set(record) - {"token", "sha256", "user", "groups", "admin"}
            if unknown:
                raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
            if bool(record.get("token")) == bool(record.get("sha256")):
                raise ConfigError(f"{where}: give exactly one of token or sha256")
            if not isinstance(record.get("user"), str) or not record["user"]:
                raise ConfigError(f"{where}: user must be a non-empty string")
            groups = record.get("groups", [])
            if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
                raise ConfigError(f"{where}: groups must be a list of strings")
            if record.get("token"):
                if len(record["token"]) < 16:
                    raise ConfigError(f"{where}: token shorter than 16 characters")
                digest = _digest(record["token"])
            else:
                try:
                    digest = bytes.fromhex(record["sha256"])
                except ValueError:
                    digest = b""
                if len(digest) != 32:
                    raise ConfigError(f"{where}: sha256 must be 64 hex digits")
            entries.append((digest, Principal(record["user"], frozenset(groups), bool(record.get("admin", False)))))
        return cls(entries)

    @classmethod
    def load(cls, tokens_file: str, tokens_env: str) -> "TokenBook":
        records: list[dict[str, Any]] = []
        sources = []
        if tokens_file:
            path = Path(tokens_file).expanduser()
            records += read_toml(path).get("tokens", [])
            sources.append(str(path))
        raw = os.environ.get(tokens_env, "") if tokens_env else ""
        if raw.strip():
            try:
                records += json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"environment variable {tokens_env}: not a JSON list of tokens ({exc})") from None
            sources.append(f"${tokens_env}")
        return cls.from_records(records, " + ".join(sources) or "tokens")

    def lookup(self, token: str) -> Principal | None:
        presented = _digest(token)
        found = None
        for digest, principal in self._entries:  # no early exit: time does not depend on the match
            if hmac.compare_digest(presented, digest):
                found = principal
        return found
