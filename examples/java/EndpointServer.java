// The job endpoint of the example: POST /jobs/send-invoice with the payload
// Producer enqueues, {"order": N}, marks order N invoiced, once. The JDK's
// own HTTP server (com.sun.net.httpserver), the database through JDBC.
//
//   APP_DB_URL=jdbc:mariadb://127.0.0.1:3306/test APP_DB_USER=root \
//   JOBPAGES_SIGNING_KEY='the nodes' SLOTPOLLER_JOBS_SIGNING_KEY' \
//     java -cp "$OUT:$JARS" EndpointServer [HOST:PORT]
//
// It listens on HOST:PORT, 127.0.0.1:8080 unless given. The database
// settings are AppDb's. JOBPAGES_SIGNING_KEY is the key the nodes sign
// with; JOBPAGES_SIGNING_KEY_PREVIOUS the old one during a key rotation
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
// A database that cannot be reached answers 503, any other failure 500:
// the node retries both. Accepted signatures and completed keys are rows in
// the database, so several instances of the application share them.
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.math.BigDecimal;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.regex.Pattern;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import slotpoller.Signature;

public final class EndpointServer {
    /** The body cap, checked before anything else is read (check 4). */
    static final int MAX_BODY_BYTES = 1 << 20;

    /** How long the work may take at most: a call whose deadline is nearer is not started. */
    static final long WORK_MILLIS = 1000;

    /** An answer: the status, a short JSON error or outcome, and the reason for the log. */
    static final class Answer extends Exception {
        private static final long serialVersionUID = 1L;
        final int status;
        final String body;

        Answer(int status, String body, String log) {
            super(log);
            this.status = status;
            this.body = body;
        }

        Answer(int status, String error) {
            this(status, "{\"error\":" + quote(error) + "}", error);
        }
    }

    public static void main(String[] args) throws Exception {
        String listen = args.length > 0 ? args[0] : "127.0.0.1:8080";
        int colon = listen.lastIndexOf(':');
        List<byte[]> keys = new ArrayList<>();
        for (String name : List.of("JOBPAGES_SIGNING_KEY", "JOBPAGES_SIGNING_KEY_PREVIOUS")) {
            String key = System.getenv(name);
            if (key != null && !key.isEmpty()) keys.add(key.getBytes(StandardCharsets.UTF_8));
        }
        if (keys.isEmpty()) {
            System.err.println("endpoint: JOBPAGES_SIGNING_KEY is not set");
            System.exit(64);
        }
        // The tables before the first call: on MySQL a CREATE TABLE
        // commits whatever is open, and two first calls would race.
        try (AppDb app = AppDb.connect()) {
            app.createTables(true);
        }
        EndpointServer endpoint = new EndpointServer(new Signature(keys));
        HttpServer server = HttpServer.create(new InetSocketAddress(listen.substring(0, colon), Integer.parseInt(listen.substring(colon + 1))), 64);
        server.createContext("/", endpoint::handle);
        server.setExecutor(Executors.newFixedThreadPool(8));
        server.start();
        System.err.println("endpoint: listening on http://" + listen);
    }

    private final Signature signature;

    EndpointServer(Signature signature) {
        this.signature = signature;
    }

    void handle(HttpExchange ex) throws IOException {
        String method = ex.getRequestMethod();
        // The raw request target as sent, percent-encoding and query
        // untouched (docs/signed-calls.md: "Use the raw request target").
        URI uri = ex.getRequestURI();
        String target = uri.getRawPath() + (uri.getRawQuery() == null ? "" : "?" + uri.getRawQuery());
        int status;
        String body;
        try {
            body = serve(ex, method, target, uri.getRawPath());
            status = 200;
        } catch (Answer a) {
            System.err.printf("refused %s %s: %d %s%n", method, target, a.status, a.getMessage());
            status = a.status;
            body = a.body;
        } catch (SQLException | RuntimeException e) {
            // Anything else (a deadlock, a lost connection) may pass: 500, retried.
            System.err.printf("failed %s %s: %s%n", method, target, e);
            status = 500;
            body = "{\"error\":\"internal error\"}";
        }
        byte[] out = (body + "\n").getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", "application/json");
        ex.sendResponseHeaders(status, out.length);
        try (OutputStream os = ex.getResponseBody()) {
            os.write(out);
        }
    }

