// The v2 signature of a slotpoller call and its checks on the endpoint's
// side: checks 1 to 5 of docs/signed-calls.md ("What an endpoint must
// check"); the replay check (6) needs a store the endpoint shares, see
// EndpointServer. JDK only: javax.crypto's HMAC, MessageDigest.isEqual.
package slotpoller;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.Function;
import java.util.regex.Pattern;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

public final class Signature {
    /** The signature window, either way (check 2). */
    public static final long MAX_AGE_SECONDS = 300;

    /** The headers a v2 signature covers, in canonical order ("How the signature is built"). */
    public static final List<String> SIGNED_HEADERS = List.of(
            "idempotency-key",
            "x-slotpoller-attempt",
            "x-slotpoller-deadline",
            "x-slotpoller-job",
            "x-slotpoller-node",
            "x-slotpoller-scheduled-for",
            "x-slotpoller-task",
            "x-slotpoller-timeout-ms",
            "x-slotpoller-token");

    /** A call the signature check refused: 401, the reason for the endpoint's log only. */
    public static final class Refused extends Exception {
        private static final long serialVersionUID = 1L;

        public Refused(String reason) {
            super(reason);
        }
    }

    /** An accepted signature ("v2=" and lowercase hex) and its timestamp. */
    public record Accepted(String signature, long timestamp) {
    }

    private static final Pattern TIMESTAMP = Pattern.compile("0|[1-9][0-9]{0,17}");
    private static final Pattern V2 = Pattern.compile("v2=[0-9a-fA-F]{64}");

    private final List<byte[]> keys;

    /**
     * @param keys the accepted keys, each the UTF-8 bytes of the string as
     *             written: the current one and, during a rotation, the previous one
     */
    public Signature(List<byte[]> keys) {
        this.keys = List.copyOf(keys);
    }

    /**
     * "v2=" and the lowercase hex HMAC-SHA-256 of the canonical string.
     *
     * @param header a signed header's single value by its lower-case name, null when absent
     */
    public static String sign(byte[] key, String method, String target, String timestamp,
            Function<String, String> header, byte[] body) {
        StringBuilder head = new StringBuilder("v2\n").append(method).append('\n').append(target).append('\n')
                .append(timestamp).append('\n');
        for (String name : SIGNED_HEADERS) {
            // Present: "name:value" without surrounding spaces and tabs;
            // absent: the bare name, with no colon.
            String value = header.apply(name);
            head.append(name);
            if (value != null) head.append(':').append(trim(value));
            head.append('\n');
        }
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(key, "HmacSHA256"));
            mac.update(head.toString().getBytes(StandardCharsets.UTF_8));
            return "v2=" + HexFormat.of().formatHex(mac.doFinal(body));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is missing from this JDK", e);
        }
    }

    /**
     * Checks a call's signature (checks 1 to 5) and returns it.
     *
     * @param target  the raw request target: path and query as in the request line
     * @param headers every value of a header by its lower-case name (empty when absent)
     * @param now     this clock, Unix seconds
     */
    public Accepted verify(String method, String target, Function<String, List<String>> headers, byte[] body, long now)
            throws Refused {
        if (keys.isEmpty()) throw new Refused("no signing key configured (JOBPAGES_SIGNING_KEY)");
        // Check 1: both headers, each exactly once, and each signed header
        // at most once.
        List<String> timestamps = headers.apply("x-slotpoller-timestamp");
        List<String> signatures = headers.apply("x-slotpoller-signature");
        if (timestamps.isEmpty() || signatures.isEmpty()) {
            throw new Refused("no X-Slotpoller-Timestamp or X-Slotpoller-Signature header");
        }
        if (timestamps.size() > 1 || signatures.size() > 1) throw new Refused("signature headers repeated");
        for (String name : SIGNED_HEADERS) {
            if (headers.apply(name).size() > 1) throw new Refused("signed header repeated: " + name);
        }
        // Check 2: decimal Unix seconds, no sign, no leading zeros, within 5
        // minutes of this clock either way.
        String timestamp = trim(timestamps.get(0));
        if (!TIMESTAMP.matcher(timestamp).matches()) {
            throw new Refused("X-Slotpoller-Timestamp \"" + timestamp + "\" is not Unix seconds");
        }
        long ts = Long.parseLong(timestamp);
        if (Math.abs(now - ts) > MAX_AGE_SECONDS) {
            throw new Refused("X-Slotpoller-Timestamp " + ts + " is " + (now - ts) + " s from this clock, more than " + MAX_AGE_SECONDS);
        }
        // Check 3: v2 only (this example has no nodes older than v2).
        String signature = trim(signatures.get(0));
        if (!V2.matcher(signature).matches()) throw new Refused("X-Slotpoller-Signature is not v2=<64 hex digits>");
        signature = signature.toLowerCase(Locale.ROOT);
        // Checks 4 and 5: the raw target, the timestamp as received, each
        // accepted key, compared in constant time with no early exit.
        Function<String, String> one = name -> headers.apply(name).isEmpty() ? null : headers.apply(name).get(0);
        byte[] received = signature.getBytes(StandardCharsets.US_ASCII);
        boolean valid = false;
        for (byte[] key : keys) {
            byte[] want = sign(key, method, target, timestamp, one, body).getBytes(StandardCharsets.US_ASCII);
            valid |= MessageDigest.isEqual(want, received);
        }
        if (!valid) throw new Refused("X-Slotpoller-Signature does not match " + method + " " + target);
        return new Accepted(signature, ts);
    }

    // HTTP's optional whitespace: spaces and tabs, nothing else.
    private static String trim(String s) {
        int b = 0, e = s.length();
        while (b < e && (s.charAt(b) == ' ' || s.charAt(b) == '\t')) b++;
        while (e > b && (s.charAt(e - 1) == ' ' || s.charAt(e - 1) == '\t')) e--;
        return s.substring(b, e);
    }

    /**
     * Prints the signature of a call, to check this code against
     * docs/signed-calls.md's test vector or to call an endpoint by hand:
     * java slotpoller.Signature KEY METHOD TARGET TIMESTAMP BODY [header=value ...]
     */
    public static void main(String[] args) {
        if (args.length < 5) {
            System.err.println("usage: java slotpoller.Signature KEY METHOD TARGET TIMESTAMP BODY [header=value ...]");
            System.exit(64);
        }
        Map<String, String> given = new HashMap<>();
        for (int i = 5; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            given.put(kv[0].toLowerCase(Locale.ROOT), kv.length > 1 ? kv[1] : "");
        }
        System.out.println(sign(args[0].getBytes(StandardCharsets.UTF_8), args[1], args[2], args[3], given::get,
                args[4].getBytes(StandardCharsets.UTF_8)));
    }
}
