package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/store"
)

func init() {
	register(command{
		name:    "keys",
		summary: "create or revoke API keys (keys create --app A --user U)",
		usage:   "keys create --app APP --user USER [--name NAME] [flags]\n       baton keys revoke --key KEY | --hash HASH [flags]",
		about:   "create prints a new API key once, on standard output; the store keeps only its SHA-256.\nrevoke stops a key, given the key or its hash.",
		example: "baton keys create --app acme --user ada --name ci\nbaton keys revoke --hash 3f1a…",
		args:    argKeys,
		flags:   keysFlags,
	})
}

// keysFlags defines the flags of `baton keys create|revoke`: one set for
// both, parsed again after the subcommand.
func keysFlags(fs *flag.FlagSet) runner {
	var storeURL, dataDir, app, user, name, key, hash string
	fs.StringVar(&storeURL, "store", envOr("BATON_STORE", ""), "store: sqlite:PATH or postgres://… (env BATON_STORE; default sqlite under --data-dir)")
	fs.StringVar(&dataDir, "data-dir", envOr("BATON_DATA_DIR", ".baton"), "where baton keeps its files (env BATON_DATA_DIR)")
	fs.StringVar(&app, "app", "", "create: the app the key acts for (required)")
	fs.StringVar(&user, "user", "", "create: the user the key acts as (required)")
	fs.StringVar(&name, "name", "", "create: a label for people: what the key is for")
	fs.StringVar(&key, "key", "", "revoke: the key to revoke")
	fs.StringVar(&hash, "hash", "", "revoke: the SHA-256 (hex) of the key to revoke")
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
	case sub == "create" && (app == "" || user == ""):
		fmt.Fprintln(stderr, "baton keys create: --app and --user are required")
		return errUsage
	case sub == "revoke" && (key == "") == (hash == ""):
		fmt.Fprintln(stderr, "baton keys revoke: give one of --key or --hash")
		return errUsage
	}
	st, err := store.Open(ctx, storeURL)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	ks, ok := st.(baton.KeyStore)
	if !ok {
		return fmt.Errorf("store %T keeps no API keys", st)
	}
	if sub == "revoke" {
		if hash == "" {
			hash = server.HashKey(key)
		}
		if err := ks.RevokeKey(ctx, hash); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "revoked")
		return nil
	}
	newKey, newHash, err := server.NewKey()
	if err != nil {
		return fmt.Errorf("make key: %w", err)
	}
	if _, err := ks.CreateKey(ctx, baton.APIKey{Hash: newHash, App: app, User: user, Name: name}); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "API key for app %q, user %q (shown once; baton keeps only its hash %s):\n", app, user, newHash)
	fmt.Fprintln(stdout, newKey)
	return nil
}
