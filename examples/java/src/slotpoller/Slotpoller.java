// Enqueue slotpoller jobs from Java through the database entry point, inside
// the application's own transaction: a job enqueued in a transaction that
// rolls back never exists; one whose transaction commits runs once (at
// least once if a node dies mid-call).
//
// The connection's database (DatabaseMetaData) chooses the call: a function
// on PostgreSQL, a procedure on MySQL and MariaDB and on SQL Server, a view
// on SQLite. The contract (parameters, defaults, checks, errors) is
// docs/enqueue.md's "The v1 contract".
package slotpoller;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Timestamp;
import java.sql.Types;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

public final class Slotpoller {
    private Slotpoller() {
    }

    /**
     * A job's optional settings. Each one left unset takes the entry point's
     * default: POST, due now on the database clock, 33 attempts, the node's
     * call timeout, no unique key, a generated idempotency key, the queue the
     * nodes route the endpoint to.
     */
    public static final class Options {
        private byte[] payload;
        private String method;
        private Long delayMs;
        private Instant runAt;
        private Integer maxAttempts;
        private Long timeoutMs;
        private String uniqueKey;
        private String idempotencyKey;
        private String queue;
        private String sqlServerSchema = "slotpoller";

        /** The call's body, sent as these bytes: pass the UTF-8 bytes of your JSON. */
        public Options payload(byte[] bytes) { this.payload = bytes; return this; }
        public Options method(String method) { this.method = method; return this; }
        public Options delayMs(long ms) { this.delayMs = ms; return this; }
        public Options runAt(Instant at) { this.runAt = at; return this; }
        public Options maxAttempts(int n) { this.maxAttempts = n; return this; }
        public Options timeoutMs(long ms) { this.timeoutMs = ms; return this; }
        public Options uniqueKey(String key) { this.uniqueKey = key; return this; }
        public Options idempotencyKey(String key) { this.idempotencyKey = key; return this; }
        public Options queue(String queue) { this.queue = queue; return this; }

        /** SQL Server only: the farm's database.schema, "slotpoller" unless set. */
        public Options sqlServerSchema(String schema) { this.sqlServerSchema = schema; return this; }
    }

    /**
     * The entry point refused the job: {@link #field()} names the parameter
     * at fault, and the message is the entry point's "field: problem". A
     * unique key another job holds is a refusal of "unique_key" whose
     * message ends "(id N)" with the holder's id (SQLite's says how to read
     * it). The transaction is then the caller's to roll back.
     */
    public static final class RefusedException extends SQLException {
        private static final long serialVersionUID = 1L;

        private final String field;

        RefusedException(String field, String message, SQLException cause) {
            super(message, cause.getSQLState(), cause.getErrorCode(), cause);
            this.field = field;
        }

        public String field() { return field; }
    }

    /** Enqueues a job with every setting at its default; see {@link #enqueue(Connection, String, Options)}. */
    public static long enqueue(Connection db, String endpoint) throws SQLException {
        return enqueue(db, endpoint, new Options());
    }

    /**
     * Enqueues a job on the connection's current transaction (or on its own
     * when the connection is in auto-commit) and returns the new job's id.
     *
     * @throws RefusedException when the entry point refuses the job
     * @throws SQLException     anything else the database says
     */
    public static long enqueue(Connection db, String endpoint, Options o) throws SQLException {
        // The arguments in the v1 contract's order, MySQL's procedure's
        // (it takes them by position only), with their JDBC types so that
        // a NULL is a typed one.
        List<Arg> args = List.of(
                new Arg("endpoint", endpoint, Types.VARCHAR),
                new Arg("payload", o.payload, Types.VARBINARY),
                new Arg("method", o.method, Types.VARCHAR),
                new Arg("delay_ms", o.delayMs, Types.BIGINT),
                new Arg("run_at", o.runAt, Types.TIMESTAMP),
                new Arg("max_attempts", o.maxAttempts, Types.INTEGER),
                new Arg("timeout_ms", o.timeoutMs, Types.BIGINT),
                new Arg("unique_key", o.uniqueKey, Types.VARCHAR),
                new Arg("idempotency_key", o.idempotencyKey, Types.VARCHAR),
                new Arg("queue", o.queue, Types.VARCHAR));
        Database d = Database.of(db);
        try {
            return switch (d) {
                case POSTGRESQL -> postgres(db, args);
                case MYSQL -> mysql(db, args);
                case SQLSERVER -> sqlServer(db, o.sqlServerSchema, args);
                case SQLITE -> sqlite(db, args);
            };
        } catch (SQLException e) {
            throw refusal(d, e);
        }
    }

