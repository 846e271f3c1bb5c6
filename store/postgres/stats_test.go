package postgres_test

import (
	"testing"

	"github.com/batonhq/baton/store/storetest"
)

func TestStats(t *testing.T) {
	dsn, schema := freshSchema(t)
	storetest.RunStats(t, open(t, dsn, schema))
}
