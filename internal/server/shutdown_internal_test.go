package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/codes"

	"goinfer/internal/server/batcher"
)

// TestShuttingDownAnswers checks that every answer saying the server shuts
// down asks the client to close the connection, whenever the drain began
// (recoverHTTP only sees drains that began before the request), and that
// the other 503s keep it open.
func TestShuttingDownAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		close bool
	}{
		{"draining", errorf(kindShuttingDown, "the server is shutting down"), true},
		{"batcher closed", fmt.Errorf("lane 0: %w", batcher.ErrClosed), true},
		{"loading", errorf(kindUnavailable, "model %q is loading", "m"), false},
		{"queue full", batcher.ErrQueueFull, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeError(w, tc.err)
			if w.Code != http.StatusServiceUnavailable {
				t.Errorf("status %d, want 503", w.Code)
			}
			if got := w.Header().Get("Connection") == "close"; got != tc.close {
				t.Errorf("Connection: close %v, want %v", got, tc.close)
			}
			k, _ := classify(tc.err)
			if tc.close && (k.grpcCode() != codes.Unavailable || k.statusLabel() != "unavailable") {
				t.Errorf("gRPC %v, label %q; want UNAVAILABLE and \"unavailable\"", k.grpcCode(), k.statusLabel())
			}
		})
	}
}
