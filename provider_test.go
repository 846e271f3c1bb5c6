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
	if ErrorCode(err) != EUNAUTHORIZED || ErrorMessage(err) != want || !errors.Is(err, ErrUnauthorized) || !errors.Is(err, cause) {
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
