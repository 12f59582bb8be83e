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
    feature = os.environ.get("COMPAT_FEATURE", "")
    if feature:
        FEATURES[feature]()
        emit({"op": "done", "ok": True})
        return
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


# Features of ../features_test.go (COMPAT_FEATURE), each on connections of
# its own.
#
# psycopg 3 sends a statement without parameters with the simple protocol
# (PQsendQuery) unless it is prepared or asked for binary results; the
# kinetic_ext statements therefore go with prepare=True (a named
# statement) or binary=True (the unnamed statement): its two extended paths.


def seed_run(rows, first):
    """Checks that rows are seed rows first, first+1, ... (id, name, qty, port)."""
    for k, row in enumerate(rows):
        i = first + k
        if tuple(row[:3]) != (i, "seed-%d" % i, 10 * i):
            return "row %d = %r, want seed row %d" % (k, tuple(row[:3]), i)
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


def read_only_tx(conn):
    conn.autocommit = False
    conn.read_only = True  # psycopg 3 sends BEGIN READ ONLY


def feature_cursor():
    conn = psycopg.connect("", autocommit=True)
    m = Mix(conn)
    read_only_tx(conn)
    m.control("DECLARE compat_cur CURSOR FOR SELECT id, name, qty, inet_server_port() FROM %s WHERE id <= %d ORDER BY id" % (TABLE, SEED), tx="cur")
    fetch_steps("cursor", "cur", lambda: conn.execute("FETCH 7 FROM compat_cur").fetchall())
    m.control("CLOSE compat_cur", tx="cur")
    m.end_tx("cur")
    conn.close()


def feature_portal():
    """A named (server-side) cursor: DECLARE with its parameter bound, then
    FETCH FORWARD itersize."""
    conn = psycopg.connect("", autocommit=True)
    m = Mix(conn)
    read_only_tx(conn)
    try:
        with conn.cursor(name="compat_portal") as cur:
            cur.itersize = 7
            cur.execute("SELECT id, name, qty, inet_server_port() FROM " + TABLE + " WHERE id <= %s ORDER BY id", (SEED,))
            fetch_steps("portal", "portal", lambda: cur.fetchmany(7))
    except Exception as e:  # noqa: BLE001
        emit_result("portal_fetch", "portal", error=describe(e))
    m.end_tx("portal")
    conn.close()


def feature_listen_notify():
    import threading
    channel = "ch_" + TABLE
    conn = psycopg.connect("", autocommit=True)
    listener = Mix(conn)
    listener.control("LISTEN " + channel)
    listener.run("listen_port", "SELECT 'listening', inet_server_port()")
    with psycopg.connect("", autocommit=True) as nconn:
        notifier = Mix(nconn)
        notifier.control("NOTIFY " + channel + ", 'payload-1'")
        notifier.run("notify", "SELECT 'sent', inet_server_port() FROM (SELECT pg_notify(%s, %s)) AS n", (channel, "payload-2"))
    got = []

    def receive():
        for n in conn.notifies():
            got.append(n)
            if len(got) == 2:
                break
    # notifies() blocks without a timeout in psycopg 3.1: bound it with a thread.
    th = threading.Thread(target=receive, daemon=True)
    th.start()
    th.join(10)
    for k, want in enumerate(["payload-1", "payload-2"]):
        if k >= len(got):
            emit_result("notify_received", error="no notification %s within 10 s" % want)
            continue
        n = got[k]
        err = None if (n.channel, n.payload) == (channel, want) else "notification %r on %r, want %r on %r" % (n.payload, n.channel, want, channel)
        emit_result("notify_received", value=n.payload, error=err)
    if th.is_alive():
        return  # the connection is still inside notifies(); the process exits
    listener.control("UNLISTEN *")
    conn.close()


def feature_unnamed():
    """prepare_threshold=None: parameterised statements are never prepared,
    always the unnamed statement (Parse/Bind/Execute of "")."""
    conn = psycopg.connect("", autocommit=True, prepare_threshold=None)
    m = Mix(conn)
    by_id = "SELECT name, qty, inet_server_port() FROM " + TABLE + " WHERE id = %s"
    insert = "INSERT INTO " + TABLE + " (id, name, qty) VALUES (%s, %s, 1) RETURNING id, inet_server_port()"
    for i in range(1, 13):
        m.run("unnamed_read", by_id, (i,), check=seed_check(i))
    for i in (3000, 3001):
        m.run("unnamed_write", insert, (i, "own-%d" % i), check=equals(i))
    for k in range(6):
        if k % 2 == 0:
            m.run("unnamed_read_after_write", by_id, (k + 1,), check=seed_check(k + 1))
        else:
            own = 3000 + k // 2 % 2
            m.run("unnamed_read_after_write", by_id, (own,), check=equals("own-%d" % own))
    conn.close()


def statement(op, conn, sql, want_code=None, **kw):
    """Runs sql for its effect; with want_code it must fail with that SQLSTATE."""
    err = None
    try:
        conn.execute(sql, **kw)
        if want_code:
            err = "succeeded, want SQLSTATE " + want_code
    except psycopg.Error as e:
        code = e.diag.sqlstate if e.diag else None
        if code != want_code:
            err = describe(e) + " (SQLSTATE %s)" % code
    emit_result(op, error=err)


def feature_kinetic_ext():
    import re
    conn = psycopg.connect("", autocommit=True)
    m = Mix(conn)
    m.run("kinetic_write", "INSERT INTO " + TABLE + " (id, name, qty) VALUES (%s, %s, 1) RETURNING id, inet_server_port()", (2000, "own-2000"), check=equals(2000), prepare=False)
    token, err = "", None
    try:
        token = conn.execute("SHOW pg_kinetic.write_lsn", prepare=True).fetchone()[0]
        res = conn.pgconn.exec_(b"SHOW pg_kinetic.write_lsn")  # the simple protocol
        simple = res.get_value(0, 0).decode() if res.ntuples == 1 else None
        if not re.match(r"^[0-9]+:[0-9A-F]+/[0-9A-F]+$", token):
            err = "pg_kinetic.write_lsn = %r, want TIMELINE:LSN" % token
        elif simple != token:
            err = "extended SHOW says %r, simple SHOW %r" % (token, simple)
    except Exception as e:  # noqa: BLE001
        err = describe(e)
    emit_result("kinetic_show_write_lsn", value=token, error=err)
    statement("kinetic_set_min_lsn", conn, "SET pg_kinetic.min_lsn = '%s'" % token, prepare=True)
    by_id = "SELECT name, qty, inet_server_port() FROM " + TABLE + " WHERE id = %s"
    m.run("kinetic_read", by_id, (5,), check=seed_check(5))
    statement("kinetic_set_invalid", conn, "SET pg_kinetic.min_lsn = 'not-a-token'", want_code="22023", binary=True)
    m.run("kinetic_read", by_id, (6,), check=seed_check(6))
    route, err = "", None
    try:
        route = conn.execute("SHOW pg_kinetic.last_route", binary=True).fetchone()[0]
        if not route.startswith("target=") or " reason=" not in route:
            err = "pg_kinetic.last_route = %r, want target=... reason=..." % route
    except Exception as e:  # noqa: BLE001
        err = describe(e)
    emit_result("kinetic_show_last_route", value=route, error=err)
    conn.close()


FEATURES = {
    "cursor": feature_cursor,
    "portal": feature_portal,
    "listen_notify": feature_listen_notify,
    "unnamed": feature_unnamed,
    "kinetic_ext": feature_kinetic_ext,
}


if __name__ == "__main__":
    main()
