package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/store/postgres"
	"github.com/batonhq/baton/store/storetest"
	"github.com/jackc/pgx/v5"
)

const (
	envDSN    = "BATON_POSTGRES_CRASH_DSN"
	envSchema = "BATON_POSTGRES_CRASH_SCHEMA"
)

func TestMain(m *testing.M) {
	if storetest.IsCrashChild() {
		storetest.CrashChildMain(func(ctx context.Context) (baton.Store, error) {
			return postgres.Open(ctx, os.Getenv(envDSN), postgres.WithSchema(os.Getenv(envSchema)))
		})
	}
	os.Exit(m.Run())
}

// TestCrash kills a process appending to PostgreSQL 20 times (see storetest.RunCrash).
//
// PostgreSQL finishes a statement whose client was killed, so the killed
// child's last append may commit after the next child has read the chat.
// The child connects under an application_name of its own, and before the
// store is opened again (to verify it, and so before the next child starts)
// the dead child's sessions are ended and awaited: what the check reads is
// then final.
func TestCrash(t *testing.T) {
	dsn, schema := freshSchema(t)
	childDSN, err := withApplicationName(dsn, schema)
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunCrash(t, func(t *testing.T) baton.Store {
		endSessions(t, dsn, schema)
		s, err := postgres.Open(context.Background(), dsn, postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, []string{envDSN + "=" + childDSN, envSchema + "=" + schema})
}

// withApplicationName returns dsn with its application_name set to name.
func withApplicationName(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// endSessions terminates the server sessions named name and waits until
// none is left.
func endSessions(t *testing.T, dsn, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	testenv.Eventually(t, 30*time.Second, "the crashed child's database sessions to end", func() error {
		var left int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) AS ended`, name).Scan(&left)
		if err != nil {
			t.Fatalf("end the crashed child's sessions: %v", err)
		}
		if left > 0 {
			return fmt.Errorf("%d sessions left", left)
		}
		return nil
	})
}
