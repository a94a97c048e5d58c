"""No text the project shows says a short word twice ("at at", "the the"): every string of the
package (f-string templates with their placeholders as gaps, implicit concatenations joined, so a
word split over two source lines is caught), its web page, prompts, README and example config.
The command line's actual output is checked the same way by tests/test_first_hour.py."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

DOUBLED = re.compile(r"\b(at|the|to|of|a|an|in|on|is|for|and|by|with|from|or|as|it|be|not)\s+\1\b", re.IGNORECASE)


def strings(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal in a Python file; a placeholder of an f-string is "{}"."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def test_no_doubled_words_in_the_package_texts() -> None:
    found = []
    for path in sorted((REPO / "hopgraph").rglob("*.py")):
        found += [f"{path.relative_to(REPO)}:{line}: {m.group(0)!r}" for line, text in strings(path)
                  for m in DOUBLED.finditer(text)]  # fmt: skip
    others = [*(REPO / "hopgraph").rglob("*.txt"), *(REPO / "hopgraph" / "serve" / "web").iterdir()]
    for path in [*others, REPO / "README.md", REPO / "examples" / "hopgraph.toml"]:
        if path.suffix in (".txt", ".js", ".html", ".md", ".toml"):
            text = re.sub(r"\n\s*(#|//)?\s*", " ", path.read_text(encoding="utf-8"))  # comment lines joined
            found += [f"{path.relative_to(REPO)}: {m.group(0)!r}" for m in DOUBLED.finditer(text)]
    assert not found, "doubled words:\n" + "\n".join(found)


def test_the_check_catches_a_doubled_word_split_over_lines(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('message = (\n    f"the file {name} was read at"\n    " at {offset}"\n)\n', encoding="utf-8")
    assert any(DOUBLED.search(text) for _, text in strings(sample))
