package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"

	"istio.io/istio/pkg/test"
)

// failer stands in for *testing.T, so the fake discovery server of Istio's tests runs in a plain program.
// Fatal ends the goroutine that called it (as testing.T does); the first failure is kept for the report.
type failer struct {
	mu       sync.Mutex
	failed   error
	cleanups []func()
	tempDirs []string
}

var _ test.Failer = &failer{}

func (f *failer) Fail() { f.record(fmt.Errorf("failed")) }

func (f *failer) FailNow() {
	f.Fail()
	runtime.Goexit()
}

func (f *failer) Fatal(args ...any) {
	f.record(fmt.Errorf("%s", fmt.Sprint(args...)))
	runtime.Goexit()
}

func (f *failer) Fatalf(format string, args ...any) {
	f.record(fmt.Errorf(format, args...))
	runtime.Goexit()
}

func (f *failer) Skip(args ...any) { f.Fatal(append([]any{"skipped: "}, args...)...) }

func (f *failer) Log(args ...any) { fmt.Fprintln(os.Stderr, args...) }

func (f *failer) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (f *failer) Helper() {}

func (f *failer) TempDir() string {
	dir, err := os.MkdirTemp("", "istio-judge-")
	if err != nil {
		f.Fatalf("temporary directory: %v", err)
	}
	f.mu.Lock()
	f.tempDirs = append(f.tempDirs, dir)
	f.mu.Unlock()
	return dir
}

func (f *failer) Cleanup(fn func()) {
	f.mu.Lock()
	f.cleanups = append(f.cleanups, fn)
	f.mu.Unlock()
}

func (f *failer) record(err error) {
	f.mu.Lock()
	if f.failed == nil {
		f.failed = err
	}
	f.mu.Unlock()
}

// Err is the first failure recorded, or nil.
func (f *failer) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// Close runs the cleanups, last registered first, and removes the temporary directories.
func (f *failer) Close() {
	f.mu.Lock()
	cleanups, dirs := f.cleanups, f.tempDirs
	f.cleanups, f.tempDirs = nil, nil
	f.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	for _, dir := range dirs {
		_ = os.RemoveAll(dir)
	}
}

// run calls fn in its own goroutine, so a Fatal inside it ends fn only; it returns the failure, if any.
func (f *failer) run(fn func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
	return f.Err()
}
