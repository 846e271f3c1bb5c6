package baton

import (
	"errors"
	"strings"
	"testing"
)

func TestProviderError(t *testing.T) {
	cause := errors.New("HTTP 401 body")
	err := error(&ProviderError{Kind: ProviderAuth, Status: 401, Message: "Incorrect API key",
		Endpoint: "https://api.openai.com/v1", Model: "gpt-4o", Err: cause})
	want := `model "gpt-4o" at https://api.openai.com/v1: auth (HTTP 401): Incorrect API key`
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
	// Clients see neither the endpoint nor the provider's text about the key.
	if ErrorCode(err) != EUNAUTHORIZED || ErrorMessage(err) != `model "gpt-4o": auth (HTTP 401)` || !errors.Is(err, ErrUnauthorized) || !errors.Is(err, cause) {
		t.Fatalf("code %q message %q", ErrorCode(err), ErrorMessage(err))
	}
	if !IsProviderError(err, ProviderAuth) || IsProviderError(err, ProviderRateLimit) || IsProviderError(cause, ProviderAuth) {
		t.Fatal("IsProviderError")
	}
	for kind, code := range map[ProviderErrorKind]string{
		ProviderRateLimit: EUNAVAILABLE, ProviderBadRequest: EINVALID, ProviderContextLength: EINVALID,
		ProviderContentFilter: EINVALID, ProviderTimeout: EUNAVAILABLE, ProviderUnavailable: EUNAVAILABLE, ProviderProtocol: EUNAVAILABLE,
	} {
		e := &ProviderError{Kind: kind, Endpoint: "e", Model: "m"}
		if ErrorCode(e) != code || !strings.Contains(ErrorMessage(e), string(kind)) {
			t.Errorf("%s: code %q message %q", kind, ErrorCode(e), ErrorMessage(e))
		}
	}
}

func TestDeltaKindString(t *testing.T) {
	for k, want := range map[DeltaKind]string{DeltaText: "text", DeltaReasoning: "reasoning", DeltaToolCall: "tool_call",
		DeltaFinish: "finish", DeltaUsage: "usage", 0: "DeltaKind(0)"} {
		if k.String() != want {
			t.Errorf("%d: %q", k, k.String())
		}
	}
	if (Usage{1, 2, 3, 4}).Add(Usage{1, 1, 1, 1}) != (Usage{2, 3, 4, 5}) {
		t.Error("Usage.Add")
	}
}

// TestProviderErrorClientMessage: what a client may see of each kind. The
// provider's text is shown only when it is about the request or the reply;
// the endpoint never is.
func TestProviderErrorClientMessage(t *testing.T) {
	for _, tt := range []struct {
		kind ProviderErrorKind
		msg  string
		want string
	}{
		{ProviderAuth, "Incorrect API key provided: sk-proj-****abcd", `model "m": auth (HTTP 400)`},
		{ProviderRateLimit, "Rate limit reached in organization org-123", `model "m": rate_limit (HTTP 400)`},
		{ProviderUnavailable, "connection failed: dial tcp 10.0.0.7:443: connect: connection refused", `model "m": unavailable (HTTP 400)`},
		{ProviderBadRequest, "Invalid 'tools[0].function.name'", `model "m": bad_request (HTTP 400): Invalid 'tools[0].function.name'`},
		{ProviderContextLength, "maximum context length is 8192 tokens", `model "m": context_length (HTTP 400): maximum context length is 8192 tokens`},
		{ProviderContentFilter, "filtered", `model "m": content_filter (HTTP 400): filtered`},
		{ProviderTimeout, "no complete reply within the call's timeout", `model "m": timeout (HTTP 400): no complete reply within the call's timeout`},
		{ProviderProtocol, "malformed chunk", `model "m": protocol (HTTP 400): malformed chunk`},
	} {
		e := &ProviderError{Kind: tt.kind, Status: 400, Message: tt.msg, Endpoint: "https://gateway.internal:8443/v1", Model: "m"}
		if got := e.ClientMessage(); got != tt.want {
			t.Errorf("%s: ClientMessage() = %q, want %q", tt.kind, got, tt.want)
		}
		if got := ErrorMessage(e); got != tt.want || strings.Contains(got, "gateway.internal") {
			t.Errorf("%s: ErrorMessage() = %q, want %q", tt.kind, got, tt.want)
		}
		if !strings.Contains(e.Error(), "gateway.internal") || !strings.Contains(e.Error(), tt.msg) {
			t.Errorf("%s: Error() = %q lost the endpoint or the message (the log needs them)", tt.kind, e.Error())
		}
	}
}
