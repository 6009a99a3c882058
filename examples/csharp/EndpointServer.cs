// The job endpoint of the example: POST /jobs/send-invoice with the payload
// producer.exe enqueues, {"order": N}, marks order N invoiced, once.
//
//   mcs -r:System.Data.dll -r:System.Web.Extensions.dll -out:endpoint.exe EndpointServer.cs src/Endpoint.cs src/Slotpoller.cs
//   APP_DB_CONNECTION='Server=127.0.0.1,1433;Database=test;User ID=app;Password=...' \
//   JOBPAGES_SIGNING_KEY='the nodes' SLOTPOLLER_JOBS_SIGNING_KEY' \
//     mono endpoint.exe http://127.0.0.1:8080/
//
// APP_DB_CONNECTION and APP_DB_SCHEMA are the database as producer.exe
// takes them. JOBPAGES_SIGNING_KEY is the key the nodes sign with;
// JOBPAGES_SIGNING_KEY_PREVIOUS the old one during a key rotation
// (docs/signed-calls.md, "Rotate without failed calls"; not
// SLOTPOLLER_..., which a node on the same machine would take for its own
// settings). The argument is the HttpListener prefix to serve.
//
// In order, each step answering as docs/signed-calls.md and
// docs/endpoints.md ("The answer") say:
//   1. the v2 signature, within 5 minutes    401, the job fails
//   2. a signature already accepted           409, the job fails
//   3. X-Slotpoller-Deadline too near/passed  503, retried on a later attempt
//   4. the payload names no order             400; an unknown order 422
//   5. Idempotency-Key already done           200, nothing done again
//   6. the order invoiced and the key recorded in one transaction: 200
// A database that cannot be reached answers 503, any other failure 500,
// which the node retries.

using System;
using System.Collections.Generic;
using System.Data;
using System.Data.SqlClient;
using System.IO;
using System.Linq;
using System.Net;
using System.Text;
using System.Threading;
using System.Web.Script.Serialization;

namespace JobPages
{
    public static class EndpointServer
    {
        private static string _connectionString;
        private static string _schema;
        private static Endpoint _endpoint;

        public static int Main(string[] args)
        {
            string prefix = args.Length > 0 ? args[0] : "http://127.0.0.1:8080/";
            _connectionString = Environment.GetEnvironmentVariable("APP_DB_CONNECTION");
            if (string.IsNullOrEmpty(_connectionString))
            {
                Console.Error.WriteLine("endpoint: APP_DB_CONNECTION is not set: give the ADO.NET connection string of the application's database");
                return 64;
            }
            _schema = Environment.GetEnvironmentVariable("APP_DB_SCHEMA");
            if (string.IsNullOrEmpty(_schema))
                _schema = "dbo";
            // The key's UTF-8 bytes as written: nothing decodes or trims it.
            byte[][] keys = new[] { "JOBPAGES_SIGNING_KEY", "JOBPAGES_SIGNING_KEY_PREVIOUS" }
                .Select(Environment.GetEnvironmentVariable)
                .Where(k => !string.IsNullOrEmpty(k))
                .Select(k => Encoding.UTF8.GetBytes(k))
                .ToArray();
            if (keys.Length == 0)
            {
                // Fail at start rather than let unsigned calls through.
                Console.Error.WriteLine("endpoint: JOBPAGES_SIGNING_KEY is not set");
                return 64;
            }
            _endpoint = new Endpoint(keys);

            using (var db = new SqlConnection(_connectionString))
            {
                db.Open();
                Endpoint.CreateTables(db, _schema);
            }

            var listener = new HttpListener();
            listener.Prefixes.Add(prefix);
            listener.Start();
            Log("listening on " + prefix);
            while (true)
            {
                HttpListenerContext context = listener.GetContext();
                // One call does not wait for another: a slow database holds
                // only its own request.
                ThreadPool.QueueUserWorkItem(_ => Handle(context));
            }
        }

        private static void Handle(HttpListenerContext context)
        {
            HttpListenerRequest request = context.Request;
            string method = request.HttpMethod;
            // The raw request target as sent, percent-encoding and query
            // untouched (docs/signed-calls.md: "Use the raw request target").
            string target = request.RawUrl;
            string path = target.Split(new[] { '?' }, 2)[0];
            try
            {
                // Check 4 of docs/signed-calls.md: cap the body before reading it.
                if (request.ContentLength64 > Endpoint.MaxBodyBytes)
                    throw new Answer(413, "request body too large");
                byte[] body = ReadBody(request.InputStream, Endpoint.MaxBodyBytes);
                if (body == null)
                    throw new Answer(413, "request body too large");

                Tuple<string, long> accepted = _endpoint.Verify(method, target, request.Headers.GetValues, body,
                    DateTimeOffset.UtcNow.ToUnixTimeSeconds());

                if (path != "/jobs/send-invoice")
                    throw new Answer(404, "no such job");
                if (method != "POST")
                    throw new Answer(405, "POST only");

                using (var db = new SqlConnection(_connectionString))
                {
                    try
                    {
                        db.Open();
                    }
                    catch (SqlException e)
                    {
                        // Transient: the node retries a 5xx (docs/endpoints.md, "The answer").
                        throw new Answer(503, "database unavailable", "connecting to APP_DB_CONNECTION: " + e.Errors[0].Message);
                    }
                    Respond(context, 200, Work(db, request, method, target, accepted, body));
                }
            }
            catch (Answer a)
            {
                Log(string.Format("refused {0} {1}: {2} {3}", method, target, a.Status, a.Message));
                Respond(context, a.Status, new { error = a.Error });
            }
            catch (Exception e)
            {
                // Anything else (a deadlock, a lost connection) may pass: 500, retried.
                Log(string.Format("failed {0} {1}: {2}", method, target, e));
                Respond(context, 500, new { error = "internal error" });
            }
        }

