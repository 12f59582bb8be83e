#!/usr/bin/env node
// node-postgres client mix for pg-kinetic's compatibility tests (test/compat).
//
// Same contract as ../psycopg2/mix.py: the PG* environment (node-postgres
// reads PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE itself), COMPAT_TABLE
// with seed rows 1..COMPAT_SEED (('seed-i', 10*i)), own writes at ids >= 1000,
// one JSON line per statement with the server's inet_server_port(), a final
// {"op":"done"} line.
//
// node-postgres sends a query with values through the extended protocol and
// the unnamed statement; a named query ({name, text, values}) is parsed once
// per connection under that name and then only bound and executed.
'use strict';

const { Client } = require('pg');

const CLIENT = 'node-postgres';
const TABLE = process.env.COMPAT_TABLE;
const SEED = parseInt(process.env.COMPAT_SEED || '50', 10);

function emit(rec) {
  process.stdout.write(JSON.stringify(Object.assign({ client: CLIENT }, rec)) + '\n');
}

const seedCheck = (i) => (row) => {
  const got = [row[0], Number(row[1])];
  return got[0] === `seed-${i}` && got[1] === 10 * i ? null : `seed row ${i} = ${JSON.stringify(got)}, want ["seed-${i}",${10 * i}]`;
};
const equals = (want) => (row) => (String(row[0]) === String(want) ? null : `got ${JSON.stringify(row[0])}, want ${JSON.stringify(want)}`);

async function main() {
  if (!TABLE) throw new Error('COMPAT_TABLE is not set');
  const conn = new Client();
  await conn.connect();
  const t = TABLE;

  // run executes one statement whose last column is inet_server_port().
  async function run(op, query, { tx, check } = {}) {
    const rec = { op };
    if (tx) rec.tx = tx;
    try {
      const res = await conn.query(Object.assign({ rowMode: 'array' }, query));
      if (res.rows.length === 0) throw new Error(`no row from: ${query.text}`);
      const row = res.rows[0];
      rec.port = Number(row[row.length - 1]);
      const err = check ? check(row) : null;
      rec.ok = err === null;
      if (err) rec.error = err;
    } catch (e) {
      rec.ok = false;
      rec.error = `${e.code || e.name}: ${e.message}`;
    }
    emit(rec);
  }
  async function control(sql, tx) {
    const rec = { op: 'control', sql };
    if (tx) rec.tx = tx;
    try {
      await conn.query(sql);
      rec.ok = true;
    } catch (e) {
      rec.ok = false;
      rec.error = `${e.code || e.name}: ${e.message}`;
      if (sql === 'COMMIT') await conn.query('ROLLBACK').catch(() => {});
    }
    emit(rec);
  }

  const byId = (i) => ({ text: `SELECT name, qty, inet_server_port() FROM ${t} WHERE id = $1`, values: [i] });
  const byIdNamed = (i) => Object.assign({ name: 'by_id' }, byId(i));
  const countSeed = { text: `SELECT count(*), inet_server_port() FROM ${t} WHERE id <= $1`, values: [SEED] };
  const insert = (i) => ({ text: `INSERT INTO ${t} (id, name, qty) VALUES ($1, $2, 1) RETURNING id, inet_server_port()`, values: [i, `own-${i}`] });
  const update = (i) => ({ text: `UPDATE ${t} SET qty = qty + 1 WHERE id = $1 RETURNING qty, inet_server_port()`, values: [i] });

  // Phase A: reads before this session wrote anything.
  await control("SET statement_timeout = '31s'");
  for (let i = 1; i <= 8; i++) await run('read', byId(i), { check: seedCheck(i) });
  // Simple protocol (no values).
  await run('read', { text: `SELECT count(*), inet_server_port() FROM ${t} WHERE id <= ${SEED}` }, { check: equals(SEED) });
  await run('read', countSeed, { check: equals(SEED) });
  for (let k = 0; k < 12; k++) {
    const i = (k % SEED) + 1;
    await run('prepared_read', byIdNamed(i), { check: seedCheck(i) });
  }
  await control('BEGIN READ ONLY', 'ro1');
  for (const i of [3, 4, 5]) await run('tx_read', byIdNamed(i), { tx: 'ro1', check: seedCheck(i) });
  await run('tx_read', countSeed, { tx: 'ro1', check: equals(SEED) });
  await control('COMMIT', 'ro1');
  await control(`PREPARE compat_by_id(int) AS SELECT name, qty, inet_server_port() FROM ${t} WHERE id = $1`);
  for (let i = 1; i <= 5; i++) await run('sql_prepared_read', { text: `EXECUTE compat_by_id(${i})` }, { check: seedCheck(i) });
  await control('DEALLOCATE compat_by_id');
  await run('session_read', { text: "SELECT current_setting('statement_timeout'), inet_server_port()" }, { check: equals('31s') });

  // Phase B: writes, and reads after them.
  for (let i = 1001; i <= 1005; i++) await run('write', insert(i), { check: equals(i) });
  for (let i = 1001; i <= 1003; i++) await run('write', update(i), { check: equals(2) });
  await run('write', insert(1006), { check: equals(1006) });
  await run('read_after_write', byIdNamed(7), { check: seedCheck(7) });
  await control('BEGIN', 'rw1');
  await run('tx_write', insert(1010), { tx: 'rw1', check: equals(1010) });
  await run('tx_write', { text: `SELECT qty, inet_server_port() FROM ${t} WHERE id = $1`, values: [1010] }, { tx: 'rw1', check: equals(1) });
  await run('tx_write', update(1010), { tx: 'rw1', check: equals(2) });
  await control('COMMIT', 'rw1');
  for (let i = 1100; i <= 1109; i++) await run('prepared_write', Object.assign({ name: 'ins' }, insert(i)), { check: equals(i) });
  for (const i of [1, 2, 3]) await run('read_after_write', byIdNamed(i), { check: seedCheck(i) });
  await control('BEGIN READ ONLY', 'ro2');
  await run('tx_read', byIdNamed(9), { tx: 'ro2', check: seedCheck(9) });
  await run('tx_read', countSeed, { tx: 'ro2', check: equals(SEED) });
  await control('COMMIT', 'ro2');
  await control('BEGIN', 'rw2');
  await run('tx_write', { text: `SELECT count(*), inet_server_port() FROM ${t} WHERE id >= 1000` }, { tx: 'rw2', check: equals(17) });
  await control('COMMIT', 'rw2');
  await conn.end();
  emit({ op: 'done', ok: true });
}

main().catch((e) => {
  process.stderr.write(`mix.js: ${e.stack || e}\n`);
  process.exit(1);
});
