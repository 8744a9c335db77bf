// Package exectest writes executables that a test runs right away.
//
// A test process that starts children from parallel tests has a race with os.WriteFile on an
// executable: a child forked while the file is open for writing inherits the writable
// descriptor until it execs (O_CLOEXEC closes it only then), and meanwhile exec of the file fails
// with ETXTBSY ("text file busy"; golang/go#22315). Holding syscall.ForkLock while the file is
// open keeps every fork of this process out of that window.
package exectest

import (
	"os"
	"syscall"
)

// WriteExecutable is os.WriteFile for a file that is executed next: no child of this process
// holds it open for writing once it returns.
func WriteExecutable(path string, data []byte, perm os.FileMode) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	return os.WriteFile(path, data, perm)
}
