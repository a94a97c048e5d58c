"""The base of every settings section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

OFFLINE_MINILM = "offline:all-minilm-l6-v2"


class Section(BaseModel):
    # Infinity and NaN are never a meaningful setting: refusing them here covers every float field.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
