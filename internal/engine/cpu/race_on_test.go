//go:build race

package cpu

// raceOn says the race detector is on: the heaviest tests shrink.
const raceOn = true
