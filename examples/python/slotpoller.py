"""Enqueue slotpoller jobs from Python inside the application's own
transaction, and check the signed calls a node makes to a job's endpoint.

enqueue() writes one job through the database entry point of
docs/enqueue.md ("The v1 contract") on a DB-API connection, in the
transaction the connection has open: a job enqueued in a transaction that
rolls back never exists; one whose transaction commits runs once (at least
once if a node dies mid-call). The connection's driver chooses the call:

    psycopg (3)   PostgreSQL        SELECT slotpoller_enqueue_v1(endpoint => ..., ...)
    pymysql       MySQL, MariaDB    CALL slotpoller_enqueue_v1(...), _v2 with a traceparent
    pymssql       SQL Server        EXEC [schema].[enqueue_v1] @endpoint = ..., ...
    sqlite3       SQLite            INSERT INTO slotpoller_enqueue_v1 (...) VALUES (...)

sign() and verify() are the v2 signature of docs/signed-calls.md.

Standard library only; each driver is imported by the application.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import re

__all__ = ["enqueue", "FieldError", "DuplicateError", "sign", "verify", "Unauthorized", "parse_deadline"]


class FieldError(ValueError):
    """The entry point refused an argument: "field: problem".

    field names the argument at fault, code is the database's own error
    (SQLSTATE 22023, SQL Server error 51000, MySQL error 1644, SQLite's
    SQLITE_CONSTRAINT, named SQLITE_CONSTRAINT_TRIGGER from Python 3.11);
    the driver's exception is __cause__. The
    transaction is the caller's to roll back (PostgreSQL has aborted it).
    """

    def __init__(self, message: str, code: object):
        super().__init__(message)
        self.field = message.split(":", 1)[0] if ":" in message else ""
        self.code = code


class DuplicateError(FieldError):
    """A job holds the unique key already; existing_id is its id, or None
    when the database did not say (a race lost on the unique index)."""

    def __init__(self, message: str, code: object, existing_id: int | None):
        super().__init__(message, code)
        self.existing_id = existing_id


def enqueue(
    conn,
    endpoint: str,
    payload: bytes | str | None = None,
    *,
    method: str | None = None,
    delay_ms: int | None = None,
    run_at: _dt.datetime | None = None,
    max_attempts: int | None = None,
    timeout_ms: int | None = None,
    unique_key: str | None = None,
    idempotency_key: str | None = None,
    queue: str | None = None,
    traceparent: str | None = None,
    schema: str = "slotpoller",
) -> int:
    """Enqueues one job on conn's current transaction; returns its id.

    None leaves an argument to the entry point's default: POST, due now on
    the database clock, 33 attempts, the node's call timeout, no unique
    key, a generated idempotency key, the queue the nodes route the
    endpoint to, no trace parent. A str payload is sent as its UTF-8
    bytes. run_at must be timezone-aware. schema is SQL Server's
    (the nodes' database.schema); the other databases ignore it.

    Raises FieldError for an argument the entry point refuses and
    DuplicateError for a unique key a job holds; any other error is the
    driver's own.
    """
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    elif payload is not None:
        payload = bytes(payload)
    if run_at is not None and run_at.utcoffset() is None:
        raise ValueError("run_at must be timezone-aware: the entry point takes a time in UTC")
    utc = None if run_at is None else run_at.astimezone(_dt.timezone.utc)
    args = {
        "endpoint": endpoint, "payload": payload, "method": method, "delay_ms": delay_ms,
        "run_at": utc, "max_attempts": max_attempts, "timeout_ms": timeout_ms,
        "unique_key": unique_key, "idempotency_key": idempotency_key, "queue": queue,
        "traceparent": traceparent,
    }
    kind = driver(conn)
    try:
        if kind == "psycopg":
            return _postgres(conn, args)
        if kind == "pymysql":
            return _mysql(conn, args)
        if kind == "pymssql":
            return _sqlserver(conn, args, schema)
        if kind == "sqlite3":
            return _sqlite(conn, args)
    except Exception as e:
        refused = _refusal(kind, e, conn, unique_key)
        if refused is None:
            raise
        raise refused from e
    raise TypeError(f"slotpoller.enqueue knows psycopg, pymysql, pymssql and sqlite3 connections, not {type(conn)!r}")


def driver(conn) -> str:
    """The top-level module of the DB-API driver behind conn (a subclass
    of a driver's connection counts as that driver's)."""
    for cls in type(conn).__mro__:
        top = cls.__module__.split(".")[0]
        if top in ("psycopg", "pymysql", "pymssql", "sqlite3"):
            return top
    return type(conn).__module__.split(".")[0]


def _postgres(conn, a) -> int:
    # By name, so that a parameter v1 adds at the end later changes
    # nothing here; only the given ones, the others keep their defaults.
    given = {k: v for k, v in a.items() if v is not None}
    names = ", ".join(f"{k} => %({k})s" for k in given)
    (job,) = conn.execute(f"SELECT slotpoller_enqueue_v1({names})", given).fetchone()
    return int(job)


def _mysql(conn, a) -> int:
    # A procedure takes its arguments by position, NULL for a default.
    # v2 is v1 with the trace parent last: v1 needs no schema 17.
    values = [a[k] for k in ("endpoint", "payload", "method", "delay_ms", "run_at", "max_attempts",
                             "timeout_ms", "unique_key", "idempotency_key", "queue")]
    if values[4] is not None:
        values[4] = values[4].replace(tzinfo=None)  # a DATETIME in UTC
    proc = "slotpoller_enqueue_v1"
    if a["traceparent"] is not None:
        proc, values = "slotpoller_enqueue_v2", values + [a["traceparent"]]
    with conn.cursor() as cur:
        cur.execute(f"CALL {proc}({', '.join(['%s'] * len(values))})", values)
        (job,) = cur.fetchone()
        # A CALL ends with a status result after the id's: read it before
        # the connection takes the next statement.
        while cur.nextset():
            pass
    return int(job)


_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _sqlserver(conn, a, schema: str) -> int:
    # The schema is a name, not a value: only what database.schema allows.
    if not _SCHEMA.fullmatch(schema):
        raise ValueError(f"schema {schema!r} is not a slotpoller schema name (a letter or _, then letters, digits or _)")
    given = {k: v for k, v in a.items() if v is not None}
    if "run_at" in given:
        # DATETIME2(7) in UTC, spelled so that no language setting reads it
        # otherwise (pymssql would send milliseconds only).
        given["run_at"] = given["run_at"].strftime("%Y-%m-%dT%H:%M:%S.%f")
    # By name: @id and @queue come in another order than MySQL's list.
    names = ", ".join(f"@{k} = %({k})s" for k in given)
    with conn.cursor() as cur:
        cur.execute(f"EXEC [{schema}].[enqueue_v1] {names}", given)
        (job,) = cur.fetchone()
    return int(job)


def _sqlite(conn, a) -> int:
    cols = [k for k, v in a.items() if v is not None]
    values = [a[k] for k in cols]
    if "run_at" in cols:  # Unix milliseconds, UTC
        values[cols.index("run_at")] = int(a["run_at"].timestamp() * 1000)
    insert = f"INSERT INTO slotpoller_enqueue_v1 ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    # The new id is the table's sequence, read in the write's transaction:
    # without one open (isolation_level=None) the two statements get one
    # of their own, or another writer could come between them.
    own = not conn.in_transaction and conn.isolation_level is None
    if own:
        conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(insert, values)
        (job,) = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'slotpoller_jobs'").fetchone()
        if own:
            conn.execute("COMMIT")
    except BaseException:
        if own:
            conn.execute("ROLLBACK")
        raise
    return int(job)


_HOLDER = re.compile(r"\(id (\d+)\)")


def _refusal(kind: str, e: Exception, conn, unique_key: str | None) -> FieldError | None:
    """The FieldError or DuplicateError for a refusal of the entry point,
    None for any other error."""
    if kind == "psycopg":
        code = getattr(e, "sqlstate", None)
        diag = getattr(e, "diag", None)
        message = (diag.message_primary if diag else None) or str(e)
        if code == "22023":
            return FieldError(message, code)
        if code == "23505":
            m = re.fullmatch(r"existing_id=(\d+)", (diag.message_detail or "") if diag else "")
            return DuplicateError(message, code, int(m.group(1)) if m else None)
        return None
    if kind in ("pymysql", "pymssql"):
        if len(e.args) < 2 or not isinstance(e.args[0], int):
            return None
        code, message = e.args[0], e.args[1]
        if isinstance(message, bytes):
            # pymssql appends its DB-Lib note to the server's message.
            message = message.decode("utf-8", "replace").split("DB-Lib error message")[0].strip()
        held = _HOLDER.search(message)
        if code in (1644, 51000):  # MySQL's SIGNAL, SQL Server's THROW
            return FieldError(message, code)
        # 51001 and MySQL's 1062 name the holder; 1062, 2627 and 2601 from
        # the unique index itself (a race) do not.
        if code in (1062, 51001, 2627, 2601):
            return DuplicateError(message, code, int(held.group(1)) if held else None)
        return None
    if kind == "sqlite3":
        # A trigger's RAISE(ABORT) is an IntegrityError (SQLITE_CONSTRAINT;
        # Python 3.11 names it SQLITE_CONSTRAINT_TRIGGER).
        name = getattr(e, "sqlite_errorname", "SQLITE_CONSTRAINT")
        message = str(e)
        if type(e).__name__ != "IntegrityError" or not re.match(r"[a-z_]+: ", message):
            return None
        if not message.startswith("unique_key: a job with"):
            return FieldError(message, name)
        # The trigger cannot say the holder's id; the transaction is still
        # open (only the statement was aborted), so ask.
        row = conn.execute("SELECT id FROM slotpoller_jobs WHERE unique_key = ?", (unique_key,)).fetchone()
        return DuplicateError(message, name, row[0] if row else None)
    return None


# --- The endpoint's side: docs/signed-calls.md ---------------------------

#: The headers a v2 signature covers, in canonical order.
SIGNED_HEADERS = (
    "idempotency-key",
    "x-slotpoller-attempt",
    "x-slotpoller-deadline",
    "x-slotpoller-job",
    "x-slotpoller-node",
    "x-slotpoller-scheduled-for",
    "x-slotpoller-task",
    "x-slotpoller-timeout-ms",
    "x-slotpoller-token",
)

#: The signature window, either way (check 2).
MAX_AGE_SECONDS = 300


class Unauthorized(Exception):
    """A call that must be refused with 401; the reason is for the log only."""


def sign(key: bytes, method: str, target: str, timestamp: str, headers: dict[str, str], body: bytes) -> str:
    """The v2 signature, "v2=<lowercase hex>". headers maps lower-case
    names to values; a signed header not in it is absent."""
    lines = ["v2", method, target, timestamp]
    for name in SIGNED_HEADERS:
        # Present: "name:value" without surrounding spaces and tabs;
        # absent: the bare name, with no colon.
        lines.append(name + ":" + headers[name].strip(" \t") if name in headers else name)
    # Header values are bytes on the wire: http.server hands them over as
    # Latin-1, which gives those bytes back.
    canonical = ("\n".join(lines) + "\n").encode("latin-1") + body
    return "v2=" + hmac.new(key, canonical, hashlib.sha256).hexdigest()


def verify(keys: list[bytes], method: str, target: str, headers: dict[str, list[str]], body: bytes, now: float) -> tuple[str, int]:
    """Checks 1 to 5 of docs/signed-calls.md ("What an endpoint must
    check"): returns the accepted signature and its timestamp, or raises
    Unauthorized. headers maps lower-case names to every value received;
    target is the raw request target, as in the request line."""
    if not keys:
        raise Unauthorized("no signing key configured (JOBPAGES_SIGNING_KEY)")
    # Check 1: both headers, each once; each signed header at most once.
    stamps, signatures = headers.get("x-slotpoller-timestamp", []), headers.get("x-slotpoller-signature", [])
    if len(stamps) != 1 or len(signatures) != 1:
        raise Unauthorized("X-Slotpoller-Timestamp and X-Slotpoller-Signature must each come once")
    for name in SIGNED_HEADERS:
        if len(headers.get(name, [])) > 1:
            raise Unauthorized(f"signed header {name} repeated")
    timestamp, signature = stamps[0].strip(" \t"), signatures[0].strip(" \t")
    # Check 2: decimal Unix seconds, no sign, no leading zeros, within 5
    # minutes of this clock either way.
    if not re.fullmatch(r"0|[1-9][0-9]{0,17}", timestamp):
        raise Unauthorized(f"X-Slotpoller-Timestamp {timestamp!r} is not Unix seconds")
    ts = int(timestamp)
    if abs(int(now) - ts) > MAX_AGE_SECONDS:
        raise Unauthorized(f"X-Slotpoller-Timestamp {ts} is {int(now) - ts} s from this clock, more than {MAX_AGE_SECONDS}")
    # Check 3: v2 only (this example has no nodes older than v2).
    if not re.fullmatch(r"v2=[0-9a-fA-F]{64}", signature):
        raise Unauthorized("X-Slotpoller-Signature is not v2=<64 hex digits>")
    signature = "v2=" + signature[3:].lower()
    # Checks 4 and 5: the raw target, the timestamp as received, each
    # accepted key, compared in constant time with no early exit.
    single = {name: values[0] for name, values in headers.items() if name in SIGNED_HEADERS}
    valid = False
    for key in keys:
        valid = hmac.compare_digest(sign(key, method, target, timestamp, single, body), signature) or valid
    if not valid:
        raise Unauthorized(f"X-Slotpoller-Signature does not match {method} {target}")
    return signature, ts


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d)[Tt](\d\d:\d\d:\d\d)(\.\d{1,9})?([Zz]|[+-]\d\d:\d\d)")


def parse_deadline(value: str) -> float | None:
    """Unix seconds (with fraction) of an RFC 3339 time such as
    X-Slotpoller-Deadline's, or None."""
    m = _RFC3339.fullmatch(value.strip())
    if not m:
        return None
    zone = "+00:00" if m.group(4) in ("Z", "z") else m.group(4)
    try:
        at = _dt.datetime.strptime(f"{m.group(1)}T{m.group(2)}{zone.replace(':', '')}", "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None
    return at.timestamp() + (float("0" + m.group(3)) if m.group(3) else 0.0)
