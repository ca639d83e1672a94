"""The nemesis soak: many seeded scenarios of ingests while the environment fails.

    uv run python bench/nemesis.py [--seeds 200] [--first 1] [--extra 4] [--jobs 1]
                                   [--transport kafka|mqtt] [--sink parquet|iceberg|delta]
                                   [--store local|s3] [--broker noida|kafka|cluster]
                                   [--reader auto|kafka-python|confluent|spark]
                                   [--write-mode append|upsert] [--routes]
                                   [--only fault,fault]
    uv run python bench/nemesis.py --seed 17 --transport mqtt --sink iceberg   # replay one
    uv run python bench/nemesis.py --store s3 --seeds 8   # the sinks on a real S3 server
    uv run python bench/nemesis.py --transport kafka --broker cluster --seeds 4  # 3 nodes
    uv run python bench/nemesis.py --write-mode upsert --broker kafka --seeds 10  # CDC
    uv run python bench/nemesis.py --routes --broker kafka --seeds 6  # one topic, many tables

Each seed plays one scenario (sluice.testing.nemesis) on every transport and sink named (all
six combinations by default, taking turns; --store s3 puts the sink on a SeaweedFS server of
the scenario's own behind the fault proxy, adding the faults s3-restart and s3-error, for
Parquet and Iceberg; --broker picks Kafka's broker: noida-db, one Apache Kafka node, which
adds the fault segment-retention, or three Apache Kafka nodes, which adds it and the faults
leader-kill, broker-pause and coordinator-move; --reader picks Kafka's range reader,
options.reader: "spark" is Spark's own Kafka source, put on the session's class path;
--write-mode upsert plays the change data capture scenarios, Kafka into current-state Iceberg
and Delta tables, without the faults that delete messages on purpose, judged by the table
against the simulated source table and the quarantine against the bad messages sent;
--routes plays Kafka's scenarios routed, one topic into five route tables of every sink kind
by a field of the payloads, the scenario's sink the ingest's own, with the Iceberg catalog's
faults and kills between two tables' commits, judged by ``sluice audit --routes`` and every
id in the one place it belongs):
every fault of that transport, sink and store once, in
the order the seed chooses, then --extra faults chosen by the seed; then the oracle
(``sluice audit`` and the exact multiset of payload ids). It prints a line per scenario and,
at the end, scenarios run, faults injected, and messages lost and doubled (must be 0 and 0;
"lost to faults" are messages a fault deleted or a broker forgot, each recorded). A failing
scenario (or one whose harness raised) prints its seed and replay command, and the run exits 1.
--jobs N splits the seeds among N processes, each with its own Spark and brokers (a scenario
mostly waits on brokers and restarts, so three or four share two cores well); the last lines
add up all of them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from sluice.kafka.config import DEFAULT_READER, READERS, SPARK_READER

JOB = ""  # " k/N" in one of several jobs


def say(text: str) -> None:
    print(f"[nemesis{JOB}] {text}", flush=True)


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
    parser.add_argument(
        "--broker",
        choices=["noida", "kafka", "cluster"],
        default="noida",
        help="Kafka's broker: noida-db, one Apache Kafka node, or a three-node cluster",
    )
    parser.add_argument(
        "--reader",
        choices=[DEFAULT_READER, *READERS, SPARK_READER],
        default=DEFAULT_READER,
        help="Kafka's range reader (options.reader)",
    )
    parser.add_argument(
        "--write-mode",
        choices=["append", "upsert"],
        default="append",
        help="append messages, or apply Debezium changes to a current-state table (Kafka into "
        "Iceberg or Delta)",
    )
    parser.add_argument(
        "--routes",
        action="store_true",
        help="route each Kafka batch by a field of its payloads to tables of every sink kind",
    )
    parser.add_argument("--only", default="", help="play only these faults (comma-separated)")
    parser.add_argument("--keep", action="store_true", help="keep each scenario's directory")
    parser.add_argument("--jobs", type=int, default=1, help="processes to split the seeds among")
    parser.add_argument("--share", help=argparse.SUPPRESS)  # "k/N": a job's part of the seeds
    parser.add_argument("--summary", help=argparse.SUPPRESS)  # where a job writes its totals
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error("--jobs takes 1 or more")
    if args.jobs > 1 and args.seed is None:
        return run_jobs(args)

    from sluice.spark import spark_session
    from sluice.testing.nemesis import Scenario, run_scenario

    upsert = args.write_mode == "upsert"
    only_kafka = upsert or args.routes
    transports = (
        [args.transport] if args.transport else ["kafka"] if only_kafka else ["kafka", "mqtt"]
    )
    if args.store == "s3" and args.sink == "delta":
        parser.error("--store s3 takes the Parquet and Iceberg sinks (Delta is local only)")
    if upsert and (transports != ["kafka"] or args.sink == "parquet"):
        parser.error("--write-mode upsert takes Kafka and the Iceberg and Delta sinks")
    if args.routes and (transports != ["kafka"] or upsert or args.store != "local"):
        parser.error("--routes takes Kafka, --write-mode append and --store local")
    every = ["parquet", "iceberg"] + (["delta"] if args.store == "local" else [])
    every = [s for s in every if not upsert or s != "parquet"]
    sinks = [args.sink] if args.sink else every
    kinds = list(itertools.product(transports, sinks))
    every_seed = range(args.first, args.first + args.seeds)
    if args.share:
        global JOB
        part, parts = (int(n) for n in args.share.split("/"))
        JOB = f" job {part + 1}/{parts}"
        every_seed = every_seed[part::parts]
    seeds = [args.seed] if args.seed is not None else list(every_seed)
    say("starting Spark (local[2])")
    spark = spark_session(
        "local[2]",
        "sluice-nemesis",
        {"spark.ui.enabled": "false"},
        kafka_source=args.reader == SPARK_READER,
    )
    spark.sparkContext.setLogLevel("OFF")  # the faults make Spark log stack traces
    started = time.monotonic()
    faults: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    failed: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="sluice-nemesis-"))
    try:
        for number, seed in enumerate(seeds):
            # The seed's place among all the seeds picks its transport and sink, so a run split
            # into jobs plays the same scenarios as one that is not.
            place = seed - args.first
            transport, sink = kinds[place % len(kinds)] if args.seed is None else kinds[0]
            scenario = Scenario(
                transport,  # type: ignore[arg-type]
                sink,  # type: ignore[arg-type]
                seed,
                extra=args.extra,
                store=args.store,
                broker=args.broker,
                reader=args.reader,
                only=tuple(f for f in args.only.split(",") if f),
                write_mode=args.write_mode,
                routes=args.routes,
            )
            workdir = root / f"{seed}-{transport}-{sink}"
            begun = time.monotonic()
            try:
                outcome = run_scenario(spark, scenario, workdir)
            except Exception:  # the harness itself: a failed scenario, and the soak goes on
                import traceback

                totals.update(scenarios=1, errors=1)
                failed.append(f"seed {seed} ({scenario}) raised:\n{traceback.format_exc()}")
                say(f"{number + 1}/{len(seeds)} {scenario}: ERROR\n{failed[-1]}")
                say(f"replay: uv run python {scenario.replay}")
                continue
            faults.update(f.split("@")[0] for f in outcome.injected)
            totals.update(
                scenarios=1,
                injected=len(outcome.injected),
                published=outcome.published,
                accounted=outcome.accounted,
                lost=len(outcome.missing),
                doubled=len(outcome.doubled),
                unfired=len(outcome.unfired),
            )
            cdc = outcome.cdc
            if cdc is not None:
                totals.update(
                    differs=len(cdc.differs),
                    overtaken=cdc.overtaken,
                    moved=cdc.moved,
                    bad=cdc.bad,
                    truncates=cdc.truncates,
                )
            routed = outcome.routed
            if routed is not None:
                totals.update(misplaced=len(routed.misplaced), routed_scenarios=1)
                totals.update({f"sent {k}": n for k, n in routed.sent.items()})
            overtaken = f", {cdc.overtaken} overtaken" if cdc is not None else ""
            say(
                f"{number + 1}/{len(seeds)} {scenario}: {'ok' if outcome.ok else 'FAILED'} "
                f"({len(outcome.injected)} faults, {outcome.published} messages{overtaken}, "
                f"{time.monotonic() - begun:.0f} s)"
            )
            if args.seed is not None:  # a replay says what happened, ok or not
                print(outcome.report(), flush=True)
                print("  errors of the rounds:", *outcome.errors, sep="\n    ", flush=True)
            if not outcome.ok:
                failed.append(outcome.report())
                if args.seed is None:
                    print(outcome.report(), flush=True)  # it names the replay command
            elif not args.keep:
                import shutil

                shutil.rmtree(workdir, ignore_errors=True)
    finally:
        spark.stop()
    if args.summary:
        summary = {"totals": {**totals, "failed": len(failed)}, "faults": faults}
        Path(args.summary).write_text(json.dumps(summary))
    return report(totals, faults, len(failed), time.monotonic() - started)


def report(totals: Counter[str], faults: Counter[str], failed: int, seconds: float) -> int:
    say(
        f"scenarios {totals['scenarios']}, faults injected {totals['injected']} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(faults.items()))}), messages published "
        f"{totals['published']}, lost to faults and recorded {totals['accounted']}, faults "
        f"that never reached their step {totals['unfired']}"
    )
    say(
        f"messages lost {totals['lost']}, doubled {totals['doubled']} "
        f"(goal 0 and 0), failed scenarios {failed} (of them, the harness raised in "
        f"{totals['errors']}), {seconds:.0f} s"
    )
    if "differs" in totals:  # write mode upsert: lost and doubled count the bad messages
        say(
            f"current-state tables: rows that differ from the source table {totals['differs']}"
            f" (goal 0); bad messages {totals['bad']} (not quarantined: 'lost', quarantined "
            f"twice: 'doubled'); truncates {totals['truncates']}; keys moved partition "
            f"{totals['moved']}; changes committed after a newer one of their key "
            f"{totals['overtaken']}"
        )
    if "routed_scenarios" in totals:
        sent = sorted((k.removeprefix("sent "), n) for k, n in totals.items() if k[:5] == "sent ")
        say(
            f"routed: messages in another place than their own {totals['misplaced']} (goal "
            f"0); published by what they are: {', '.join(f'{k} {n}' for k, n in sent)}"
        )
    return 1 if failed else 0


def run_jobs(args: argparse.Namespace) -> int:
    """Run the seeds in ``args.jobs`` processes of this script and add up their totals."""
    started = time.monotonic()
    summaries = Path(tempfile.mkdtemp(prefix="sluice-nemesis-jobs-"))
    passed = ["--seeds", str(args.seeds), "--first", str(args.first), "--extra", str(args.extra)]
    passed += ["--store", args.store, "--broker", args.broker, "--only", args.only]
    passed += ["--reader", args.reader, "--write-mode", args.write_mode]
    passed += ["--keep"] if args.keep else []
    passed += ["--routes"] if args.routes else []
    passed += [f"--{k}={getattr(args, k)}" for k in ("transport", "sink") if getattr(args, k)]
    children = []
    for part in range(args.jobs):
        command = [sys.executable, __file__, *passed, "--share", f"{part}/{args.jobs}"]
        command += ["--summary", str(summaries / f"{part}.json")]
        children.append(subprocess.Popen(command))
    say(f"{args.seeds} seeds in {args.jobs} jobs (pids {', '.join(str(c.pid) for c in children)})")
    codes = [child.wait() for child in children]
    totals: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    missing = 0
    for part in range(args.jobs):
        path = summaries / f"{part}.json"
        if not path.exists():
            missing += 1
            continue
        summary = json.loads(path.read_text())
        totals.update(summary["totals"])
        faults.update(summary["faults"])
    say(f"all {args.jobs} jobs:")
    status = report(totals, faults, totals["failed"], time.monotonic() - started)
    if missing:
        say(f"{missing} job(s) ended without a summary: see their output above")
    return 1 if status or missing or any(codes) else 0


if __name__ == "__main__":
    sys.exit(main())
