#!/usr/bin/env python3
"""The job endpoint of the example: POST /jobs/send-invoice with the
payload producer.py enqueues, {"order": N}, marks order N invoiced, once.

    APP_DB_URL='mysql://root@127.0.0.1:3306/test' \\
    JOBPAGES_SIGNING_KEY='the nodes' SLOTPOLLER_JOBS_SIGNING_KEY' \\
      python3 endpoint.py [HOST:PORT]

It listens on 127.0.0.1:8080 unless told. APP_DB_URL is the database as
producer.py takes it. JOBPAGES_SIGNING_KEY is the key the nodes sign with;
JOBPAGES_SIGNING_KEY_PREVIOUS the old one during a key rotation
(docs/signed-calls.md, "Rotate without failed calls"; not SLOTPOLLER_...,
which a node on the same machine would take for its own settings).

In order, each step answering as docs/signed-calls.md and
docs/endpoints.md ("The answer") say:
  1. the v2 signature, within 5 minutes    401, the job fails
  2. a signature already accepted           409, the job fails
  3. X-Slotpoller-Deadline too near/passed  503, retried on a later attempt
  4. the payload names no order             400; an unknown order 422
  5. Idempotency-Key already done           200, nothing done again
  6. the order invoiced and the key recorded in one transaction: 200
A database that cannot be reached answers 503, any other failure 500:
both are retried. Accepted signatures and completed keys are rows in the
database, so several instances of the endpoint behind one address agree.
"""

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import appdb
import slotpoller

#: The body cap, checked before anything else is read (check 4).
MAX_BODY_BYTES = 1 << 20

#: How long the work may take at most: a call whose deadline is nearer
#: than that is not started.
WORK_SECONDS = 1.0


class Answer(Exception):
    """An answer: the status, a short JSON body, and what to log."""

    def __init__(self, status, body, log=""):
        super().__init__(log or body.get("error", status))
        self.status, self.body = status, body


def require_time(deadline, when):
    """Refuses to start (or commit) work that cannot end before
    X-Slotpoller-Deadline, the time the node gives up on the call
    (docs/endpoints.md, "The call"): a 503, which the node retries. A call
    without the header (one made by hand) has no deadline."""
    if deadline is None:
        return
    at = slotpoller.parse_deadline(deadline)
    if at is None:
        raise Answer(400, {"error": "X-Slotpoller-Deadline is not an RFC 3339 time"})
    left = at - time.time()
    if left < WORK_SECONDS:
        raise Answer(503, {"error": "deadline too near: not started"},
                     f"{when}: X-Slotpoller-Deadline {deadline} is {left:.3f} s away, the work needs up to {WORK_SECONDS:.3f} s")


def first_use(db, signature, ts):
    """Records an accepted signature until its timestamp leaves the
    window; a 409 when it was there already: a replay (docs/signed-calls.md,
    check 6 and "Replays")."""
    seen = db.table("example_seen_signatures")
    try:
        # Signatures whose timestamp left the window are refused as stale
        # anyway: forget them.
        db.execute(f"DELETE FROM {seen} WHERE expires_at < %s", [int(time.time())])
        db.execute(f"INSERT INTO {seen} (signature, expires_at) VALUES (%s, %s)",
                   [signature, ts + slotpoller.MAX_AGE_SECONDS])
        db.conn.commit()
    except Exception as e:
        db.conn.rollback()
        if db.duplicate(e):
            raise Answer(409, {"error": "already received"}, "replay of a signature already accepted") from e
        raise


