// Enqueue slotpoller jobs from C# through SQL Server's entry point,
// [schema].[enqueue_v1], inside the application's own transaction: a job
// enqueued in a transaction that rolls back never exists; one whose
// transaction commits runs once (at least once if a node dies mid-call).
//
// ADO.NET with System.Data.SqlClient, as .NET Framework and Mono ship it;
// Microsoft.Data.SqlClient takes the same code with its own namespace. The
// contract (parameters, defaults, checks, errors) is docs/enqueue.md's
// "The v1 contract".

using System;
using System.Data;
using System.Data.SqlClient;

namespace JobPages
{
    public static class Slotpoller
    {
        /// <summary>The nodes' database.schema unless they set another.</summary>
        public const string DefaultSchema = "slotpoller";

        /// <summary>
        /// Enqueues a job on the transaction (or on its own when transaction
        /// is null and the connection has none open) and returns the new
        /// job's id.
        ///
        /// Every argument after the endpoint may be left null for the entry
        /// point's default: POST, due now on the database clock, 33
        /// attempts, the node's call timeout, no unique key, a generated
        /// idempotency key, the queue the nodes route the endpoint to. The
        /// payload's bytes are the call's body as they are: pass the UTF-8
        /// bytes of your JSON. schema is the nodes' database.schema.
        ///
        /// Bad input throws a SqlException with Number 51000 and a message
        /// "field: problem"; a taken unique key Number 51001, the message
        /// ending "(id N)" with the id of the job that holds it. The
        /// transaction is then the caller's to roll back.
        /// </summary>
        public static long Enqueue(
            SqlConnection connection,
            SqlTransaction transaction,
            string endpoint,
            byte[] payload = null,
            string method = null,
            long? delayMs = null,
            DateTimeOffset? runAt = null,
            int? maxAttempts = null,
            long? timeoutMs = null,
            string uniqueKey = null,
            string idempotencyKey = null,
            string queue = null,
            string schema = DefaultSchema)
        {
            if (connection == null)
                throw new ArgumentNullException("connection");
            if (string.IsNullOrEmpty(schema))
                throw new ArgumentException("the farm's schema (the nodes' database.schema) is empty", "schema");

            // A stored procedure call (an RPC, not a batch of text): the
            // parameters travel typed and the name is never parsed as SQL.
            using (var cmd = new SqlCommand(Quote(schema) + ".[enqueue_v1]", connection, transaction))
            {
                cmd.CommandType = CommandType.StoredProcedure;
                // Every parameter with its SQL type, NULL ones included: a
                // NULL without a type is refused by some servers (Babelfish:
                // "Data type 0x1F is unknown"), and SQL Server then reads
                // NULL as "the default" all the same.
                Add(cmd, "@endpoint", SqlDbType.NVarChar, endpoint);
                Add(cmd, "@payload", SqlDbType.VarBinary, payload);
                Add(cmd, "@method", SqlDbType.NVarChar, method);
                Add(cmd, "@delay_ms", SqlDbType.BigInt, delayMs);
                // datetime2(7) in UTC, whatever the offset it was given in.
                Add(cmd, "@run_at", SqlDbType.DateTime2, runAt.HasValue ? (object)runAt.Value.UtcDateTime : null);
                Add(cmd, "@max_attempts", SqlDbType.Int, maxAttempts);
                Add(cmd, "@timeout_ms", SqlDbType.BigInt, timeoutMs);
                Add(cmd, "@unique_key", SqlDbType.NVarChar, uniqueKey);
                Add(cmd, "@idempotency_key", SqlDbType.NVarChar, idempotencyKey);
                Add(cmd, "@queue", SqlDbType.NVarChar, queue);
                SqlParameter id = cmd.Parameters.Add("@id", SqlDbType.BigInt);
                id.Direction = ParameterDirection.Output;
                // The procedure also returns the id as a one-row result; the
                // OUTPUT parameter is read once the call has ended.
                cmd.ExecuteNonQuery();
                if (id.Value == null || id.Value == DBNull.Value)
                    throw new InvalidOperationException(Quote(schema) + ".[enqueue_v1] returned no job id");
                return Convert.ToInt64(id.Value);
            }
        }

        private static void Add(SqlCommand cmd, string name, SqlDbType type, object value)
        {
            SqlParameter p = cmd.Parameters.Add(name, type);
            // (max) for the procedure's NVARCHAR(MAX) and VARBINARY(MAX):
            // a sized parameter would cut a long value before it is checked.
            if (type == SqlDbType.NVarChar || type == SqlDbType.VarBinary)
                p.Size = -1;
            if (type == SqlDbType.DateTime2)
                p.Scale = 7;
            p.Value = value ?? DBNull.Value;
        }

        /// <summary>A schema name as a bracketed identifier.</summary>
        public static string Quote(string name)
        {
            return "[" + name.Replace("]", "]]") + "]";
        }
    }
}
