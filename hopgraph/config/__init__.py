"""All settings in one typed model (sections in this package's modules: build, retrieval, serve).

The same model is read from a TOML file (sections = the fields below), overridden from the
command line (``--chunking.size 150``: every leaf field is an option, see :mod:`hopgraph.cli`) and
stored in each index manifest, so an index always records how it was built. Defaults are the
seeds' settings unless a field's description says otherwise.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from hopgraph.config.base import OFFLINE_MINILM, Section
from hopgraph.config.build import (
    LLM_CONNECTION_FIELDS,
    AccessConfig,
    AnswerConfig,
    ChunkingConfig,
    EmbeddingConfig,
    ExtractionConfig,
    GraphConfig,
    KeywordConfig,
    LLMConfig,
    RerankConfig,
)
from hopgraph.config.cluster import ClusterConfig
from hopgraph.config.retrieval import (
    ConceptMethod,
    CueMethod,
    G2consMethod,
    KetMethod,
    KeywordMethod,
    KgMethod,
    KnngMethod,
    PprMethod,
    RetrievalConfig,
    TextMethod,
)
from hopgraph.config.serve import RequestLimits, ServeConfig
from hopgraph.errors import ConfigError, cut, listed

__all__ = [
    "LLM_CONNECTION_FIELDS",
    "OFFLINE_MINILM",
    "AccessConfig",
    "AnswerConfig",
    "ChunkingConfig",
    "ClusterConfig",
    "ConceptMethod",
    "CueMethod",
    "EmbeddingConfig",
    "ExtractionConfig",
    "G2consMethod",
    "GraphConfig",
    "HopgraphConfig",
    "KetMethod",
    "KeywordConfig",
    "KeywordMethod",
    "KgMethod",
    "KnngMethod",
    "LLMConfig",
    "PprMethod",
    "RequestLimits",
    "RerankConfig",
    "RetrievalConfig",
    "Section",
    "ServeConfig",
    "TextMethod",
    "apply_overrides",
    "dotted_keys",
    "example_toml",
    "leaf_fields",
    "load_config",
    "read_toml",
    "validate_config",
    "validate_section",
]

# Settings by when they act, as dotted-key prefixes: a build's (the index keeps them) and a query's
# (they may change from one question to the next).
BUILD_SECTIONS = ("chunking.", "embedding.", "keywords.", "graph.", "extraction.", "llm.", "cluster.")
QUERY_SECTIONS = ("retrieval.", "embedding.device", "llm.", "rerank.", "answer.")

M = TypeVar("M", bound=BaseModel)


class HopgraphConfig(Section):
    access: AccessConfig = AccessConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    keywords: KeywordConfig = KeywordConfig()
    graph: GraphConfig = GraphConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    llm: LLMConfig = LLMConfig()
    extraction: ExtractionConfig = ExtractionConfig()
    rerank: RerankConfig = RerankConfig()
    answer: AnswerConfig = AnswerConfig()
    serve: ServeConfig = ServeConfig()
    cluster: ClusterConfig = ClusterConfig()

    def build_settings(self) -> dict[str, Any]:
        """The LLM-free build settings, as manifests record them for people (`hopgraph inspect`) and as
        manifests written before per-stage settings keys compared them. What invalidates which stage
        is decided by the stage registry (hopgraph/index/pipeline.py), not here."""
        return self.model_dump(
            include={"access", "chunking", "embedding", "keywords", "graph"},
            exclude={"embedding": {"device", "batch_size", "cache", "query_prompt"}},
        )


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> HopgraphConfig:
    """Read a TOML file (optional) and apply dotted-key overrides such as {"chunking.size": 150}."""
    data = read_toml(path) if path is not None else {}
    return validate_config(apply_overrides(data, overrides or {}), source=str(path) if path else "configuration")


def read_toml(path: str | Path, kind: str = "config file") -> dict[str, Any]:
    """The TOML file at ``path``; ``kind`` names it in errors ("tokens file")."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{kind} not found: {path}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def dotted_keys(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"ppr": {"damping": 0.6}} → {"ppr.damping": 0.6}: applied as overrides, only named leaves change."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(dotted_keys(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys ({"retrieval.ppr.damping": 0.6}) in nested settings, in place; returns ``data``."""
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {dotted}: {key} is not a section")
        node[leaf] = value
    return data


def validate_config(data: dict[str, Any], source: str = "configuration") -> HopgraphConfig:
    return validate_section(HopgraphConfig, data, source)


def validate_section(model: type[M], data: dict[str, Any], source: str = "configuration") -> M:
    """``model`` from plain data, or a ConfigError naming every bad key (never a pydantic traceback)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(model, err) for err in exc.errors()]
        raise ConfigError(f"{source}: {listed(problems)}") from None


def _problem(model: type[BaseModel], error: Any) -> str:
    """One validation error as "key: what is wrong", an unknown key with the setting it may mean."""
    where = [str(part) for part in error["loc"]]
    said = f"{cut('.'.join(where))}: {error['msg']}"
    if error.get("type") != "extra_forbidden":
        return said
    section: Any = model
    for part in where[:-1]:  # the section the unknown key is in
        field = getattr(section, "model_fields", {}).get(part)
        section = field.annotation if field is not None else None
    known = list(getattr(section, "model_fields", {}))
    close = difflib.get_close_matches(where[-1], known, n=1)
    return f"{said} (did you mean {'.'.join([*where[:-1], close[0]])}?)" if close else said


def leaf_fields(model: type[BaseModel] = HopgraphConfig, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted name, FieldInfo) for every leaf setting: the source of the CLI options."""
    leaves: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            leaves.extend(leaf_fields(annotation, f"{prefix}{name}."))
        else:
            leaves.append((f"{prefix}{name}", info))
    return leaves


def example_toml() -> str:
    """``examples/hopgraph.toml``: every setting with its default and description.

    A test keeps the file equal to this.
    """
    lines = [
        "# hopgraph settings with their defaults. Every key can also be given on the command line,",
        "# e.g. --chunking.size 150 or --retrieval.ppr.text_weight 0.5 (command line > this file > default).",
    ]

    def section(model: type[BaseModel], name: str) -> None:
        lines.extend(["", f"[{name}]"])
        nested = []
        for key, info in model.model_fields.items():
            annotation = info.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                nested.append((key, annotation))
                continue
            lines.append(f"# {info.description}")
            default = info.default
            if default is None:
                lines.append(f"# {key} =   (unset)")
            elif isinstance(default, bool):
                lines.append(f"{key} = {'true' if default else 'false'}")
            elif isinstance(default, str):
                lines.append(f"{key} = {json.dumps(default, ensure_ascii=False)}")
            else:
                lines.append(f"{key} = {default!r}")
        for key, annotation in nested:
            section(annotation, f"{name}.{key}")

    for key, info in HopgraphConfig.model_fields.items():
        annotation = info.annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel)  # every top-level field is a section
        section(annotation, key)
    return "\n".join(lines) + "\n"