    /** The databases the farm runs on, as a connection tells them. */
    public enum Database {
        POSTGRESQL, MYSQL, SQLSERVER, SQLITE;

        public static Database of(Connection db) throws SQLException {
            String name = db.getMetaData().getDatabaseProductName().toLowerCase(Locale.ROOT);
            if (name.contains("postgresql")) return POSTGRESQL;
            if (name.contains("mysql") || name.contains("mariadb")) return MYSQL;
            if (name.contains("sql server")) return SQLSERVER;
            if (name.contains("sqlite")) return SQLITE;
            throw new SQLException("slotpoller knows the entry points of PostgreSQL, MySQL/MariaDB, SQL Server and SQLite, not of " + name);
        }
    }

    private record Arg(String name, Object value, int type) {
    }

    // By name, only the arguments given, so that a parameter v1 adds at the
    // end later changes nothing here.
    private static long postgres(Connection db, List<Arg> args) throws SQLException {
        List<Arg> given = given(args);
        StringBuilder sql = new StringBuilder("SELECT slotpoller_enqueue_v1(");
        for (int i = 0; i < given.size(); i++) {
            sql.append(i == 0 ? "" : ", ").append(given.get(i).name()).append(" => ?");
        }
        try (PreparedStatement st = db.prepareStatement(sql.append(')').toString())) {
            bind(st, given, Database.POSTGRESQL);
            return firstId(st);
        }
    }

    // A procedure takes every argument, by position: NULL is the default.
    private static long mysql(Connection db, List<Arg> args) throws SQLException {
        try (PreparedStatement st = db.prepareStatement("CALL slotpoller_enqueue_v1(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")) {
            bind(st, args, Database.MYSQL);
            return firstId(st);
        }
    }

