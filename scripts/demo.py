"""The Sluice demo (``make demo``): IoT readings from Kafka and MQTT into Parquet, end to end.

1. starts the embedded brokers (noida-db for Kafka, mosquitto for MQTT, as ``sluice brokers
   up`` does) with their state in ``$SLUICE_HOME/demo`` (default ``~/.sluice/demo``);
2. starts one local SparkSession (``local[2]``) and a throwaway Airflow home (sqlite, in
   ``$SLUICE_HOME/demo/airflow-<pid>``);
3. opens the MQTT session of the Dagster sensor (its first tick: nothing waits yet);
4. for each wave: publishes sample readings, a few of them malformed, to Kafka and to MQTT
   (``sluice publish --sample iot``); runs the Airflow example DAG ``kafka_to_parquet`` with
   ``dag.test()`` (deferrable sensor, then Spark ingest); ticks the Dagster sensor
   ``mqtt_readings_sensor`` and runs the job it asks for (``mqtt_readings``);
5. checks the Parquet datasets against what the runs reported, draws ``ingested.png`` and
   prints a summary table.

The brokers it started are stopped by pid at the end, also after an error or Ctrl-C. The
libraries' own logs (Airflow, Dagster, Spark) go to ``<output>/demo.log``; the terminal shows
the steps. Runs inside the workspace's venv (it needs sluice-airflow and sluice-dagster)::

    uv run --all-packages python scripts/demo.py [--output DIR] [--waves N] [--verbose]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, TextIO

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
AIRFLOW_DAGS = ROOT / "dags_examples" / "airflow"
DAGSTER_DEFS = ROOT / "dags_examples" / "dagster_defs.py"

KAFKA_TOPIC = "iot.readings"
KAFKA_PARTITIONS = 2
MQTT_TOPIC = "sluice/iot/readings"
AIRFLOW_DAG = "kafka_to_parquet"
DAGSTER_SENSOR = "mqtt_readings_sensor"
DAGSTER_JOB = "mqtt_readings"
SPARK_MASTER = "local[2]"
#: Sensor ticks tried before giving up, and the pause between them.
TICKS, TICK_PAUSE_S = 5, 2.0
NOTHING_WAITING = "no messages waiting"  # the queue sensor's skip reason (sluice.cursor)
#: Output entries the demo owns: removed at the start of a run, so reruns do not pile up.
OWNED_OUTPUTS = (AIRFLOW_DAG, DAGSTER_JOB, "ingested.png", "summary.json", "demo.log")


Closer = Callable[[], object]


class DemoError(Exception):
    """A step failed; the message is the one line the user sees."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM (a KeyboardInterrupt, which libraries let through)."""


@dataclass
class SourceRuns:
    """One source, the orchestrator that ingests it, and what each of its runs reported."""

    source: str
    orchestrator: str
    sink: Path
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def batches(self) -> int:
        return len(self.results)

    def total(self, key: str) -> int:
        return sum(int(r[key]) for r in self.results)

    @property
    def messages_per_second(self) -> float:
        seconds = sum(float(r["seconds"]) for r in self.results)
        return self.total("read") / seconds if seconds > 0 else 0.0


# --- output: steps on the terminal, everything else in the log ------------------------------


