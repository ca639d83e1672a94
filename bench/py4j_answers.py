"""What Nagle's algorithm on the JVM's end of PySpark's Py4J gateway costs a Python call that
gets a long answer, both sides in one session (:mod:`sluice.spark.gateway`).

    uv run python bench/py4j_answers.py [--calls 20]

For answers of 4 KiB to 1 MiB (a Java string built in the JVM, returned to Python), it times
``--calls`` calls with Nagle's algorithm on (Py4J 0.10.9.9 as PySpark ships it) and off
(:func:`sluice.spark.gateway.disable_nagle`), interleaved, and prints the median per call of
each and the ratio. A Sluice ingest with ``options.reader="spark"`` gets such an answer when
its observation brings back a small quarantine (44 KiB for 200 quarantined messages).
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20, help="calls per answer size and side")
    args = parser.parse_args()

    from sluice.spark import spark_session
    from sluice.spark.gateway import disable_nagle

    spark = spark_session("local[1]", "sluice-bench-py4j", {"spark.ui.enabled": "false"})
    jvm = spark._jvm
    print(f"{'answer':>10} {'Nagle on':>12} {'Nagle off':>12} {'on/off':>8}")
    for size in (4_000, 8_000, 8_300, 16_000, 44_000, 256_000, 1_000_000):
        text = jvm.java.lang.StringBuilder()
        text.append("x" * size)
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.calls):
            for nagle in (True, False):
                disable_nagle(spark, disable=not nagle)
                started = time.perf_counter()
                answer = text.toString()
                times[nagle].append(time.perf_counter() - started)
                assert len(answer) == size
        on, off = (statistics.median(times[side]) * 1000 for side in (True, False))
        print(f"{size:>8} B {on:>9.2f} ms {off:>9.2f} ms {on / off:>7.1f}x")
    disable_nagle(spark)
    spark.stop()


if __name__ == "__main__":
    main()
