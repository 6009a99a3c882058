// Package conventions holds no code: its tests check the rules of the
// repository's layout that a reviewer would otherwise check by eye, so that
// they hold after every change:
//
//   - every exported name in the module's packages has a doc comment, and
//     every package a package comment;
//   - no Go file in the node's larger packages is longer than
//     MaxFileLines unless its own comment says why (a line starting with
//     "// Long file:");
//   - README.md stays a front page (at most MaxReadmeLines lines), and the
//     README and docs/ speak of the software, not of how it was built.
package conventions

// MaxFileLines is the longest a Go file in the checked packages may be
// without a reason written in it.
const MaxFileLines = 500

// MaxReadmeLines is the longest README.md may be: what the software is,
// its quick start and a docs index; everything else lives in docs/.
const MaxReadmeLines = 300