def invoice(db, method, target, headers, body, signature, ts):
    """Steps 2 to 6 on a call whose signature was verified: the answer's
    status and body."""
    first_use(db, signature, ts)
    # Do not start what cannot end before the node gives up on the call.
    deadline = one(headers, "x-slotpoller-deadline")
    require_time(deadline, "before the work")

    # A bad request that no retry can fix: a 4xx other than 408 and 429
    # fails the job at once (docs/endpoints.md, "The answer").
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    order = payload.get("order") if isinstance(payload, dict) else None
    if type(order) is not int or order <= 0:
        raise Answer(400, {"error": 'the payload must be a JSON object with an "order": a positive integer'})
    key = (one(headers, "idempotency-key") or "").strip()
    if not key or len(key.encode("latin-1")) > 255:
        raise Answer(400, {"error": "Idempotency-Key missing or longer than 255 bytes"})
    job = one(headers, "x-slotpoller-job")

    # The work and its Idempotency-Key in one transaction: either both are
    # there or neither. A second call with the key waits for the first's
    # transaction on the key's row, then finds it (docs/endpoints.md:
    # "effectively once with the key").
    try:
        try:
            db.execute(f"INSERT INTO {db.table('example_done')} (idem_key, job_id) VALUES (%s, %s)", [key, job])
        except Exception as e:
            if not db.duplicate(e):
                raise
            db.conn.rollback()
            log(f"{method} {target}: Idempotency-Key {key} already done: nothing to do")
            return 200, {"outcome": "already done", "order": order}
        cur = db.execute(f"UPDATE {db.table('example_orders')} SET invoices = invoices + 1 WHERE id = %s", [order])
        if cur.rowcount != 1:
            raise Answer(422, {"error": f"no order {order}"})
        # Work that ran late is not committed: past the deadline another
        # node may already be calling the job again.
        require_time(deadline, "before the commit")
        db.conn.commit()
    except BaseException:
        db.conn.rollback()
        raise
    log(f"{method} {target}: order {order} invoiced (job {job or '-'}, Idempotency-Key {key})")
    return 200, {"outcome": "invoiced", "order": order}


def one(headers, name):
    """A header's value (verify() made sure a signed one came once)."""
    values = headers.get(name)
    return values[0] if values else None


def log(message):
    print(message, file=sys.stderr, flush=True)


class Handler(BaseHTTPRequestHandler):
    server_version = "jobpages-example"
    keys = []

    def do_POST(self):
        method = self.command
        # The raw request target as sent, percent-encoding and query
        # untouched (docs/signed-calls.md: "Use the raw request target").
        target = self.path
        try:
            status, answer = self.checked(method, target)
        except Answer as a:
            log(f"refused {method} {target}: {a.status} {a}")
            status, answer = a.status, a.body
        except Exception as e:
            # Anything else (a deadlock, a lost connection) may pass: 500,
            # retried.
            log(f"failed {method} {target}: {type(e).__name__}: {e}")
            status, answer = 500, {"error": "internal error"}
        data = (json.dumps(answer) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_PATCH = do_DELETE = do_POST

    def checked(self, method, target):
        # Check 4 of docs/signed-calls.md: cap the body before reading it.
        if self.headers.get("Transfer-Encoding"):
            raise Answer(411, {"error": "a Content-Length is required"})
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise Answer(400, {"error": "bad Content-Length"}) from None
        if length < 0:
            raise Answer(400, {"error": "bad Content-Length"})
        if length > MAX_BODY_BYTES:
            raise Answer(413, {"error": "request body too large"})
        body = self.rfile.read(length)
        # Every value of every header, by lower-case name: a repeated
        # signed header is refused, not joined.
        headers = {}
        for name, value in self.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        try:
            signature, ts = slotpoller.verify(self.keys, method, target, headers, body, time.time())
        except slotpoller.Unauthorized as e:
            # "Refuse with 401 Unauthorized" (check 8), the detail in the
            # log only: the caller is told nothing about why.
            raise Answer(401, {"error": "unauthorized"}, str(e)) from None

        if target.split("?", 1)[0] != "/jobs/send-invoice":
            raise Answer(404, {"error": "no such job"})
        if method != "POST":
            raise Answer(405, {"error": "POST only"})
        try:
            db = appdb.connect()
        except Exception as e:
            # Transient: the node retries a 5xx (docs/endpoints.md, "The
            # answer").
            raise Answer(503, {"error": "database unavailable"}, f"connecting to APP_DB_URL: {e}") from e
        try:
            return invoice(db, method, target, headers, body, signature, ts)
        finally:
            db.conn.close()

    def log_message(self, format, *args):
        log(f"{self.address_string()} {format % args}")


def main(argv):
    keys = [os.environ[n].encode() for n in ("JOBPAGES_SIGNING_KEY", "JOBPAGES_SIGNING_KEY_PREVIOUS") if os.environ.get(n)]
    if not keys:
        log("endpoint: JOBPAGES_SIGNING_KEY is not set: give it the nodes' SLOTPOLLER_JOBS_SIGNING_KEY")
        return 64
    host, _, port = (argv[1] if len(argv) > 1 else "127.0.0.1:8080").rpartition(":")
    # The tables once, at the start: a database that cannot be reached
    # shows now rather than at the first call.
    db = appdb.connect()
    db.create_tables()
    db.conn.close()
    Handler.keys = keys
    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    server.daemon_threads = True
    log(f"endpoint: listening on http://{host or '127.0.0.1'}:{port}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
