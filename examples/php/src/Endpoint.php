<?php
// A job endpoint that only slotpoller may call, in plain PHP with PDO:
// the checks of docs/signed-calls.md ("What an endpoint must check"), the
// deadline and Idempotency-Key rules of docs/endpoints.md ("The call"),
// and the answers of docs/endpoints.md ("The answer"):
//
//   2xx              the job is done (also: it was already done)
//   408, 429, 5xx    the job is retried
//   any other 4xx    the job has failed at once
//
// Nothing here keeps state between requests (PHP's built-in server keeps
// none): accepted signatures and completed keys are rows in the database.

declare(strict_types=1);

namespace Slotpoller;

require_once __DIR__ . '/Slotpoller.php';

use PDO;
use PDOException;

/** An answer: the status and a short JSON body. */
final class Answer extends \Exception
{
    public function __construct(public readonly int $status, public readonly array $body, public readonly string $log = '')
    {
        parent::__construct($log !== '' ? $log : (string) ($body['error'] ?? $status));
    }
}

final class Endpoint
{
    /** The signature window, either way (docs/signed-calls.md, check 2). */
    public const MAX_AGE_SECONDS = 300;

    /** The body cap, checked before anything else is read (check 4). */
    public const MAX_BODY_BYTES = 1 << 20;

    /**
     * The headers a v2 signature covers, in canonical order
     * (docs/signed-calls.md, "How the signature is built").
     */
    public const SIGNED_HEADERS = [
        'idempotency-key',
        'x-slotpoller-attempt',
        'x-slotpoller-deadline',
        'x-slotpoller-job',
        'x-slotpoller-node',
        'x-slotpoller-scheduled-for',
        'x-slotpoller-task',
        'x-slotpoller-timeout-ms',
        'x-slotpoller-token',
    ];

    /**
     * @param list<string> $keys the accepted signing keys: the current one
     *                           and, during a rotation, the previous one
     * @param float $workSeconds how long the work may take at most: a call
     *                           whose deadline is nearer than that is not started
     */
    public function __construct(
        private readonly array $keys,
        private readonly float $workSeconds = 1.0,
    ) {
    }

    /**
     * The v2 signature of a request, "v2=<lowercase hex>".
     *
     * @param array<string, string> $headers lower-case names => values; a
     *                                       signed header not in it is absent
     */
    public static function sign(string $key, string $method, string $target, string $timestamp, array $headers, string $body): string
    {
        $canonical = "v2\n" . $method . "\n" . $target . "\n" . $timestamp . "\n";
        foreach (self::SIGNED_HEADERS as $name) {
            // Present: "name:value" without surrounding spaces and tabs;
            // absent: the bare name, with no colon.
            $canonical .= array_key_exists($name, $headers) ? $name . ':' . trim($headers[$name], " \t") : $name;
            $canonical .= "\n";
        }
        return 'v2=' . hash_hmac('sha256', $canonical . $body, $key);
    }

    /**
     * Checks the signature of a request: checks 1 to 5 of
     * docs/signed-calls.md. Returns the accepted signature and its
     * timestamp; throws a 401 Answer otherwise.
     *
     * @param array<string, string> $headers lower-case names => values
     * @return array{string, int}
     */
    public function verify(string $method, string $target, array $headers, string $body, int $now): array
    {
        // "Refuse with 401 Unauthorized" (check 8), the detail in the log
        // only: the caller is told nothing about why.
        $refuse = static fn (string $why): Answer => new Answer(401, ['error' => 'unauthorized'], $why);
        if ($this->keys === []) {
            throw $refuse('no signing key configured (JOBPAGES_SIGNING_KEY)');
        }
        // Check 1: both headers present. PHP's server joins a repeated
        // header into one value ("a, b"), which then matches no signature,
        // so a repeated signed header is refused as a forgery.
        $timestamp = $headers['x-slotpoller-timestamp'] ?? '';
        $signature = trim($headers['x-slotpoller-signature'] ?? '');
        if (trim($timestamp) === '' || $signature === '') {
            throw $refuse('no X-Slotpoller-Timestamp or X-Slotpoller-Signature header');
        }
        // Check 2: decimal Unix seconds, no sign, no leading zeros, within
        // 5 minutes of this clock either way.
        if (preg_match('/^(0|[1-9][0-9]{0,17})$/', trim($timestamp)) !== 1) {
            throw $refuse(sprintf('X-Slotpoller-Timestamp "%s" is not Unix seconds', $timestamp));
        }
        $ts = (int) trim($timestamp);
        if (abs($now - $ts) > self::MAX_AGE_SECONDS) {
            throw $refuse(sprintf('X-Slotpoller-Timestamp %d is %d s from this clock, more than %d', $ts, $now - $ts, self::MAX_AGE_SECONDS));
        }
        // Check 3: v2 only (this example has no nodes older than v2).
        if (preg_match('/^v2=[0-9a-fA-F]{64}$/', $signature) !== 1) {
            throw $refuse('X-Slotpoller-Signature is not v2=<64 hex digits>');
        }
        $signature = 'v2=' . strtolower(substr($signature, 3));
        // Checks 4 and 5: the raw target, the timestamp as received, each
        // accepted key, compared in constant time with no early exit.
        $valid = false;
        foreach ($this->keys as $key) {
            $want = self::sign($key, $method, $target, trim($timestamp), $headers, $body);
            $valid = hash_equals($want, $signature) || $valid;
        }
        if (!$valid) {
            throw $refuse(sprintf('X-Slotpoller-Signature does not match %s %s', $method, $target));
        }
        return [$signature, $ts];
    }

