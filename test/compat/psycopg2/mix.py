#!/usr/bin/env python3
"""psycopg2 client mix for pg-kinetic's compatibility tests (test/compat).

Connects through kineticd with libpq's environment (PGHOST, PGPORT, PGUSER,
PGPASSWORD, PGDATABASE, PGSSLMODE) and runs a realistic mix against
COMPAT_TABLE, whose rows 1..COMPAT_SEED (default 50) the test created and
replicated beforehand: seed row i is ('seed-i', 10*i). The mix's own writes
use ids >= 1000.

It prints one JSON line per statement:
  {"client":"psycopg2","op":...,"tx":...,"port":inet_server_port(),"ok":true}
or "ok":false with "error". Statements that return no row (BEGIN, PREPARE,
SET ...) are "op":"control" without a port. The last line is {"op":"done"}.
A statement that fails is reported and the mix goes on; the exit status is
non-zero only when the mix could not run at all.

psycopg2 interpolates parameters on the client and sends simple-protocol
queries; its only server-side prepared statements are SQL PREPARE/EXECUTE.
"""
import json
import os
import sys

import psycopg2
import psycopg2.extensions

CLIENT = "psycopg2"
TABLE = os.environ["COMPAT_TABLE"]
SEED = int(os.environ.get("COMPAT_SEED", "50"))


def emit(rec):
    rec = dict({"client": CLIENT}, **rec)
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()


def seed_check(i):
    def check(row):
        if (row[0], row[1]) != ("seed-%d" % i, 10 * i):
            return "seed row %d = %r, want ('seed-%d', %d)" % (i, row[:2], i, 10 * i)
        return None
    return check


def equals(want):
    def check(row):
        if row[0] != want:
            return "got %r, want %r" % (row[0], want)
        return None
    return check


class Mix:
    def __init__(self, conn):
        self.conn = conn

    def run(self, op, sql, params=None, tx=None, check=None):
        """Runs one statement whose last column is inet_server_port()."""
        rec = {"op": op}
        if tx:
            rec["tx"] = tx
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, params)
                row = cur.fetchone()
            if row is None:
                raise RuntimeError("no row from: " + sql)
            rec["port"] = int(row[-1])
            err = check(row) if check else None
            rec["ok"] = err is None
            if err:
                rec["error"] = err
        except Exception as e:  # noqa: BLE001 - every failure is reported
            rec["ok"] = False
            rec["error"] = "%s: %s" % (type(e).__name__, str(e).strip())
        emit(rec)

    def control(self, sql, tx=None):
        rec = {"op": "control", "sql": sql}
        if tx:
            rec["tx"] = tx
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql)
            rec["ok"] = True
        except Exception as e:  # noqa: BLE001
            rec["ok"] = False
            rec["error"] = "%s: %s" % (type(e).__name__, str(e).strip())
        emit(rec)

    def end_tx(self, tx, commit=True):
        """COMMIT (or ROLLBACK after a failure) through psycopg2's API."""
        rec = {"op": "control", "sql": "COMMIT" if commit else "ROLLBACK", "tx": tx}
        try:
            if commit:
                self.conn.commit()
            else:
                self.conn.rollback()
            rec["ok"] = True
        except Exception as e:  # noqa: BLE001
            rec["ok"] = False
            rec["error"] = "%s: %s" % (type(e).__name__, str(e).strip())
            self.conn.rollback()
        emit(rec)


def main():
    conn = psycopg2.connect("")  # everything from PG* variables
    conn.autocommit = True
    m = Mix(conn)
    t = TABLE
    by_id = "SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = %s"
    count_seed = "SELECT count(*), inet_server_port() FROM " + t + " WHERE id <= %s"
    insert = "INSERT INTO " + t + " (id, name, qty) VALUES (%s, %s, 1) RETURNING id, inet_server_port()"

    # Phase A: reads before this session wrote anything.
    m.control("SET statement_timeout = '31s'")
    for i in range(1, 9):
        m.run("read", by_id, (i,), check=seed_check(i))
    for _ in range(2):
        m.run("read", count_seed, (SEED,), check=equals(SEED))
    # The same parameterized query over and over; psycopg2 keeps it client-side.
    for k in range(12):
        i = k % SEED + 1
        m.run("prepared_read", by_id, (i,), check=seed_check(i))
    # Read-only transaction, psycopg2's way: BEGIN READ ONLY from set_session.
    conn.set_session(readonly=True, autocommit=False)
    for i in (3, 4, 5):
        m.run("tx_read", by_id, (i,), tx="ro1", check=seed_check(i))
    m.run("tx_read", count_seed, (SEED,), tx="ro1", check=equals(SEED))
    m.end_tx("ro1")
    conn.readonly = None
    conn.autocommit = True
    # SQL-level prepared statement.
    m.control("PREPARE compat_by_id(int) AS SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = $1")
    for i in range(1, 6):
        m.run("sql_prepared_read", "EXECUTE compat_by_id(%s)", (i,), check=seed_check(i))
    m.control("DEALLOCATE compat_by_id")
    m.run("session_read", "SELECT current_setting('statement_timeout'), inet_server_port()", check=equals("31s"))

    # Phase B: writes, and reads after them.
    for i in range(1001, 1006):
        m.run("write", insert, (i, "own-%d" % i), check=equals(i))
    for i in range(1001, 1004):
        m.run("write", "UPDATE " + t + " SET qty = qty + 1 WHERE id = %s RETURNING qty, inet_server_port()", (i,), check=equals(2))
    m.run("write", insert, (1006, "own-1006"), check=equals(1006))
    m.run("read_after_write", by_id, (7,), check=seed_check(7))
    # Read-write transaction: psycopg2 sends BEGIN before the first statement.
    conn.autocommit = False
    m.run("tx_write", insert, (1010, "own-1010"), tx="rw1", check=equals(1010))
    m.run("tx_write", "SELECT qty, inet_server_port() FROM " + t + " WHERE id = %s", (1010,), tx="rw1", check=equals(1))
    m.run("tx_write", "UPDATE " + t + " SET qty = qty + 1 WHERE id = %s RETURNING qty, inet_server_port()", (1010,), tx="rw1", check=equals(2))
    m.end_tx("rw1")
    conn.autocommit = True
    for i in range(1100, 1110):
        m.run("prepared_write", insert, (i, "own-%d" % i), check=equals(i))
    for i in (1, 2, 3):
        m.run("read_after_write", by_id, (i,), check=seed_check(i))
    conn.set_session(readonly=True, autocommit=False)
    m.run("tx_read", by_id, (9,), tx="ro2", check=seed_check(9))
    m.run("tx_read", count_seed, (SEED,), tx="ro2", check=equals(SEED))
    m.end_tx("ro2")
    conn.readonly = None
    # Everything this session wrote, seen inside a read-write transaction.
    m.run("tx_write", "SELECT count(*), inet_server_port() FROM " + t + " WHERE id >= 1000", tx="rw2", check=equals(17))
    m.end_tx("rw2")
    conn.autocommit = True
    conn.close()
    emit({"op": "done", "ok": True})


if __name__ == "__main__":
    main()