    private static final Pattern SCHEMA = Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0,127}");

    // By name, only the arguments given. The procedure answers with a
    // one-row result, id.
    private static long sqlServer(Connection db, String schema, List<Arg> args) throws SQLException {
        if (schema == null || !SCHEMA.matcher(schema).matches()) {
            throw new SQLException("SQL Server schema \"" + schema + "\" is not a letter or _ followed by up to 127 letters, digits or _");
        }
        List<Arg> given = given(args);
        StringBuilder sql = new StringBuilder("EXEC [" + schema + "].[enqueue_v1] ");
        for (int i = 0; i < given.size(); i++) {
            sql.append(i == 0 ? "" : ", ").append('@').append(given.get(i).name()).append(" = ?");
        }
        try (PreparedStatement st = db.prepareStatement(sql.toString())) {
            bind(st, given, Database.SQLSERVER);
            return firstId(st);
        }
    }

    // An INSERT into the view, whose trigger checks and writes the job; in
    // the same transaction the writer's lock makes the last id given out
    // this INSERT's. In auto-commit the two get a transaction of their own.
    private static long sqlite(Connection db, List<Arg> args) throws SQLException {
        if (!db.getAutoCommit()) return sqliteInsert(db, args);
        db.setAutoCommit(false);
        try {
            long id = sqliteInsert(db, args);
            db.commit();
            return id;
        } catch (SQLException | RuntimeException e) {
            db.rollback();
            throw e;
        } finally {
            db.setAutoCommit(true);
        }
    }

    private static long sqliteInsert(Connection db, List<Arg> args) throws SQLException {
        List<Arg> given = given(args);
        StringBuilder cols = new StringBuilder(), marks = new StringBuilder();
        for (int i = 0; i < given.size(); i++) {
            cols.append(i == 0 ? "" : ", ").append(given.get(i).name());
            marks.append(i == 0 ? "?" : ", ?");
        }
        try (PreparedStatement st = db.prepareStatement("INSERT INTO slotpoller_enqueue_v1 (" + cols + ") VALUES (" + marks + ")")) {
            bind(st, given, Database.SQLITE);
            st.executeUpdate();
        }
        try (PreparedStatement st = db.prepareStatement("SELECT seq FROM sqlite_sequence WHERE name = 'slotpoller_jobs'")) {
            return firstId(st);
        }
    }

    private static List<Arg> given(List<Arg> args) {
        List<Arg> given = new ArrayList<>();
        for (Arg a : args) {
            if (a.value() != null) given.add(a);
        }
        return given;
    }

    private static void bind(PreparedStatement st, List<Arg> args, Database d) throws SQLException {
        int i = 1;
        for (Arg a : args) {
            Object v = a.value();
            if (v == null) {
                st.setNull(i++, a.type());
            } else if (v instanceof Instant at) {
                // The run time as each entry point takes it: a timestamptz
                // on PostgreSQL, Unix milliseconds on SQLite, a UTC
                // DATETIME/datetime2 on MySQL and SQL Server.
                switch (d) {
                    case POSTGRESQL -> st.setObject(i++, at.atOffset(ZoneOffset.UTC));
                    case SQLITE -> st.setLong(i++, at.toEpochMilli());
                    default -> st.setTimestamp(i++, Timestamp.valueOf(LocalDateTime.ofInstant(at, ZoneOffset.UTC)));
                }
            } else if (v instanceof byte[] b) {
                st.setBytes(i++, b);
            } else {
                st.setObject(i++, v, a.type());
            }
        }
    }

    // The first result set's first column: MySQL's CALL and SQL Server's
    // EXEC may put update counts before it.
    private static long firstId(PreparedStatement st) throws SQLException {
        boolean isResult = st.execute();
        while (!isResult && st.getUpdateCount() != -1) {
            isResult = st.getMoreResults();
        }
        if (!isResult) throw new SQLException("the slotpoller entry point returned no job id");
        try (ResultSet rs = st.getResultSet()) {
            if (!rs.next()) throw new SQLException("the slotpoller entry point returned no job id");
            return rs.getLong(1);
        }
    }

    // The field names of the v1 contract's messages, "field: problem".
    private static final Pattern FIELD = Pattern.compile(
            "\\b(endpoint|payload|method|delay|run_at|max_attempts|timeout|unique_key|idempotency_key|queue|traceparent): (.*)");

    /**
     * The entry point's refusal as a RefusedException; any other error as
     * it came. Bad input is SQLSTATE 22023 (PostgreSQL, MySQL), error
     * 51000 (SQL Server) or a trigger's SQLITE_CONSTRAINT; a taken unique
     * key 23505 (PostgreSQL), 1062 (MySQL), 51001 (SQL Server).
     */
    private static SQLException refusal(Database d, SQLException e) {
        String state = e.getSQLState() == null ? "" : e.getSQLState();
        boolean refused = switch (d) {
            case POSTGRESQL -> state.equals("22023") || state.equals("23505");
            case MYSQL -> state.equals("22023") || e.getErrorCode() == 1062;
            case SQLSERVER -> e.getErrorCode() == 51000 || e.getErrorCode() == 51001;
            case SQLITE -> (e.getErrorCode() & 0xff) == 19; // SQLITE_CONSTRAINT and its extended codes
        };
        String text = e.getMessage() == null ? "" : e.getMessage();
        Matcher m = FIELD.matcher(text.lines().findFirst().orElse(""));
        if (!refused || !m.find()) return e;
        String problem = m.group(2);
        if (d == Database.SQLITE && problem.endsWith(")")) {
            // xerial wraps the trigger's message: "... to abort (field: problem)".
            problem = problem.substring(0, problem.length() - 1);
        }
        return new RefusedException(m.group(1), m.group(1) + ": " + problem, e);
    }
}
