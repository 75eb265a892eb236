//go:build race

package inputs

const raceEnabled = true
