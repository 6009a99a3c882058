'use strict';
// An application's write and its job in one transaction: it records an
// order in a table of its own and enqueues the job that sends its invoice,
// then commits both or rolls both back.
//
//   APP_DB_URL='mysql://root@127.0.0.1:3306/test' node producer.js commit|rollback [ENDPOINT]
//
// APP_DB_URL is the farm's database (postgres://, mysql:// or
// sqlserver://, see src/db.js); on SQL Server APP_DB_SCHEMA is the farm's
// schema (database.schema, slotpoller unless set). ENDPOINT is the job's
// path on the nodes' base URL, /jobs/send-invoice unless given. It prints
// one JSON line: the outcome, the order's and the job's ids, and the
// payload. A refused enqueue prints the database's error, rolls back and
// exits with status 2.

const { connect } = require('./src/db');
const { enqueue, EnqueueError } = require('./slotpoller');

function fail(status, message) {
  process.stderr.write(`producer: ${message}\n`);
  process.exit(status);
}

async function main() {
  const [outcome, endpoint = '/jobs/send-invoice', ...rest] = process.argv.slice(2);
  if (!['commit', 'rollback'].includes(outcome) || rest.length > 0) {
    fail(64, 'usage: node producer.js commit|rollback [ENDPOINT]');
  }
  const url = process.env.APP_DB_URL;
  if (!url) {
    fail(64, 'APP_DB_URL is not set: give the URL of the farm\'s database, e.g. mysql://root@127.0.0.1:3306/test');
  }

  const db = await connect(url);
  try {
    // The application's own table (invoices: how many times endpoint.js
    // sent the order's invoice). On MySQL a CREATE TABLE commits whatever
    // is open, so it comes before the transaction.
    await db.createTables();

    await db.begin();
    const item = 'book';
    let order;
    let payload;
    let job;
    try {
      order = await insertOrder(db, item);
      payload = JSON.stringify({ order, item });
      job = await enqueue(db.client, endpoint, { payload, maxAttempts: 5, schema: db.schema });
    } catch (err) {
      await db.rollback();
      if (err instanceof EnqueueError) {
        // The entry point's refusal: the database's code and "field: problem".
        const code = err.cause.number !== undefined ? `error ${err.cause.number}` : `SQLSTATE ${err.cause.sqlState ?? err.cause.code}`;
        fail(2, `order and job rolled back: the entry point refused the job (${code}): ${err.message}`);
      }
      throw err;
    }

    if (outcome === 'commit') {
      await db.commit();
    } else {
      await db.rollback();
    }
    const said = outcome === 'commit' ? 'committed' : 'rolled back';
    process.stdout.write(`${JSON.stringify({ outcome: said, order, job, payload })}\n`);
  } finally {
    await db.close();
  }
}

// The new order's id, as each database hands it back.
async function insertOrder(db, item) {
  switch (db.kind) {
    case 'postgres':
      return Number((await db.query('INSERT INTO example_orders (item) VALUES (?) RETURNING id', [item])).rows[0].id);
    case 'sqlserver':
      return Number((await db.query(`INSERT INTO ${db.table('example_orders')} (item) OUTPUT INSERTED.id VALUES (?)`, [item])).rows[0].id);
    default:
      return Number((await db.client.execute('INSERT INTO example_orders (item) VALUES (?)', [item]))[0].insertId);
  }
}

main().catch((err) => fail(1, err.stack ?? String(err)));
