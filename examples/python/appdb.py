"""The example application's database: a connection from APP_DB_URL and
the example's own tables, on the farm's database.

    postgresql://USER:PASSWORD@HOST:PORT/DB?options=-csearch_path%3DSCHEMA   psycopg (3)
    mysql://USER:PASSWORD@HOST:PORT/DB                                        PyMySQL
    mssql://USER:PASSWORD@HOST:PORT/DB?schema=SCHEMA                          pymssql
    sqlite:///PATH/TO/slotpoller.db                                           sqlite3

On SQL Server, schema is the nodes' database.schema (slotpoller unless
given): the entry point's and, in this example, the example's tables'.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class AppDB:
    conn: object
    dialect: str  # postgres, mysql, sqlserver, sqlite
    schema: str = "slotpoller"  # SQL Server's

    def table(self, name: str) -> str:
        """A table's name as SQL: in the farm's schema on SQL Server."""
        return f"[{self.schema}].[{name}]" if self.dialect == "sqlserver" else name

    def sql(self, text: str) -> str:
        """text with its %s placeholders in the driver's style."""
        return text.replace("%s", "?") if self.dialect == "sqlite" else text

    def execute(self, text: str, args=()):
        """Runs a statement on a new cursor and returns the cursor."""
        cur = self.conn.cursor()
        cur.execute(self.sql(text), tuple(args))
        return cur

    def duplicate(self, e: Exception) -> bool:
        """Whether a driver's error is a duplicate key."""
        if self.dialect == "postgres":
            return getattr(e, "sqlstate", None) == "23505"
        if self.dialect == "sqlite":
            # The extended code's name is Python 3.11's; the message is older.
            return type(e).__name__ == "IntegrityError" and "UNIQUE constraint failed" in str(e)
        # PyMySQL and pymssql: (number, message); MySQL 1062, SQL Server
        # 2627 (a key) and 2601 (a unique index).
        return bool(e.args) and e.args[0] in ((1062,) if self.dialect == "mysql" else (2627, 2601))

    def insert_order(self, item: str) -> int:
        """Inserts an order and returns its id."""
        t = self.table("example_orders")
        if self.dialect == "postgres":
            return self.execute(f"INSERT INTO {t} (item) VALUES (%s) RETURNING id", [item]).fetchone()[0]
        if self.dialect == "sqlserver":
            return self.execute(f"INSERT INTO {t} (item) OUTPUT INSERTED.id VALUES (%s)", [item]).fetchone()[0]
        return self.execute(f"INSERT INTO {t} (item) VALUES (%s)", [item]).lastrowid

    def create_tables(self) -> None:
        """Creates the example's tables if missing, and commits: on MySQL a
        CREATE TABLE commits whatever is open anyway."""
        for statement in _TABLES[self.dialect]:
            self.execute(statement.replace("{s}", self.schema))
        self.conn.commit()


_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def connect(url: str | None = None, timeout: int = 10) -> AppDB:
    """A connection to APP_DB_URL (or url), its transaction not yet
    begun; the driver is imported here, so that each database needs only
    its own."""
    url = url or os.environ.get("APP_DB_URL", "")
    if not url:
        raise SystemExit("APP_DB_URL is not set: give the farm's database, e.g. postgresql://app@127.0.0.1/farm")
    u = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(u.query).items()}
    user, password = unquote(u.username or ""), unquote(u.password or "")
    database = unquote(u.path.lstrip("/"))
    if u.scheme in ("postgresql", "postgres"):
        import psycopg

        return AppDB(psycopg.connect(url, connect_timeout=timeout), "postgres")
    if u.scheme == "mysql":
        import pymysql

        where = {"unix_socket": query["unix_socket"]} if "unix_socket" in query else {"host": u.hostname, "port": u.port or 3306}
        return AppDB(pymysql.connect(user=user, password=password, database=database, charset="utf8mb4",
                                     connect_timeout=timeout, **where), "mysql")
    if u.scheme == "mssql":
        import pymssql

        schema = query.get("schema", "slotpoller")
        if not _SCHEMA.fullmatch(schema):
            raise SystemExit(f"APP_DB_URL: schema {schema!r} is not a slotpoller schema name")
        conn = pymssql.connect(server=u.hostname, port=str(u.port or 1433), user=user, password=password,
                               database=database, login_timeout=timeout, timeout=60)
        return AppDB(conn, "sqlserver", schema)
    if u.scheme == "sqlite":
        import sqlite3

        # The node's file: it writes in WAL mode, so wait for its lock
        # rather than fail at once; IMMEDIATE takes the write lock as a
        # transaction begins, not halfway.
        conn = sqlite3.connect(unquote(u.path), timeout=timeout, isolation_level="IMMEDIATE", check_same_thread=False)
        return AppDB(conn, "sqlite")
    raise SystemExit(f"APP_DB_URL: scheme {u.scheme!r}; this example knows postgresql, mysql, mssql and sqlite")


