"""What a look at the update queue costs: ``hopgraph.index.jobs.list_jobs`` over ``--records``
finished job records (``serve.keep_jobs`` keeps 1,000 by default), which a server does every
``serve.refresh_seconds`` and again when it collects old versions.

Both sides run in one process, in turns: ``read`` empties the record-text cache before every look
(each record opened and read, as before the cache), ``cached`` keeps it (each record's stamp looked
at, its text parsed). The records are real ones: written by ``write_new_job`` and marked done by
``write_job``, as a server's finished jobs are.

    python3 scripts/bench_job_records.py                   # 1,000 records → scripts/results/job_records.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from hopgraph.documents import Document
from hopgraph.evaluate.report import provenance, write_json
from hopgraph.index import jobs

RESULT = Path(__file__).resolve().parent / "results" / "job_records.json"


def finished_records(root: Path, count: int) -> None:
    for n in range(1, count + 1):
        document = Document(id=f"memo-{n}", title=f"Memo {n}", text=f"Memo number {n} about the Sorvik pier.")
        record = jobs.write_new_job(root, f"j{n:06d}-{n % 4096:06x}", [document], [])
        jobs.write_job(root, {**record, "status": "done", "attempts": 1, "version": record["id"]})


def look(root: Path, cold: bool) -> float:
    if cold:
        jobs._RECORDS.folders.clear()
    started = time.perf_counter()
    jobs.list_jobs(root)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30, help="looks per side, in turns")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        finished_records(root, args.records)
        look(root, cold=False)  # the first look fills the cache; the page cache is warm for both sides
        seconds: dict[str, list[float]] = {"read": [], "cached": []}
        for _ in range(args.rounds):
            seconds["read"].append(look(root, cold=True))
            seconds["cached"].append(look(root, cold=False))
    median = {side: statistics.median(times) * 1000 for side, times in seconds.items()}
    result = {
        "records": args.records,
        "rounds": args.rounds,
        "look_ms_median": {side: round(ms, 2) for side, ms in median.items()},
        "look_ms_runs": {side: [round(t * 1000, 2) for t in times] for side, times in seconds.items()},
        "read_over_cached": round(median["read"] / median["cached"], 2),
        **provenance(),
    }
    write_json(args.out, result)
    print(
        f"{args.records} records: a look takes {median['read']:.1f} ms reading every record, "
        f"{median['cached']:.1f} ms from the cache ({result['read_over_cached']}x)"
    )


if __name__ == "__main__":
    main()
