// A check of Slotpoller.enqueue's settings for e2e/example_java_test.go
// (TestJavaExampleEnqueueOptions), not a part of the example: in a
// transaction, a job with every setting given; then in auto-commit one
// with a delay, and one whose unique key is taken, whose refusal is caught
// (a refusal would end PostgreSQL's transaction). It prints one JSON line:
// the two jobs' ids, the run time it gave (Unix ms), and the refusal's
// field and message. The database settings are AppDb's.
import java.sql.SQLException;
import java.time.Instant;
import java.time.temporal.ChronoUnit;

import slotpoller.Slotpoller;

public final class EnqueueOptions {
    public static void main(String[] args) throws SQLException {
        try (AppDb app = AppDb.connect()) {
            app.db.setAutoCommit(false);
            // Every byte value, over the 8,000 bytes jTDS still sends as varbinary.
            byte[] payload = new byte[8000];
            for (int i = 0; i < payload.length; i++) payload[i] = (byte) i;
            // Whole seconds: jTDS sends a Timestamp as a datetime (1/300 s).
            Instant runAt = Instant.now().plus(1, ChronoUnit.HOURS).truncatedTo(ChronoUnit.SECONDS);
            long full = Slotpoller.enqueue(app.db, "/jobs/options?x=%20y", app.options().payload(payload).method("PUT")
                    .runAt(runAt).maxAttempts(7).timeoutMs(2500).uniqueKey("options-é").idempotencyKey("options-idem").queue("java"));
            app.db.commit();
            app.db.setAutoCommit(true);
            long delayed = Slotpoller.enqueue(app.db, "/jobs/delayed", app.options().delayMs(7_200_000));
            String field, message;
            try {
                Slotpoller.enqueue(app.db, "/jobs/taken", app.options().uniqueKey("options-é"));
                throw new IllegalStateException("a taken unique key was not refused");
            } catch (Slotpoller.RefusedException e) {
                field = e.field();
                message = e.getMessage();
            }
            System.out.println("{\"full\":" + full + ",\"delayed\":" + delayed + ",\"run_at\":" + runAt.toEpochMilli()
                    + ",\"field\":" + EndpointServer.quote(field) + ",\"message\":" + EndpointServer.quote(message) + "}");
        }
    }
}