    private String serve(HttpExchange ex, String method, String target, String path) throws Answer, SQLException, IOException {
        // Check 4 of docs/signed-calls.md: cap the body before reading it.
        String length = ex.getRequestHeaders().getFirst("Content-Length");
        if (length != null && length.matches("[0-9]{1,18}") && Long.parseLong(length) > MAX_BODY_BYTES) {
            throw new Answer(413, "request body too large");
        }
        byte[] body;
        try (InputStream in = ex.getRequestBody()) {
            body = in.readNBytes(MAX_BODY_BYTES + 1);
        }
        if (body.length > MAX_BODY_BYTES) throw new Answer(413, "request body too large");

        // Checks 1 to 5: 401, the detail in the log only.
        Signature.Accepted accepted;
        try {
            accepted = signature.verify(method, target, name -> ex.getRequestHeaders().getOrDefault(name, List.of()),
                    body, Instant.now().getEpochSecond());
        } catch (Signature.Refused r) {
            throw new Answer(401, "{\"error\":\"unauthorized\"}", r.getMessage());
        }
        if (!path.equals("/jobs/send-invoice")) throw new Answer(404, "no such job");
        if (!method.equals("POST")) throw new Answer(405, "POST only");

        AppDb app;
        try {
            app = AppDb.connect();
        } catch (SQLException e) {
            // Transient: the node retries a 5xx (docs/endpoints.md, "The answer").
            throw new Answer(503, "{\"error\":\"database unavailable\"}", "connecting to APP_DB_URL: " + e.getMessage());
        }
        try (app) {
            // Check 6: 409 for a signature seen before.
            firstUse(app, accepted);

            // Do not start what cannot end before the node gives up on the call.
            String deadline = ex.getRequestHeaders().getFirst("X-Slotpoller-Deadline");
            requireTime(deadline, "before the work");

            // A bad request that no retry can fix: a 4xx other than 408 and
            // 429 fails the job at once (docs/endpoints.md, "The answer").
            long order = order(body);
            String key = ex.getRequestHeaders().getFirst("Idempotency-Key");
            key = key == null ? "" : key.strip();
            if (key.isEmpty() || key.getBytes(StandardCharsets.UTF_8).length > 255) {
                throw new Answer(400, "Idempotency-Key missing or longer than 255 bytes");
            }
            String job = ex.getRequestHeaders().getFirst("X-Slotpoller-Job");

            // The work and its Idempotency-Key in one transaction: either
            // both are there or neither. A second call with the key waits
            // for the first's transaction on the key's row, then finds it
            // (docs/endpoints.md: "effectively once with the key").
            app.db.setAutoCommit(false);
            try {
                try (PreparedStatement st = app.db.prepareStatement(
                        "INSERT INTO " + app.table("example_done") + " (idem_key, job_id) VALUES (?, ?)")) {
                    st.setString(1, key);
                    st.setString(2, job);
                    st.executeUpdate();
                } catch (SQLException e) {
                    if (!app.duplicate(e)) throw e;
                    app.db.rollback();
                    System.err.printf("%s %s: Idempotency-Key %s already done: nothing to do%n", method, target, key);
                    return "{\"outcome\":\"already done\",\"order\":" + order + "}";
                }
                try (PreparedStatement st = app.db.prepareStatement(
                        "UPDATE " + app.table("example_orders") + " SET invoices = invoices + 1 WHERE id = ?")) {
                    st.setLong(1, order);
                    if (st.executeUpdate() != 1) throw new Answer(422, "no order " + order);
                }
                // Work that ran late is not committed: past the deadline
                // another node may already be calling the job again.
                requireTime(deadline, "before the commit");
                app.db.commit();
            } catch (Answer | SQLException | RuntimeException e) {
                app.db.rollback();
                throw e;
            }
            System.err.printf("%s %s: order %d invoiced (job %s, Idempotency-Key %s)%n", method, target, order, job == null ? "-" : job, key);
            return "{\"outcome\":\"invoiced\",\"order\":" + order + "}";
        }
    }

    /**
     * Records an accepted signature until its timestamp is out of the
     * window; a 409 Answer when it was already there: a replay
     * (docs/signed-calls.md, check 6 and "Replays").
     */
    private static void firstUse(AppDb app, Signature.Accepted accepted) throws SQLException, Answer {
        String table = app.table("example_seen_signatures");
        // Signatures whose timestamp left the window are refused as stale
        // anyway: forget them.
        try (PreparedStatement st = app.db.prepareStatement("DELETE FROM " + table + " WHERE expires_at < ?")) {
            st.setLong(1, Instant.now().getEpochSecond());
            st.executeUpdate();
        }
        try (PreparedStatement st = app.db.prepareStatement("INSERT INTO " + table + " (signature, expires_at) VALUES (?, ?)")) {
            st.setString(1, accepted.signature());
            st.setLong(2, accepted.timestamp() + Signature.MAX_AGE_SECONDS);
            st.executeUpdate();
        } catch (SQLException e) {
            if (app.duplicate(e)) throw new Answer(409, "{\"error\":\"already received\"}", "replay of a signature already accepted");
            throw e;
        }
    }

