package daemon

import "syscall"

// allocated is the bytes a file takes on disk (0 if it is not there).
func allocated(path string) int64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}
