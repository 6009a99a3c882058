<?php
// Enqueue slotpoller jobs from PHP through the database entry point, inside
// the application's own transaction: a job enqueued in a transaction that
// rolls back never exists; one whose transaction commits runs once (at
// least once if a node dies mid-call).
//
// The PDO connection's driver chooses the call: the entry point is a
// procedure on MySQL and MariaDB (pdo_mysql), a function on PostgreSQL
// (pdo_pgsql) and a procedure in slotpoller's schema on SQL Server
// (pdo_dblib, or pdo_sqlsrv on Windows). The contract (parameters,
// defaults, checks, errors) is docs/enqueue.md's "The v1 contract".

declare(strict_types=1);

namespace Slotpoller;

use DateTimeImmutable;
use DateTimeInterface;
use DateTimeZone;
use LogicException;
use PDO;

final class Slotpoller
{
    /** The PDO drivers that speak to SQL Server: FreeTDS's and Microsoft's. */
    public const SQLSERVER_DRIVERS = ['dblib', 'sqlsrv'];

    /**
     * Enqueues a job on the connection's current transaction (or on its own
     * if none is open) and returns the new job's id.
     *
     * Every argument after the endpoint may be left null for the entry
     * point's default: POST, due now on the database clock, 33 attempts,
     * the node's call timeout, no unique key, a generated idempotency key,
     * the queue the nodes route the endpoint to. The payload's bytes are
     * the call's body as they are: pass the UTF-8 bytes of your JSON.
     * $schema is, on SQL Server only, the schema of slotpoller's tables
     * and entry point: the nodes' database.schema.
     *
     * Bad input raises a PDOException with a message "field: problem":
     * SQLSTATE 22023 on PostgreSQL and MySQL, server error 51000 on SQL
     * Server. A taken unique key raises SQLSTATE 23000 (MySQL), 23505
     * (PostgreSQL) or server error 51001 (SQL Server), the message naming
     * the id of the job that holds it. pdo_dblib shows the server's
     * message but not its number (SQLSTATE HY000, DB-Library's 20018):
     * there the "field:" prefix tells a refusal apart. The transaction is
     * then the caller's to roll back.
     */
    public static function enqueue(
        PDO $db,
        string $endpoint,
        ?string $payload = null,
        ?string $method = null,
        ?int $delayMs = null,
        ?DateTimeInterface $runAt = null,
        ?int $maxAttempts = null,
        ?int $timeoutMs = null,
        ?string $uniqueKey = null,
        ?string $idempotencyKey = null,
        ?string $queue = null,
        string $schema = 'slotpoller',
    ): int {
        // The library reads no return codes: a failed call must not pass
        // for an enqueued job.
        if ($db->getAttribute(PDO::ATTR_ERRMODE) !== PDO::ERRMODE_EXCEPTION) {
            throw new LogicException('Slotpoller::enqueue needs a PDO connection with PDO::ATTR_ERRMODE set to PDO::ERRMODE_EXCEPTION');
        }
        $driver = $db->getAttribute(PDO::ATTR_DRIVER_NAME);
        $sqlServer = in_array($driver, self::SQLSERVER_DRIVERS, true);
        // Unicode text on SQL Server (N'...' where the driver quotes):
        // its parameters are nvarchar.
        $text = $sqlServer ? PDO::PARAM_STR | PDO::PARAM_STR_NATL : PDO::PARAM_STR;
        // The arguments in the v1 contract's order, the order MySQL's
        // procedure takes them in (it has no named arguments).
        $args = [
            'endpoint' => [$endpoint, $text],
            'payload' => [$payload, PDO::PARAM_LOB],
            'method' => [$method, $text],
            'delay_ms' => [$delayMs, PDO::PARAM_INT],
            'run_at' => [$runAt === null ? null : self::time($driver, $runAt), PDO::PARAM_STR],
            'max_attempts' => [$maxAttempts, PDO::PARAM_INT],
            'timeout_ms' => [$timeoutMs, PDO::PARAM_INT],
            'unique_key' => [$uniqueKey, $text],
            'idempotency_key' => [$idempotencyKey, $text],
            'queue' => [$queue, $text],
        ];
        if ($sqlServer) {
            // pdo_dblib sends a bound LOB as a text literal, which the
            // server would turn into bytes of the database's code page:
            // the payload goes as a binary literal of its bytes in hex
            // (0x alone is an empty payload), the rest bound as usual.
            $bytes = $payload === null ? 'NULL' : '0x' . bin2hex($payload);
            unset($args['payload']);
        }
        $st = match (true) {
            // Server-side prepared, so the payload travels as bytes, not
            // as text in the connection's character set.
            $driver === 'mysql' => $db->prepare(
                'CALL slotpoller_enqueue_v1(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
                [PDO::ATTR_EMULATE_PREPARES => false],
            ),
            // By name, so that a parameter v1 adds at the end later
            // changes nothing here.
            $driver === 'pgsql' => $db->prepare(
                'SELECT slotpoller_enqueue_v1(endpoint => ?, payload => ?, method => ?, delay_ms => ?, run_at => ?,'
                . ' max_attempts => ?, timeout_ms => ?, unique_key => ?, idempotency_key => ?, queue => ?)',
            ),
            // By name too (@id, an OUTPUT parameter, is left out: the
            // procedure also answers with the id as a one-row result).
            $sqlServer => $db->prepare(
                'EXEC ' . self::quoteName($schema) . '.[enqueue_v1] @endpoint = ?, @payload = ' . $bytes . ', @method = ?,'
                . ' @delay_ms = ?, @run_at = ?, @max_attempts = ?, @timeout_ms = ?, @unique_key = ?, @idempotency_key = ?, @queue = ?',
            ),
            default => throw new LogicException(sprintf(
                'Slotpoller::enqueue knows the entry point of MySQL/MariaDB (pdo_mysql), PostgreSQL (pdo_pgsql)'
                . ' and SQL Server (pdo_dblib, pdo_sqlsrv), not of PDO driver "%s"',
                $driver,
            )),
        };
        foreach (array_values($args) as $i => [$value, $type]) {
            $st->bindValue($i + 1, $value, $value === null ? PDO::PARAM_NULL : $type);
        }
        $st->execute();
        // SQL Server's procedure answers with a one-row result "id"; a
        // server may send results without columns before it (row counts),
        // which are skipped.
        while ($st->columnCount() === 0 && $st->nextRowset()) {
        }
        $id = $st->fetchColumn();
        // MySQL's CALL ends with a status result after the id's: it must be
        // read before the connection takes the next statement.
        $st->closeCursor();
        if ($id === false || $id === null) {
            throw new LogicException('slotpoller_enqueue_v1 returned no job id');
        }
        return (int) $id;
    }

    /** A T-SQL name, bracketed: [name], a ] in it doubled. */
    public static function quoteName(string $name): string
    {
        return '[' . str_replace(']', ']]', $name) . ']';
    }

    // The run time as each entry point takes it: MySQL a DATETIME in UTC,
    // SQL Server a datetime2 in UTC (ISO 8601, which no DATEFORMAT
    // setting reads otherwise), PostgreSQL a timestamptz with its offset.
    private static function time(string $driver, DateTimeInterface $t): string
    {
        $utc = DateTimeImmutable::createFromInterface($t)->setTimezone(new DateTimeZone('UTC'));
        return match (true) {
            $driver === 'mysql' => $utc->format('Y-m-d H:i:s.u'),
            in_array($driver, self::SQLSERVER_DRIVERS, true) => $utc->format('Y-m-d\TH:i:s.u'),
            default => $utc->format('Y-m-d H:i:s.uP'),
        };
    }
}