    /**
     * The example's table $name as a statement names it: in $schema on SQL
     * Server, which has no search path; elsewhere where the connection's
     * database or search_path puts it.
     */
    public static function table(PDO $db, string $name, string $schema = 'slotpoller'): string
    {
        return self::sqlServer($db) ? Slotpoller::quoteName($schema) . '.' . $name : $name;
    }

    /** Creates the example's tables if missing. */
    public static function createTables(PDO $db, string $schema = 'slotpoller'): void
    {
        $driver = $db->getAttribute(PDO::ATTR_DRIVER_NAME);
        [$orders, $seen, $done] = array_map(static fn (string $name): string => self::table($db, $name, $schema),
            ['example_orders', 'example_seen_signatures', 'example_done']);
        // SQL Server creates a table only where OBJECT_ID finds none; the
        // quoted name is one this code built.
        $missing = static fn (string $table): string => 'IF OBJECT_ID(' . $db->quote($table) . ", 'U') IS NULL";
        // On MySQL a CREATE TABLE commits whatever is open: these come
        // before any transaction.
        $statements = match (true) {
            $driver === 'mysql' => [
                'CREATE TABLE IF NOT EXISTS example_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, item VARCHAR(200) NOT NULL,'
                . ' invoices INT NOT NULL DEFAULT 0) ENGINE = InnoDB',
                'CREATE TABLE IF NOT EXISTS example_seen_signatures (signature CHAR(67) CHARACTER SET ascii PRIMARY KEY,'
                . ' expires_at BIGINT NOT NULL, INDEX (expires_at)) ENGINE = InnoDB',
                'CREATE TABLE IF NOT EXISTS example_done (idem_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY,'
                . ' job_id VARCHAR(40) NULL, done_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE = InnoDB',
            ],
            $driver === 'pgsql' => [
                'CREATE TABLE IF NOT EXISTS example_orders (id bigserial PRIMARY KEY, item text NOT NULL, invoices int NOT NULL DEFAULT 0)',
                'CREATE TABLE IF NOT EXISTS example_seen_signatures (signature text PRIMARY KEY, expires_at bigint NOT NULL)',
                'CREATE INDEX IF NOT EXISTS example_seen_signatures_expires ON example_seen_signatures (expires_at)',
                'CREATE TABLE IF NOT EXISTS example_done (idem_key text PRIMARY KEY, job_id text NULL,'
                . ' done_at timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP)',
            ],
            // Keys compare byte for byte, as on the other databases.
            self::sqlServer($db) => [
                "{$missing($orders)} CREATE TABLE $orders (id BIGINT IDENTITY PRIMARY KEY, item NVARCHAR(200) NOT NULL,"
                . ' invoices INT NOT NULL DEFAULT 0)',
                "{$missing($seen)} BEGIN CREATE TABLE $seen (signature NVARCHAR(67) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY,"
                . " expires_at BIGINT NOT NULL); CREATE INDEX example_seen_signatures_expires ON $seen (expires_at); END",
                "{$missing($done)} CREATE TABLE $done (idem_key NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY,"
                . ' job_id NVARCHAR(40) NULL, done_at DATETIME2(3) NOT NULL DEFAULT SYSUTCDATETIME())',
            ],
            default => throw new \LogicException(sprintf('PDO driver "%s": this example knows mysql, pgsql, dblib and sqlsrv', $driver)),
        };
        foreach ($statements as $sql) {
            $db->exec($sql);
        }
    }

