package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testenv"
)

// TestServe_DevNeedsLoopback: --dev refuses an address other machines can reach.
func TestServe_DevNeedsLoopback(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"serve", "--dev", "--addr", "0.0.0.0:0", "--data-dir", t.TempDir()}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "loopback") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

// TestServe_ShortMetricsTokenRefused: a guessable metrics token stops the
// server from starting, and the error does not echo it.
func TestServe_ShortMetricsTokenRefused(t *testing.T) {
	t.Setenv("BATON_METRICS_TOKEN", "hunter2")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "BATON_METRICS_TOKEN: 7 characters") || strings.Contains(errb.String(), "hunter2") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

// TestServe_DevSmoke starts `baton serve --dev` on a loopback port, runs the
// hello chat to completion over HTTP, and shuts down gracefully.
func TestServe_DevSmoke(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errb testenv.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--dev", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, pw, &errb)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no listening line: %v; stderr: %s", err, errb.String())
	}
	go io.Copy(io.Discard, pr)
	base := strings.TrimSpace(strings.TrimPrefix(line, "baton listening on "))
	if !strings.Contains(errb.String(), "dev mode") && !strings.Contains(errb.String(), "DEV MODE") {
		t.Errorf("dev mode is not announced loudly: %s", errb.String())
	}
	resp, err := http.Post(base+"/api/chats/local/hello/start", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var started struct {
		ChatID string `json:"chat_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&started)
	resp.Body.Close()
	if resp.StatusCode != 201 || started.ChatID == "" {
		t.Fatalf("start: %d", resp.StatusCode)
	}
	testenv.Eventually(t, 20*time.Second, "the hello chat to complete", func() error {
		resp, err := http.Get(base + "/api/chats/local/" + started.ChatID)
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Status string `json:"status"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&c)
		resp.Body.Close()
		if c.Status != "completed" {
			return fmt.Errorf("status %q", c.Status)
		}
		return nil
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d: %s", code, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not shut down")
	}
}

// TestServe_MemoryCapsMustBeNumbers: a cap that is not a whole number of
// at least 1 (0 for the state cache), or a commit delay that is not a
// duration of 0 or more, stops the server with an error naming the flag
// and its variable.
func TestServe_MemoryCapsMustBeNumbers(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  [2]string
		want string
	}{
		{args: []string{"--max-chats-in-memory", "0"}, want: "--max-chats-in-memory (BATON_MAX_CHATS_IN_MEMORY)"},
		{env: [2]string{"BATON_MAX_CHATS_IN_MEMORY", "lots"}, want: "--max-chats-in-memory (BATON_MAX_CHATS_IN_MEMORY)"},
		{args: []string{"--state-cache", "-2"}, want: "--state-cache (BATON_STATE_CACHE)"},
		{args: []string{"--sqlite-commit-delay", "-1ms"}, want: "--sqlite-commit-delay (BATON_SQLITE_COMMIT_DELAY)"},
		{env: [2]string{"BATON_SQLITE_COMMIT_DELAY", "soon"}, want: "--sqlite-commit-delay (BATON_SQLITE_COMMIT_DELAY)"},
	} {
		if tc.env[0] != "" {
			t.Setenv(tc.env[0], tc.env[1])
		}
		var out, errb bytes.Buffer
		args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, tc.args...)
		if code := run(context.Background(), args, &out, &errb); code != 1 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v %v: exit %d: %s", tc.args, tc.env, code, errb.String())
		}
		if tc.env[0] != "" {
			t.Setenv(tc.env[0], "")
		}
	}
}
