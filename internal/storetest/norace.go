//go:build !race

package storetest

// UnderRace is true when the tests run under the race detector (race.go).
const UnderRace = false
