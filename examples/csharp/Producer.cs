// An application's write and its job in one transaction: it records an
// order in a table of its own and enqueues the job that sends its invoice,
// then commits both or rolls both back.
//
//   mcs -r:System.Data.dll -r:System.Web.Extensions.dll -out:producer.exe Producer.cs src/Slotpoller.cs
//   APP_DB_CONNECTION='Server=127.0.0.1,1433;Database=test;User ID=app;Password=...' \
//     mono producer.exe commit|rollback [ENDPOINT]
//
// APP_DB_CONNECTION is an ADO.NET connection string of the farm's SQL
// Server database; APP_SLOTPOLLER_SCHEMA the nodes' database.schema
// (slotpoller unless given); APP_DB_SCHEMA the schema of the application's
// own table (dbo unless given). ENDPOINT is the job's path on the nodes'
// base URL, /jobs/send-invoice unless given. It prints one JSON line: the
// outcome, the order's and the job's ids, and the payload. A refused
// enqueue prints the database's error, rolls back and exits with status 2.

using System;
using System.Data;
using System.Data.SqlClient;
using System.Text;
using System.Web.Script.Serialization;

namespace JobPages
{
    public static class Producer
    {
        private const string Usage = "usage: mono producer.exe commit|rollback [ENDPOINT]";

        public static int Main(string[] args)
        {
            if (args.Length < 1 || args.Length > 2 || (args[0] != "commit" && args[0] != "rollback"))
                return Fail(64, Usage);
            bool commit = args[0] == "commit";
            string endpoint = args.Length > 1 ? args[1] : "/jobs/send-invoice";
            string connectionString = Environment.GetEnvironmentVariable("APP_DB_CONNECTION");
            if (string.IsNullOrEmpty(connectionString))
                return Fail(64, "APP_DB_CONNECTION is not set: give the ADO.NET connection string of the farm's database, e.g. Server=127.0.0.1,1433;Database=farm;User ID=app;Password=...");
            string farmSchema = Setting("APP_SLOTPOLLER_SCHEMA", Slotpoller.DefaultSchema);
            string orders = Slotpoller.Quote(Setting("APP_DB_SCHEMA", "dbo")) + ".[example_orders]";

            using (var db = new SqlConnection(connectionString))
            {
                db.Open();
                // The application's own table (invoices: how many times the
                // endpoint sent the order's invoice).
                Execute(db, null, "IF OBJECT_ID(N'" + orders.Replace("'", "''") + "', N'U') IS NULL"
                    + " CREATE TABLE " + orders + " (id BIGINT IDENTITY(1, 1) PRIMARY KEY, item NVARCHAR(200) NOT NULL,"
                    + " invoices INT NOT NULL DEFAULT 0)");

                long order, job;
                string payload;
                using (SqlTransaction tx = db.BeginTransaction())
                {
                    try
                    {
                        const string item = "book";
                        using (var insert = new SqlCommand("INSERT INTO " + orders + " (item) OUTPUT INSERTED.id VALUES (@item)", db, tx))
                        {
                            insert.Parameters.Add("@item", SqlDbType.NVarChar, 200).Value = item;
                            order = Convert.ToInt64(insert.ExecuteScalar());
                        }
                        payload = new JavaScriptSerializer().Serialize(new { order, item });
                        job = Slotpoller.Enqueue(db, tx, endpoint, Encoding.UTF8.GetBytes(payload),
                            maxAttempts: 5, schema: farmSchema);
                    }
                    catch (SqlException e) when (e.Number == 51000 || e.Number == 51001)
                    {
                        tx.Rollback();
                        // The entry point's refusals: 51000 "field: problem",
                        // 51001 a taken unique key.
                        return Fail(2, string.Format("order and job rolled back: SQL Server error {0}: {1}", e.Number, e.Errors[0].Message));
                    }

                    if (commit)
                        tx.Commit();
                    else
                        tx.Rollback();
                }
                Console.WriteLine(new JavaScriptSerializer().Serialize(new
                {
                    outcome = commit ? "committed" : "rolled back",
                    order,
                    job,
                    payload,
                }));
            }
            return 0;
        }

        private static string Setting(string name, string fallback)
        {
            string value = Environment.GetEnvironmentVariable(name);
            return string.IsNullOrEmpty(value) ? fallback : value;
        }

        private static void Execute(SqlConnection db, SqlTransaction tx, string sql)
        {
            using (var cmd = new SqlCommand(sql, db, tx))
                cmd.ExecuteNonQuery();
        }

        private static int Fail(int status, string message)
        {
            Console.Error.WriteLine("producer: " + message);
            return status;
        }
    }
}