# The application's own tables. example_orders.invoices: how many times
# endpoint.py sent the order's invoice; example_seen_signatures: the
# signatures accepted within their window (replays); example_done: the
# Idempotency-Keys of work done.
_TABLES = {
    "postgres": [
        "CREATE TABLE IF NOT EXISTS example_orders (id bigserial PRIMARY KEY, item text NOT NULL, invoices int NOT NULL DEFAULT 0)",
        "CREATE TABLE IF NOT EXISTS example_seen_signatures (signature text PRIMARY KEY, expires_at bigint NOT NULL)",
        "CREATE INDEX IF NOT EXISTS example_seen_signatures_expires ON example_seen_signatures (expires_at)",
        "CREATE TABLE IF NOT EXISTS example_done (idem_key text PRIMARY KEY, job_id text NULL,"
        " done_at timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP)",
    ],
    "mysql": [
        "CREATE TABLE IF NOT EXISTS example_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, item VARCHAR(200) NOT NULL,"
        " invoices INT NOT NULL DEFAULT 0) ENGINE = InnoDB",
        "CREATE TABLE IF NOT EXISTS example_seen_signatures (signature CHAR(67) CHARACTER SET ascii PRIMARY KEY,"
        " expires_at BIGINT NOT NULL, INDEX (expires_at)) ENGINE = InnoDB",
        "CREATE TABLE IF NOT EXISTS example_done (idem_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY,"
        " job_id VARCHAR(40) NULL, done_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE = InnoDB",
    ],
    # The index with its table, in one batch: CREATE INDEX has no IF NOT
    # EXISTS, Babelfish keeps another name in sys.indexes than the one
    # given, and refuses an index inside CREATE TABLE. A binary collation
    # keeps keys that differ in case apart.
    "sqlserver": [
        "IF OBJECT_ID(N'[{s}].[example_orders]', N'U') IS NULL CREATE TABLE [{s}].[example_orders]"
        " (id BIGINT IDENTITY PRIMARY KEY, item NVARCHAR(200) NOT NULL, invoices INT NOT NULL DEFAULT 0)",
        "IF OBJECT_ID(N'[{s}].[example_seen_signatures]', N'U') IS NULL BEGIN"
        " CREATE TABLE [{s}].[example_seen_signatures] (signature VARCHAR(67) NOT NULL PRIMARY KEY, expires_at BIGINT NOT NULL);"
        " CREATE INDEX example_seen_signatures_expires ON [{s}].[example_seen_signatures] (expires_at); END",
        "IF OBJECT_ID(N'[{s}].[example_done]', N'U') IS NULL CREATE TABLE [{s}].[example_done]"
        " (idem_key NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY, job_id NVARCHAR(40) NULL,"
        " done_at DATETIME2(3) NOT NULL DEFAULT SYSUTCDATETIME())",
    ],
    "sqlite": [
        "CREATE TABLE IF NOT EXISTS example_orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL, invoices INTEGER NOT NULL DEFAULT 0)",
        "CREATE TABLE IF NOT EXISTS example_seen_signatures (signature TEXT PRIMARY KEY, expires_at INTEGER NOT NULL)",
        "CREATE INDEX IF NOT EXISTS example_seen_signatures_expires ON example_seen_signatures (expires_at)",
        "CREATE TABLE IF NOT EXISTS example_done (idem_key TEXT PRIMARY KEY, job_id TEXT NULL,"
        " done_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
    ],
}
