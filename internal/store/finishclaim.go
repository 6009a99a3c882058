package store

import (
	"context"
	"database/sql"
	"fmt"
)

// A busy node's results and its next claim in one statement: as a batch
// of calls ends, the node records their results and claims as many new
// jobs in the same round trip, where it would otherwise send one
// statement for each. PostgreSQL only: its results and its claim are
// each one statement, which a data-modifying CTE joins.

// finishClaimer is a dialect that records a batch of results and claims
// in one statement.
type finishClaimer interface {
	finishAndClaimJobs() string
}

// FusesFinishAndClaim reports whether JobsFinishAndClaim sends one
// statement (PostgreSQL). Elsewhere a node records results and claims
// apart.
func (s *Store) FusesFinishAndClaim() bool {
	_, ok := s.d.(finishClaimer)
	return ok && !s.callerTx
}

// finishAndClaimJobs: the batch of results as a CTE, its ids returned as
// rows of kind 0, then the claim's rows (kind 1) from the claim function.
// A result row carries placeholder claim columns, never read. The two
// parts touch different rows: the results rows this node holds (running),
// the claim ready ones. The claim function, a later command of the
// statement, sees what the results wrote: a retry due at once may be
// claimed again by it, under a new token, as a later claim would.
func (d Postgres) finishAndClaimJobs() string {
	return `WITH fin AS (` + d.finishArrayJobs() + `)
SELECT 0, fin.id, CAST(1 AS bigint), 1, 1, '', '', CAST(NULL AS bytea), '', CAST(0 AS bigint), clock_timestamp(),
  CAST(NULL AS timestamptz), CAST('' AS varchar), CAST(NULL AS varchar) FROM fin
UNION ALL
SELECT 1, c.id, c.token, c.attempt, c.max_attempts, c.endpoint, c.method, c.payload, c.idem_key, c.timeout_ms,
  c.run_at, c.scheduled_for, c.queue, c.trace_parent FROM slotpoller_claim_jobs(?, ?, ?, ?, ?, ?, ?) c`
}

// JobsFinishAndClaim records the ends of several calls, as JobsFinish
// does, and claims up to limit due jobs, as JobsClaim does, in one
// statement (FusesFinishAndClaim). It reports, in the order given,
// whether each result was written, and the claims. Either both happened
// or neither: on an error, the results are to be written again and the
// claim may have committed unseen, as with any claim.
func (s *Store) JobsFinishAndClaim(ctx context.Context, given []Finish, owner, ownerNode string, limit int, hold Hold) ([]bool, []Claim, error) {
	fc, ok := s.d.(finishClaimer)
	if !ok || s.callerTx {
		return nil, nil, fmt.Errorf("record results and claim in one statement: not on %s", s.d.Name())
	}
	if len(given) == 0 || len(given) > MaxFinishBatch || limit <= 0 {
		return nil, nil, fmt.Errorf("record results of %d jobs and claim %d: 1 to %d results and a positive claim", len(given), limit, MaxFinishBatch)
	}
	rows := finishRowsOf(given)
	c := finishColumnsOf(rows)
	args := append(finishSeps(), c.ids, c.tokens, c.states, c.retries, c.statuses, c.errs, c.suffixes, owner, ownerNode, limit)
	args = append(args, hold.args()...)
	q := s.expanded(-2, fc.finishAndClaimJobs)
	what := fmt.Sprintf("record results of %d jobs and claim", len(given))
	var finished []int64
	var claimed []claimRow
	err := s.retry(ctx, func() error {
		finished, claimed = finished[:0], claimed[:0]
		rs, err := s.query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var kind int
			row, err := scanClaimRow(kindFirst{rs, &kind})
			if err != nil {
				return err
			}
			if kind == 0 {
				finished = append(finished, row.claim.ID)
			} else {
				claimed = append(claimed, row)
			}
		}
		return rs.Err()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	out := writtenOf(given, finished)
	claims, err := s.setAsideOdd(ctx, owner, claimed)
	if err != nil {
		return out, nil, err
	}
	return out, claims, nil
}

// kindFirst scans a row whose first column says what the rest is.
type kindFirst struct {
	rows *sql.Rows
	kind *int
}

func (k kindFirst) Scan(dest ...any) error {
	return k.rows.Scan(append([]any{k.kind}, dest...)...)
}
