package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/store"
)

func init() {
	register(command{
		name:    "keys",
		summary: "create or revoke API keys (keys create --app A --user U)",
		usage:   "keys create --app APP --user USER [--name NAME] [flags]\n       baton keys revoke [--hash HASH] [flags]   (without --hash, the key is read from stdin)",
		about:   "create prints a new API key once, on standard output; the store keeps only its SHA-256.\nrevoke stops a key, given the key on standard input (never as a flag: the process list shows\nflags to every local user) or its hash.",
		example: "baton keys create --app default --user ada --name ci\nbaton keys revoke < ada.key\nbaton keys revoke --hash 3f1a…",
		args:    argKeys,
		flags:   keysFlags,
	})
}

// keysFlags defines the flags of `baton keys create|revoke`: one set for
// both, parsed again after the subcommand.
func keysFlags(fs *flag.FlagSet) runner {
	var storeURL, dataDir, app, user, name, key, hash string
	fs.StringVar(&storeURL, "store", envOr("BATON_STORE", ""), "store: sqlite:PATH or postgres://… (env BATON_STORE; default sqlite under --data-dir; not mem:, which keeps nothing)")
	fs.StringVar(&dataDir, "data-dir", envOr("BATON_DATA_DIR", ".baton"), "where baton keeps its files (env BATON_DATA_DIR)")
	fs.StringVar(&app, "app", "", "create: the app the key acts for (required)")
	fs.StringVar(&user, "user", "", "create: the user the key acts as (required)")
	fs.StringVar(&name, "name", "", "create: a label for people: what the key is for")
	fs.StringVar(&key, "key", "", "revoke: refused; pipe the key on stdin, or give --hash")
	fs.StringVar(&hash, "hash", "", "revoke: the SHA-256 (hex) of the key to revoke (else the key is read from stdin)")
	return func(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) error {
		sub := fs.Arg(0)
		if sub != "create" && sub != "revoke" {
			fs.Usage()
			return errUsage
		}
		if err := parseFlags(fs, fs.Args()[1:]); err != nil { // the flags after the subcommand
			return err
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "baton keys %s: unexpected argument %q\n", sub, fs.Arg(0))
			return errUsage
		}
		return runKeys(ctx, sub, keysOptions{storeURL, dataDir, app, user, name, key, hash}, stdout, stderr)
	}
}

// keysOptions are the flags of `baton keys`.
type keysOptions struct{ storeURL, dataDir, app, user, name, key, hash string }

// runKeys is `baton keys create|revoke`. create prints a new key once; the
// store keeps only its SHA-256.
func runKeys(ctx context.Context, sub string, o keysOptions, stdout, stderr io.Writer) error {
	storeURL, dataDir, app, user, name, key, hash := o.storeURL, o.dataDir, o.app, o.user, o.name, o.key, o.hash
	if storeURL == "" {
		storeURL = "sqlite:" + filepath.Join(dataDir, "baton.db")
	}
	switch {
	case strings.HasPrefix(storeURL, "mem:"):
		// A memory store is gone when this command exits: a key created
		// there could never be used, a revoke would revoke nothing.
		fmt.Fprintf(stderr, "baton keys %s: --store %s keeps nothing after this command exits; give the sqlite: or postgres:// store baton serve uses\n", sub, storeURL)
		return errUsage
	case sub == "create" && (app == "" || user == ""):
		fmt.Fprintln(stderr, "baton keys create: --app and --user are required")
		return errUsage
	case sub == "revoke" && key != "":
		fmt.Fprintln(stderr, "baton keys revoke: --key would show the key in the process list; pipe it on stdin (baton keys revoke < keyfile) or give --hash")
		return errUsage
	case sub == "revoke" && hash == "":
		k, err := readKey(stdin)
		if err != nil {
			fmt.Fprintf(stderr, "baton keys revoke: %v\n", err)
			return errUsage
		}
		hash = server.HashKey(k)
	}
	st, err := store.Open(ctx, storeURL)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	if sub == "revoke" {
		if err := st.RevokeKey(ctx, hash); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "revoked")
		return nil
	}
	newKey, newHash, err := server.NewKey()
	if err != nil {
		return fmt.Errorf("make key: %w", err)
	}
	if _, err := st.CreateKey(ctx, baton.APIKey{Hash: newHash, App: app, User: user, Name: name}); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "API key for app %q, user %q (shown once; baton keeps only its hash %s):\n", app, user, newHash)
	fmt.Fprintln(stdout, newKey)
	return nil
}

// stdin is where keys revoke reads a key (a variable so tests can set it).
var stdin io.Reader = os.Stdin

// readKey reads one key from r: its first line, trimmed.
func readKey(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the key from stdin: %w", err)
	}
	key := strings.TrimSpace(line)
	if key == "" {
		return "", errors.New("no key on stdin (pipe it in, or give --hash)")
	}
	return key, nil
}
