"""One progress bar over a whole build: the stage it is in, the corpus's documents and tokens, and an
estimate of the time left across all stages.

A stage whose work is counted (texts embedded, LLM calls answered) moves the bar within its share,
so the estimate follows that work instead of jumping from stage to stage; the bar never restarts
during a run. A stage finished by an earlier run leaves the bar, which covers this run's work only
(a resumed build's estimate is not made short by stages it skips). The token count is the corpus's
character count / 4 (marked "~") until the chunking stage has counted them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tqdm import tqdm

from hopgraph.documents import Document

STEPS = 1000  # bar positions per stage: fractions of a stage without float counters in the display
CHARS_PER_TOKEN = 4  # English prose in cl100k tokens, for the estimate shown before tokens are counted
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}"


class RunProgress:
    """The build's bar; ``stage`` enters the next stage, ``within`` reports work done inside it."""

    def __init__(self, stages: Sequence[str], documents: Sequence[Document], tokens: int | None, enabled: bool):
        self.stages = list(stages)
        self.documents = len(documents)
        self.tokens = f"{tokens:,}" if tokens else f"~{sum(len(d.text) for d in documents) // CHARS_PER_TOKEN:,}"
        self.number, self.name, self.skipped = 0, "", 0
        self.bar = tqdm(
            total=len(self.stages) * STEPS, desc="index", bar_format=BAR_FORMAT, disable=not enabled, file=sys.stderr
        )

    @classmethod
    def off(cls) -> RunProgress:
        """A bar that shows nothing (a build context outside :func:`build_index`)."""
        return cls([], [], 0, False)

    def _move(self, position: int, note: str = "") -> None:
        self.bar.update(max(position - self.bar.n, 0))
        self.bar.set_postfix_str(
            f"stage {self.number + 1}/{len(self.stages)} {self.name}{note}, documents={self.documents}, "
            f"tokens={self.tokens}"
        )

    def stage(self, number: int, name: str, *, done_earlier: bool = False) -> None:
        self.number, self.name = number, name
        if done_earlier:
            self.skipped += 1
            self.bar.total -= STEPS
        self._move(self._start, " (done earlier)" if done_earlier else "")

    @property
    def _start(self) -> int:
        """Bar position at which the current stage's work starts."""
        return (self.number - self.skipped) * STEPS

    def counted(self, tokens: int) -> None:
        """The corpus's token count, once the chunking stage has it."""
        self.tokens = f"{tokens:,}"

    def within(self, done: int, total: int) -> None:
        """``done`` of the stage's ``total`` units of work are finished."""
        if total > 0:
            self._move(self._start + min(done * STEPS // total, STEPS - 1))

    def finish(self) -> None:
        self.bar.total = max(self.bar.total, 1)  # every stage done earlier: nothing left is all done
        self.bar.update(self.bar.total - self.bar.n)
        self.bar.set_postfix_str(f"done, documents={self.documents}, tokens={self.tokens}")
        self.bar.close()

    def close(self) -> None:
        self.bar.close()