    /**
     * Refuses to start work that cannot end before X-Slotpoller-Deadline,
     * the time the node gives up on the call (docs/endpoints.md, "The
     * call"): a 503, which the node retries, so the job runs again on a
     * later attempt. A call without the header (one made by hand) has no
     * deadline.
     */
    static void requireTime(String deadline, String when) throws Answer {
        if (deadline == null) return;
        Instant at;
        try {
            at = OffsetDateTime.parse(deadline.strip()).toInstant();
        } catch (DateTimeParseException e) {
            throw new Answer(400, "X-Slotpoller-Deadline is not an RFC 3339 time");
        }
        long left = at.toEpochMilli() - System.currentTimeMillis();
        if (left < WORK_MILLIS) {
            throw new Answer(503, "{\"error\":\"deadline too near: not started\"}",
                    when + ": X-Slotpoller-Deadline " + deadline + " is " + left + " ms away, the work needs up to " + WORK_MILLIS + " ms");
        }
    }

    /** The order the payload names: a JSON object's "order", a positive integer; else 400. */
    static long order(byte[] body) throws Answer {
        Object payload;
        try {
            payload = new Json(new String(body, StandardCharsets.UTF_8)).document();
        } catch (IllegalArgumentException e) {
            payload = null;
        }
        if (payload instanceof Map<?, ?> m && m.get("order") instanceof Long n && n > 0) return n;
        throw new Answer(400, "the payload must be a JSON object with an \"order\": a positive integer");
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                default -> b.append(c < 0x20 ? String.format("\\u%04x", (int) c) : String.valueOf(c));
            }
        }
        return b.append('"').toString();
    }

    /**
     * A strict JSON reader (RFC 8259), as small as the payload needs: the JDK
     * has none. Objects are Maps, arrays Lists; a number is a Long when
     * written as an integer of up to 18 digits (1.0 and 1e0 are not), else a
     * BigDecimal; strings, booleans and null as such.
     */
    static final class Json {
        private final String s;
        private int i;

        Json(String s) {
            this.s = s;
        }

        Object document() {
            Object v = value();
            space();
            if (i != s.length()) throw new IllegalArgumentException("JSON: text after the value at " + i);
            return v;
        }

        private Object value() {
            space();
            if (i >= s.length()) throw new IllegalArgumentException("JSON: unexpected end");
            char c = s.charAt(i);
            if (c == '{') {
                i++;
                Map<String, Object> m = new LinkedHashMap<>();
                space();
                if (peek('}')) return m;
                do {
                    space();
                    String k = string();
                    space();
                    expect(':');
                    m.put(k, value());
                    space();
                } while (peek(','));
                expect('}');
                return m;
            }
            if (c == '[') {
                i++;
                List<Object> l = new ArrayList<>();
                space();
                if (peek(']')) return l;
                do {
                    l.add(value());
                    space();
                } while (peek(','));
                expect(']');
                return l;
            }
            if (c == '"') return string();
            for (String word : List.of("true", "false", "null")) {
                if (s.startsWith(word, i)) {
                    i += word.length();
                    return word.equals("null") ? null : Boolean.valueOf(word);
                }
            }
            var m = NUMBER.matcher(s).region(i, s.length());
            if (!m.lookingAt()) throw new IllegalArgumentException("JSON: unexpected " + c + " at " + i);
            i = m.end();
            if (m.group(2) == null && m.group(3) == null && m.group().length() <= 18) return Long.valueOf(m.group());
            return new BigDecimal(m.group());
        }

        private static final Pattern NUMBER = Pattern.compile("-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?");

        private String string() {
            expect('"');
            StringBuilder b = new StringBuilder();
            while (true) {
                if (i >= s.length()) throw new IllegalArgumentException("JSON: unterminated string");
                char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c < 0x20) throw new IllegalArgumentException("JSON: control character in a string");
                if (c != '\\') {
                    b.append(c);
                    continue;
                }
                if (i >= s.length()) throw new IllegalArgumentException("JSON: unterminated string");
                char e = s.charAt(i++);
                switch (e) {
                    case '"', '\\', '/' -> b.append(e);
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'n' -> b.append('\n');
                    case 'r' -> b.append('\r');
                    case 't' -> b.append('\t');
                    case 'u' -> {
                        if (i + 4 > s.length() || !s.substring(i, i + 4).matches("[0-9a-fA-F]{4}")) {
                            throw new IllegalArgumentException("JSON: bad \\u escape");
                        }
                        b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                        i += 4;
                    }
                    default -> throw new IllegalArgumentException("JSON: bad escape \\" + e);
                }
            }
        }

        private void space() {
            while (i < s.length() && " \t\n\r".indexOf(s.charAt(i)) >= 0) i++;
        }

        private boolean peek(char c) {
            if (i < s.length() && s.charAt(i) == c) {
                i++;
                return true;
            }
            return false;
        }

        private void expect(char c) {
            if (!peek(c)) throw new IllegalArgumentException("JSON: expected " + c + " at " + i);
        }
    }
}
