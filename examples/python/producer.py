#!/usr/bin/env python3
"""An application's write and its job in one transaction: it records an
order in a table of its own and enqueues the job that sends its invoice,
then commits both or rolls both back.

    APP_DB_URL='mysql://root@127.0.0.1:3306/test' python3 producer.py commit|rollback [ENDPOINT]

APP_DB_URL is the farm's database (see appdb.py for its forms). ENDPOINT
is the job's path on the nodes' base URL, /jobs/send-invoice unless
given. It prints one JSON line: the outcome, the order's and the job's
ids, and the payload. A refused enqueue prints the database's error, rolls
back and exits with status 2.
"""

import json
import sys

import appdb
import slotpoller


def main(argv):
    if len(argv) not in (2, 3) or argv[1] not in ("commit", "rollback"):
        print("usage: python3 producer.py commit|rollback [ENDPOINT]", file=sys.stderr)
        return 64
    outcome = argv[1]
    endpoint = argv[2] if len(argv) == 3 else "/jobs/send-invoice"

    db = appdb.connect()
    db.create_tables()  # before the transaction: DDL commits on MySQL

    # The driver's connection has a transaction open from its first
    # statement on (DB-API), until commit() or rollback().
    try:
        item = "book"
        order = db.insert_order(item)
        payload = json.dumps({"order": order, "item": item})
        job = slotpoller.enqueue(db.conn, endpoint, payload, max_attempts=5, schema=db.schema)
    except slotpoller.FieldError as e:
        db.conn.rollback()
        # "field: problem" and the database's own code (SQLSTATE 22023,
        # SQL Server 51000, MySQL 1644, SQLite SQLITE_CONSTRAINT_TRIGGER).
        print(f"producer: order and job rolled back: {type(e).__name__} [{e.code}] {e}", file=sys.stderr)
        return 2
    except BaseException:
        db.conn.rollback()
        raise

    if outcome == "commit":
        db.conn.commit()
        said = "committed"
    else:
        db.conn.rollback()
        said = "rolled back"
    db.conn.close()
    print(json.dumps({"outcome": said, "order": order, "job": job, "payload": payload}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
