//go:build race

package remote

// raceEnabled: the race detector's shadow memory multiplies what a test
// sees of its heap in RSS.
const raceEnabled = true
