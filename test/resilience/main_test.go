package resilience

import (
	"log/slog"
	"os"
	"testing"

	"poise.dev/poise/pkg/controlplane"
)

func TestMain(m *testing.M) {
	// client-go's and controller-runtime's process-wide loggers are set
	// before any test starts an apiserver or a plane, so none sets them
	// while another reads them; their errors reach stderr
	controlplane.RouteLibraryLogs(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	os.Exit(m.Run())
}
