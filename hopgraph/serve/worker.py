"""The update worker the server starts: runs the pending jobs of one index (as one build per
``--batches``), then exits.

    python -m hopgraph.serve.worker INDEX --llm '{"base_url": ...}'
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from hopgraph.config import LLMConfig, validate_section
from hopgraph.errors import HopgraphError
from hopgraph.index import versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index")
    parser.add_argument("--llm", default="{}", help="LLM connection settings (JSON of the llm section) for LLM stages")
    parser.add_argument(
        "--nice", type=int, default=0, help="lower this process's CPU priority by this much, so readers come first"
    )
    parser.add_argument(
        "--batches", type=int, default=None, help="run at most this many builds (each publishes one version), then exit"
    )
    parser.add_argument("--run", default=None, help="a name for this run, recorded with the attempts it starts")
    args = parser.parse_args(argv)
    if args.nice and hasattr(os, "nice"):
        os.nice(args.nice)
    try:
        versions.run_pending(
            args.index,
            llm=validate_section(LLMConfig, json.loads(args.llm), "--llm"),
            batches=args.batches,
            run=args.run,
        )
    except HopgraphError as exc:  # the job record holds the message too
        print(f"hopgraph worker: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