    /**
     * Records an accepted signature until its timestamp is out of the
     * window; a 409 Answer when it was already there: a replay
     * (docs/signed-calls.md, check 6 and "Replays").
     */
    public static function firstUse(PDO $db, string $signature, int $ts, int $now, string $schema = 'slotpoller'): void
    {
        $seen = self::table($db, 'example_seen_signatures', $schema);
        // Signatures whose timestamp left the window are refused as stale
        // anyway: forget them.
        $db->prepare("DELETE FROM $seen WHERE expires_at < ?")->execute([$now]);
        if (!self::insertOnce($db, $seen, ['signature' => $signature, 'expires_at' => $ts + self::MAX_AGE_SECONDS])) {
            throw new Answer(409, ['error' => 'already received'], 'replay of a signature already accepted');
        }
    }

    /**
     * Inserts a row into $table, whose key is the row's first column;
     * false, with nothing written, when a row with that key is there.
     *
     * @param array<string, string|int|null> $row column => value
     */
    public static function insertOnce(PDO $db, string $table, array $row): bool
    {
        $columns = implode(', ', array_keys($row));
        $marks = implode(', ', array_fill(0, count($row), '?'));
        if (self::sqlServer($db)) {
            // pdo_dblib does not show the server's error number, so a
            // duplicate key (2627) cannot be told from other errors by
            // it: the key is looked up first, under a lock held to the
            // end of the transaction, so a concurrent insert of the key
            // waits, then finds it. Where the hints are ignored (Babelfish)
            // the loser of that race gets the primary key's error, a 500
            // that the node retries.
            $key = array_key_first($row);
            $st = $db->prepare("INSERT INTO $table ($columns) SELECT $marks"
                . " WHERE NOT EXISTS (SELECT 1 FROM $table WITH (UPDLOCK, HOLDLOCK) WHERE $key = ?)");
            $st->execute([...array_values($row), $row[$key]]);
            return $st->rowCount() === 1;
        }
        try {
            $db->prepare("INSERT INTO $table ($columns) VALUES ($marks)")->execute(array_values($row));
        } catch (PDOException $e) {
            if (self::duplicate($e)) {
                return false;
            }
            throw $e;
        }
        return true;
    }

    /**
     * Refuses to start work that cannot end before X-Slotpoller-Deadline,
     * the time the node gives up on the call (docs/endpoints.md, "The
     * call"): a 503, which the node retries (docs/endpoints.md, "The
     * answer": 5xx is retried), so the job runs again on a later attempt.
     * A call without the header (one made by hand) has no deadline.
     */
    public function requireTime(?string $deadline, float $now, string $when): void
    {
        if ($deadline === null) {
            return;
        }
        $at = self::parseDeadline($deadline);
        if ($at === null) {
            throw new Answer(400, ['error' => 'X-Slotpoller-Deadline is not an RFC 3339 time']);
        }
        if ($now + $this->workSeconds > $at) {
            throw new Answer(503, ['error' => 'deadline too near: not started'],
                sprintf('%s: X-Slotpoller-Deadline %s is %.3f s away, the work needs up to %.3f s', $when, $deadline, $at - $now, $this->workSeconds));
        }
    }

    /** Unix seconds (with fraction) of an RFC 3339 time, or null. */
    public static function parseDeadline(string $value): ?float
    {
        if (preg_match('/^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/i', trim($value), $m) !== 1) {
            return null;
        }
        $t = \DateTimeImmutable::createFromFormat('!Y-m-d\TH:i:sP', $m[1] . strtoupper($m[3] === 'z' ? 'Z' : $m[3]));
        if ($t === false) {
            return null;
        }
        return $t->getTimestamp() + ($m[2] === '' ? 0.0 : (float) ('0' . $m[2]));
    }

    /** Whether the connection is to SQL Server (pdo_dblib or pdo_sqlsrv). */
    public static function sqlServer(PDO $db): bool
    {
        return in_array($db->getAttribute(PDO::ATTR_DRIVER_NAME), Slotpoller::SQLSERVER_DRIVERS, true);
    }

    /** Whether a PDO error is a duplicate key (MySQL's or PostgreSQL's). */
    public static function duplicate(PDOException $e): bool
    {
        // MySQL and MariaDB: SQLSTATE 23000 with error 1062; PostgreSQL:
        // SQLSTATE 23505.
        $info = $e->errorInfo ?? [];
        return ($info[0] ?? $e->getCode()) === '23505' || (($info[0] ?? '') === '23000' && (int) ($info[1] ?? 0) === 1062);
    }
}
