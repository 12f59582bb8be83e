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
  const feature = process.env.COMPAT_FEATURE || '';
  if (feature) {
    if (!FEATURES[feature]) throw new Error(`no feature ${feature}`);
    await FEATURES[feature]();
    emit({ op: 'done', ok: true });
    return;
  }
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

// Features of ../features_test.go (COMPAT_FEATURE), each on connections of
// its own. pg-cursor is not a dependency: node-postgres's own Query with
// `rows` is the row-limited portal (Execute of `rows` rows + Flush, again on
// PortalSuspended, Sync after CommandComplete), delivered whole at the end.

const describe = (e) => `${e.code || e.name}: ${e.message}`;

function emitResult(op, { tx, port, value, error } = {}) {
  const rec = { op, ok: !error };
  if (tx) rec.tx = tx;
  if (port) rec.port = port;
  if (value) rec.value = value;
  if (error) rec.error = error;
  emit(rec);
}

// seedRun checks that rows are seed rows first, first+1, ... (id, name, qty, port).
function seedRun(rows, first) {
  for (let k = 0; k < rows.length; k++) {
    const i = first + k;
    const [id, name, qty] = rows[k];
    if (Number(id) !== i || name !== `seed-${i}` || Number(qty) !== 10 * i) {
      return `row ${k} = ${JSON.stringify(rows[k].slice(0, 3))}, want seed row ${i}`;
    }
  }
  return null;
}

// fetchSteps calls fetch() (7 rows at a time) until it returns no row.
async function fetchSteps(op, tx, fetch) {
  let next = 1;
  for (let n = 0; n < Math.floor(SEED / 7) + 2; n++) {
    let rows;
    try {
      rows = await fetch();
    } catch (e) {
      emitResult(`${op}_fetch`, { tx, error: describe(e) });
      return;
    }
    if (rows.length === 0) {
      emitResult(`${op}_end`, { tx, error: next === SEED + 1 ? null : `ended before row ${next}` });
      return;
    }
    const want = Math.min(7, SEED - next + 1);
    const error = rows.length !== want ? `${rows.length} rows at row ${next}, want ${want}` : seedRun(rows, next);
    emitResult(`${op}_fetch`, { tx, port: Number(rows[0][rows[0].length - 1]), error });
    if (error) return;
    next += rows.length;
  }
}

async function connected() {
  const c = new Client();
  await c.connect();
  return c;
}

async function control(c, sql, tx) {
  const rec = { op: 'control', sql };
  if (tx) rec.tx = tx;
  try {
    await c.query(sql);
    rec.ok = true;
  } catch (e) {
    rec.ok = false;
    rec.error = describe(e);
  }
  emit(rec);
}

// run executes one statement whose last column is inet_server_port().
async function runOn(c, op, query, { tx, check } = {}) {
  const rec = { op };
  if (tx) rec.tx = tx;
  try {
    const res = await c.query(Object.assign({ rowMode: 'array' }, query));
    if (res.rows.length === 0) throw new Error(`no row from: ${query.text}`);
    const row = res.rows[0];
    rec.port = Number(row[row.length - 1]);
    const err = check ? check(row) : null;
    rec.ok = err === null;
    if (err) rec.error = err;
  } catch (e) {
    rec.ok = false;
    rec.error = describe(e);
  }
  emit(rec);
}

const rangeQuery = () => ({
  text: `SELECT id, name, qty, inet_server_port() FROM ${TABLE} WHERE id <= $1 ORDER BY id`,
  values: [SEED],
  rowMode: 'array',
});

async function featureCursor() {
  const c = await connected();
  await control(c, 'BEGIN READ ONLY', 'cur');
  await control(c, `DECLARE compat_cur CURSOR FOR SELECT id, name, qty, inet_server_port() FROM ${TABLE} WHERE id <= ${SEED} ORDER BY id`, 'cur');
  await fetchSteps('cursor', 'cur', async () => (await c.query({ text: 'FETCH 7 FROM compat_cur', rowMode: 'array' })).rows);
  await control(c, 'CLOSE compat_cur', 'cur');
  await control(c, 'COMMIT', 'cur');
  await c.end();
}

async function featurePortal() {
  const c = await connected();
  await control(c, 'BEGIN READ ONLY', 'portal');
  let all = null;
  try {
    all = (await c.query(Object.assign({ rows: 7 }, rangeQuery()))).rows;
  } catch (e) {
    emitResult('portal_fetch', { tx: 'portal', error: describe(e) });
  }
  if (all !== null) {
    // The rows came 7 at a time on the wire; report them in the same steps.
    let k = 0;
    await fetchSteps('portal', 'portal', async () => {
      const chunk = all.slice(k, k + 7);
      k += chunk.length;
      return chunk;
    });
  }
  await control(c, 'COMMIT', 'portal');
  // The same outside a transaction: one unit of several Flush-terminated batches.
  try {
    const rows = (await c.query(Object.assign({ rows: 7 }, rangeQuery()))).rows;
    const error = rows.length !== SEED ? `${rows.length} rows, want ${SEED}` : seedRun(rows, 1);
    emitResult('portal_autocommit', { port: rows.length ? Number(rows[0][3]) : 0, error });
  } catch (e) {
    emitResult('portal_autocommit', { error: describe(e) });
  }
  await c.end();
}

