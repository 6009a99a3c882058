'use strict';
// The example's database plumbing, one shape over three drivers: a
// connection from a URL, queries with ? placeholders, a transaction, and
// the example's own tables. What a real application has its own way of
// doing; slotpoller.js is the part to copy.
//
//   postgres://user:password@host:5432/db?options=-c%20search_path%3Dfarm   pg
//   mysql://user:password@host:3306/db                                      mysql2
//   sqlserver://user:password@host:1433?database=db&encrypt=disable         tedious
//
// On SQL Server the farm's tables are in the schema database.schema
// (default slotpoller): APP_DB_SCHEMA names it, and this example keeps its
// own tables there too.

/** A database connection of any of the three kinds. */
class Db {
  constructor(kind, client, schema) {
    this.kind = kind; // 'postgres', 'mysql' or 'sqlserver'
    this.client = client; // the driver's own connection, for slotpoller.enqueue
    this.schema = schema;
  }

  /** A table of the example, as a statement names it. */
  table(name) {
    return this.kind === 'sqlserver' ? `${quoteName(this.schema)}.${quoteName(name)}` : name;
  }

  /** Runs one statement with ? placeholders; returns its rows and the rows it changed. */
  async query(sql, params = []) {
    switch (this.kind) {
      case 'postgres': {
        let i = 0;
        const res = await this.client.query(sql.replace(/\?/g, () => `$${++i}`), params);
        return { rows: res.rows, rowCount: res.rowCount ?? 0 };
      }
      case 'mysql': {
        const [res] = await this.client.execute(sql, params);
        return Array.isArray(res) ? { rows: res, rowCount: 0 } : { rows: [], rowCount: res.affectedRows };
      }
      default: {
        let i = 0;
        return tediousQuery(this.client, sql.replace(/\?/g, () => `@p${++i}`),
          params.map((value, n) => [`p${n + 1}`, tediousType(value), value, tediousOptions(value)]));
      }
    }
  }

  async begin() {
    if (this.kind === 'sqlserver') {
      return tediousCall(this.client, 'beginTransaction');
    }
    return this.query('BEGIN');
  }

  async commit() {
    if (this.kind === 'sqlserver') {
      return tediousCall(this.client, 'commitTransaction');
    }
    return this.query('COMMIT');
  }

  async rollback() {
    if (this.kind === 'sqlserver') {
      // An error that ended the transaction on the server leaves none to
      // roll back: tedious follows the server's word on it.
      return this.client.inTransaction ? tediousCall(this.client, 'rollbackTransaction') : undefined;
    }
    return this.query('ROLLBACK');
  }

  /** Whether err is a duplicate key in one of the example's tables. */
  static duplicate(err) {
    // PostgreSQL SQLSTATE 23505, MySQL/MariaDB error 1062, SQL Server 2627
    // (a primary key or unique constraint) and 2601 (a unique index).
    return err?.code === '23505' || err?.errno === 1062 || err?.number === 2627 || err?.number === 2601;
  }

  /** Creates the example's tables if missing. */
  async createTables() {
    const statements = {
      // On MySQL a CREATE TABLE commits whatever is open: these come before
      // any transaction.
      mysql: [
        'CREATE TABLE IF NOT EXISTS example_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, item VARCHAR(200) NOT NULL,'
        + ' invoices INT NOT NULL DEFAULT 0) ENGINE = InnoDB',
        'CREATE TABLE IF NOT EXISTS example_seen_signatures (signature CHAR(67) CHARACTER SET ascii PRIMARY KEY,'
        + ' expires_at BIGINT NOT NULL, INDEX (expires_at)) ENGINE = InnoDB',
        'CREATE TABLE IF NOT EXISTS example_done (idem_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY,'
        + ' job_id VARCHAR(40) NULL, done_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE = InnoDB',
      ],
      postgres: [
        'CREATE TABLE IF NOT EXISTS example_orders (id bigserial PRIMARY KEY, item text NOT NULL, invoices int NOT NULL DEFAULT 0)',
        'CREATE TABLE IF NOT EXISTS example_seen_signatures (signature text PRIMARY KEY, expires_at bigint NOT NULL)',
        'CREATE INDEX IF NOT EXISTS example_seen_signatures_expires ON example_seen_signatures (expires_at)',
        'CREATE TABLE IF NOT EXISTS example_done (idem_key text PRIMARY KEY, job_id text NULL,'
        + ' done_at timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP)',
      ],
      // T-SQL has no IF NOT EXISTS on CREATE TABLE. The keys compare
      // byte for byte (a binary collation), as on the other databases.
      sqlserver: [
        ['example_orders', 'id BIGINT IDENTITY PRIMARY KEY, item NVARCHAR(200) NOT NULL, invoices INT NOT NULL DEFAULT 0'],
        ['example_seen_signatures', 'signature VARCHAR(67) COLLATE Latin1_General_100_BIN2 PRIMARY KEY, expires_at BIGINT NOT NULL'],
        ['example_done', 'idem_key NVARCHAR(255) COLLATE Latin1_General_100_BIN2 PRIMARY KEY, job_id NVARCHAR(40) NULL,'
          + ' done_at DATETIME2(3) NOT NULL DEFAULT SYSUTCDATETIME()'],
      ].map(([name, columns]) => `IF OBJECT_ID(N'${this.table(name).replace(/'/g, "''")}', N'U') IS NULL`
        + ` CREATE TABLE ${this.table(name)} (${columns})`),
    }[this.kind];
    for (const sql of statements) {
      await this.query(sql);
    }
  }

