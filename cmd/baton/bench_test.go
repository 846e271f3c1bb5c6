package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/turnbench"
)

// runBenchJSON runs `baton bench --json` with args and decodes its report.
func runBenchJSON(t *testing.T, args ...string) benchReport {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append([]string{"bench", "--json"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("baton bench %s: exit %d\nstderr:\n%s", strings.Join(args, " "), code, stderr.String())
	}
	var rep benchReport
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("baton bench --json printed what is not its report: %v\n%s", err, stdout.String())
	}
	return rep
}

// checkResult fails t unless r is a sane measurement of turns turns.
func checkResult(t *testing.T, r benchResult, variant string, concurrency, turns int, xFloor bool) {
	t.Helper()
	if r.Variant != variant || r.Concurrency != concurrency || r.Turns != turns {
		t.Fatalf("result %+v; want %s, %d in flight, %d turns", r, variant, concurrency, turns)
	}
	if r.Seconds <= 0 || r.TurnsPerSec <= 0 || r.CPUMsPerTurn <= 0 || r.ClientCPUMsPerTurn <= 0 || r.AllocsPerTurn <= 0 {
		t.Fatalf("%s: a figure is not positive: %+v", variant, r)
	}
	if r.LatencyMs.P50 <= 0 || r.LatencyMs.P50 > r.LatencyMs.P99 || r.FirstTokenMs.P50 <= 0 || r.FirstTokenMs.P50 > r.LatencyMs.P99 {
		t.Fatalf("%s: latencies out of order: %+v", variant, r)
	}
	if xFloor != (r.XFloor > 0) {
		t.Fatalf("%s: x_floor %v; want one only when the floor ran", variant, r.XFloor)
	}
}

func TestBench_SQLiteJSON(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.out")
	rep := runBenchJSON(t, "--turns", "8", "--seq-turns", "3", "--concurrency", "4", "--idle-chats", "5", "--cpuprofile", prof)
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Fatalf("--cpuprofile: %v, %v", fi, err)
	}
	if rep.Mode != "overhead" || rep.Model != "fake" || rep.Store != "sqlite" || rep.Served || rep.CPUs < 1 || rep.Go == "" {
		t.Fatalf("report header %+v", rep)
	}
	if len(rep.Results) != 4 {
		t.Fatalf("%d results; want floor and baton, one at a time and 4 in flight: %+v", len(rep.Results), rep.Results)
	}
	checkResult(t, rep.Results[0], "floor", 1, 3, false)
	checkResult(t, rep.Results[1], "floor", 4, 8, false)
	checkResult(t, rep.Results[2], "baton sqlite", 1, 3, true)
	checkResult(t, rep.Results[3], "baton sqlite", 4, 8, true)
	for _, r := range rep.Results {
		if r.ModelConnsPerTurn == nil || *r.ModelConnsPerTurn < 0 {
			t.Fatalf("%s: model_conns_per_turn %v; want the fake model's count", r.Variant, r.ModelConnsPerTurn)
		}
		// SQLite counts its commits; the floor keeps nothing. One at a
		// time a turn commits at least twice (its start, its reply).
		if want := r.Variant == "baton sqlite"; want != (r.CommitsPerTurn > 0) || r.Concurrency == 1 && want && r.CommitsPerTurn < 2 {
			t.Fatalf("%s, %d in flight: commits_per_turn %v", r.Variant, r.Concurrency, r.CommitsPerTurn)
		}
		// SQLite counts its reads too (none, embedded); the floor has none to count.
		if want := r.Variant == "baton sqlite"; want != (r.ReadsPerTurn != nil) || want && *r.ReadsPerTurn != 0 {
			t.Fatalf("%s, %d in flight: reads_per_turn %v", r.Variant, r.Concurrency, r.ReadsPerTurn)
		}
	}
	if rep.Idle == nil || rep.Idle.Chats != 5 {
		t.Fatalf("idle %+v; want 5 chats", rep.Idle)
	}
}

// TestBench_Served runs the served variant: this test binary is started as
// the server (TestMain), and the CPU reported is that process's.
func TestBench_Served(t *testing.T) {
	rep := runBenchJSON(t, "--served", "--store", "mem", "--turns", "4", "--seq-turns", "0", "--concurrency", "2")
	if !rep.Served || rep.Store != "mem" || len(rep.Results) != 2 {
		t.Fatalf("report %+v", rep)
	}
	checkResult(t, rep.Results[1], "baton served mem", 2, 4, true)
}

