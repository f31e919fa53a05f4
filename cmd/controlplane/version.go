package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// versionInfo is what `version` says of the binary.
type versionInfo struct {
	// Version: the one the build set with -ldflags "-X main.version=...",
	// else the main module's (a go install of a tagged release, or a
	// build in a checkout that Go stamped), else "dev".
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
	Module    string `json:"module,omitempty"`
	// Revision, Time and Modified come from the VCS stamp of a build in a
	// checkout; empty otherwise.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
}

// buildVersion reads the version from main.version and the build information.
func buildVersion() versionInfo {
	v := versionInfo{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Module = bi.Main.Path
	if v.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// text is the version as `version` and `--version` print it.
func (v versionInfo) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "controlplane %s (%s, %s)\n", v.Version, v.GoVersion, v.Platform)
	if v.Revision != "" {
		fmt.Fprintf(&b, "  revision %s", v.Revision)
		if v.Time != "" {
			fmt.Fprintf(&b, " (%s)", v.Time)
		}
		if v.Modified {
			b.WriteString(", modified")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func newVersionCmd(stdout, stderr io.Writer, info versionInfo) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the version, its Go release and VCS revision",
		Args:  cobra.NoArgs,
	}
	c.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return command(c, func(*cobra.Command, []string) int {
		if !checkOutput(output, stderr) {
			return exitUsage
		}
		return writeReport(output, stdout, stderr, info, func() error {
			_, err := io.WriteString(stdout, info.text())
			return err
		})
	})
}