  async close() {
    if (this.kind === 'sqlserver') {
      await new Promise((resolve) => {
        this.client.once('end', resolve);
        this.client.close();
      });
      return;
    }
    await this.client.end();
  }
}

/** Opens one connection to the database a URL names (see the top of this file). */
async function connect(url, schema = process.env.APP_DB_SCHEMA || 'slotpoller') {
  const u = new URL(url);
  switch (u.protocol) {
    case 'postgres:':
    case 'postgresql:': {
      const pg = require('pg');
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
      await client.connect();
      return new Db('postgres', client, null);
    }
    case 'mysql:': {
      const mysql = require('mysql2/promise');
      // The ids and counts as numbers; times as the server's text.
      const client = await mysql.createConnection({ uri: url, charset: 'utf8mb4', connectTimeout: 5000, supportBigNumbers: true });
      return new Db('mysql', client, null);
    }
    case 'sqlserver:':
      return new Db('sqlserver', await tediousConnect(u), schema);
    default:
      throw new Error(`APP_DB_URL: ${u.protocol} is not one of postgres:, mysql:, sqlserver:`);
  }
}

/** [name] with ] doubled: a T-SQL identifier that may hold anything. */
function quoteName(name) {
  return `[${name.replace(/]/g, ']]')}]`;
}

// go-mssqldb's URL form, as a node's SLOTPOLLER_DATABASE_DSN has it:
// sqlserver://user:password@host:port?database=db&encrypt=disable.
function tediousConnect(u) {
  const { Connection } = require('tedious');
  const encrypt = (u.searchParams.get('encrypt') ?? 'true').toLowerCase();
  const connection = new Connection({
    server: u.hostname,
    authentication: {
      type: 'default',
      options: { userName: decodeURIComponent(u.username), password: decodeURIComponent(u.password) },
    },
    options: {
      port: Number(u.port || 1433),
      database: u.searchParams.get('database') ?? undefined,
      encrypt: !['disable', 'false', 'no', '0'].includes(encrypt),
      trustServerCertificate: (u.searchParams.get('TrustServerCertificate') ?? '').toLowerCase() === 'true',
      connectTimeout: 15000,
      // A statement of a busy T-SQL server may take seconds: the node's
      // deadline, not the driver's 15 s default, bounds the work.
      requestTimeout: 60000,
    },
  });
  return new Promise((resolve, reject) => {
    connection.connect((err) => (err ? reject(err) : resolve(connection)));
  });
}

// tedious takes each parameter with its T-SQL type: text as nvarchar(max)
// and integers as bigint whatever their value, so that the server keeps
// one plan per statement; a NULL typed too.
function tediousType(value) {
  const { TYPES } = require('tedious');
  if (Buffer.isBuffer(value)) return TYPES.VarBinary;
  if (typeof value === 'number' || typeof value === 'bigint') return Number.isInteger(Number(value)) ? TYPES.BigInt : TYPES.Float;
  if (value instanceof Date) return TYPES.DateTime2;
  return TYPES.NVarChar;
}

function tediousOptions(value) {
  if (typeof value === 'string' || Buffer.isBuffer(value) || value === null || value === undefined) return { length: Infinity };
  if (value instanceof Date) return { scale: 7 };
  return undefined;
}

/** Runs one batch on a tedious connection: its rows as objects, and the rows it changed. */
function tediousQuery(connection, sql, params) {
  const { Request } = require('tedious');
  return new Promise((resolve, reject) => {
    const rows = [];
    const request = new Request(sql, (err, rowCount) => (err ? reject(err) : resolve({ rows, rowCount: rowCount ?? 0 })));
    for (const [name, type, value, options] of params) {
      request.addParameter(name, type, value ?? null, options);
    }
    request.on('row', (columns) => {
      rows.push(Object.fromEntries(columns.map((c) => [c.metadata.colName, c.value])));
    });
    connection.execSql(request);
  });
}

function tediousCall(connection, method) {
  return new Promise((resolve, reject) => connection[method]((err) => (err ? reject(err) : resolve())));
}

module.exports = { Db, connect };
