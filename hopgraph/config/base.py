"""The base of every settings section."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict

from hopgraph.errors import ConfigError

OFFLINE_MINILM = "offline:all-minilm-l6-v2"


def web_address(url: str) -> str:
    """``url`` when it is an http(s) address with a host; a ValueError otherwise, so "notaurl" is
    refused at once instead of being tried four times as a connection and then reported."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) address with a host: {url!r}")
    return url


def llm_address(url: str, where: str = "") -> str:
    """``url`` as the LLM server's address (``llm.base_url``); a ConfigError saying ``where`` otherwise.
    Asked where an address is given or used, not when settings are read: an index stores whatever
    address it was built with, used or not."""
    try:
        return web_address(url)
    except ValueError as error:
        raise ConfigError(f"{where}llm.base_url: {error}") from None


def comma_separated(value: Any) -> Any:
    """A list setting given as one comma-separated string (as on the command line) split into its
    items; anything else unchanged, for the field's own validation."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


# A list setting that may also be given as one comma-separated string (the command line's form).
CommaList = Annotated[list[str], BeforeValidator(comma_separated)]


class Section(BaseModel):
    # Infinity and NaN are never a meaningful setting: refusing them here covers every float field.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