class Steps:
    """Each step of the demo as a line: ``✓ what it did (seconds)``, then its notes. While a
    step runs, a terminal shows a spinner with the time so far; off a terminal (CI, a pipe)
    a line says when it starts."""

    def __init__(self, console: Console, live: bool = True) -> None:
        self.console = console
        self.live = live and console.is_terminal
        self.current = "starting"
        self._notes: list[str] | None = None  # a terminal's notes, shown after the step

    def say(self, text: str) -> None:
        if self._notes is not None:
            self._notes.append(text)
        else:
            self.console.print(f"    {text}", highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        self.current = text
        started = time.perf_counter()
        live = None
        if self.live:
            self._notes = []
            live = Live(
                _Running(text, started),
                console=self.console,
                transient=True,
                refresh_per_second=8,
                redirect_stdout=False,  # stdout is the log file: keep it there
                redirect_stderr=False,
            )
            live.start()
        else:
            self.console.print(f"[bold]…[/] {text}", highlight=False)
        done = False
        try:
            yield
            done = True
        finally:
            if live is not None:
                live.stop()
            mark = "[green]✓[/]" if done else "[red]✗[/]"
            seconds = time.perf_counter() - started
            self.console.print(f"{mark} {text} ({seconds:.1f} s)", highlight=False)
            notes, self._notes = self._notes or [], None
            for note in notes:
                self.say(note)


class _Running:
    """A spinner, the step and how long it has run (redrawn by :class:`rich.live.Live`)."""

    def __init__(self, text: str, started: float) -> None:
        self.text, self.started = text, started
        self.spinner = Spinner("dots")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self.spinner.text = f"{self.text} ({time.perf_counter() - self.started:.0f} s)"
        yield self.spinner


def logs_to(path: Path | None) -> tuple[TextIO, TextIO]:
    """Send file descriptors 1 and 2 to ``path`` for the rest of the process (Airflow's,
    Dagster's and Spark's JVM's output all go there, child processes and exit handlers
    included) and return streams on the original stdout and stderr for the demo's own
    output. ``None``: leave everything where it is."""
    if path is None:
        return sys.stdout, sys.stderr
    sys.stdout.flush()
    sys.stderr.flush()
    out = open(os.dup(1), "w", buffering=1, encoding="utf-8")  # noqa: SIM115
    err = open(os.dup(2), "w", buffering=1, encoding="utf-8")  # noqa: SIM115
    with path.open("ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    return out, err


def was_interrupted(exc: BaseException) -> bool:
    """Ctrl-C or SIGTERM: also when a Dagster run caught it (Dagster handles the signals
    itself while a run executes, and raises its own error)."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    dagster = sys.modules.get("dagster")
    return dagster is not None and isinstance(exc, dagster.DagsterExecutionInterruptedError)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return line or type(exc).__name__


class Interrupts:
    """Ctrl-C and SIGTERM end the demo, whoever's signal handler is installed when they come.

    Airflow's task runner and Dagster's run executor install their own handlers for a while
    (Dagster drops a signal that comes at the wrong moment), and Python drops an exception
    raised while it runs a garbage-collection callback (py4j frees its Java objects in those).
    So a thread learns of every signal through Python's wakeup fd, which does not depend on
    the handler, and raises :class:`Interrupted` in the main thread every second until the
    demo has handled it."""

    def __init__(self) -> None:
        self.received = ""  # the first signal's name
        self._pending = threading.Event()
        self._handled = threading.Event()
        self._sockets: tuple[socket.socket, socket.socket] | None = None  # kept open

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._handler)
        signal.signal(signal.SIGTERM, self._handler)
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._sockets = reader, writer
        threading.Thread(target=self._watch, args=(reader,), daemon=True).start()
        threading.Thread(target=self._repeat, daemon=True).start()

    def _note(self, signum: int) -> None:
        if not self.received:
            self.received = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            self._pending.set()

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        self._note(signum)
        raise Interrupted(self.received)

    def _watch(self, reader: socket.socket) -> None:
        while not self._handled.is_set():
            for signum in reader.recv(64):
                if signum in (signal.SIGINT, signal.SIGTERM):
                    self._note(signum)

    def _repeat(self) -> None:
        self._pending.wait()
        while not self._handled.wait(1.0):
            main = threading.main_thread().ident
            if main is not None:  # a real signal: it also wakes a blocking call
                signal.pthread_kill(main, signal.SIGINT)

    def done(self) -> None:
        """The demo is stopping: from now on signals are ignored (the brokers must stop)."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self._handled.set()
        self._pending.set()


# --- the pieces -------------------------------------------------------------------------------


def load_module(path: Path, name: str) -> ModuleType:
    """Import the file at ``path`` as module ``name`` (the examples read the environment at
    import, so this happens after the environment is set)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DemoError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Brokers:
    """The embedded brokers, started and stopped with ``sluice brokers up|down`` in a state
    directory of the demo's own (so brokers a user started with ``sluice brokers up`` are
    neither reused nor stopped)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.entries: list[dict[str, Any]] = []

    def _state(self) -> list[dict[str, Any]]:
        path = self.home / "brokers.json"
        if not path.exists():
            return []
        brokers: list[dict[str, Any]] = json.loads(path.read_text()).get("brokers", [])
        return brokers

    def up(self) -> list[str]:
        """Start them; returns the leftovers of an earlier, killed demo it stopped first."""
        os.environ["SLUICE_HOME"] = str(self.home)
        from sluice.cli import brokers

        leftovers = self._stop()
        try:
            brokers.up()
        finally:
            self.entries = self._state()
        return leftovers

    def url(self, kind: str) -> str:
        for entry in self.entries:
            if entry["scheme"].startswith(kind):
                return f"{entry['scheme']}://{entry['host']}:{entry['port']}"
        raise DemoError(f"no {kind} broker was started (see {self.home})")

    def log_tails(self, lines: int = 30) -> str:
        parts = []
        for entry in self.entries:
            try:
                text = Path(entry["log"]).read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            parts.append(f"--- {entry['name']} log ({entry['log']}) ---\n" + "\n".join(text))
        return "\n".join(parts)

    def down(self) -> list[str]:
        """Stop them by pid (``sluice brokers down --purge``); returns what it stopped."""
        self.entries = []
        return self._stop()

    def _stop(self) -> list[str]:
        if not (self.home / "brokers.json").exists():
            return []
        os.environ["SLUICE_HOME"] = str(self.home)
        from sluice.cli import brokers

        running = [e for e in self._state() if brokers.running(brokers.Entry(**e))]
        brokers.down(purge=True)
        return [f"{e['name']} (pid {e['pid']})" for e in running]


def publish(url: str, topic: str, count: int, malformed: int, key_field: str | None) -> str:
    """``sluice publish URL/TOPIC --sample iot --count N --malformed M``, in this process."""
    from sluice.cli.publish import Sample
    from sluice.cli.publish import publish as publish_command

    uri = f"{url}/{topic}" + ("?qos=1" if url.startswith("mqtt") else "")
    publish_command(
        uri,
        file=None,
        stdin=False,
        sample=Sample.iot,
        count=count,
        malformed=malformed,
        seed=None,
        rate=None,
        key_field=key_field,
    )
    command = f"sluice publish {uri} --sample iot --count {count} --malformed {malformed}"
    return command + (f" --key-field {key_field}" if key_field else "")


class InBackground:
    """Runs ``function`` on a daemon thread (so Ctrl-C never waits for it)."""

    def __init__(self, function: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(function,), daemon=True)
        self._thread.start()

    def _run(self, function: Any) -> None:
        try:
            self._value = function()
        except BaseException as exc:
            self._error = exc

    def result(self, timeout: float) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise DemoError(f"still not done after {timeout:.0f} s")
        if self._error is not None:
            raise self._error
        return self._value


def warm_up_spark(spark: Any, scratch: Path) -> None:
    """A first small Parquet write: Spark's first job loads and compiles much (tens of
    seconds on a busy machine); done in the background, the first ingest does not wait."""
    frame = spark.createDataFrame([("sensor-000", 21.0)], "device STRING, temperature DOUBLE")
    frame.write.mode("overwrite").parquet(str(scratch / "spark-warm-up"))


def start_spark() -> Any:
    from sluice.spark import spark_session

    spark = spark_session(
        SPARK_MASTER,
        "sluice-demo",
        {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class AirflowKafka:
    """The Airflow example DAG ``kafka_to_parquet`` in a private Airflow home, run with
    ``dag.test()``: its deferrable sensor returns the batch waiting on the topic, its
    SparkIngestOperator writes it to Parquet and commits the group's offsets."""

    def __init__(self, kafka_url: str, output: Path, state: Path) -> None:
        for stale in state.glob("airflow-*"):  # what a killed run left
            shutil.rmtree(stale, ignore_errors=True)
        self.home = state / f"airflow-{os.getpid()}"
        self.home.mkdir(parents=True)
        host, port = kafka_url.split("://", 1)[1].rsplit(":", 1)
        # Airflow reads its configuration when it is first imported: all of it goes here.
        os.environ.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(AIRFLOW_DAGS),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home}/airflow.db",
                "AIRFLOW_CONN_SLUICE_KAFKA_DEFAULT": json.dumps(
                    {"conn_type": "sluice_kafka", "host": host, "port": int(port)}
                ),
                "SLUICE_EXAMPLE_KAFKA_TOPIC": KAFKA_TOPIC,
                "SLUICE_EXAMPLE_SINK": str(output),
                "SLUICE_EXAMPLE_SCHEDULE": "none",
            }
        )
        if "airflow" in sys.modules:
            raise DemoError("Airflow was imported before its home was set up")
        self.dag: Any = None

    def migrate(self) -> subprocess.Popen[bytes]:
        """``airflow db migrate`` in the background (it takes a few seconds)."""
        return subprocess.Popen(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C is the demo's to handle; it stops this by pid
        )

    def load(self) -> None:
        from sluice_airflow.testing import import_dag_file

        module = import_dag_file(AIRFLOW_DAGS / f"{AIRFLOW_DAG}.py")
        self.dag = module.dag
        self.schema: str = module.READING_SCHEMA  # the Spark DDL of the readings

    def run(self) -> dict[str, Any]:
        from sluice_airflow.testing import DagRunFailed, run_dag

        run = run_dag(self.dag)
        try:
            run.raise_for_state()
        except DagRunFailed as exc:
            raise DemoError(f"Airflow: {exc}") from None
        result = run.xcom("ingest")
        if not isinstance(result, dict):
            raise DemoError(f"the Airflow task 'ingest' returned {result!r}, not a summary")
        return result

    def close(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


class DagsterMqtt:
    """The Dagster example Definitions: the sensor ``mqtt_readings_sensor`` ticked as the
    daemon would (keeping its cursor), and each run it asks for executed in process on a
    real (ephemeral) instance, where the sensor looks its runs up."""

    def __init__(self, mqtt_url: str, output: Path, schema: str) -> None:
        os.environ.update(
            {
                "SLUICE_EXAMPLE_MQTT_URL": mqtt_url,
                "SLUICE_EXAMPLE_MQTT_TOPIC": MQTT_TOPIC,
                "SLUICE_EXAMPLE_SINK": str(output),
            }
        )
        self.schema = schema
        self.instance: Any = None
        self.ticker: Any = None
        self.defs: Any = None

    def load(self) -> None:
        from dagster import DagsterInstance

        from sluice_dagster.testing import SensorTicker

        self.defs = load_module(DAGSTER_DEFS, "sluice_demo_dagster_defs").defs
        self.instance = DagsterInstance.ephemeral()
        self.ticker = SensorTicker.from_definitions(self.defs, DAGSTER_SENSOR, self.instance)

    def tick(self) -> Any:
        """One sensor evaluation: a run request, or None with the reason it skipped."""
        data = self.ticker.tick()
        requests = list(data.run_requests or [])
        if len(requests) > 1:
            raise DemoError(f"the sensor asked for {len(requests)} runs at once")
        return (requests[0], None) if requests else (None, data.skip_message)

    def open_session(self, say: Any) -> str:
        """The first tick: it connects as the persistent session (which from then on keeps
        what is published for it) and finds nothing waiting."""
        for attempt in range(1, TICKS + 1):
            request, reason = self.tick()
            if request is not None:
                raise DemoError("the Dagster sensor found readings before any were published")
            if NOTHING_WAITING in (reason or ""):
                return str(reason)
            say(f"tick {attempt} skipped: {reason}")
            time.sleep(TICK_PAUSE_S)
        raise DemoError(f"the Dagster sensor could not open its MQTT session: {reason}")

    def next_request(self, say: Any) -> Any:
        """Tick until the sensor asks for a run, as the daemon would (every 30 s by default;
        here a few seconds apart): a tick can skip when the broker is slow to answer."""
        for attempt in range(1, TICKS + 1):
            request, reason = self.tick()
            if request is not None:
                return request
            say(f"tick {attempt} skipped: {reason}")
            time.sleep(TICK_PAUSE_S)
        raise DemoError(f"the Dagster sensor requested no run in {TICKS} ticks: {reason}")

    def run(self, request: Any) -> dict[str, Any]:
        job = self.defs.resolve_job_def(DAGSTER_JOB)
        run_config = json.loads(json.dumps(request.run_config))
        [op_name] = run_config["ops"]
        # dagster_defs.py's job is defined for another payload schema: parse the readings'
        run_config["ops"][op_name]["config"]["schema_ddl"] = self.schema
        result = job.execute_in_process(
            run_config=run_config, instance=self.instance, tags=request.tags
        )
        if not result.success:
            raise DemoError(f"the Dagster run {result.run_id} failed")
        output: dict[str, Any] = result.output_for_node(op_name)
        return output

    def close(self) -> None:
        if self.instance is not None:
            self.instance.dispose()


# --- summary ----------------------------------------------------------------------------------


def parquet_rows(path: Path) -> int:
    import pyarrow.dataset as ds

    if not path.exists():
        return 0
    return int(ds.dataset(path, format="parquet", partitioning="hive").count_rows())


def check_on_disk(runs: SourceRuns) -> tuple[int, int]:
    """Rows of the dataset and of its quarantine, which must be what the runs reported."""
    rows = parquet_rows(runs.sink)
    quarantined = sum(parquet_rows(d) for d in runs.sink.glob("batch_id=*/_quarantine"))
    if (rows, quarantined) != (runs.total("written"), runs.total("quarantined")):
        raise DemoError(
            f"{runs.sink} holds {rows} rows and {quarantined} quarantined, but the "
            f"{runs.orchestrator} runs reported {runs.total('written')} and "
            f"{runs.total('quarantined')}"
        )
    return rows, quarantined


def draw_chart(all_runs: list[SourceRuns], path: Path) -> None:
    """Rows per device for each source, and per batch what was written and quarantined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow.dataset as ds

    per_device: dict[str, Counter[str]] = {}
    for runs in all_runs:
        table = ds.dataset(runs.sink, format="parquet", partitioning="hive").to_table(
            columns=["device"]
        )
        per_device[runs.source] = Counter(str(d) for d in table.column("device").to_pylist())
    devices = sorted(set().union(*per_device.values()))

    fig, (left, right) = plt.subplots(
        1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2.2, 1]}
    )
    width = 0.8 / max(1, len(all_runs))
    for index, runs in enumerate(all_runs):
        xs = [d + index * width - 0.4 + width / 2 for d in range(len(devices))]
        left.bar(
            xs,
            [per_device[runs.source][d] for d in devices],
            width,
            label=f"{runs.source} ({runs.orchestrator})",
        )
    left.set_xticks(range(len(devices)))
    left.set_xticklabels([d.replace("sensor-", "") for d in devices])
    left.set_xlabel("device (sensor-…)")
    left.set_ylabel("rows ingested")
    left.set_title("Readings ingested per device")
    left.set_ylim(0, left.get_ylim()[1] * 1.15)
    left.legend(fontsize=8, loc="upper center", ncol=len(all_runs), frameon=False)

    labels, written, quarantined = [], [], []
    for runs in all_runs:
        for number, result in enumerate(runs.results, start=1):
            labels.append(f"{runs.source}\nbatch {number}")
            written.append(int(result["written"]))
            quarantined.append(int(result["quarantined"]))
    ys = range(len(labels))
    right.barh([y - 0.2 for y in ys], written, 0.4, label="written", color="tab:green")
    right.barh([y + 0.2 for y in ys], quarantined, 0.4, label="quarantined", color="tab:red")
    for y, (w, q) in enumerate(zip(written, quarantined, strict=True)):
        right.text(w, y - 0.2, f" {w}", va="center", fontsize=7)
        right.text(max(q, 1), y + 0.2, f" {q}", va="center", fontsize=7)
    right.set_xscale("log")
    right.set_xlim(left=1, right=max(written) * 4)
    right.set_yticks(list(ys))
    right.set_yticklabels(labels, fontsize=8)
    right.invert_yaxis()
    right.set_xlabel("messages (log scale)")
    right.set_title("Per batch")
    right.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def summary_table(all_runs: list[SourceRuns]) -> Table:
    table = Table(title="Ingested", title_justify="left")
    table.add_column("source")
    table.add_column("orchestrator")
    for name in ("batches", "rows written", "quarantined", "msg/s"):
        table.add_column(name, justify="right")
    for runs in all_runs:
        table.add_row(
            runs.source,
            runs.orchestrator,
            str(runs.batches),
            f"{runs.total('written'):,}",
            f"{runs.total('quarantined'):,}",
            f"{runs.messages_per_second:,.0f}",
        )
    return table


# --- the demo ---------------------------------------------------------------------------------


@dataclass
class Options:
    output: Path
    home: Path
    waves: int
    kafka_messages: int
    mqtt_messages: int
    malformed: int
    verbose: bool


def run_demo(options: Options, steps: Steps, brokers: Brokers, closers: list[Closer]) -> None:
    output = options.output
    started = time.perf_counter()

    with steps.step(f"Starting the brokers (sluice brokers up) and the topic {KAFKA_TOPIC}"):
        for leftover in brokers.up():
            steps.say(f"stopped {leftover}, left running by an earlier demo")
        for entry in brokers.entries:
            steps.say(
                f"{entry['name']}: {entry['scheme']}://{entry['host']}:{entry['port']} "
                f"(pid {entry['pid']})"
            )
        kafka_url, mqtt_url = brokers.url("kafka"), brokers.url("mqtt")
        from sluice.brokers import create_kafka_topic

        create_kafka_topic(kafka_url.split("://", 1)[1], KAFKA_TOPIC, KAFKA_PARTITIONS)

    os.environ["SLUICE_SPARK_MASTER"] = SPARK_MASTER
    airflow = AirflowKafka(kafka_url, output, options.home)
    closers.append(airflow.close)
    # Spark's JVM, `airflow db migrate` and the imports of Airflow and Dagster, side by side
    with steps.step(f"Starting Spark ({SPARK_MASTER}) and Airflow's database (sqlite)"):
        migrating = airflow.migrate()
        spark_starting = InBackground(start_spark)
        try:
            airflow.load()
            dagster = DagsterMqtt(mqtt_url, output, airflow.schema)
            closers.append(dagster.close)
            dagster.load()
            code = migrating.wait(timeout=300)
            spark = spark_starting.result(timeout=300)
            closers.append(spark.stop)
        finally:
            if migrating.poll() is None:
                migrating.kill()
                migrating.wait()
        if code != 0:
            raise DemoError(f"airflow db migrate failed (exit code {code})")
        InBackground(lambda: warm_up_spark(spark, airflow.home))
        steps.say(f"Spark {spark.version}; Airflow home {airflow.home}")
        steps.say(f"loaded the Airflow DAG {AIRFLOW_DAG} and the Dagster Definitions")

    with steps.step(f"Dagster: first tick of {DAGSTER_SENSOR} (opens its MQTT session)"):
        steps.say(f"skipped: {dagster.open_session(steps.say)}")

    kafka = SourceRuns("kafka", f"Airflow: {AIRFLOW_DAG}", output / AIRFLOW_DAG)
    mqtt = SourceRuns("mqtt", f"Dagster: {DAGSTER_JOB}", output / DAGSTER_JOB)
    for wave in range(1, options.waves + 1):
        what = f"wave {wave}/{options.waves}"
        with steps.step(f"Publishing {what}: readings to Kafka and MQTT, some malformed"):
            for url, topic, count, key in (
                (kafka_url, KAFKA_TOPIC, options.kafka_messages, "device"),
                (mqtt_url, MQTT_TOPIC, options.mqtt_messages, None),
            ):
                began = time.perf_counter()
                command = publish(url, topic, count, options.malformed, key)
                steps.say(f"{command}  ({time.perf_counter() - began:.1f} s)")

        with steps.step(f"Airflow: {AIRFLOW_DAG}.test() ({what}: sensor, then Spark ingest)"):
            result = airflow.run()
            kafka.results.append(result)
            steps.say(describe(result))

        with steps.step(f"Dagster: {DAGSTER_SENSOR} tick, then a run of {DAGSTER_JOB} ({what})"):
            request = dagster.next_request(steps.say)
            steps.say(f"run requested, run key {request.run_key}")
            result = dagster.run(request)
            mqtt.results.append(result)
            steps.say(describe(result))

    with steps.step("Iceberg: the Kafka readings again, into an Iceberg table (SQLite catalog)"):
        for line in ingest_into_iceberg(spark, kafka_url, airflow.schema, output / "iceberg"):
            steps.say(line)

    all_runs = [kafka, mqtt]
    chart = output / "ingested.png"
    with steps.step("Checking the Parquet datasets and drawing the chart"):
        for runs in all_runs:
            check_on_disk(runs)
        draw_chart(all_runs, chart)
        write_summary(all_runs, chart, output / "summary.json", time.perf_counter() - started)

    console = steps.console
    console.print()
    console.print(summary_table(all_runs))
    outputs: list[tuple[str, Path]] = []
    for runs in all_runs:
        outputs += [(f"{runs.source} dataset", runs.sink)]
        outputs += [(f"{runs.source} quarantine", runs.sink / "batch_id=*" / "_quarantine")]
    outputs += [
        ("iceberg table", output / "iceberg"),
        ("chart", chart),
        ("summary", output / "summary.json"),
    ]
    if not options.verbose:
        outputs.append(("log", output / "demo.log"))
    console.print("\nOutputs:")
    for label, path in outputs:
        console.print(f"  {label + ':':<18} {path}", highlight=False, soft_wrap=True)


def ingest_into_iceberg(spark: Any, kafka_url: str, schema: str, lake: Path) -> list[str]:
    """The Kafka topic read again, by a consumer group of its own, into an Iceberg table of an
    embedded SQLite catalog; then the table's snapshots, each naming its batch."""
    from sluice.batch import plan_batch
    from sluice.kafka import KafkaMessageQueue
    from sluice.spark import ingest
    from sluice.spark.sinks.iceberg import IcebergSink

    lake.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {
            "PYICEBERG_CATALOG__DEMO__TYPE": "sql",
            "PYICEBERG_CATALOG__DEMO__URI": f"sqlite:///{lake / 'catalog.db'}",
            "PYICEBERG_CATALOG__DEMO__WAREHOUSE": (lake / "warehouse").as_uri(),
        }
    )
    table = "iceberg://demo/demo.readings"
    queue = KafkaMessageQueue(KAFKA_TOPIC)
    queue.configure(
        {
            "connection.uri": kafka_url.split("://", 1)[1],
            "topic": KAFKA_TOPIC,
            "group_id": "demo-iceberg",
            "from_beginning": True,
        }
    )
    queue.open(None)
    lines = []
    try:
        while (spec := plan_batch(queue)) is not None:
            result = ingest(spark, spec, table, source=kafka_url, schema=schema)
            lines.append(describe(result.to_dict()))
    finally:
        queue.close(None)
    return lines + IcebergSink(table).snapshot_lines()