async function featureListenNotify() {
  const channel = `ch_${TABLE}`;
  const listener = await connected();
  const got = [];
  let wake = null;
  listener.on('notification', (n) => {
    got.push(n);
    if (wake) wake();
  });
  await control(listener, `LISTEN ${channel}`);
  await runOn(listener, 'listen_port', { text: "SELECT 'listening', inet_server_port()" });
  const notifier = await connected();
  await control(notifier, `NOTIFY ${channel}, 'payload-1'`);
  await runOn(notifier, 'notify', { text: "SELECT 'sent', inet_server_port() FROM (SELECT pg_notify($1, $2)) AS n", values: [channel, 'payload-2'] });
  await notifier.end();
  const deadline = Date.now() + 10000;
  while (got.length < 2 && Date.now() < deadline) {
    await new Promise((resolve) => {
      wake = resolve;
      setTimeout(resolve, deadline - Date.now());
    });
  }
  ['payload-1', 'payload-2'].forEach((want, k) => {
    const n = got[k];
    if (!n) {
      emitResult('notify_received', { error: `no notification ${want} within 10 s` });
      return;
    }
    const error = n.channel === channel && n.payload === want ? null : `notification ${JSON.stringify(n.payload)} on ${n.channel}, want ${want} on ${channel}`;
    emitResult('notify_received', { value: n.payload, error });
  });
  await control(listener, 'UNLISTEN *');
  await listener.end();
}

async function featureUnnamed() {
  // A query with values and no name: Parse/Bind/Execute of the unnamed statement.
  const c = await connected();
  const byId = (i) => ({ text: `SELECT name, qty, inet_server_port() FROM ${TABLE} WHERE id = $1`, values: [i] });
  const insert = (i) => ({ text: `INSERT INTO ${TABLE} (id, name, qty) VALUES ($1, $2, 1) RETURNING id, inet_server_port()`, values: [i, `own-${i}`] });
  for (let i = 1; i <= 12; i++) await runOn(c, 'unnamed_read', byId(i), { check: seedCheck(i) });
  for (const i of [3000, 3001]) await runOn(c, 'unnamed_write', insert(i), { check: equals(i) });
  for (let k = 0; k < 6; k++) {
    if (k % 2 === 0) {
      await runOn(c, 'unnamed_read_after_write', byId(k + 1), { check: seedCheck(k + 1) });
    } else {
      const own = 3000 + (Math.floor(k / 2) % 2);
      await runOn(c, 'unnamed_read_after_write', byId(own), { check: equals(`own-${own}`) });
    }
  }
  await c.end();
}

// statement runs a named (extended-protocol) query for its effect; with
// wantCode it must fail with that SQLSTATE.
async function statement(c, op, query, wantCode) {
  let error = null;
  try {
    await c.query(query);
    if (wantCode) error = `succeeded, want SQLSTATE ${wantCode}`;
  } catch (e) {
    if (e.code !== wantCode) error = `${describe(e)} (SQLSTATE ${e.code})`;
  }
  emitResult(op, { error });
}

async function featureKineticExt() {
  // node-postgres takes the extended protocol for a query with values or a
  // name; SHOW and SET have no parameters, so they go as named queries.
  const c = await connected();
  await runOn(c, 'kinetic_write', { text: `INSERT INTO ${TABLE} (id, name, qty) VALUES ($1, $2, 1) RETURNING id, inet_server_port()`, values: [2000, 'own-2000'] }, { check: equals(2000) });
  let token = '';
  let error = null;
  try {
    token = (await c.query({ name: 'show_write_lsn', text: 'SHOW pg_kinetic.write_lsn', rowMode: 'array' })).rows[0][0];
    const simple = (await c.query({ text: 'SHOW pg_kinetic.write_lsn', rowMode: 'array' })).rows[0][0];
    if (!/^[0-9]+:[0-9A-F]+\/[0-9A-F]+$/.test(token)) error = `pg_kinetic.write_lsn = ${JSON.stringify(token)}, want TIMELINE:LSN`;
    else if (simple !== token) error = `extended SHOW says ${token}, simple SHOW ${simple}`;
  } catch (e) {
    error = describe(e);
  }
  emitResult('kinetic_show_write_lsn', { value: token, error });
  await statement(c, 'kinetic_set_min_lsn', { name: 'set_min_lsn', text: `SET pg_kinetic.min_lsn = '${token}'` });
  const byId = (i) => ({ text: `SELECT name, qty, inet_server_port() FROM ${TABLE} WHERE id = $1`, values: [i] });
  await runOn(c, 'kinetic_read', byId(5), { check: seedCheck(5) });
  await statement(c, 'kinetic_set_invalid', { name: 'set_bad_min_lsn', text: "SET pg_kinetic.min_lsn = 'not-a-token'" }, '22023');
  await runOn(c, 'kinetic_read', byId(6), { check: seedCheck(6) });
  let route = '';
  error = null;
  try {
    route = (await c.query({ name: 'show_last_route', text: 'SHOW pg_kinetic.last_route', rowMode: 'array' })).rows[0][0];
    if (!route.startsWith('target=') || !route.includes(' reason=')) error = `pg_kinetic.last_route = ${JSON.stringify(route)}, want target=... reason=...`;
  } catch (e) {
    error = describe(e);
  }
  emitResult('kinetic_show_last_route', { value: route, error });
  await c.end();
}

const FEATURES = {
  cursor: featureCursor,
  portal: featurePortal,
  listen_notify: featureListenNotify,
  unnamed: featureUnnamed,
  kinetic_ext: featureKineticExt,
};

main().catch((e) => {
  process.stderr.write(`mix.js: ${e.stack || e}\n`);
  process.exit(1);
});
