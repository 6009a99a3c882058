<?php
// An application's write and its job in one transaction: it records an
// order in a table of its own and enqueues the job that sends its invoice,
// then commits both or rolls both back.
//
//   APP_DB_DSN='mysql:host=127.0.0.1;port=3306;dbname=test;charset=utf8mb4' APP_DB_USER=root \
//     php producer.php commit|rollback [ENDPOINT]
//
// APP_DB_DSN is a PDO DSN of the farm's database (mysql:, pgsql:, or on
// SQL Server dblib: or sqlsrv:); APP_DB_USER and APP_DB_PASSWORD are its
// login. On SQL Server APP_DB_SCHEMA is the schema of slotpoller's tables
// (the nodes' database.schema, slotpoller unless given), which holds the
// example's table too. ENDPOINT is the job's
// path on the nodes' base URL, /jobs/send-invoice unless given. It prints
// one JSON line: the outcome, the order's and the job's ids, and the
// payload. A refused enqueue prints the database's error, rolls back and
// exits with status 2.

declare(strict_types=1);

require __DIR__ . '/src/Slotpoller.php';

use Slotpoller\Slotpoller;

function fail(int $status, string $message): never
{
    fwrite(STDERR, 'producer: ' . $message . PHP_EOL);
    exit($status);
}

$usage = 'usage: php producer.php commit|rollback [ENDPOINT]';
$outcome = $argv[1] ?? '';
if (!in_array($outcome, ['commit', 'rollback'], true) || count($argv) > 3) {
    fail(64, $usage);
}
$endpoint = $argv[2] ?? '/jobs/send-invoice';
$dsn = getenv('APP_DB_DSN');
if ($dsn === false || $dsn === '') {
    fail(64, 'APP_DB_DSN is not set: give the PDO DSN of the farm\'s database, e.g. mysql:host=127.0.0.1;dbname=test;charset=utf8mb4');
}

$db = new PDO($dsn, getenv('APP_DB_USER') ?: null, getenv('APP_DB_PASSWORD') ?: null, [
    PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
]);
$driver = $db->getAttribute(PDO::ATTR_DRIVER_NAME);
$sqlServer = in_array($driver, Slotpoller::SQLSERVER_DRIVERS, true);
// SQL Server has no search path: the example's table is named in the
// farm's schema there.
$schema = getenv('APP_DB_SCHEMA') ?: 'slotpoller';
$orders = $sqlServer ? Slotpoller::quoteName($schema) . '.example_orders' : 'example_orders';

// The application's own table (invoices: how many times endpoint.php
// sent the order's invoice). On MySQL a CREATE TABLE commits whatever
// is open, so it comes before the transaction.
$db->exec(match (true) {
    $driver === 'mysql' => 'CREATE TABLE IF NOT EXISTS example_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, item VARCHAR(200) NOT NULL,'
        . ' invoices INT NOT NULL DEFAULT 0) ENGINE = InnoDB',
    $driver === 'pgsql' => 'CREATE TABLE IF NOT EXISTS example_orders (id bigserial PRIMARY KEY, item text NOT NULL, invoices int NOT NULL DEFAULT 0)',
    $sqlServer => 'IF OBJECT_ID(' . $db->quote($orders) . ", 'U') IS NULL CREATE TABLE $orders (id BIGINT IDENTITY PRIMARY KEY, item NVARCHAR(200) NOT NULL,"
        . ' invoices INT NOT NULL DEFAULT 0)',
    default => fail(64, sprintf('PDO driver "%s": this example knows mysql, pgsql, dblib and sqlsrv', $driver)),
});

$db->beginTransaction();
try {
    $item = 'book';
    if ($driver === 'mysql') {
        $db->prepare('INSERT INTO example_orders (item) VALUES (?)')->execute([$item]);
        $order = (int) $db->lastInsertId();
    } else {
        $st = $db->prepare($sqlServer
            ? "INSERT INTO $orders (item) OUTPUT INSERTED.id VALUES (?)"
            : 'INSERT INTO example_orders (item) VALUES (?) RETURNING id');
        $st->execute([$item]);
        $order = (int) $st->fetchColumn();
        $st->closeCursor();
    }
    $payload = json_encode(['order' => $order, 'item' => $item], JSON_THROW_ON_ERROR);
    $job = Slotpoller::enqueue($db, $endpoint, $payload, maxAttempts: 5, schema: $schema);
} catch (PDOException $e) {
    $db->rollBack();
    // The entry point's refusals say "field: problem": SQLSTATE 22023 on
    // PostgreSQL and MySQL, server error 51000 on SQL Server.
    fail(2, sprintf('order and job rolled back: %s', $e->getMessage()));
}

if ($outcome === 'commit') {
    $db->commit();
    $said = 'committed';
} else {
    $db->rollBack();
    $said = 'rolled back';
}
echo json_encode(['outcome' => $said, 'order' => $order, 'job' => $job, 'payload' => $payload], JSON_THROW_ON_ERROR), PHP_EOL;
