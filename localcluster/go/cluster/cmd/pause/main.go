// Command pause is the sandbox ("pause") container of the local cluster's pods: it holds the
// pod's namespaces, reaps the children it inherits as PID 1, and exits on SIGINT or SIGTERM.
// The upstream pause image (registry.k8s.io/pause) is C and not served by any reachable registry,
// so this is the same behaviour in Go, built static and shipped in an image FROM scratch.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
