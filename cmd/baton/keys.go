package main

import (
	"bufio"
	"context"
	"errors"
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
	register(command{name: "keys", summary: "create or revoke API keys (keys create --app A --user U)", run: runKeys})
}

// runKeys is `baton keys create|revoke`. create prints a new key once; the
// store keeps only its SHA-256.
func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "revoke") {
		fmt.Fprintln(stderr, "Usage: baton keys create --app APP --user USER [--name NAME]\n       baton keys revoke [--hash HASH]   (without --hash, the key is read from stdin)")
		return errUsage
	}
	sub := args[0]
	fs := newFlagSet("keys "+sub, stderr)
	var storeURL, dataDir, app, user, name, key, hash string
	fs.StringVar(&storeURL, "store", envOr("BATON_STORE", ""), "store: sqlite:PATH or postgres://… (env BATON_STORE; default sqlite under --data-dir)")
	fs.StringVar(&dataDir, "data-dir", envOr("BATON_DATA_DIR", ".baton"), "where baton keeps its files (env BATON_DATA_DIR)")
	if sub == "create" {
		fs.StringVar(&app, "app", "", "the app the key acts for (required)")
		fs.StringVar(&user, "user", "", "the user the key acts as (required)")
		fs.StringVar(&name, "name", "", "a label for people: what the key is for")
	} else {
		// The key itself is never a flag: a command line is in the process
		// list (ps, /proc) for every local user to read.
		fs.StringVar(&key, "key", "", "refused: pipe the key on stdin, or give --hash")
		fs.StringVar(&hash, "hash", "", "the SHA-256 (hex) of the key to revoke (else the key is read from stdin)")
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if storeURL == "" {
		storeURL = "sqlite:" + filepath.Join(dataDir, "baton.db")
	}
	switch {
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
