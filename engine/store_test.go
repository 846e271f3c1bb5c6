package engine_test

import (
	"reflect"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/engine"
)

// Every store baton ships is an engine.Store: the engine asks nothing of a
// store beyond what baton.Store promises.
var _ engine.Store = baton.Store(nil)

// TestStoreDeclaresTasksAndLeases: the engine's Store declares the task and
// lease stores the engine uses, so a store without them is refused where
// the Config is built. (They used to be run-time assertions on the store:
// a store without tasks failed at the first background task, one without
// leases at New with an instance id.)
func TestStoreDeclaresTasksAndLeases(t *testing.T) {
	st := reflect.TypeFor[engine.Store]()
	for _, need := range []reflect.Type{reflect.TypeFor[baton.TaskStore](), reflect.TypeFor[baton.LeaseStore]()} {
		if !st.Implements(need) {
			t.Errorf("engine.Store does not declare %v, which the engine uses", need)
		}
	}
}
