// An application's write and its job in one transaction: it records an
// order in a table of its own and enqueues the job that sends its invoice,
// then commits both or rolls both back.
//
//   APP_DB_URL=jdbc:mariadb://127.0.0.1:3306/test APP_DB_USER=root \
//     java -cp "$OUT:$JARS" Producer commit|rollback [ENDPOINT]
//
// The database settings are AppDb's. ENDPOINT is the job's path on the
// nodes' base URL, /jobs/send-invoice unless given. It prints one JSON
// line: the outcome, the order's and the job's ids, and the payload. A
// refused enqueue prints the entry point's refusal, rolls back and exits
// with status 2.
import java.nio.charset.StandardCharsets;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

import slotpoller.Slotpoller;

public final class Producer {
    public static void main(String[] args) throws SQLException {
        if (args.length < 1 || args.length > 2 || !(args[0].equals("commit") || args[0].equals("rollback"))) {
            fail(64, "usage: java Producer commit|rollback [ENDPOINT]");
        }
        String endpoint = args.length > 1 ? args[1] : "/jobs/send-invoice";
        try (AppDb app = AppDb.connect()) {
            app.createTables(false);
            app.db.setAutoCommit(false);
            String item = "book";
            long order, job;
            String payload;
            try {
                try (PreparedStatement st = app.db.prepareStatement(
                        "INSERT INTO " + app.table("example_orders") + " (item) VALUES (?)", Statement.RETURN_GENERATED_KEYS)) {
                    st.setString(1, item);
                    st.executeUpdate();
                    try (ResultSet keys = st.getGeneratedKeys()) {
                        keys.next();
                        order = keys.getLong(1);
                    }
                }
                payload = "{\"order\":" + order + ",\"item\":\"" + item + "\"}";
                job = Slotpoller.enqueue(app.db, endpoint,
                        app.options().payload(payload.getBytes(StandardCharsets.UTF_8)).maxAttempts(5));
            } catch (Slotpoller.RefusedException e) {
                app.db.rollback();
                fail(2, "order and job rolled back: refused (" + e.field() + "): " + e.getMessage());
                return;
            }
            String said;
            if (args[0].equals("commit")) {
                app.db.commit();
                said = "committed";
            } else {
                app.db.rollback();
                said = "rolled back";
            }
            System.out.println("{\"outcome\":\"" + said + "\",\"order\":" + order + ",\"job\":" + job
                    + ",\"payload\":\"" + payload.replace("\\", "\\\\").replace("\"", "\\\"") + "\"}");
        }
    }

    private static void fail(int status, String message) {
        System.err.println("producer: " + message);
        System.exit(status);
    }
}
