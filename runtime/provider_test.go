package runtime

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

// The model endpoint is logged without what a base URL may carry besides
// it: a user and password, or a key in its query.
func TestProviderFor_LogsTheEndpointWithoutCredentials(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-not-logged")
	t.Setenv("OPENAI_BASE_URL", "https://user:hunter2@models.example/v1?api-key=query-secret")
	wf, err := workflow.Load(workflows.FS, "hello")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	if _, err := providerFor(slog.New(slog.NewTextHandler(&logs, nil)))(wf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "base_url=https://models.example/v1") {
		t.Errorf("the endpoint is not logged:\n%s", logs.String())
	}
	for _, secret := range []string{"hunter2", "query-secret", "sk-not-logged"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log holds %q:\n%s", secret, logs.String())
		}
	}
}
