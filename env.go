package baton

import "strings"

// serverOnlyEnv are the environment variables that hold baton's own
// credentials: the key that seals every tenant's secrets, the operator's
// metrics token, and the store and bus addresses (which may carry
// passwords). No workflow may read them: not as a tool's env, a ${VAR} in a
// url or header, a headers_from_env, an MCP server's env or a from_env.
var serverOnlyEnv = []string{"BATON_SECRET_KEY", "BATON_METRICS_TOKEN", "BATON_STORE", "BATON_BUS"}

// ServerOnlyEnv reports whether name is one of baton's own credentials
// that no workflow may read (the check ignores case).
func ServerOnlyEnv(name string) bool {
	for _, n := range serverOnlyEnv {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}
