package server

import (
	"context"
	"fmt"
	"net"
	"strings"

	"goinfer/internal/h1"
)

// HTTP transports (Config.HTTPTransport).
const (
	// HTTPTransportFast serves plain inference requests on internal/h1's
	// loop (one write per answer, no goroutine per request) and every
	// other request through net/http on the same port.
	HTTPTransportFast = "fast"
	// HTTPTransportNetHTTP serves every request through net/http.
	HTTPTransportNetHTTP = "nethttp"
)

func checkHTTPTransport(t string) error {
	switch t {
	case "", HTTPTransportFast, HTTPTransportNetHTTP:
		return nil
	}
	return fmt.Errorf("server: HTTP transport %q: want %s or %s", t, HTTPTransportFast, HTTPTransportNetHTTP)
}

// newFastHTTP puts the fast loop in front of s.http for inference
// requests, with the same handler and timeouts.
func (s *Server) newFastHTTP() *h1.Server {
	return &h1.Server{
		Handler:           s.http.Handler,
		Fallback:          s.http,
		Eligible:          fastEligible,
		ReadHeaderTimeout: s.http.ReadHeaderTimeout,
		ReadTimeout:       s.http.ReadTimeout,
		IdleTimeout:       s.http.IdleTimeout,
		NewConnGrace:      freshAge,
		ErrorLog:          s.http.ErrorLog,
	}
}

// fastEligible takes the inference requests: the hot path, whose answers
// are the ones a client waits on.
func fastEligible(method, path string) bool {
	return method == "POST" && strings.HasPrefix(path, "/v2/models/") && strings.HasSuffix(path, "/infer")
}

// httpServer is what serves the HTTP port: net/http's server, or h1's in
// front of it.
type httpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}
