package tsc

const supported = true

func rdtsc() uint64
