package main

import (
	"flag"
	"fmt"
	"time"
)

// netFlags are the connection settings serve and bench --url share: how a
// read waits for data, and the kernel's socket buffers.
type netFlags struct {
	busyPoll     time.Duration
	socketBuffer int
}

func (n *netFlags) register(fs *flag.FlagSet, side string) {
	fs.DurationVar(&n.busyPoll, "busy_poll", 0, fmt.Sprintf("let the %s's reads poll the socket for up to `DURATION` (e.g. 200us) before sleeping in the network poller: data that arrives meanwhile is read without waking a sleeping thread, at the price of a core busy while a connection waits (0: off)", side))
	fs.IntVar(&n.socketBuffer, "socket_buffer_bytes", 0, fmt.Sprintf("kernel send and receive buffer in `BYTES` of the %s's connections (0: the kernel's default, auto-tuned)", side))
}

// check validates the values; its errors are usage errors.
func (n *netFlags) check() error {
	switch {
	case n.busyPoll < 0:
		return fmt.Errorf("--busy_poll %v: must not be negative", n.busyPoll)
	case n.socketBuffer < 0:
		return fmt.Errorf("--socket_buffer_bytes %d: must not be negative", n.socketBuffer)
	}
	return nil
}
