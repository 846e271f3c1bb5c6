package postgres_test

import (
	"context"
	"os"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/postgres"
	"github.com/batonhq/baton/store/storetest"
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
func TestCrash(t *testing.T) {
	dsn, schema := freshSchema(t)
	storetest.RunCrash(t, func(t *testing.T) baton.Store {
		s, err := postgres.Open(context.Background(), dsn, postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, []string{envDSN + "=" + dsn, envSchema + "=" + schema})
}