// TestBench_Table checks the human output: a header, a row per run, the note.
func TestBench_Table(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"bench", "--store", "mem", "--turns", "2", "--seq-turns", "0", "--concurrency", "2"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"variant", "CPU ms/turn", "x floor", "commits/turn", "reads/turn", "model conns/turn", "floor", "baton mem", "Fake model in this process"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in the table:\n%s", want, out)
		}
	}
	// Not a terminal: progress is plain lines, no carriage returns.
	if !strings.Contains(stderr.String(), "bench: baton mem, 2 in flight: 2 turns") || strings.Contains(stderr.String(), "\r") {
		t.Fatalf("progress on a pipe:\n%q", stderr.String())
	}
}

func TestBench_BadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--turns", "0"}, "--turns: 0; want at least 1", 1},
		{[]string{"--concurrency", "-3"}, "--concurrency: -3; want at least 1", 1},
		{[]string{"--seq-turns", "-1"}, "--seq-turns: -1", 1},
		{[]string{"--idle-chats", "-1"}, "--idle-chats: -1", 1},
		{[]string{"--store", "redis://x"}, `--store: "redis://x"; want sqlite, sqlite:PATH, mem or postgres://…`, 1},
		{[]string{"--server", "http://127.0.0.1:1", "--idle-chats", "5"}, "--idle-chats needs a server this command starts", 1},
		{[]string{"--server", "http://127.0.0.1:1", "--base-url", "http://x"}, "--base-url and --server", 1},
		{[]string{"--server", "127.0.0.1:1"}, `server URL "127.0.0.1:1": want http://host:port`, 1},
		{[]string{"--base-url", "api.openai.com"}, `--base-url: "api.openai.com"; want http://… or https://…`, 1},
		{[]string{"--model", "gpt-5"}, "--model is for --base-url", 1},
		{[]string{"--workflow", "support"}, "--app and --workflow are for --server", 1},
		{[]string{"--turns", "many"}, `invalid value "many" for flag -turns`, 2},
		{[]string{"extra"}, `unexpected argument "extra"`, 2},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"bench"}, tc.args...), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("baton bench %s: exit %d, stderr:\n%s\nwant exit %d and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
		}
	}
}

// TestBench_ServerElsewhere runs `baton bench --server URL` against a
// server it did not start (this test binary, started as one): latency,
// no CPU of the server, no floor.
func TestBench_ServerElsewhere(t *testing.T) {
	m, err := turnbench.StartModel()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err := turnbench.SpawnServer(t.Context(), os.Args[0], []string{"-test.run=^$"}, os.Environ(),
		turnbench.ServerConfig{StoreURL: "mem:", BaseURL: m.URL, APIKey: "bench"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	t.Setenv("BATON_API_KEY", p.Key)
	rep := runBenchJSON(t, "--server", p.URL, "--turns", "4", "--seq-turns", "2", "--concurrency", "2")
	if rep.Mode != "latency" || rep.Server != p.URL || len(rep.Results) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Results {
		if r.Variant != "baton served" || r.XFloor != 0 || r.ModelConnsPerTurn != nil || r.CommitsPerTurn != 0 || r.ReadsPerTurn != nil ||
			r.LatencyMs.P50 <= 0 || r.FirstTokenMs.P50 <= 0 || r.FirstTokenMs.P50 > r.LatencyMs.P99 {
			t.Fatalf("result %+v", r)
		}
	}
	// A wrong key is a clear error, not a hang.
	t.Setenv("BATON_API_KEY", "bk_wrong")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"bench", "--server", p.URL, "--turns", "1", "--seq-turns", "0"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "401") {
		t.Fatalf("wrong key: exit %d, stderr %q", code, stderr.String())
	}
}

// TestBench_ModelDown: a model that cannot be reached ends the run with
// the chat's error, not a hang.
func TestBench_ModelDown(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "--base-url", "http://127.0.0.1:1/v1", "--store", "mem", "--turns", "1", "--seq-turns", "0", "--concurrency", "1"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "chat.error") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestBench_ProgressBarOnTerminal: on a terminal the progress is a bar
// redrawn in place, erased before the table.
func TestBench_ProgressBarOnTerminal(t *testing.T) {
	master, tty := openPTY(t)
	defer master.Close()
	shown := make(chan string, 1)
	go func() { // ends when tty is closed: the master's read fails
		var b bytes.Buffer
		_, _ = b.ReadFrom(master)
		shown <- b.String()
	}()
	var stdout bytes.Buffer
	code := run(context.Background(), []string{"bench", "--store", "mem", "--turns", "20", "--seq-turns", "0", "--concurrency", "2"}, &stdout, tty)
	tty.Close()
	out := <-shown
	if code != 0 {
		t.Fatalf("exit %d: %q", code, out)
	}
	for _, want := range []string{"\r\033[K", "baton mem, 2 in flight [", "####", "20/20"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in what the terminal showed: %q", want, out)
		}
	}
	if strings.Contains(out, "turns…\n") {
		t.Fatalf("plain progress lines on a terminal: %q", out)
	}
}
