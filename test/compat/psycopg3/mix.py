#!/usr/bin/env python3
"""psycopg 3 client mix for pg-kinetic's compatibility tests (test/compat).

Same contract as ../psycopg2/mix.py: libpq's PG* environment, COMPAT_TABLE
with seed rows 1..COMPAT_SEED (('seed-i', 10*i)), own writes at ids >= 1000,
one JSON line per statement with the server's inet_server_port(), a final
{"op":"done"} line.

psycopg 3 sends parameterized queries with the extended protocol. A query
executed prepare_threshold (default 5) times becomes a named server-side
prepared statement (_pg3_N); prepare=True prepares it at once. Both paths
are exercised, on autocommit statements and inside transactions.
"""
import json
import os
import sys

import psycopg

CLIENT = "psycopg3"
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


def describe(e):
    return "%s: %s" % (type(e).__name__, str(e).strip())


class Mix:
    def __init__(self, conn):
        self.conn = conn

    def run(self, op, sql, params=None, tx=None, check=None, prepare=None):
        """Runs one statement whose last column is inet_server_port()."""
        rec = {"op": op}
        if tx:
            rec["tx"] = tx
        try:
            row = self.conn.execute(sql, params, prepare=prepare).fetchone()
            if row is None:
                raise RuntimeError("no row from: " + sql)
            rec["port"] = int(row[-1])
            err = check(row) if check else None
            rec["ok"] = err is None
            if err:
                rec["error"] = err
        except Exception as e:  # noqa: BLE001 - every failure is reported
            rec["ok"] = False
            rec["error"] = describe(e)
        emit(rec)

    def control(self, sql, tx=None):
        rec = {"op": "control", "sql": sql}
        if tx:
            rec["tx"] = tx
        try:
            self.conn.execute(sql)
            rec["ok"] = True
        except Exception as e:  # noqa: BLE001
            rec["ok"] = False
            rec["error"] = describe(e)
        emit(rec)

    def end_tx(self, tx):
        rec = {"op": "control", "sql": "COMMIT", "tx": tx}
        try:
            self.conn.commit()
            rec["ok"] = True
        except Exception as e:  # noqa: BLE001
            rec["ok"] = False
            rec["error"] = describe(e)
            self.conn.rollback()
        emit(rec)


def main():
    conn = psycopg.connect("", autocommit=True)  # everything from PG* variables
    m = Mix(conn)
    t = TABLE
    by_id = "SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = %s"
    count_seed = "SELECT count(*), inet_server_port() FROM " + t + " WHERE id <= %s"
    insert = "INSERT INTO " + t + " (id, name, qty) VALUES (%s, %s, 1) RETURNING id, inet_server_port()"
    update = "UPDATE " + t + " SET qty = qty + 1 WHERE id = %s RETURNING qty, inet_server_port()"

    # Phase A: reads before this session wrote anything.
    m.control("SET statement_timeout = '31s'")
    for i in range(1, 9):
        m.run("read", by_id, (i,), check=seed_check(i), prepare=False)
    for _ in range(2):
        m.run("read", count_seed, (SEED,), check=equals(SEED), prepare=False)
    # Default threshold: unnamed for the first executions, then _pg3_N.
    for k in range(12):
        i = k % SEED + 1
        m.run("prepared_read", by_id, (i,), check=seed_check(i))
    # Read-only transaction, psycopg 3's way: read_only on a non-autocommit
    # connection makes it send BEGIN READ ONLY.
    conn.autocommit = False
    conn.read_only = True
    for i in (3, 4, 5):
        m.run("tx_read", by_id, (i,), tx="ro1", check=seed_check(i))
    m.run("tx_read", count_seed, (SEED,), tx="ro1", check=equals(SEED), prepare=True)
    m.end_tx("ro1")
    conn.read_only = None
    conn.autocommit = True
    m.control("PREPARE compat_by_id(int) AS SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = $1")
    for i in range(1, 6):
        m.run("sql_prepared_read", "EXECUTE compat_by_id(%s)" % i, check=seed_check(i), prepare=False)
    m.control("DEALLOCATE compat_by_id")
    m.run("session_read", "SELECT current_setting('statement_timeout'), inet_server_port()", check=equals("31s"))

    # Phase B: writes, and reads after them.
    for i in range(1001, 1006):
        m.run("write", insert, (i, "own-%d" % i), check=equals(i), prepare=False)
    for i in range(1001, 1004):
        m.run("write", update, (i,), check=equals(2), prepare=False)
    m.run("write", insert, (1006, "own-1006"), check=equals(1006), prepare=False)
    m.run("read_after_write", by_id, (7,), check=seed_check(7))
    # Read-write transaction with the transaction() block (BEGIN ... COMMIT).
    try:
        with conn.transaction():
            m.run("tx_write", insert, (1010, "own-1010"), tx="rw1", check=equals(1010), prepare=False)
            m.run("tx_write", "SELECT qty, inet_server_port() FROM " + t + " WHERE id = %s", (1010,), tx="rw1", check=equals(1), prepare=False)
            m.run("tx_write", update, (1010,), tx="rw1", check=equals(2), prepare=True)
        emit({"op": "control", "sql": "COMMIT", "tx": "rw1", "ok": True})
    except Exception as e:  # noqa: BLE001
        emit({"op": "control", "sql": "COMMIT", "tx": "rw1", "ok": False, "error": describe(e)})
    for i in range(1100, 1110):
        m.run("prepared_write", insert, (i, "own-%d" % i), check=equals(i), prepare=True)
    for i in (1, 2, 3):
        m.run("read_after_write", by_id, (i,), check=seed_check(i))
    conn.autocommit = False
    conn.read_only = True
    m.run("tx_read", by_id, (9,), tx="ro2", check=seed_check(9))
    m.run("tx_read", count_seed, (SEED,), tx="ro2", check=equals(SEED), prepare=True)
    m.end_tx("ro2")
    conn.read_only = None
    m.run("tx_write", "SELECT count(*), inet_server_port() FROM " + t + " WHERE id >= 1000", tx="rw2", check=equals(17))
    m.end_tx("rw2")
    conn.autocommit = True
    conn.close()
    emit({"op": "done", "ok": True})


if __name__ == "__main__":
    main()
