//go:build race

package storetest

// UnderRace is true when the tests run under the race detector. SQLite's
// driver is Go (C translated), so under the detector it writes and reads
// thirty times slower than otherwise: the tests of big tables load it
// with a tenth of their rows there. Their assertions are plans and
// counts, which hold at either size; their times are measured without it.
const UnderRace = true
