"""A seeded workload of changes on real PostgreSQL source tables, for the change data capture
tests and benchmarks that run Debezium (:mod:`.debezium_postgres`) and compare the lake
with the source (:mod:`.cdc_oracle`).

Three tables, each ``REPLICA IDENTITY DEFAULT`` (Debezium's ``before`` holds the key only):

- ``customers``: int4 key, text, a text that is often NULL, bool, NUMERIC(12,2),
  timestamptz; single-row inserts, updates (some setting NULLs) and deletes.
- ``documents``: int8 key, and ``body``, a text of 12,000 random characters (pglz finds
  nothing to compress, so PostgreSQL keeps it out of line, TOASTed); most updates leave it
  unchanged, and then pgoutput does not send it: Debezium writes
  ``__debezium_unavailable_value`` in its place.
- ``orders``: int8 key, int4, NUMERIC(10,3), timestamptz, text; multi-row transactions
  (several orders, a customer's balance and a delete in one commit); a column added
  mid-stream (``ALTER TABLE orders ADD COLUMN note text``, at :attr:`Workload.alter_round`),
  and a ``TRUNCATE`` (at :attr:`Workload.truncate_round`) after which it fills again.

The sessions write timestamps in a zone other than UTC (``Asia/Kolkata``), so a reader
that drops the offset is caught. :meth:`Workload.fence` writes a row to a fourth table,
``fence``, that a test waits for in Kafka to know the connector has sent everything before
it.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

__all__ = ["TABLES", "Workload"]

#: The captured tables, in the order they are made.
TABLES = ("customers", "documents", "orders")
FENCE = "fence"
TIME_ZONE = "Asia/Kolkata"
BODY_LENGTH = 12_000

_DDL = (
    """CREATE TABLE customers (
        id integer PRIMARY KEY,
        name text NOT NULL,
        email text,
        active boolean NOT NULL,
        balance numeric(12, 2),
        updated_at timestamptz
    )""",
    """CREATE TABLE documents (
        id bigint PRIMARY KEY,
        title text NOT NULL,
        body text NOT NULL,
        revision integer NOT NULL
    )""",
    """CREATE TABLE orders (
        id bigint PRIMARY KEY,
        customer_id integer NOT NULL,
        amount numeric(10, 3) NOT NULL,
        placed_at timestamptz NOT NULL,
        status text
    )""",
    "CREATE TABLE fence (id integer PRIMARY KEY, round integer NOT NULL)",
)
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Workload:
    """The changes of seed ``seed``: :meth:`create` makes the tables and their first rows
    (the connector's snapshot), :meth:`run_round` applies round ``n`` of ``rounds``. The
    same seed gives the same statements."""

    seed: int = 0
    rounds: int = 9
    schema: str = "public"
    _rng: random.Random = field(init=False, repr=False)
    _customers: set[int] = field(default_factory=set, repr=False)
    _documents: set[int] = field(default_factory=set, repr=False)
    _orders: set[int] = field(default_factory=set, repr=False)
    _next: dict[str, int] = field(default_factory=dict, repr=False)
    #: rounds applied so far, and the statements' count
    done: int = 0
    statements: int = 0
    #: whether ``orders`` has gained its column ``note``
    altered: bool = False

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    @property
    def alter_round(self) -> int:
        return self.rounds // 3

    @property
    def truncate_round(self) -> int:
        return (2 * self.rounds) // 3

    def qualified(self, table: str) -> str:
        return f"{self.schema}.{table}"

    @property
    def captured(self) -> list[str]:
        """The tables the connector captures (``schema.table``), the fence included."""
        return [self.qualified(t) for t in (*TABLES, FENCE)]

    # -- values -------------------------------------------------------------------------

    def _id(self, table: str) -> int:
        self._next[table] = self._next.get(table, 0) + 1
        base = {"customers": 0, "documents": 5_000_000_000, "orders": 9_000_000_000}[table]
        return base + self._next[table]

    def _decimal(self, digits: int, scale: int) -> Decimal:
        rng = self._rng
        unscaled = rng.randrange(-(10 ** (digits - 1)), 10 ** (digits - 1))
        if rng.random() < 0.2:
            unscaled = unscaled // 10 * 10  # a trailing zero: 0.10, not 0.1
        return Decimal(unscaled).scaleb(-scale)

    def _instant(self) -> datetime:
        seconds = self._rng.randrange(0, 400 * 86400)
        micros = self._rng.randrange(0, 1_000_000)
        return _EPOCH + timedelta(seconds=seconds, microseconds=micros)

    def _text(self, length: int) -> str:
        return "".join(self._rng.choices(string.ascii_letters + string.digits, k=length))

    def _maybe(self, value: Any, null: float = 0.25) -> Any:
        return None if self._rng.random() < null else value

    # -- statements ---------------------------------------------------------------------

    @contextmanager
    def _transaction(self, dsn: str) -> Iterator[Any]:
        import psycopg2

        conn = psycopg2.connect(dsn)
        try:
            with conn, conn.cursor() as cur:
                cur.execute(f"SET TIME ZONE '{TIME_ZONE}'")
                cur.execute(f"SET search_path TO {self.schema}")
                yield cur
        finally:
            conn.close()

    def _run(self, cur: Any, statement: str, args: tuple[Any, ...] = ()) -> None:
        cur.execute(statement, args)
        self.statements += 1

    def _insert_customer(self, cur: Any) -> None:
        key = self._id("customers")
        row = (
            key,
            f"customer {key}",
            self._maybe(f"c{key}@example.com"),
            self._rng.random() < 0.5,
            self._maybe(self._decimal(10, 2)),
            self._maybe(self._instant()),
        )
        self._run(cur, "INSERT INTO customers VALUES (%s, %s, %s, %s, %s, %s)", row)
        self._customers.add(key)

    def _update_customer(self, cur: Any) -> None:
        if not self._customers:
            return self._insert_customer(cur)
        key = self._rng.choice(sorted(self._customers))
        self._run(
            cur,
            "UPDATE customers SET email = %s, active = %s, balance = %s, updated_at = %s "
            "WHERE id = %s",
            (
                self._maybe(f"c{key}.{self._rng.randrange(100)}@example.org", 0.4),
                self._rng.random() < 0.5,
                self._maybe(self._decimal(10, 2), 0.3),
                self._maybe(self._instant(), 0.2),
                key,
            ),
        )
        return None

    def _delete(self, cur: Any, table: str, keys: set[int]) -> None:
        if not keys:
            return
        key = self._rng.choice(sorted(keys))
        self._run(cur, f"DELETE FROM {table} WHERE id = %s", (key,))
        keys.discard(key)

    def _insert_document(self, cur: Any) -> None:
        key = self._id("documents")
        row = (key, f"document {key}", self._text(BODY_LENGTH), 1)
        self._run(cur, "INSERT INTO documents VALUES (%s, %s, %s, %s)", row)
        self._documents.add(key)

    def _touch_document(self, cur: Any, body: bool) -> None:
        """An update of a document; ``body``: a new body too (else the TOASTed body is left
        as it is, and Debezium sends its placeholder)."""
        if not self._documents:
            return self._insert_document(cur)
        key = self._rng.choice(sorted(self._documents))
        title = f"document {key} rev {self._rng.randrange(1000)}"
        if body:
            self._run(
                cur,
                "UPDATE documents SET title = %s, body = %s, revision = revision + 1 WHERE id = %s",
                (title, self._text(BODY_LENGTH), key),
            )
        else:
            self._run(
                cur,
                "UPDATE documents SET title = %s, revision = revision + 1 WHERE id = %s",
                (title, key),
            )
        return None

    def _insert_order(self, cur: Any) -> None:
        key = self._id("orders")
        customer = self._rng.choice(sorted(self._customers)) if self._customers else 0
        values: tuple[Any, ...] = (
            key,
            customer,
            self._decimal(7, 3),
            self._instant(),
            self._maybe(self._rng.choice(["new", "paid", "shipped"])),
        )
        if self.altered:
            values += (self._maybe(f"note {self._text(8)}", 0.5),)
            self._run(cur, "INSERT INTO orders VALUES (%s, %s, %s, %s, %s, %s)", values)
        else:
            self._run(cur, "INSERT INTO orders VALUES (%s, %s, %s, %s, %s)", values)
        self._orders.add(key)

    def _update_order(self, cur: Any) -> None:
        if not self._orders:
            return self._insert_order(cur)
        key = self._rng.choice(sorted(self._orders))
        status = self._maybe(self._rng.choice(["paid", "shipped", "returned"]), 0.2)
        if self.altered:
            note = self._maybe(f"note {self._text(8)}", 0.3)
            self._run(
                cur, "UPDATE orders SET status = %s, note = %s WHERE id = %s", (status, note, key)
            )
        else:
            self._run(cur, "UPDATE orders SET status = %s WHERE id = %s", (status, key))
        return None

    # -- the workload -------------------------------------------------------------------

    def create(self, dsn: str, customers: int = 6, documents: int = 3, orders: int = 4) -> None:
        """Make the tables (and the fence) and their first rows: what the connector's
        snapshot reads."""
        with self._transaction(dsn) as cur:
            for statement in _DDL:
                self._run(cur, statement)
            for _ in range(customers):
                self._insert_customer(cur)
            for _ in range(documents):
                self._insert_document(cur)
            for _ in range(orders):
                self._insert_order(cur)

    def run_round(self, dsn: str) -> None:
        """The next round: single-row changes of each table, a multi-row transaction, a
        document update that leaves its body unchanged; the ALTER and the TRUNCATE in their
        rounds."""
        number = self.done
        rng = self._rng
        for _ in range(3):
            with self._transaction(dsn) as cur:
                rng.choice([self._insert_customer, self._update_customer, self._update_customer])(
                    cur
                )
        with self._transaction(dsn) as cur:
            self._delete(cur, "customers", self._customers)
        with self._transaction(dsn) as cur:  # one transaction, several tables and rows
            for _ in range(rng.randrange(2, 5)):
                self._insert_order(cur)
            self._update_order(cur)
            self._update_customer(cur)
            self._delete(cur, "orders", self._orders)
        with self._transaction(dsn) as cur:
            self._touch_document(cur, body=False)  # the TOASTed body unchanged
        with self._transaction(dsn) as cur:  # by turns: a new document, a new body, neither
            if number % 3 == 0:
                self._insert_document(cur)
            else:
                self._touch_document(cur, body=number % 3 == 1)
        if number == self.alter_round:
            with self._transaction(dsn) as cur:
                self._run(cur, "ALTER TABLE orders ADD COLUMN note text")
            self.altered = True
            with self._transaction(dsn) as cur:
                self._insert_order(cur)
                self._update_order(cur)
        if number == self.truncate_round:
            with self._transaction(dsn) as cur:
                self._run(cur, "TRUNCATE orders")
            self._orders.clear()
            with self._transaction(dsn) as cur:
                self._insert_order(cur)
        self.done += 1

    def fence(self, dsn: str) -> int:
        """Write the fence row of the rounds done so far (its number: :attr:`done`)."""
        with self._transaction(dsn) as cur:
            self._run(
                cur,
                "INSERT INTO fence VALUES (1, %s) ON CONFLICT (id) DO UPDATE SET round = %s",
                (self.done, self.done),
            )
        return self.done
