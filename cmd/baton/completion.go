package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

func init() {
	register(command{
		name:    "completion",
		summary: "print a shell completion script (bash, zsh or fish)",
		usage:   "completion bash|zsh|fish",
		about:   "Prints a script that completes baton's commands, their flags and arguments in your shell.",
		example: "source <(baton completion bash)                                  # bash, this shell; add it to ~/.bashrc to keep it\n" +
			"baton completion zsh > \"${fpath[1]}/_baton\"                      # zsh, then restart it\n" +
			"baton completion fish > ~/.config/fish/completions/baton.fish    # fish",
		args: argShells,
		flags: func(*flag.FlagSet) runner {
			return func(_ context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) error {
				if fs.NArg() != 1 {
					fs.Usage()
					return errUsage
				}
				switch fs.Arg(0) {
				case "bash":
					writeBashCompletion(stdout)
				case "zsh":
					writeZshCompletion(stdout)
				case "fish":
					writeFishCompletion(stdout)
				default:
					fmt.Fprintf(stderr, "baton completion: %q is not bash, zsh or fish\n", fs.Arg(0))
					return errUsage
				}
				return nil
			}
		},
	})
}

// flagInfo is a flag as completion needs it.
type flagInfo struct {
	name  string
	usage string
	bool  bool // takes no value
}

// commandFlags returns a command's flags, from the same definitions its
// run parses.
func commandFlags(c command) []flagInfo {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.flags(fs)
	var out []flagInfo
	fs.VisitAll(func(f *flag.Flag) {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		out = append(out, flagInfo{name: f.Name, usage: f.Usage, bool: ok && b.IsBoolFlag()})
	})
	return out
}

// argWords are the fixed words an argument kind completes to.
func argWords(k argKind) []string {
	switch k {
	case argCommands:
		var names []string
		for _, c := range sortedCommands() {
			names = append(names, c.name)
		}
		return names
	case argShells:
		return []string{"bash", "zsh", "fish"}
	case argKeys:
		return []string{"create", "revoke"}
	case argWorkflows:
		return []string{"hello", "generator"} // the built-in examples
	}
	return nil
}

func writeBashCompletion(w io.Writer) {
	var names []string
	for _, c := range sortedCommands() {
		names = append(names, c.name)
	}
	fmt.Fprintf(w, `# bash completion for baton: source <(baton completion bash)
_baton() {
    local cur="${COMP_WORDS[COMP_CWORD]}"
    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W %q -- "$cur"))
        return
    fi
    local flags="" words="" dirs=""
    case "${COMP_WORDS[1]}" in
`, strings.Join(names, " "))
	for _, c := range sortedCommands() {
		var flags []string
		for _, f := range commandFlags(c) {
			flags = append(flags, "--"+f.name)
		}
		dirs := ""
		if c.args == argDirs || c.args == argWorkflows {
			dirs = "1"
		}
		fmt.Fprintf(w, "        %s) flags=%q; words=%q; dirs=%q ;;\n", c.name, strings.Join(flags, " "), strings.Join(argWords(c.args), " "), dirs)
	}
	fmt.Fprint(w, `    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
        return
    fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    if [[ -n $dirs ]]; then
        COMPREPLY+=($(compgen -d -- "$cur"))
    fi
}
complete -F _baton baton
`)
}

// zshQuote makes s (its first line) safe inside a single-quoted zsh word.
func zshQuote(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.ReplaceAll(s, "'", `'\''`)
}

// zshSpec makes s safe as the description of an _arguments spec, which
// ends at an unescaped "]" and where ":" separates fields.
func zshSpec(s string) string {
	return strings.NewReplacer(`\`, `\\`, ":", `\:`, "[", `\[`, "]", `\]`).Replace(zshQuote(s))
}

func writeZshCompletion(w io.Writer) {
	fmt.Fprint(w, "#compdef baton\n# zsh completion for baton: baton completion zsh > \"${fpath[1]}/_baton\"\n\n_baton() {\n    local -a commands\n    commands=(\n")
	for _, c := range sortedCommands() {
		fmt.Fprintf(w, "        '%s:%s'\n", c.name, zshQuote(c.summary))
	}
	fmt.Fprint(w, "    )\n    if (( CURRENT == 2 )); then\n        _describe 'command' commands\n        return\n    fi\n    case $words[2] in\n")
	for _, c := range sortedCommands() {
		fmt.Fprintf(w, "        %s)\n            _arguments \\\n", c.name)
		for _, f := range commandFlags(c) {
			if f.bool {
				fmt.Fprintf(w, "                '--%s[%s]' \\\n", f.name, zshSpec(f.usage))
			} else {
				fmt.Fprintf(w, "                '--%s=[%s]:value:' \\\n", f.name, zshSpec(f.usage))
			}
		}
		switch c.args {
		case argDirs:
			fmt.Fprint(w, "                '*:folder:_files -/'\n")
		case argWorkflows:
			fmt.Fprintf(w, "                '1:workflow:(%s)'\n", strings.Join(argWords(c.args), " "))
		case argNone:
			fmt.Fprint(w, "                '*: :'\n")
		default:
			fmt.Fprintf(w, "                '1:argument:(%s)'\n", strings.Join(argWords(c.args), " "))
		}
		fmt.Fprint(w, "            ;;\n")
	}
	fmt.Fprint(w, "    esac\n}\n\ncompdef _baton baton\n")
}

// fishQuote single-quotes s for fish.
func fishQuote(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func writeFishCompletion(w io.Writer) {
	fmt.Fprint(w, "# fish completion for baton: baton completion fish > ~/.config/fish/completions/baton.fish\ncomplete -c baton -f\n")
	for _, c := range sortedCommands() {
		fmt.Fprintf(w, "complete -c baton -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
	}
	for _, c := range sortedCommands() {
		cond := "'__fish_seen_subcommand_from " + c.name + "'"
		for _, f := range commandFlags(c) {
			req := " -r"
			if f.bool {
				req = ""
			}
			fmt.Fprintf(w, "complete -c baton -n %s -l %s%s -d %s\n", cond, f.name, req, fishQuote(f.usage))
		}
		if words := argWords(c.args); len(words) > 0 {
			fmt.Fprintf(w, "complete -c baton -n %s -a %s\n", cond, fishQuote(strings.Join(words, " ")))
		}
		if c.args == argDirs || c.args == argWorkflows {
			fmt.Fprintf(w, "complete -c baton -n %s -a '(__fish_complete_directories)'\n", cond)
		}
	}
}
