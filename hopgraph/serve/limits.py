"""What one request may ask of the server: its retrieval ``params`` checked against
``serve.request_limits`` before any work starts.

The [retrieval] bounds suit a trusted config file; a caller of the server could otherwise ask for a
search whose cost grows as top_k·beam per depth (cue) or that reaches the whole graph (concept), and
keep a core busy long after its deadline matters. The deadline (:mod:`hopgraph.deadline`) stops
whatever still runs too long; these bounds keep an accepted request's cost near the ordinary.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from hopgraph.config import RequestLimits, RetrievalConfig
from hopgraph.errors import cut

# Settings a request may not change: each shapes a graph the server builds once per index and keeps
# (the walk over passages and entities), so every new value a caller sent built and kept one more.
SERVER_FIXED = ("ppr.entity_cooccurrence_weight",)


class OverLimit(ValueError):
    """A request parameter over its server bound; ``field`` is its dotted name under params."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def limit_for(setting: str, limits: RequestLimits) -> tuple[str, float] | None:
    """(name under serve.request_limits, bound) for a dotted retrieval setting, or None if unbounded here."""
    name = setting.replace(".", "_")
    if name in RequestLimits.model_fields:
        return name, getattr(limits, name)
    if setting.endswith("_weight"):
        return "weights", limits.weights
    return None


def as_number(value: Any) -> float | None:
    """``value`` as the number the settings' validation would read from it, or None if it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer past any float (a 400-digit number): over every bound
            return math.inf
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def check_params(overrides: dict[str, Any], limits: RequestLimits, server: RetrievalConfig) -> None:
    """Raise OverLimit for the first numeric setting in ``overrides`` (dotted keys) over its bound,
    not finite, or other than the ``server``'s own value of a SERVER_FIXED setting; other values are
    left to the RetrievalConfig validation.

    A number given as a string counts as that number: the settings' validation would accept "10"
    for 10, so it must not slip past the bounds.
    """
    for setting, raw in overrides.items():
        value = float(raw) if setting in SERVER_FIXED and isinstance(raw, bool) else as_number(raw)  # read as 1, 0
        if value is None:
            continue
        if not math.isfinite(value):
            raise OverLimit(setting, f"params.{cut(setting)} = {value}: must be a finite number")
        if setting in SERVER_FIXED:
            fixed = functools.reduce(getattr, setting.split("."), server)
            if value != fixed:
                raise OverLimit(
                    setting,
                    f"params.{setting} = {value:g}: this server fixes it at {fixed:g}, as it shapes a graph "
                    "built once and kept (set it in the server's [retrieval] settings)",
                )
        bound = limit_for(setting, limits)
        if bound is not None and value > bound[1]:
            raise OverLimit(
                setting,
                f"params.{cut(setting)} = {value:g} is over the server's limit {bound[1]:g} "
                f"(serve.request_limits.{bound[0]})",
            )
