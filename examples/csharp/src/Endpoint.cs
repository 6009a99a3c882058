// A job endpoint that only slotpoller may call, with what .NET Framework
// and Mono ship (System.Net.HttpListener, System.Data.SqlClient): the
// checks of docs/signed-calls.md ("What an endpoint must check"), the
// deadline and Idempotency-Key rules of docs/endpoints.md ("The call"),
// and the answers of docs/endpoints.md ("The answer"):
//
//   2xx              the job is done (also: it was already done)
//   408, 429, 5xx    the job is retried
//   any other 4xx    the job has failed at once
//
// Accepted signatures and completed keys are rows in the database, not
// memory: every instance of the application behind a load balancer sees
// them, and they survive a restart.

using System;
using System.Collections.Generic;
using System.Data;
using System.Data.SqlClient;
using System.Globalization;
using System.Security.Cryptography;
using System.Text;
using System.Text.RegularExpressions;

namespace JobPages
{
    /// <summary>An answer: the status, a short message for the caller, the detail for the log.</summary>
    public sealed class Answer : Exception
    {
        public readonly int Status;
        public readonly string Error;

        public Answer(int status, string error, string log = null)
            : base(log ?? error)
        {
            Status = status;
            Error = error;
        }
    }

    /// <summary>
    /// The v2 signature as docs/signed-calls.md ("C# (ASP.NET Core)") builds
    /// it, without ASP.NET and in the C# that Mono's compiler takes.
    /// </summary>
    public static class SlotpollerSigning
    {
        /// <summary>The headers a v2 signature covers, in canonical order.</summary>
        public static readonly string[] SignedHeaders =
        {
            "idempotency-key", "x-slotpoller-attempt", "x-slotpoller-deadline", "x-slotpoller-job",
            "x-slotpoller-node", "x-slotpoller-scheduled-for", "x-slotpoller-task",
            "x-slotpoller-timeout-ms", "x-slotpoller-token",
        };

        /// <summary>"v2=&lt;hex&gt;"; header(name) returns the header's single value, or null when absent.</summary>
        public static string SignV2(byte[] key, string method, string target, string timestamp,
            Func<string, string> header, byte[] body)
        {
            var head = new StringBuilder();
            head.Append("v2\n").Append(method).Append('\n').Append(target).Append('\n').Append(timestamp).Append('\n');
            foreach (string name in SignedHeaders)
            {
                head.Append(name);
                string value = header(name);
                if (value != null)
                    head.Append(':').Append(value.Trim(' ', '\t')); // absent: the bare name, no colon
                head.Append('\n');
            }
            byte[] canonical = Encoding.UTF8.GetBytes(head.ToString());
            using (var hmac = new HMACSHA256(key))
            {
                hmac.TransformBlock(canonical, 0, canonical.Length, null, 0);
                hmac.TransformFinalBlock(body, 0, body.Length);
                return "v2=" + BitConverter.ToString(hmac.Hash).Replace("-", "").ToLowerInvariant();
            }
        }

        /// <summary>
        /// Whether a and b are equal, in a time that depends on their length
        /// only (CryptographicOperations.FixedTimeEquals is .NET Core's).
        /// </summary>
        public static bool FixedTimeEquals(byte[] a, byte[] b)
        {
            if (a.Length != b.Length)
                return false;
            int diff = 0;
            for (int i = 0; i < a.Length; i++)
                diff |= a[i] ^ b[i];
            return diff == 0;
        }
    }

    public sealed class Endpoint
    {
        /// <summary>The signature window, either way (docs/signed-calls.md, check 2).</summary>
        public const int MaxAgeSeconds = 300;

        /// <summary>The body cap, checked before anything else is read (check 4).</summary>
        public const int MaxBodyBytes = 1 << 20;

        private static readonly Regex Timestamp = new Regex("^(0|[1-9][0-9]{0,17})$");
        private static readonly Regex V2 = new Regex("^v2=[0-9a-fA-F]{64}$");
        private static readonly Regex Rfc3339 = new Regex(
            @"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$", RegexOptions.IgnoreCase);

        private readonly IList<byte[]> _keys;
        private readonly double _workSeconds;

