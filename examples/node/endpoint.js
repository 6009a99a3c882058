'use strict';
// The job endpoint of the example: POST /jobs/send-invoice with the payload
// producer.js enqueues, {"order": N}, marks order N invoiced, once. Plain
// node:http and node:crypto, with the database driver of APP_DB_URL.
//
//   APP_DB_URL='mysql://root@127.0.0.1:3306/test' \
//   JOBPAGES_SIGNING_KEY='the nodes' SLOTPOLLER_JOBS_SIGNING_KEY' \
//     node endpoint.js [HOST:]PORT
//
// APP_DB_URL and APP_DB_SCHEMA are the database as producer.js takes it;
// it listens on 127.0.0.1:8080 unless told. JOBPAGES_SIGNING_KEY is the key
// the nodes sign with; JOBPAGES_SIGNING_KEY_PREVIOUS the old one during a
// key rotation (docs/signed-calls.md, "Rotate without failed calls"; not
// SLOTPOLLER_..., which a node on the same machine would take for its own
// settings).
//
// In order, each step answering as docs/signed-calls.md and
// docs/endpoints.md ("The answer") say:
//   1. the v2 signature, within 5 minutes    401, the job fails
//   2. a signature already accepted           409, the job fails
//   3. X-Slotpoller-Deadline too near/passed  503, retried on a later attempt
//   4. the payload names no order             400; an unknown order 422
//   5. Idempotency-Key already done           200, nothing done again
//   6. the order invoiced and the key recorded in one transaction: 200
// A database that cannot be reached answers 503, any other failure 500:
// the node retries both.

const http = require('node:http');
const { connect, Db } = require('./src/db');
const { MAX_AGE_SECONDS, Refusal, verify, requireTime } = require('./src/signature');

/** The body cap, checked before anything else is read (check 4). */
const MAX_BODY_BYTES = 1 << 20;

/** How long the work may take at most: a call whose deadline is nearer is not started. */
const WORK_MS = 1000;

/** Idle connections kept for the next calls (one call uses one at a time). */
const IDLE_CONNECTIONS = 4;

const keys = [process.env.JOBPAGES_SIGNING_KEY, process.env.JOBPAGES_SIGNING_KEY_PREVIOUS]
  .filter((k) => k)
  .map((k) => Buffer.from(k, 'utf8'));

// A connection per call in flight, kept for the next one: opening one
// costs a round trip or several (on a T-SQL server, most of a second).
const idle = [];

async function acquire() {
  return idle.pop() ?? connect(process.env.APP_DB_URL);
}

function release(db, healthy) {
  if (healthy && idle.length < IDLE_CONNECTIONS) {
    idle.push(db);
    return;
  }
  db.close().catch(() => {});
}

class Unreachable extends Error {}

async function handle(req, res) {
  const { method, url: target } = req; // req.url is the raw request target, as sent
  const path = target.split('?', 1)[0];
  const headers = req.headersDistinct;
  try {
    const body = await readBody(req);
    const { signature, timestamp } = verify(keys, method, target, headers, body, Math.floor(Date.now() / 1000));
    if (path !== '/jobs/send-invoice') {
      throw new Refusal(404, { error: 'no such job' });
    }
    if (method !== 'POST') {
      throw new Refusal(405, { error: 'POST only' });
    }

    let db;
    try {
      db = await acquire();
    } catch (err) {
      // Transient: the node retries a 5xx (docs/endpoints.md, "The answer").
      throw new Unreachable(`connecting to APP_DB_URL: ${err.message}`);
    }
    let healthy = false;
    try {
      const answer = await sendInvoice(db, { method, target, headers, body, signature, timestamp });
      healthy = true;
      return answer;
    } catch (err) {
      healthy = err instanceof Refusal;
      throw err;
    } finally {
      release(db, healthy);
    }
  } catch (err) {
    if (err instanceof Refusal) {
      console.error(`refused ${method} ${target}: ${err.status} ${err.message}`);
      return [err.status, err.body];
    }
    if (err instanceof Unreachable) {
      console.error(`failed ${method} ${target}: ${err.message}`);
      return [503, { error: 'database unavailable' }];
    }
    // Anything else (a deadlock, a lost connection) may pass: 500, retried.
    console.error(`failed ${method} ${target}: ${err.stack ?? err}`);
    return [500, { error: 'internal error' }];
  }
}

