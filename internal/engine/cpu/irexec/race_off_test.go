//go:build !race

package irexec

// raceOn says the race detector is on: the heaviest tests shrink.
const raceOn = false
