'use strict';
// Enqueue slotpoller jobs from Node.js through the database entry point,
// inside the application's own transaction: a job enqueued in a
// transaction that rolls back never exists; one whose transaction commits
// runs once (at least once if a node dies mid-call).
//
// The client's driver chooses the call (docs/enqueue.md, "From any
// language: the database entry points"):
//
//   pg (Client, or a Pool's client)   SELECT slotpoller_enqueue_v1(endpoint => $1, ...)
//   mysql2 (a connection, promise     CALL slotpoller_enqueue_v1(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
//     or callback API)
//   tedious (Connection)              EXEC [schema].[enqueue_v1] @endpoint = @endpoint, ...
//
// The contract (parameters, defaults, checks, errors) is docs/enqueue.md's
// "The v1 contract". This file needs none of the three drivers itself.

/**
 * The entry point refused the job: bad input (field names the argument at
 * fault, the message is the database's "field: problem"), or a unique key
 * another job holds (field "unique_key", existingId that job's id when the
 * database said it). cause is the driver's error.
 */
class EnqueueError extends Error {
  constructor(message, { field, existingId = null, cause }) {
    super(message, { cause });
    this.name = 'EnqueueError';
    this.field = field;
    this.existingId = existingId;
  }
}

// The arguments in the v1 contract's order, the order MySQL's procedure
// takes them in (it has no named arguments): option name, parameter name.
const ARGUMENTS = [
  ['endpoint', 'endpoint'],
  ['payload', 'payload'],
  ['method', 'method'],
  ['delayMs', 'delay_ms'],
  ['runAt', 'run_at'],
  ['maxAttempts', 'max_attempts'],
  ['timeoutMs', 'timeout_ms'],
  ['uniqueKey', 'unique_key'],
  ['idempotencyKey', 'idempotency_key'],
  ['queue', 'queue'],
];

/**
 * Enqueues one job on the client's current transaction (or on its own when
 * none is open) and resolves to the new job's id.
 *
 * Every option may be left out for the entry point's default: POST, due
 * now on the database clock, 33 attempts, the node's call timeout, no
 * unique key, a generated idempotency key, the queue the nodes route the
 * endpoint to. The payload is sent as the call's body byte for byte: a
 * string goes as its UTF-8 bytes, a Buffer as it is.
 *
 * Bad input and a taken unique key reject with an EnqueueError; any other
 * error (a lost connection, a deadlock) is the driver's own. The
 * transaction is then the caller's to roll back.
 *
 * @param {object} client a pg Client, a mysql2 connection or a tedious Connection
 * @param {string} endpoint the job's path on the nodes' base URL, e.g. /jobs/send-invoice
 * @param {object} [options]
 * @param {string|Buffer} [options.payload]
 * @param {string} [options.method] GET, POST, PUT, PATCH or DELETE
 * @param {number} [options.delayMs] due this long from now (database clock)
 * @param {Date} [options.runAt] due at this time; not with delayMs
 * @param {number} [options.maxAttempts] 1 to 1000
 * @param {number} [options.timeoutMs] the call's timeout, 0 for the node's
 * @param {string} [options.uniqueKey] at most one job with it at any time
 * @param {string} [options.idempotencyKey] the Idempotency-Key of every call
 * @param {string} [options.queue] the job's queue
 * @param {string} [options.schema] SQL Server: the schema of the farm's tables (database.schema), slotpoller unless given
 * @returns {Promise<number>}
 */
async function enqueue(client, endpoint, options = {}) {
  const known = new Set([...ARGUMENTS.map(([name]) => name), 'schema']);
  const unknown = Object.keys(options).filter((name) => !known.has(name));
  if (unknown.length > 0) {
    // A misspelt option would otherwise be its default, silently.
    throw new TypeError(`enqueue: unknown option ${unknown.join(', ')}`);
  }
  const values = { ...options, endpoint };
  if (typeof values.payload === 'string') {
    values.payload = Buffer.from(values.payload, 'utf8');
  }
  let id;
  try {
    id = await driverOf(client)(client, values);
  } catch (err) {
    throw refusal(err) ?? err;
  }
  if (id === undefined || id === null) {
    throw new Error('slotpoller_enqueue_v1 returned no job id');
  }
  // A bigint arrives as a string (pg) or a BigInt/number: ids fit a
  // double exactly up to 2^53, far beyond any farm's count.
  const n = Number(id);
  if (!Number.isSafeInteger(n)) {
    throw new RangeError(`job id ${id} is not a safe integer`);
  }
  return n;
}

