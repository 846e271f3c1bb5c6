// Command baton runs multi-agent LLM workflows: `baton serve` starts the
// server, `baton chat` runs a chat in the terminal, `baton validate` checks
// workflows. Each subcommand lives in a file of its own and registers itself
// (its flags, help and examples) in init, so adding one touches no other
// file; `baton help` and `baton completion` read the same registry.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/batonhq/baton/internal/turnbench"
)

// command is one subcommand of baton.
type command struct {
	name    string
	summary string // one line, for the list of commands
	usage   string // the synopsis after "baton ", e.g. "chat [flags] WORKFLOW"
	about   string // what it does, for its help
	example string // command lines, one per line, for its help
	args    argKind
	// flags defines the command's flags on fs and returns what runs the
	// command once fs has parsed its arguments (the rest are fs.Args()). It
	// returns an error to report and exit 1; errUsage exits 2.
	flags func(fs *flag.FlagSet) runner
}

// runner runs a command whose flags fs has parsed.
type runner func(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) error

// argKind is what a command's arguments are, for shell completion.
type argKind int

const (
	argNone      argKind = iota
	argDirs              // folders
	argWorkflows         // a workflow name (or a folder)
	argCommands          // a command name
	argShells            // bash, zsh or fish
	argKeys              // create or revoke
)

// errUsage asks main to exit with status 2, as flag does for bad usage.
var errUsage = errors.New("usage")

// exitError carries an exit status without a message of its own (the
// command printed what it had to say).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func main() {
	if os.Getenv(turnbench.ServerEnv) != "" {
		// `baton bench --served` started this process as its server.
		os.Exit(turnbench.ServeChild())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "baton: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	fs := newFlagSet(c.name, stderr)
	exec := c.flags(fs)
	fs.Usage = func() { writeHelp(stderr, c, fs) }
	err := parseFlags(fs, args[1:])
	if err == nil {
		err = exec(ctx, fs, stdout, stderr)
	}
	var exit exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &exit):
		return exit.code
	default:
		fmt.Fprintf(stderr, "baton %s: %v\n", c.name, err)
		return 1
	}
}

// sortedCommands returns the commands by name.
func sortedCommands() []command {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]command, len(names))
	for i, n := range names {
		out[i] = commands[n]
	}
	return out
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "baton runs multi-agent LLM workflows.\n\nUsage: baton COMMAND [flags] [arguments]\n\nCommands:")
	for _, c := range sortedCommands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nExamples:\n  baton chat hello\n  baton serve --dev\n\nRun 'baton help COMMAND' for a command's flags, their environment variables, and examples.")
}

// writeHelp writes a command's help: synopsis, what it does, its flags
// (each naming its environment variable, when it has one) and examples.
func writeHelp(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: baton %s\n", c.usage)
	if c.about != "" {
		fmt.Fprintf(w, "\n%s\n", c.about)
	}
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nFlags:")
		out := fs.Output()
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
	if c.example != "" {
		fmt.Fprintln(w, "\nExamples:")
		for line := range strings.SplitSeq(c.example, "\n") {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
}

func init() {
	register(command{
		name:    "help",
		summary: "show a command's help: flags, environment variables, examples",
		usage:   "help [COMMAND]",
		example: "baton help chat",
		args:    argCommands,
		flags: func(*flag.FlagSet) runner {
			return func(_ context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) error {
				switch fs.NArg() {
				case 0:
					usage(stdout)
					return nil
				case 1:
				default:
					fmt.Fprintln(stderr, "Usage: baton help [COMMAND]")
					return errUsage
				}
				c, ok := commands[fs.Arg(0)]
				if !ok {
					fmt.Fprintf(stderr, "baton help: unknown command %q\n\n", fs.Arg(0))
					usage(stderr)
					return errUsage
				}
				cfs := newFlagSet(c.name, stderr)
				c.flags(cfs)
				writeHelp(stdout, c, cfs)
				return nil
			}
		},
	})
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("baton "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args and maps flag's errors onto run's conventions.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

// envOr returns the environment variable key, or def when it is unset.
func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && strings.TrimSpace(v) != "" {
		return v
	}
	return def
}