        // Steps 2 to 6 for a call whose signature is valid: returns the body
        // of a 200 ("invoiced" or "already done"), or throws the Answer of a
        // refusal.
        private static object Work(SqlConnection db, HttpListenerRequest request, string method, string target,
            Tuple<string, long> accepted, byte[] body)
        {
            // Check 6 of docs/signed-calls.md: 409 for a signature seen before.
            Endpoint.FirstUse(db, _schema, accepted.Item1, accepted.Item2, DateTimeOffset.UtcNow.ToUnixTimeSeconds());

            // Do not start what cannot end before the node gives up on the call.
            string deadline = request.Headers["X-Slotpoller-Deadline"];
            _endpoint.RequireTime(deadline, DateTimeOffset.UtcNow, "before the work");

            // A bad request that no retry can fix: a 4xx other than 408 and
            // 429 fails the job at once (docs/endpoints.md, "The answer").
            long order = Order(body);
            if (order <= 0)
                throw new Answer(400, "the payload must be a JSON object with an \"order\": a positive integer");
            string key = (request.Headers["Idempotency-Key"] ?? "").Trim();
            if (key.Length == 0 || key.Length > 255)
                throw new Answer(400, "Idempotency-Key missing or longer than 255 characters");
            string job = request.Headers["X-Slotpoller-Job"];

            string s = Slotpoller.Quote(_schema);
            // The work and its Idempotency-Key in one transaction: either
            // both are there or neither. A second call with the key waits for
            // the first's transaction on the key's row, then finds it
            // (docs/endpoints.md: "effectively once with the key").
            using (SqlTransaction tx = db.BeginTransaction())
            {
                using (var record = new SqlCommand("INSERT INTO " + s + ".[example_done] (idem_key, job_id) VALUES (@key, @job)", db, tx))
                {
                    record.Parameters.Add("@key", SqlDbType.NVarChar, 255).Value = key;
                    record.Parameters.Add("@job", SqlDbType.NVarChar, 40).Value = (object)job ?? DBNull.Value;
                    try
                    {
                        record.ExecuteNonQuery();
                    }
                    catch (SqlException e) when (Endpoint.Duplicate(e))
                    {
                        tx.Rollback();
                        Log(string.Format("{0} {1}: Idempotency-Key {2} already done: nothing to do", method, target, key));
                        return new { outcome = "already done", order };
                    }
                }
                using (var invoice = new SqlCommand("UPDATE " + s + ".[example_orders] SET invoices = invoices + 1 WHERE id = @order", db, tx))
                {
                    invoice.Parameters.Add("@order", SqlDbType.BigInt).Value = order;
                    if (invoice.ExecuteNonQuery() != 1)
                        throw new Answer(422, "no order " + order);
                }
                // Work that ran late is not committed: past the deadline
                // another node may already be calling the job again.
                _endpoint.RequireTime(deadline, DateTimeOffset.UtcNow, "before the commit");
                tx.Commit();
            }
            // (Leaving the using without a commit rolls the transaction back.)
            Log(string.Format("{0} {1}: order {2} invoiced (job {3}, Idempotency-Key {4})", method, target, order, job ?? "-", key));
            return new { outcome = "invoiced", order };
        }

        // The payload's "order" when it is a positive integer, else 0.
        private static long Order(byte[] body)
        {
            object payload;
            try
            {
                payload = new JavaScriptSerializer().DeserializeObject(new UTF8Encoding(false, true).GetString(body));
            }
            catch (Exception e) when (e is ArgumentException || e is InvalidOperationException)
            {
                return 0; // not JSON, or not UTF-8 (DecoderFallbackException is an ArgumentException)
            }
            var fields = payload as IDictionary<string, object>;
            object order;
            if (fields == null || !fields.TryGetValue("order", out order))
                return 0;
            // Whole numbers decode as int or long; anything else is no order.
            if (order is int)
                return (int)order;
            if (order is long)
                return (long)order;
            return 0;
        }

        // The whole body, or null when it is longer than limit bytes.
        private static byte[] ReadBody(Stream input, int limit)
        {
            var buffer = new MemoryStream();
            byte[] chunk = new byte[16 * 1024];
            int n;
            while ((n = input.Read(chunk, 0, chunk.Length)) > 0)
            {
                if (buffer.Length + n > limit)
                    return null;
                buffer.Write(chunk, 0, n);
            }
            return buffer.ToArray();
        }

        private static void Respond(HttpListenerContext context, int status, object body)
        {
            try
            {
                byte[] bytes = Encoding.UTF8.GetBytes(new JavaScriptSerializer().Serialize(body) + "\n");
                context.Response.StatusCode = status;
                context.Response.ContentType = "application/json";
                context.Response.ContentLength64 = bytes.Length;
                context.Response.OutputStream.Write(bytes, 0, bytes.Length);
                context.Response.Close();
            }
            catch (Exception e) when (e is HttpListenerException || e is IOException || e is ObjectDisposedException)
            {
                Log("answering: " + e.Message); // the caller went away
            }
        }

        private static void Log(string message)
        {
            Console.Error.WriteLine(DateTime.UtcNow.ToString("yyyy-MM-dd'T'HH:mm:ss.fff'Z' ") + message);
        }
    }
}