        /// <param name="keys">the accepted signing keys: the current one and, during a rotation, the previous one</param>
        /// <param name="workSeconds">how long the work may take at most: a call whose deadline is nearer is not started</param>
        public Endpoint(IList<byte[]> keys, double workSeconds = 1.0)
        {
            _keys = keys;
            _workSeconds = workSeconds;
        }

        /// <summary>
        /// Checks the signature of a request: checks 1 to 5 of
        /// docs/signed-calls.md. Returns the accepted signature and its
        /// timestamp; throws a 401 Answer otherwise. header(name) returns
        /// every value the request has for the header.
        /// </summary>
        public Tuple<string, long> Verify(string method, string target, Func<string, string[]> header, byte[] body, long now)
        {
            // "Refuse with 401 Unauthorized" (check 8), the detail in the
            // log only: the caller is told nothing about why.
            Func<string, Answer> refuse = why => new Answer(401, "unauthorized", why);
            if (_keys.Count == 0)
                throw refuse("no signing key configured (JOBPAGES_SIGNING_KEY)");
            // Check 1: both headers, each once; each signed header at most once.
            string[] timestamps = header("x-slotpoller-timestamp") ?? new string[0];
            string[] signatures = header("x-slotpoller-signature") ?? new string[0];
            if (timestamps.Length == 0 || signatures.Length == 0)
                throw refuse("no X-Slotpoller-Timestamp or X-Slotpoller-Signature header");
            if (timestamps.Length > 1 || signatures.Length > 1)
                throw refuse("X-Slotpoller-Timestamp or X-Slotpoller-Signature repeated");
            var signed = new Dictionary<string, string>();
            foreach (string name in SlotpollerSigning.SignedHeaders)
            {
                string[] values = header(name);
                if (values == null || values.Length == 0)
                    continue;
                if (values.Length > 1)
                    throw refuse("signed header repeated: " + name);
                signed[name] = values[0];
            }
            // Check 2: decimal Unix seconds, no sign, no leading zeros,
            // within 5 minutes of this clock either way.
            string timestamp = timestamps[0].Trim(' ', '\t');
            if (!Timestamp.IsMatch(timestamp))
                throw refuse(string.Format("X-Slotpoller-Timestamp \"{0}\" is not Unix seconds", timestamps[0]));
            long ts = long.Parse(timestamp, CultureInfo.InvariantCulture);
            if (Math.Abs(now - ts) > MaxAgeSeconds)
                throw refuse(string.Format("X-Slotpoller-Timestamp {0} is {1} s from this clock, more than {2}", ts, now - ts, MaxAgeSeconds));
            // Check 3: v2 only (this example has no nodes older than v2).
            string signature = signatures[0].Trim(' ', '\t');
            if (!V2.IsMatch(signature))
                throw refuse("X-Slotpoller-Signature is not v2=<64 hex digits>");
            signature = "v2=" + signature.Substring(3).ToLowerInvariant();
            // Checks 4 and 5: the raw target, the timestamp as received, each
            // accepted key, compared in constant time with no early exit.
            byte[] received = Encoding.ASCII.GetBytes(signature);
            bool valid = false;
            foreach (byte[] key in _keys)
            {
                string want = SlotpollerSigning.SignV2(key, method, target, timestamp,
                    name => signed.ContainsKey(name) ? signed[name] : null, body);
                valid |= SlotpollerSigning.FixedTimeEquals(Encoding.ASCII.GetBytes(want), received);
            }
            if (!valid)
                throw refuse(string.Format("X-Slotpoller-Signature does not match {0} {1}", method, target));
            return Tuple.Create(signature, ts);
        }

        /// <summary>
        /// Refuses to start work that cannot end before X-Slotpoller-Deadline,
        /// the time the node gives up on the call (docs/endpoints.md, "The
        /// call"): a 503, which the node retries (docs/endpoints.md, "The
        /// answer": 5xx is retried), so the job runs again on a later
        /// attempt. A call without the header (one made by hand) has no
        /// deadline.
        /// </summary>
        public void RequireTime(string deadline, DateTimeOffset now, string when)
        {
            if (deadline == null)
                return;
            DateTimeOffset? at = ParseDeadline(deadline);
            if (at == null)
                throw new Answer(400, "X-Slotpoller-Deadline is not an RFC 3339 time");
            double left = (at.Value - now).TotalSeconds;
            if (left < _workSeconds)
                throw new Answer(503, "deadline too near: not started", string.Format(CultureInfo.InvariantCulture,
                    "{0}: X-Slotpoller-Deadline {1} is {2:0.000} s away, the work needs up to {3:0.000} s", when, deadline, left, _workSeconds));
        }

