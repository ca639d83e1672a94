"""The nemesis soak: many seeded scenarios of ingests while the environment fails.

    uv run python bench/nemesis.py [--seeds 200] [--first 1] [--extra 4]
                                   [--transport kafka|mqtt] [--sink parquet|iceberg|delta]
                                   [--store local|s3]
    uv run python bench/nemesis.py --seed 17 --transport mqtt --sink iceberg   # replay one
    uv run python bench/nemesis.py --store s3 --seeds 8   # the sinks on a real S3 server

Each seed plays one scenario (sluice.testing.nemesis) on every transport and sink named (all
six combinations by default, taking turns; --store s3 puts the sink on a SeaweedFS server of
the scenario's own behind the fault proxy, adding the faults s3-restart and s3-error, for
Parquet and Iceberg): every fault of that transport, sink and store once, in
the order the seed chooses, then --extra faults chosen by the seed; then the oracle
(``sluice audit`` and the exact multiset of payload ids). It prints a line per scenario and,
at the end, scenarios run, faults injected, and messages lost and doubled (must be 0 and 0;
"lost to faults" are messages a fault deleted or a broker forgot, each recorded). A failing
scenario prints its seed and replay command, and the run exits 1.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


def say(text: str) -> None:
    print(f"[nemesis] {text}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8, help="scenarios to run")
    parser.add_argument("--first", type=int, default=1, help="the first seed")
    parser.add_argument("--seed", type=int, help="replay this one seed (with one transport/sink)")
    parser.add_argument("--extra", type=int, default=4, help="random faults after one of each")
    parser.add_argument("--transport", choices=["kafka", "mqtt"])
    parser.add_argument("--sink", choices=["parquet", "iceberg", "delta"])
    parser.add_argument(
        "--store",
        choices=["local", "s3"],
        default="local",
        help="where the sink lives: local disk, or a real S3 server (SeaweedFS)",
    )
    parser.add_argument("--keep", action="store_true", help="keep each scenario's directory")
    args = parser.parse_args()

    from sluice.spark import spark_session
    from sluice.testing.nemesis import Scenario, run_scenario

    transports = [args.transport] if args.transport else ["kafka", "mqtt"]
    if args.store == "s3" and args.sink == "delta":
        parser.error("--store s3 takes the Parquet and Iceberg sinks (Delta is local only)")
    every = ["parquet", "iceberg"] + (["delta"] if args.store == "local" else [])
    sinks = [args.sink] if args.sink else every
    kinds = list(itertools.product(transports, sinks))
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    say("starting Spark (local[2])")
    spark = spark_session("local[2]", "sluice-nemesis", {"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("OFF")  # the faults make Spark log stack traces
    started = time.monotonic()
    faults: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    failed: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="sluice-nemesis-"))
    try:
        for number, seed in enumerate(seeds):
            transport, sink = kinds[number % len(kinds)] if args.seed is None else kinds[0]
            scenario = Scenario(
                transport,  # type: ignore[arg-type]
                sink,  # type: ignore[arg-type]
                seed,
                extra=args.extra,
                store=args.store,
            )
            workdir = root / f"{seed}-{transport}-{sink}"
            begun = time.monotonic()
            outcome = run_scenario(spark, scenario, workdir)
            faults.update(f.split("@")[0] for f in outcome.injected)
            totals.update(
                scenarios=1,
                injected=len(outcome.injected),
                published=outcome.published,
                accounted=outcome.accounted,
                lost=len(outcome.missing),
                doubled=len(outcome.doubled),
            )
            say(
                f"{number + 1}/{len(seeds)} {scenario}: {'ok' if outcome.ok else 'FAILED'} "
                f"({len(outcome.injected)} faults, {outcome.published} messages, "
                f"{time.monotonic() - begun:.0f} s)"
            )
            if not outcome.ok:
                failed.append(outcome.report())
                print(outcome.report(), flush=True)
            elif not args.keep:
                import shutil

                shutil.rmtree(workdir, ignore_errors=True)
    finally:
        spark.stop()
    say(
        f"scenarios {totals['scenarios']}, faults injected {totals['injected']} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(faults.items()))}), messages published "
        f"{totals['published']}, lost to faults and recorded {totals['accounted']}"
    )
    say(
        f"messages lost {totals['lost']}, doubled {totals['doubled']} "
        f"(goal 0 and 0), failed scenarios {len(failed)}, "
        f"{time.monotonic() - started:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