def describe(result: dict[str, Any]) -> str:
    return (
        f"batch {result['batch_id']}: {result['read']} read, {result['written']} written, "
        f"{result['quarantined']} quarantined in {float(result['seconds']):.1f} s"
    )


def write_summary(all_runs: list[SourceRuns], chart: Path, path: Path, seconds: float) -> None:
    summary = {
        "sources": [
            {
                "source": r.source,
                "orchestrator": r.orchestrator,
                "batches": r.batches,
                "rows_written": r.total("written"),
                "quarantined": r.total("quarantined"),
                "read": r.total("read"),
                "messages_per_second": round(r.messages_per_second, 1),
                "dataset": str(r.sink),
                "quarantine": str(r.sink / "batch_id=*" / "_quarantine"),
                "batch_ids": [res["batch_id"] for res in r.results],
            }
            for r in all_runs
        ],
        "chart": str(chart),
        "seconds": round(seconds, 1),
    }
    path.write_text(json.dumps(summary, indent=2) + "\n")


def close_all(closers: list[Closer]) -> None:
    """Stop Spark, dispose of the Dagster instance, remove the Airflow home."""
    for close in reversed(closers):
        with contextlib.suppress(Exception):
            close()


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        description="Sluice end to end: Kafka and MQTT readings, Airflow and Dagster, Spark, "
        "Parquet."
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("demo-output"),
        help="where the datasets, chart and log go (default: ./demo-output)",
    )
    parser.add_argument("--waves", type=int, default=2, help="publish-and-ingest rounds")
    parser.add_argument("--kafka-messages", type=int, default=4000, help="per wave")
    parser.add_argument("--mqtt-messages", type=int, default=1000, help="per wave")
    parser.add_argument("--malformed", type=int, default=6, help="malformed readings per wave")
    parser.add_argument(
        "--verbose", action="store_true", help="show the libraries' logs instead of a log file"
    )
    args = parser.parse_args(argv)
    if min(args.waves, args.kafka_messages, args.mqtt_messages) < 1:
        parser.error("--waves, --kafka-messages and --mqtt-messages must be at least 1")
    if not 0 <= args.malformed <= min(args.kafka_messages, args.mqtt_messages):
        parser.error("--malformed must be between 0 and the messages per wave")
    home = Path(os.environ.get("SLUICE_HOME") or Path.home() / ".sluice") / "demo"
    return Options(
        output=args.output.absolute(),
        home=home.absolute(),
        waves=args.waves,
        kafka_messages=args.kafka_messages,
        mqtt_messages=args.mqtt_messages,
        malformed=args.malformed,
        verbose=args.verbose,
    )


