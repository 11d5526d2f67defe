package server

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPanicsAreRecoveredAndLogged(t *testing.T) {
	var logs bytes.Buffer
	s, err := New(Config{ModelName: "m", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("HTTP", func(t *testing.T) {
		h := s.recoverHTTP(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v2/models/m/infer", nil))
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"error":"internal error: boom"`) {
			t.Fatalf("got %d %s", rec.Code, rec.Body)
		}
		// The server answers the next request.
		rec = httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v2/health/live", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("live after a panic: %d", rec.Code)
		}
	})
	t.Run("gRPC", func(t *testing.T) {
		_, err := s.recoverUnary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/inference.GRPCInferenceService/ModelInfer"},
			func(context.Context, any) (any, error) { panic("kaboom") })
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "kaboom") {
			t.Fatalf("got %v", err)
		}
	})
	if !strings.Contains(logs.String(), "panic in HTTP handler") || !strings.Contains(logs.String(), "panic in gRPC handler") ||
		!strings.Contains(logs.String(), "stack=") {
		t.Errorf("panics not logged with their stacks:\n%s", logs.String())
	}
}
