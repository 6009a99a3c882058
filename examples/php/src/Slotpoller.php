<?php
// Enqueue slotpoller jobs from PHP through the database entry point, inside
// the application's own transaction: a job enqueued in a transaction that
// rolls back never exists; one whose transaction commits runs once (at
// least once if a node dies mid-call).
//
// The PDO connection's driver chooses the call: the entry point is a
// procedure on MySQL and MariaDB (pdo_mysql) and a function on PostgreSQL
// (pdo_pgsql). The contract (parameters, defaults, checks, errors) is
// docs/enqueue.md's "The v1 contract".

declare(strict_types=1);

namespace Slotpoller;

use DateTimeImmutable;
use DateTimeInterface;
use DateTimeZone;
use LogicException;
use PDO;

final class Slotpoller
{
    /**
     * Enqueues a job on the connection's current transaction (or on its own
     * if none is open) and returns the new job's id.
     *
     * Every argument after the endpoint may be left null for the entry
     * point's default: POST, due now on the database clock, 33 attempts,
     * the node's call timeout, no unique key, a generated idempotency key,
     * the queue the nodes route the endpoint to. The payload's bytes are
     * the call's body as they are: pass the UTF-8 bytes of your JSON.
     *
     * Bad input raises a PDOException with SQLSTATE 22023 and a message
     * "field: problem"; a taken unique key raises SQLSTATE 23000 (MySQL)
     * or 23505 (PostgreSQL) naming the id of the job that holds it. The
     * transaction is then the caller's to roll back.
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
    ): int {
        // The library reads no return codes: a failed call must not pass
        // for an enqueued job.
        if ($db->getAttribute(PDO::ATTR_ERRMODE) !== PDO::ERRMODE_EXCEPTION) {
            throw new LogicException('Slotpoller::enqueue needs a PDO connection with PDO::ATTR_ERRMODE set to PDO::ERRMODE_EXCEPTION');
        }
        $driver = $db->getAttribute(PDO::ATTR_DRIVER_NAME);
        // The arguments in the v1 contract's order, the order MySQL's
        // procedure takes them in (it has no named arguments).
        $args = [
            [$endpoint, PDO::PARAM_STR],
            [$payload, PDO::PARAM_LOB],
            [$method, PDO::PARAM_STR],
            [$delayMs, PDO::PARAM_INT],
            [$runAt === null ? null : self::time($driver, $runAt), PDO::PARAM_STR],
            [$maxAttempts, PDO::PARAM_INT],
            [$timeoutMs, PDO::PARAM_INT],
            [$uniqueKey, PDO::PARAM_STR],
            [$idempotencyKey, PDO::PARAM_STR],
            [$queue, PDO::PARAM_STR],
        ];
        $st = match ($driver) {
            // Server-side prepared, so the payload travels as bytes, not
            // as text in the connection's character set.
            'mysql' => $db->prepare(
                'CALL slotpoller_enqueue_v1(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
                [PDO::ATTR_EMULATE_PREPARES => false],
            ),
            // By name, so that a parameter v1 adds at the end later
            // changes nothing here.
            'pgsql' => $db->prepare(
                'SELECT slotpoller_enqueue_v1(endpoint => ?, payload => ?, method => ?, delay_ms => ?, run_at => ?,'
                . ' max_attempts => ?, timeout_ms => ?, unique_key => ?, idempotency_key => ?, queue => ?)',
            ),
            default => throw new LogicException(sprintf(
                'Slotpoller::enqueue knows the entry point of MySQL/MariaDB (pdo_mysql) and PostgreSQL (pdo_pgsql), not of PDO driver "%s"',
                $driver,
            )),
        };
        foreach ($args as $i => [$value, $type]) {
            $st->bindValue($i + 1, $value, $value === null ? PDO::PARAM_NULL : $type);
        }
        $st->execute();
        $id = $st->fetchColumn();
        // MySQL's CALL ends with a status result after the id's: it must be
        // read before the connection takes the next statement.
        $st->closeCursor();
        if ($id === false || $id === null) {
            throw new LogicException('slotpoller_enqueue_v1 returned no job id');
        }
        return (int) $id;
    }

    // The run time as each entry point takes it: MySQL a DATETIME in UTC,
    // PostgreSQL a timestamptz with its offset.
    private static function time(string $driver, DateTimeInterface $t): string
    {
        $utc = DateTimeImmutable::createFromInterface($t)->setTimezone(new DateTimeZone('UTC'));
        return $driver === 'mysql' ? $utc->format('Y-m-d H:i:s.u') : $utc->format('Y-m-d H:i:s.uP');
    }
}
