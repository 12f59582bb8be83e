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
    feature = os.environ.get("COMPAT_FEATURE", "")
    if feature:
        FEATURES[feature](conn)
        conn.close()
        emit({"op": "done", "ok": True})
        return
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


# Features of ../features_test.go (COMPAT_FEATURE), each on connections of
# its own. psycopg2 has no unnamed-statement path (it sends only simple
# queries), so "unnamed" is not among them; kinetic_ext runs through its
# only path, the simple protocol.

def describe(e):
    return "%s: %s" % (type(e).__name__, str(e).strip())


def seed_run(rows, first):
    """Checks that rows are seed rows first, first+1, ... (id, name, qty, port)."""
    for k, row in enumerate(rows):
        i = first + k
        if tuple(row[:3]) != (i, "seed-%d" % i, 10 * i):
            return "row %d = %r, want seed row %d" % (k, row[:3], i)
    return None


def emit_result(op, tx=None, port=None, value=None, error=None):
    rec = {"op": op, "ok": error is None}
    if tx:
        rec["tx"] = tx
    if port:
        rec["port"] = port
    if value:
        rec["value"] = value
    if error:
        rec["error"] = error
    emit(rec)


def fetch_steps(op, tx, fetch):
    """Calls fetch() (7 rows at a time) until it returns no row, checking
    the seed rows come in order; one line per non-empty fetch, then op_end."""
    nxt = 1
    for _ in range(SEED // 7 + 2):
        try:
            rows = fetch()
        except Exception as e:  # noqa: BLE001
            emit_result(op + "_fetch", tx, error=describe(e))
            return False
        if not rows:
            emit_result(op + "_end", tx, error=None if nxt == SEED + 1 else "ended before row %d" % nxt)
            return True
        want = min(7, SEED - nxt + 1)
        err = "%d rows at row %d, want %d" % (len(rows), nxt, want) if len(rows) != want else seed_run(rows, nxt)
        emit_result(op + "_fetch", tx, port=int(rows[0][-1]), error=err)
        if err:
            return False
        nxt += len(rows)
    return False


def cursor_query():
    return "SELECT id, name, qty, inet_server_port() FROM %s WHERE id <= %d ORDER BY id" % (TABLE, SEED)


def feature_cursor(conn):
    m = Mix(conn)
    conn.set_session(readonly=True, autocommit=False)  # BEGIN READ ONLY
    m.control("DECLARE compat_cur CURSOR FOR " + cursor_query(), tx="cur")

    def fetch():
        with conn.cursor() as cur:
            cur.execute("FETCH 7 FROM compat_cur")
            return cur.fetchall()
    fetch_steps("cursor", "cur", fetch)
    m.control("CLOSE compat_cur", tx="cur")
    m.end_tx("cur")


def feature_portal(conn):
    """A named (server-side) cursor: DECLARE and FETCH FORWARD itersize."""
    m = Mix(conn)
    conn.set_session(readonly=True, autocommit=False)
    try:
        cur = conn.cursor(name="compat_portal")
        cur.itersize = 7
        cur.execute("SELECT id, name, qty, inet_server_port() FROM " + TABLE + " WHERE id <= %s ORDER BY id", (SEED,))
        fetch_steps("portal", "portal", lambda: cur.fetchmany(7))
        cur.close()
    except Exception as e:  # noqa: BLE001
        emit_result("portal_fetch", "portal", error=describe(e))
    m.end_tx("portal")


def feature_listen_notify(conn):
    import select
    import time
    channel = "ch_" + TABLE
    listener = Mix(conn)
    listener.control("LISTEN " + channel)
    listener.run("listen_port", "SELECT 'listening', inet_server_port()")
    nconn = psycopg2.connect("")
    nconn.autocommit = True
    notifier = Mix(nconn)
    notifier.control("NOTIFY " + channel + ", 'payload-1'")
    notifier.run("notify", "SELECT 'sent', inet_server_port() FROM (SELECT pg_notify(%s, %s)) AS n", (channel, "payload-2"))
    nconn.close()
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        if select.select([conn], [], [], max(0, deadline - time.monotonic())) == ([], [], []):
            continue
        conn.poll()
        while conn.notifies:
            got.append(conn.notifies.pop(0))
    for k, want in enumerate(["payload-1", "payload-2"]):
        if k >= len(got):
            emit_result("notify_received", error="no notification %s within 10 s" % want)
            continue
        n = got[k]
        err = None if (n.channel, n.payload) == (channel, want) else "notification %r on %r, want %r on %r" % (n.payload, n.channel, want, channel)
        emit_result("notify_received", value=n.payload, error=err)
    listener.control("UNLISTEN *")


def statement(op, conn, sql, want_code=None):
    """Runs sql for its effect; with want_code it must fail with that SQLSTATE."""
    err = None
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
        if want_code:
            err = "succeeded, want SQLSTATE " + want_code
    except psycopg2.Error as e:
        if e.pgcode != want_code:
            err = describe(e) + " (SQLSTATE %s)" % e.pgcode
    emit_result(op, error=err)


def show(conn, name):
    with conn.cursor() as cur:
        cur.execute("SHOW " + name)
        return cur.fetchone()[0]


def feature_kinetic_ext(conn):
    import re
    m = Mix(conn)
    m.run("kinetic_write", "INSERT INTO " + TABLE + " (id, name, qty) VALUES (%s, %s, 1) RETURNING id, inet_server_port()", (2000, "own-2000"), check=equals(2000))
    token, err = "", None
    try:
        token = show(conn, "pg_kinetic.write_lsn")
        status = conn.get_parameter_status("pg_kinetic.write_lsn")
        if not re.match(r"^[0-9]+:[0-9A-F]+/[0-9A-F]+$", token):
            err = "pg_kinetic.write_lsn = %r, want TIMELINE:LSN" % token
        elif status is not None and status != token:
            err = "SHOW says %r, ParameterStatus %r" % (token, status)
    except Exception as e:  # noqa: BLE001
        err = describe(e)
    emit_result("kinetic_show_write_lsn", value=token, error=err)
    statement("kinetic_set_min_lsn", conn, "SET pg_kinetic.min_lsn = '%s'" % token)
    by_id = "SELECT name, qty, inet_server_port() FROM " + TABLE + " WHERE id = %s"
    m.run("kinetic_read", by_id, (5,), check=seed_check(5))
    statement("kinetic_set_invalid", conn, "SET pg_kinetic.min_lsn = 'not-a-token'", want_code="22023")
    m.run("kinetic_read", by_id, (6,), check=seed_check(6))
    route, err = "", None
    try:
        route = show(conn, "pg_kinetic.last_route")
        if not route.startswith("target=") or " reason=" not in route:
            err = "pg_kinetic.last_route = %r, want target=... reason=..." % route
    except Exception as e:  # noqa: BLE001
        err = describe(e)
    emit_result("kinetic_show_last_route", value=route, error=err)


FEATURES = {
    "cursor": feature_cursor,
    "portal": feature_portal,
    "listen_notify": feature_listen_notify,
    "kinetic_ext": feature_kinetic_ext,
}


if __name__ == "__main__":
    main()
