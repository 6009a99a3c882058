-- A job's history: one line per ended attempt or operator action, written
-- by the statement that ends it, with times on the database clock (see
-- internal/store/history.go). The last 8,000 characters are kept.
ALTER TABLE slotpoller_jobs ADD COLUMN history TEXT;