// Which call a client takes, by what it is: the drivers share no base class.
function driverOf(client) {
  if (typeof client?.getConnection === 'function' || typeof client?.connect === 'function' && client.totalCount !== undefined) {
    // A pool hands each statement to any of its connections: the job would
    // not be in the caller's transaction.
    throw new TypeError('enqueue needs the connection the transaction is on, not a pool: pass the pool\'s client');
  }
  if (typeof client?.execSql === 'function' && typeof client.beginTransaction === 'function') {
    return viaTedious;
  }
  if (typeof client?.execute === 'function' && client.config !== undefined) {
    // mysql2: a callback connection (its .promise() is the same connection)
    // or a promise one.
    return (c, v) => viaMysql(typeof c.promise === 'function' ? c.promise() : c, v);
  }
  if (typeof client?.execute === 'function' && client.connection?.config !== undefined) {
    return viaMysql;
  }
  if (typeof client?.query === 'function' && client.connectionParameters !== undefined) {
    return viaPg;
  }
  throw new TypeError('enqueue needs a pg Client, a mysql2 connection or a tedious Connection');
}

async function viaPg(client, values) {
  // By name and only what is given, so that a parameter v1 adds at the end
  // later changes nothing here, and the rest take their defaults.
  const given = ARGUMENTS.filter(([name]) => values[name] !== undefined && values[name] !== null);
  const args = given.map(([, param], i) => `${param} => $${i + 1}`);
  const res = await client.query(`SELECT slotpoller_enqueue_v1(${args.join(', ')}) AS id`,
    given.map(([name]) => values[name]));
  return res.rows[0]?.id;
}

async function viaMysql(conn, values) {
  // Every argument by position, NULL for its default; execute() prepares it
  // on the server, so the payload travels as bytes, not as text in the
  // connection's character set.
  const args = ARGUMENTS.map(([name]) => {
    const v = values[name] ?? null;
    // The procedure takes a DATETIME in UTC; mysql2 would write a Date in
    // the connection's time zone.
    return v instanceof Date ? v.toISOString().replace('T', ' ').replace('Z', '') : v;
  });
  const [results] = await conn.execute('CALL slotpoller_enqueue_v1(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)', args);
  // A CALL answers with its result sets, then a status: the id's row first.
  return results[0]?.[0]?.id;
}

function viaTedious(connection, values) {
  const { Request, TYPES } = require('tedious');
  const types = {
    endpoint: [TYPES.NVarChar], payload: [TYPES.VarBinary], method: [TYPES.NVarChar],
    delayMs: [TYPES.BigInt], runAt: [TYPES.DateTime2, { scale: 7 }], maxAttempts: [TYPES.Int],
    timeoutMs: [TYPES.BigInt], uniqueKey: [TYPES.NVarChar], idempotencyKey: [TYPES.NVarChar], queue: [TYPES.NVarChar],
  };
  const schema = `[${(values.schema ?? 'slotpoller').replace(/]/g, ']]')}]`;
  // Only what is given, by name: the procedure's own defaults for the
  // rest. Text and bytes as nvarchar(max) and varbinary(max) whatever
  // their length, the procedure's types, so the server keeps one plan.
  const given = ARGUMENTS.filter(([name]) => values[name] !== undefined && values[name] !== null);
  const sql = `EXEC ${schema}.[enqueue_v1] ${given.map(([, param]) => `@${param} = @${param}`).join(', ')}`;
  return new Promise((resolve, reject) => {
    let id;
    const request = new Request(sql, (err) => (err ? reject(err) : resolve(id)));
    for (const [name, param] of given) {
      const [type, options = {}] = types[name];
      const length = type === TYPES.NVarChar || type === TYPES.VarBinary ? { length: Infinity } : {};
      request.addParameter(param, type, values[name], { ...options, ...length });
    }
    // The procedure answers with a one-row result, id.
    request.on('row', (columns) => {
      id = columns.find((c) => c.metadata.colName === 'id')?.value;
    });
    connection.execSql(request);
  });
}

// The entry point's refusal as an EnqueueError, or null for any other
// error: bad input is PostgreSQL and MySQL SQLSTATE 22023 and SQL Server
// error 51000; a taken unique key PostgreSQL 23505 (detail existing_id=N),
// MySQL 1062 and SQL Server 51001 (message ending "(id N)"), or, when two
// enqueue one key at once, the unique index's own error (2627 on Babelfish).
function refusal(err) {
  const field = /^([a-z_]+): /.exec(err?.message ?? '')?.[1];
  const invalid = err?.code === '22023' || err?.sqlState === '22023' || err?.number === 51000;
  if (invalid) {
    return new EnqueueError(err.message, { field, cause: err });
  }
  const duplicate = err?.code === '23505' || err?.errno === 1062 || [51001, 2627, 2601].includes(err?.number);
  if (duplicate) {
    const existing = /existing_id=(\d+)/.exec(err.detail ?? '')?.[1] ?? /\(id (\d+)\)\s*$/.exec(err.message)?.[1];
    return new EnqueueError(err.message, { field: 'unique_key', existingId: existing === undefined ? null : Number(existing), cause: err });
  }
  return null;
}

module.exports = { enqueue, EnqueueError };
