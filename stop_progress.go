package main

import "time"

// stopWithProgress runs stop and calls report with checkpoint 1 at once,
// then with the next checkpoint every interval until stop returns: how a
// Windows service tells the service manager that a long stop (the drain)
// is progressing, not hung. It returns stop's error.
func stopWithProgress(stop func() error, every time.Duration, report func(checkpoint uint32)) error {
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for checkpoint := uint32(1); ; checkpoint++ {
		report(checkpoint)
		select {
		case err := <-stopped:
			return err
		case <-tick.C:
		}
	}
}
