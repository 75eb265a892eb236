package main

import "testing"

func TestParseChunkSize(t *testing.T) {
	for in, want := range map[string]int64{"64KiB": 64 << 10, "512K": 512 << 10, "2MiB": 2 << 20, "8M": 8 << 20, "131072": 128 << 10} {
		if got, err := parseChunkSize(in); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "32KiB", "16MiB", "100KiB", "-64KiB", "lots"} {
		if _, err := parseChunkSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
