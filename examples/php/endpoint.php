<?php
// The job endpoint of the example: POST /jobs/send-invoice with the payload
// producer.php enqueues, {"order": N}, marks order N invoiced, once.
//
//   APP_DB_DSN='mysql:host=127.0.0.1;port=3306;dbname=test;charset=utf8mb4' APP_DB_USER=root \
//   JOBPAGES_SIGNING_KEY='the nodes' SLOTPOLLER_JOBS_SIGNING_KEY' \
//     php -S 127.0.0.1:8080 endpoint.php
//
// APP_DB_DSN, APP_DB_USER, APP_DB_PASSWORD (and on SQL Server
// APP_DB_SCHEMA) are the database as producer.php takes it.
// JOBPAGES_SIGNING_KEY is the key the nodes sign with;
// JOBPAGES_SIGNING_KEY_PREVIOUS the old one during a key rotation
// (docs/signed-calls.md, "Rotate without failed calls"; not SLOTPOLLER_...,
// which a node on the same machine would take for its own settings).
//
// In order, each step answering as docs/signed-calls.md and
// docs/endpoints.md ("The answer") say:
//   1. the v2 signature, within 5 minutes    401, the job fails
//   2. a signature already accepted           409, the job fails
//   3. X-Slotpoller-Deadline too near/passed  503, retried on a later attempt
//   4. the payload names no order             400; an unknown order 422
//   5. Idempotency-Key already done           200, nothing done again
//   6. the order invoiced and the key recorded in one transaction: 200
// A database that cannot be reached or fails mid-way answers 503 or 500,
// which the node retries.

declare(strict_types=1);

require __DIR__ . '/src/Endpoint.php';

use Slotpoller\Answer;
use Slotpoller\Endpoint;

/** @param array<string, mixed> $body */
function answer(int $status, array $body): never
{
    http_response_code($status);
    header('Content-Type: application/json');
    echo json_encode($body, JSON_UNESCAPED_SLASHES), "\n";
    exit;
}

$method = $_SERVER['REQUEST_METHOD'] ?? '';
// The raw request target as sent, percent-encoding and query untouched
// (docs/signed-calls.md: "Use the raw request target").
$target = $_SERVER['REQUEST_URI'] ?? '';
$path = explode('?', $target, 2)[0];
$headers = array_change_key_case(getallheaders(), CASE_LOWER);
$now = microtime(true);

try {
    // Check 4 of docs/signed-calls.md: cap the body before reading it.
    if ((int) ($_SERVER['CONTENT_LENGTH'] ?? 0) > Endpoint::MAX_BODY_BYTES) {
        throw new Answer(413, ['error' => 'request body too large']);
    }
    $body = (string) file_get_contents('php://input', false, null, 0, Endpoint::MAX_BODY_BYTES + 1);
    if (strlen($body) > Endpoint::MAX_BODY_BYTES) {
        throw new Answer(413, ['error' => 'request body too large']);
    }

    $keys = array_values(array_filter([getenv('JOBPAGES_SIGNING_KEY'), getenv('JOBPAGES_SIGNING_KEY_PREVIOUS')],
        static fn ($k) => is_string($k) && $k !== ''));
    $endpoint = new Endpoint($keys);
    [$signature, $ts] = $endpoint->verify($method, $target, $headers, $body, (int) floor($now));

    if ($path !== '/jobs/send-invoice') {
        throw new Answer(404, ['error' => 'no such job']);
    }
    if ($method !== 'POST') {
        throw new Answer(405, ['error' => 'POST only']);
    }

    try {
        $db = new PDO((string) getenv('APP_DB_DSN'), getenv('APP_DB_USER') ?: null, getenv('APP_DB_PASSWORD') ?: null, [
            PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
            PDO::ATTR_TIMEOUT => 5,
        ]);
    } catch (PDOException $e) {
        // Transient: the node retries a 5xx (docs/endpoints.md, "The answer").
        throw new Answer(503, ['error' => 'database unavailable'], 'connecting to APP_DB_DSN: ' . $e->getMessage());
    }
    // SQL Server's columns are nvarchar: strings go as Unicode (N'...')
    // where the driver quotes them. Its tables are in APP_DB_SCHEMA.
    if (Endpoint::sqlServer($db)) {
        $db->setAttribute(PDO::ATTR_DEFAULT_STR_PARAM, PDO::PARAM_STR_NATL);
    }
    $schema = getenv('APP_DB_SCHEMA') ?: 'slotpoller';
    Endpoint::createTables($db, $schema);

    // Check 6 of docs/signed-calls.md: 409 for a signature seen before.
    Endpoint::firstUse($db, $signature, $ts, (int) floor($now), $schema);

    // Do not start what cannot end before the node gives up on the call.
    $deadline = $headers['x-slotpoller-deadline'] ?? null;
    $endpoint->requireTime($deadline, microtime(true), 'before the work');

    // A bad request that no retry can fix: a 4xx other than 408 and 429
    // fails the job at once (docs/endpoints.md, "The answer").
    $payload = json_decode($body, true);
    $order = is_array($payload) ? ($payload['order'] ?? null) : null;
    if (!is_int($order) || $order <= 0) {
        throw new Answer(400, ['error' => 'the payload must be a JSON object with an "order": a positive integer']);
    }
    $key = trim($headers['idempotency-key'] ?? '');
    if ($key === '' || strlen($key) > 255) {
        throw new Answer(400, ['error' => 'Idempotency-Key missing or longer than 255 bytes']);
    }
    $job = $headers['x-slotpoller-job'] ?? null;

    // The work and its Idempotency-Key in one transaction: either both are
    // there or neither. A second call with the key waits for the first's
    // transaction on the key's row, then finds it (docs/endpoints.md:
    // "effectively once with the key").
    $db->beginTransaction();
    try {
        if (!Endpoint::insertOnce($db, Endpoint::table($db, 'example_done', $schema), ['idem_key' => $key, 'job_id' => $job])) {
            $db->rollBack();
            error_log(sprintf('%s %s: Idempotency-Key %s already done: nothing to do', $method, $target, $key));
            answer(200, ['outcome' => 'already done', 'order' => $order]);
        }
        $st = $db->prepare('UPDATE ' . Endpoint::table($db, 'example_orders', $schema) . ' SET invoices = invoices + 1 WHERE id = ?');
        $st->execute([$order]);
        if ($st->rowCount() !== 1) {
            throw new Answer(422, ['error' => sprintf('no order %d', $order)]);
        }
        // Work that ran late is not committed: past the deadline another
        // node may already be calling the job again.
        $endpoint->requireTime($deadline, microtime(true), 'before the commit');
        $db->commit();
    } catch (Throwable $e) {
        if ($db->inTransaction()) {
            $db->rollBack();
        }
        throw $e;
    }
    error_log(sprintf('%s %s: order %d invoiced (job %s, Idempotency-Key %s)', $method, $target, $order, $job ?? '-', $key));
    answer(200, ['outcome' => 'invoiced', 'order' => $order]);
} catch (Answer $a) {
    error_log(sprintf('refused %s %s: %d %s', $method, $target, $a->status, $a->getMessage()));
    answer($a->status, $a->body);
} catch (Throwable $e) {
    // Anything else (a deadlock, a lost connection) may pass: 500, retried.
    error_log(sprintf('failed %s %s: %s', $method, $target, $e->getMessage()));
    answer(500, ['error' => 'internal error']);
}
