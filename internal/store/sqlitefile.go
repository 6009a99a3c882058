package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
)

// ErrFileGone means the SQLite file the store opened was removed or
// replaced: the store's connection still writes to the old file, which no
// other process sees any more.
var ErrFileGone = errors.New("the SQLite file was removed or replaced while the node ran")

// sqliteFile is the file a SQLite store opened, to notice its removal.
type sqliteFile struct {
	path string
	info os.FileInfo
}

// openedFile reads which file the SQLite connection opened, and what it
// is on disk; nil for an in-memory database.
func openedFile(ctx context.Context, db *sql.DB) (*sqliteFile, error) {
	var path string
	if err := db.QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&path); err != nil {
		return nil, fmt.Errorf("read the database file name: %w", err)
	}
	if path == "" {
		return nil, nil
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("the SQLite file %s: %w", path, err)
	}
	return &sqliteFile{path: path, info: info}, nil
}

// CheckFile returns ErrFileGone when the SQLite file the store opened is no
// longer at its path (removed, or replaced by another file). It costs a
// stat; it is nil for the server databases and in-memory SQLite.
func (s *Store) CheckFile() error {
	if s.file == nil {
		return nil
	}
	info, err := os.Stat(s.file.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %s no longer exists; stopping rather than working on a queue nobody else sees (restore the file and start the node again)", ErrFileGone, s.file.path)
	case err != nil:
		return nil // unreadable for now (permissions, a network share): not proof it is gone
	case !os.SameFile(info, s.file.info):
		return fmt.Errorf("%w: %s is another file now; stopping rather than working on a queue nobody else sees (start the node again to open the new file)", ErrFileGone, s.file.path)
	}
	return nil
}
