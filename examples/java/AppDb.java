// The example application's database: the connection its settings name,
// and its own tables (the orders, and the endpoint's accepted signatures
// and completed Idempotency-Keys) on each database.
//
//   APP_DB_URL       the JDBC URL of the farm's database, e.g.
//                    jdbc:postgresql://127.0.0.1:5432/farm
//                    jdbc:mariadb://127.0.0.1:3306/farm
//                    jdbc:jtds:sqlserver://127.0.0.1:1433/farm
//                    jdbc:sqlite:/var/lib/slotpoller/slotpoller.db
//   APP_DB_USER, APP_DB_PASSWORD   its login (none for SQLite)
//   APP_DB_SCHEMA    SQL Server only: the farm's database.schema
//                    ("slotpoller" unless set); the example keeps its own
//                    tables there too, so that one schema holds all of it
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;

import slotpoller.Slotpoller;
import slotpoller.Slotpoller.Database;

final class AppDb implements AutoCloseable {
    final Connection db;
    final Database kind;
    final String schema;

    private AppDb(Connection db, Database kind, String schema) {
        this.db = db;
        this.kind = kind;
        this.schema = schema;
    }

    static AppDb connect() throws SQLException {
        String url = System.getenv("APP_DB_URL");
        if (url == null || url.isEmpty()) {
            throw new IllegalStateException("APP_DB_URL is not set: give the JDBC URL of the farm's database, e.g. jdbc:postgresql://127.0.0.1:5432/farm");
        }
        if (url.startsWith("jdbc:jtds:")) {
            // jTDS is a JDBC 3 driver: it does not register itself.
            try {
                Class.forName("net.sourceforge.jtds.jdbc.Driver");
            } catch (ClassNotFoundException e) {
                throw new SQLException("jTDS is not on the classpath (on Debian: apt-get install libjtds-java)", e);
            }
        }
        String schema = System.getenv().getOrDefault("APP_DB_SCHEMA", "slotpoller");
        Connection db = DriverManager.getConnection(url, System.getenv("APP_DB_USER"), System.getenv("APP_DB_PASSWORD"));
        try {
            Database kind = Database.of(db);
            if (kind == Database.SQLITE) {
                // The nodes write the same file: wait for their write lock
                // rather than fail at once.
                try (Statement st = db.createStatement()) {
                    st.execute("PRAGMA busy_timeout = 10000");
                }
            }
            return new AppDb(db, kind, schema);
        } catch (SQLException | RuntimeException e) {
            db.close();
            throw e;
        }
    }

    /** Enqueue options with this database's SQL Server schema. */
    Slotpoller.Options options() {
        return new Slotpoller.Options().sqlServerSchema(schema);
    }

    /** A table of the example's by name: in the farm's schema on SQL Server. */
    String table(String name) {
        return kind == Database.SQLSERVER ? "[" + schema + "].[" + name + "]" : name;
    }

    /** Creates the orders table, and the endpoint's tables with it, if missing. */
    void createTables(boolean endpoint) throws SQLException {
        // On MySQL a CREATE TABLE commits whatever is open: these come
        // before any transaction.
        List<String> statements = switch (kind) {
            case MYSQL -> List.of(
                    "CREATE TABLE IF NOT EXISTS example_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, item VARCHAR(200) NOT NULL,"
                            + " invoices INT NOT NULL DEFAULT 0) ENGINE = InnoDB",
                    "CREATE TABLE IF NOT EXISTS example_seen_signatures (signature CHAR(67) CHARACTER SET ascii PRIMARY KEY,"
                            + " expires_at BIGINT NOT NULL, INDEX (expires_at)) ENGINE = InnoDB",
                    "CREATE TABLE IF NOT EXISTS example_done (idem_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY,"
                            + " job_id VARCHAR(40) NULL, done_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE = InnoDB");
            case POSTGRESQL -> List.of(
                    "CREATE TABLE IF NOT EXISTS example_orders (id bigserial PRIMARY KEY, item text NOT NULL, invoices int NOT NULL DEFAULT 0)",
                    "CREATE TABLE IF NOT EXISTS example_seen_signatures (signature text PRIMARY KEY, expires_at bigint NOT NULL)",
                    "CREATE INDEX IF NOT EXISTS example_seen_signatures_expires ON example_seen_signatures (expires_at)",
                    "CREATE TABLE IF NOT EXISTS example_done (idem_key text PRIMARY KEY, job_id text NULL,"
                            + " done_at timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP)");
            // No (MAX) column: jTDS speaks TDS 7.1, which has no way to
            // read one back. A binary collation keeps keys that differ in
            // case apart, as the other databases do.
            case SQLSERVER -> List.of(
                    "IF OBJECT_ID(N'" + table("example_orders") + "', N'U') IS NULL CREATE TABLE " + table("example_orders")
                            + " (id BIGINT IDENTITY(1, 1) PRIMARY KEY, item NVARCHAR(200) NOT NULL, invoices INT NOT NULL DEFAULT 0)",
                    "IF OBJECT_ID(N'" + table("example_seen_signatures") + "', N'U') IS NULL BEGIN CREATE TABLE " + table("example_seen_signatures")
                            + " (signature CHAR(67) NOT NULL PRIMARY KEY, expires_at BIGINT NOT NULL);"
                            + " CREATE INDEX example_seen_signatures_expires ON " + table("example_seen_signatures") + " (expires_at); END",
                    "IF OBJECT_ID(N'" + table("example_done") + "', N'U') IS NULL CREATE TABLE " + table("example_done")
                            + " (idem_key NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY, job_id VARCHAR(40) NULL,"
                            + " done_at DATETIME2 NOT NULL DEFAULT SYSUTCDATETIME())");
            case SQLITE -> List.of(
                    "CREATE TABLE IF NOT EXISTS example_orders (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT NOT NULL,"
                            + " invoices INTEGER NOT NULL DEFAULT 0)",
                    "CREATE TABLE IF NOT EXISTS example_seen_signatures (signature TEXT PRIMARY KEY, expires_at INTEGER NOT NULL)",
                    "CREATE INDEX IF NOT EXISTS example_seen_signatures_expires ON example_seen_signatures (expires_at)",
                    "CREATE TABLE IF NOT EXISTS example_done (idem_key TEXT PRIMARY KEY, job_id TEXT NULL,"
                            + " done_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)");
        };
        try (Statement st = db.createStatement()) {
            for (String sql : endpoint ? statements : statements.subList(0, 1)) {
                st.execute(sql);
            }
        }
    }

    /** Whether an error is a duplicate key. */
    boolean duplicate(SQLException e) {
        return switch (kind) {
            case POSTGRESQL -> "23505".equals(e.getSQLState());
            case MYSQL -> e.getErrorCode() == 1062;
            case SQLSERVER -> e.getErrorCode() == 2627 || e.getErrorCode() == 2601;
            // SQLITE_CONSTRAINT_PRIMARYKEY and _UNIQUE, or the bare SQLITE_CONSTRAINT.
            case SQLITE -> e.getErrorCode() == 1555 || e.getErrorCode() == 2067 || e.getErrorCode() == 19;
        };
    }

    @Override
    public void close() throws SQLException {
        db.close();
    }
}
