package postgres_test

import (
	"testing"

	"github.com/batonhq/baton/store/storetest"
)

func TestKeys(t *testing.T) {
	dsn, schema := freshSchema(t)
	storetest.RunKeys(t, open(t, dsn, schema))
}