async function sendInvoice(db, { method, target, headers, body, signature, timestamp }) {
  // Check 6 of docs/signed-calls.md: 409 for a signature seen before.
  await firstUse(db, signature, timestamp);

  // Do not start what cannot end before the node gives up on the call.
  const deadline = headers['x-slotpoller-deadline']?.[0];
  requireTime(deadline, Date.now(), WORK_MS, 'before the work');

  // A bad request that no retry can fix: a 4xx other than 408 and 429
  // fails the job at once (docs/endpoints.md, "The answer").
  let order;
  try {
    order = JSON.parse(body.toString('utf8'))?.order;
  } catch {
    order = undefined;
  }
  if (!Number.isSafeInteger(order) || order <= 0) {
    throw new Refusal(400, { error: 'the payload must be a JSON object with an "order": a positive integer' });
  }
  const key = (headers['idempotency-key']?.[0] ?? '').trim();
  if (key === '' || key.length > 255) {
    throw new Refusal(400, { error: 'Idempotency-Key missing or longer than 255 characters' });
  }
  const job = headers['x-slotpoller-job']?.[0] ?? null;

  // The work and its Idempotency-Key in one transaction: either both are
  // there or neither. A second call with the key waits for the first's
  // transaction on the key's row, then finds it (docs/endpoints.md:
  // "effectively once with the key").
  await db.begin();
  try {
    try {
      await db.query(`INSERT INTO ${db.table('example_done')} (idem_key, job_id) VALUES (?, ?)`, [key, job]);
    } catch (err) {
      if (!Db.duplicate(err)) {
        throw err;
      }
      await db.rollback();
      console.error(`${method} ${target}: Idempotency-Key ${key} already done: nothing to do`);
      return [200, { outcome: 'already done', order }];
    }
    const { rowCount } = await db.query(`UPDATE ${db.table('example_orders')} SET invoices = invoices + 1 WHERE id = ?`, [order]);
    if (rowCount !== 1) {
      throw new Refusal(422, { error: `no order ${order}` });
    }
    // Work that ran late is not committed: past the deadline another
    // node may already be calling the job again.
    requireTime(deadline, Date.now(), 0, 'before the commit');
    await db.commit();
  } catch (err) {
    // A failed rollback must not hide why: the connection is dropped anyway.
    await db.rollback().catch(() => {});
    throw err;
  }
  console.error(`${method} ${target}: order ${order} invoiced (job ${job ?? '-'}, Idempotency-Key ${key})`);
  return [200, { outcome: 'invoiced', order }];
}

/**
 * Records an accepted signature until its timestamp leaves the window; a
 * 409 Refusal when it was already there: a replay (docs/signed-calls.md,
 * check 6 and "Replays"). Rows, not memory: every instance of the
 * application behind a load balancer sees them.
 */
async function firstUse(db, signature, timestamp) {
  const table = db.table('example_seen_signatures');
  // Signatures whose timestamp left the window are refused as stale
  // anyway: forget them.
  await db.query(`DELETE FROM ${table} WHERE expires_at < ?`, [Math.floor(Date.now() / 1000)]);
  try {
    await db.query(`INSERT INTO ${table} (signature, expires_at) VALUES (?, ?)`, [signature, timestamp + MAX_AGE_SECONDS]);
  } catch (err) {
    if (Db.duplicate(err)) {
      throw new Refusal(409, { error: 'already received' }, 'replay of a signature already accepted');
    }
    throw err;
  }
}

/** The raw body, at most MAX_BODY_BYTES: a 413 Refusal past that (check 4). */
async function readBody(req) {
  const tooLarge = () => new Refusal(413, { error: 'request body too large' });
  if (Number(req.headers['content-length'] ?? 0) > MAX_BODY_BYTES) {
    throw tooLarge();
  }
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) {
      throw tooLarge();
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

async function main() {
  if (keys.length === 0) {
    // Unsigned calls would be let through: refuse to start instead.
    console.error('endpoint: JOBPAGES_SIGNING_KEY is not set: give it the nodes\' SLOTPOLLER_JOBS_SIGNING_KEY');
    process.exit(64);
  }
  if (!process.env.APP_DB_URL) {
    console.error('endpoint: APP_DB_URL is not set: give the URL of the farm\'s database, e.g. mysql://root@127.0.0.1:3306/test');
    process.exit(64);
  }
  const listen = process.argv[2] ?? '127.0.0.1:8080';
  const at = listen.lastIndexOf(':');
  const [host, port] = at < 0 ? ['127.0.0.1', listen] : [listen.slice(0, at), listen.slice(at + 1)];

  // The example's tables, once, before the first call.
  const db = await connect(process.env.APP_DB_URL);
  await db.createTables();
  release(db, true);

  const server = http.createServer((req, res) => {
    handle(req, res).then(([status, answer]) => {
      // A body left unread (too large) would be the next request's start.
      res.writeHead(status, { 'Content-Type': 'application/json', ...(status === 413 ? { Connection: 'close' } : {}) });
      res.end(`${JSON.stringify(answer)}\n`);
    });
  });
  server.listen(Number(port), host, () => console.log(`endpoint: listening on http://${host}:${port}`));
  process.on('SIGTERM', () => server.close(() => Promise.all(idle.map((c) => c.close())).then(() => process.exit(0))));
}

main().catch((err) => {
  console.error(`endpoint: ${err.stack ?? err}`);
  process.exit(1);
});
