"""The document record that flows from ingestion to retrieved evidence."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Document:
    """One source document.

    ``metadata`` is carried unchanged to every chunk cut from the document. Two keys have a
    meaning of their own: ``acl`` (list of group names allowed to read the document; absent means
    "follow the configured default") and ``timestamp`` (ISO-8601 string).
    """

    id: str
    text: str
    title: str = ""
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def acl(self) -> list[str] | None:
        acl = self.metadata.get("acl")
        return None if acl is None else [str(group) for group in acl]
