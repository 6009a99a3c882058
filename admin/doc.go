// Package admin is a node's admin endpoint (admin.listen): the HTTP API
// under /api/v1/, the dashboard at /, its sign-in, /healthz, /readyz,
// /metrics and /status.
//
// # Dependencies
//
// admin imports service, never the other way round: the node does not
// know HTTP. It reads the node through Node, a handful of methods that
// *service.Node has (its configuration, clock and logger, its store, its
// runner for the local fast path of an enqueue, its readiness and its
// metrics registry), and the node serves it through service.Endpoint:
// `slotpoller run` gives the node a Server with node.Serve, and the node
// starts it at the beginning of Run and stops it after the drain, before
// it closes the store the handlers read. Readiness and the metrics stay
// with the node, whose state they read; this package serves them.
//
// # Invariants
//
//   - One route table (routes.go) makes the mux, the guard's exceptions
//     and the listing at GET /api/; nothing is served that is not in it.
//   - Every route passes the guard (api_guard.go) but the table's public
//     ones, /healthz and /readyz, which load balancers probe without
//     credentials. The sign-in ones (the form at /login, the page's
//     script and style at /assets/) pass its Host and Origin checks
//     without a token. With admin.token set, every other route wants the
//     token or a signed-in session, whose writes carry its CSRF header.
//     Without it the Host must name loopback. No CORS header is ever sent.
//   - Every read is bounded whatever the size of the tables: job counts
//     stop at service.JobCountCap, a list page at client.MaxListLimit, the
//     throughput read at throughputCap rows; the dashboard's farm and
//     throughput reads are shared by all viewers of a node and refreshed
//     at most once per farmEvery and throughputEvery; the readiness check
//     (/readyz, slotpoller_ready) queries at most once a second. Bodies are
//     capped (maxJobBody, maxBatchBody) and every call's database work
//     has apiTimeout.
//   - Every write goes through the function the CLI's verb calls: the
//     job routes through package client, whose cancels and retries the
//     job's history records with the actor "api@<node>"; every cancel,
//     retry, schedule and task action is logged, naming the node once.
//   - JSON bodies are not HTML-escaped, and every time the API writes is
//     RFC 3339 UTC to the millisecond, fixed-width (timeLayout). /status
//     is the CLI's report (`slotpoller status -json`) as the CLI writes it.
//   - The DSN's password shows nowhere: errors that may quote the DSN are
//     masked, and the farm view shows the masked DSN.
package admin
