package daemon

import "time"

// The daemon forks its codex children, and re-executes itself, on the process's main thread.
// Children get the parent-death signal (childproc.SysProcAttr) when the thread that forked them
// exits, and an execve ends every thread but the one calling it: only a thread that calls every
// exec outlives them all. The binary locks its main goroutine to the main thread in its init
// (runtime.LockOSThread), the documented way to keep package main on it, and serves a
// MainThread there.

// MainThread runs functions on the main thread, which Serve keeps for itself.
type MainThread struct{ calls chan func() }

// NewMainThread returns a MainThread for the goroutine locked to the main thread to Serve.
func NewMainThread() *MainThread { return &MainThread{calls: make(chan func())} }

// Serve runs run on another goroutine and the calls of do on this one, the main goroutine,
// until run returns; it returns run's result.
func (m *MainThread) Serve(run func() int) int {
	done := make(chan int, 1)
	go func() { done <- run() }()
	for {
		select {
		case f := <-m.calls:
			f()
		case code := <-done:
			return code
		}
	}
}

// do runs f on the main thread and waits for it; on a nil MainThread (in-process tests) f runs
// on the caller's thread.
func (m *MainThread) do(f func()) {
	if m == nil {
		f()
		return
	}
	ok := make(chan struct{})
	m.calls <- func() {
		defer close(ok)
		f()
	}
	<-ok
}

// fork is appserver.Config.Fork: start runs on the main thread.
func (m *MainThread) fork(start func() error) error {
	var err error
	m.do(func() { err = start() })
	return err
}

// doWithin is do when the main thread takes f within wait; it reports whether it did (false:
// f did not run).
func (m *MainThread) doWithin(f func(), wait time.Duration) bool {
	if m == nil {
		f()
		return true
	}
	ok := make(chan struct{})
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case m.calls <- func() {
		defer close(ok)
		f()
	}:
		<-ok
		return true
	case <-t.C:
		return false
	}
}
