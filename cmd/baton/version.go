package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

func init() {
	register(command{
		name:    "version",
		summary: "print baton's version and build",
		usage:   "version",
		about:   "Prints the module version, the VCS revision (+dirty when modified) and Go's version.",
		example: "baton version",
		flags: func(*flag.FlagSet) runner {
			return func(_ context.Context, _ *flag.FlagSet, stdout, _ io.Writer) error {
				fmt.Fprintln(stdout, versionString())
				return nil
			}
		},
	})
}

// versionString describes the build from the module's build info: the
// module version (or "(devel)"), the VCS revision when known, and Go's version.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "baton (unknown build)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	s := "baton " + v
	var rev, modified string
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " " + rev + modified
	}
	return s + " " + bi.GoVersion
}
