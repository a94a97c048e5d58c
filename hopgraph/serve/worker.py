"""The update worker the server starts: runs the pending jobs of one index, one build per batch
(each publishes a version), and stays ``--linger`` seconds after its last build for jobs that
follow, so a stream of small inserts pays the process start and the model loading once.

    python -m hopgraph.serve.worker INDEX --llm '{"base_url": ...}' --linger 30
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from hopgraph.config import LLMConfig, validate_section
from hopgraph.errors import HopgraphError, storage_message
from hopgraph.index import versions
from hopgraph.serve.state import FAILURE_RECORDED, STORAGE_REFUSED, check_servable


def work(
    index: str,
    llm: LLMConfig,
    *,
    batches: int | None,
    linger: float,
    poll: float,
    run: str | None,
    parent: int | None = None,
    job_seconds: float = 0.0,
) -> int:
    """Build batch after batch while jobs are pending; wait up to ``linger`` seconds (looking every
    ``poll``) for more; stop after ``batches`` builds. Returns the number of builds.

    A worker whose server (``parent``, a pid) died starts no further build: the server that takes
    over the jobs runs its own worker, which this one must not outlive unwatched. A build past
    ``job_seconds`` (0 = no limit) fails its jobs.
    """
    built = 0
    parent = os.getppid() if parent is None else parent
    idle_since = time.monotonic()
    while (batches is None or built < batches) and os.getppid() == parent:
        if versions.run_pending(index, llm=llm, batches=1, run=run, verify=check_servable, seconds=job_seconds):
            built += 1
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= linger:
            break
        else:
            time.sleep(min(poll, max(0.0, linger - (time.monotonic() - idle_since))))
    return built


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
    parser.add_argument(
        "--linger", type=float, default=0.0, help="seconds to wait after the last build for more jobs before exiting"
    )
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between looks at the queue while lingering")
    parser.add_argument(
        "--parent",
        type=int,
        default=None,
        help="pid of the server that started this worker: no new build once it has gone",
    )
    parser.add_argument("--run", default=None, help="a name for this run, recorded with the attempts it starts")
    parser.add_argument(
        "--job-seconds", type=float, default=0.0, help="fail a build that runs longer than this (0: no limit)"
    )
    args = parser.parse_args(argv)
    if args.nice and hasattr(os, "nice"):
        os.nice(args.nice)
    try:
        work(
            args.index,
            validate_section(LLMConfig, json.loads(args.llm), "--llm"),
            batches=args.batches,
            linger=max(0.0, args.linger),
            poll=max(0.05, args.poll),
            run=args.run,
            parent=args.parent,
            job_seconds=max(0.0, args.job_seconds),
        )
    except HopgraphError as exc:  # the job record holds the message too
        print(f"hopgraph worker: {exc}", file=sys.stderr)
        return FAILURE_RECORDED
    except OSError as exc:
        said = storage_message(exc)
        if said is None:
            raise
        # Not the jobs' fault: they stay unfinished, as a killed run leaves them, for a later run.
        print(f"hopgraph worker: {said}", file=sys.stderr)
        return STORAGE_REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main())