def clear_outputs(output: Path) -> None:
    """Remove what an earlier run wrote to ``output`` (only the demo's own entries)."""
    output.mkdir(parents=True, exist_ok=True)
    for name in OWNED_OUTPUTS:
        target = output / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)


def quiet_libraries() -> None:
    """Drop the library warnings that say nothing to a demo user: Airflow's missing graphviz,
    Starlette's httpx deprecation (Airflow's in-process API client), Dagster's pointers to its
    ``dg`` tool. Python's -W / PYTHONWARNINGS still win; the tests filter nothing."""
    if sys.warnoptions:
        return
    warnings.filterwarnings("ignore", message="Could not import graphviz")
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    warnings.filterwarnings("ignore", message=r"(?s).*superseded.*\bdg\b")


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    quiet_libraries()
    clear_outputs(options.output)
    log = options.output / "demo.log"
    interrupts = Interrupts()
    interrupts.install()
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 100
    out, err = logs_to(None if options.verbose else log)
    console = Console(file=out, width=width, highlight=False)
    errors = Console(file=err, width=width, highlight=False)
    console.rule("[bold]Sluice demo[/]: Kafka + MQTT → Airflow + Dagster → Spark → Parquet")
    started = time.perf_counter()
    brokers = Brokers(options.home)
    closers: list[Closer] = []
    steps = Steps(console, live=not options.verbose)  # verbose: logs would break a spinner
    problems: list[str] = []
    status = 0
    try:
        try:
            run_demo(options, steps, brokers, closers)
        except BaseException as exc:
            interrupts.done()
            if interrupts.received or was_interrupted(exc):
                status = 130
                how = interrupts.received or "a signal"
                problems.append(f"Interrupted ({how}) during: {steps.current}")
            else:
                status = 1
                problems.append(f"The demo failed during: {steps.current}: {_first_line(exc)}")
                traceback.print_exc()  # into the log
                print(brokers.log_tails(), file=sys.stderr)
    finally:
        interrupts.done()  # stopping the brokers must not be interrupted by a second Ctrl-C
        try:
            stopped = brokers.down()
        except Exception as exc:
            traceback.print_exc()
            stopped, status = [], status or 1
            problems.append(
                f"could not stop the brokers ({_first_line(exc)}): their pids are in "
                f"{options.home / 'brokers.json'}"
            )
        if stopped:
            console.print(f"Stopped {', '.join(stopped)}.", highlight=False)
        close_all(closers)
    if problems:
        hint = "" if options.verbose else f" Full log: {log}"
        errors.print(f"[red]{'; '.join(problems)}.[/]{hint}", highlight=False, soft_wrap=True)
    else:
        console.print(f"[green]Done[/] in {time.perf_counter() - started:.0f} s.")
    return status


if __name__ == "__main__":
    sys.exit(main())