        /// <summary>An RFC 3339 time, or null.</summary>
        public static DateTimeOffset? ParseDeadline(string value)
        {
            Match m = Rfc3339.Match(value.Trim(' ', '\t'));
            if (!m.Success)
                return null;
            string zone = m.Groups[3].Value.ToUpperInvariant() == "Z" ? "+00:00" : m.Groups[3].Value;
            DateTimeOffset t;
            if (!DateTimeOffset.TryParseExact(m.Groups[1].Value + zone, "yyyy'-'MM'-'dd'T'HH':'mm':'sszzz",
                    CultureInfo.InvariantCulture, DateTimeStyles.None, out t))
                return null;
            // Up to 9 digits of fraction; DateTimeOffset keeps 7.
            if (m.Groups[2].Success)
                t = t.AddTicks((long)(double.Parse("0" + m.Groups[2].Value, CultureInfo.InvariantCulture) * TimeSpan.TicksPerSecond));
            return t;
        }

        /// <summary>The example's tables, in schema, created when missing.</summary>
        public static void CreateTables(SqlConnection db, string schema)
        {
            string s = Slotpoller.Quote(schema);
            Func<string, string> missing = table => "IF OBJECT_ID(N'" + (s + "." + table).Replace("'", "''") + "', N'U') IS NULL ";
            // Idempotency keys compare byte for byte (a binary collation):
            // SQL Server's default collation would take "Key" for "key".
            string[] statements =
            {
                missing("[example_orders]") + "CREATE TABLE " + s + ".[example_orders] (id BIGINT IDENTITY(1, 1) PRIMARY KEY,"
                    + " item NVARCHAR(200) NOT NULL, invoices INT NOT NULL DEFAULT 0)",
                missing("[example_seen_signatures]") + "BEGIN CREATE TABLE " + s + ".[example_seen_signatures] ("
                    + "signature CHAR(67) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY, expires_at BIGINT NOT NULL);"
                    + " CREATE INDEX example_seen_signatures_expires ON " + s + ".[example_seen_signatures] (expires_at); END",
                missing("[example_done]") + "CREATE TABLE " + s + ".[example_done] ("
                    + "idem_key NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY, job_id NVARCHAR(40) NULL,"
                    + " done_at DATETIME2 NOT NULL DEFAULT SYSUTCDATETIME())",
            };
            foreach (string sql in statements)
            {
                using (var cmd = new SqlCommand(sql, db))
                    cmd.ExecuteNonQuery();
            }
        }

        /// <summary>
        /// Records an accepted signature until its timestamp is out of the
        /// window; a 409 Answer when it was already there: a replay
        /// (docs/signed-calls.md, check 6 and "Replays").
        /// </summary>
        public static void FirstUse(SqlConnection db, string schema, string signature, long ts, long now)
        {
            string table = Slotpoller.Quote(schema) + ".[example_seen_signatures]";
            // Signatures whose timestamp left the window are refused as
            // stale anyway: forget them.
            using (var purge = new SqlCommand("DELETE FROM " + table + " WHERE expires_at < @now", db))
            {
                purge.Parameters.Add("@now", SqlDbType.BigInt).Value = now;
                purge.ExecuteNonQuery();
            }
            using (var insert = new SqlCommand("INSERT INTO " + table + " (signature, expires_at) VALUES (@signature, @expires)", db))
            {
                insert.Parameters.Add("@signature", SqlDbType.Char, 67).Value = signature;
                insert.Parameters.Add("@expires", SqlDbType.BigInt).Value = ts + MaxAgeSeconds;
                try
                {
                    insert.ExecuteNonQuery();
                }
                catch (SqlException e) when (Duplicate(e))
                {
                    throw new Answer(409, "already received", "replay of a signature already accepted");
                }
            }
        }

        /// <summary>Whether a SQL Server error is a duplicate key: 2627 (a constraint) or 2601 (a unique index).</summary>
        public static bool Duplicate(SqlException e)
        {
            foreach (SqlError error in e.Errors)
            {
                if (error.Number == 2627 || error.Number == 2601)
                    return true;
            }
            return false;
        }
    }
}
