package llm

import (
	"net/url"
	"strings"
	"time"

	"github.com/batonhq/baton"
)

// ErrorForStatus returns the provider error for an HTTP error response:
// status, the provider's error code and message, the endpoint and the model.
// Every provider returns errors of the same kinds for the same statuses, so
// the scripted provider's injected errors look exactly like real ones.
func ErrorForStatus(status int, code, message, endpoint, model string, retryAfter time.Duration) *baton.ProviderError {
	e := &baton.ProviderError{
		Status:     status,
		Code:       code,
		Message:    message,
		Endpoint:   endpoint,
		Model:      model,
		RetryAfter: retryAfter,
	}
	lower := strings.ToLower(code + " " + message)
	switch {
	case status == 401 || status == 403:
		e.Kind = baton.ProviderAuth
	case status == 429:
		e.Kind = baton.ProviderRateLimit
	case strings.Contains(lower, "context_length_exceeded") || strings.Contains(lower, "context length") ||
		strings.Contains(lower, "context window") || strings.Contains(lower, "maximum context"):
		e.Kind = baton.ProviderContextLength
	case strings.Contains(lower, "content_filter") || strings.Contains(lower, "content_policy") ||
		strings.Contains(lower, "content management policy"):
		e.Kind = baton.ProviderContentFilter
	case status == 408 || status == 409 || status >= 500:
		e.Kind = baton.ProviderUnavailable
	case status >= 400:
		e.Kind = baton.ProviderBadRequest
	default:
		e.Kind = baton.ProviderProtocol
	}
	if e.Message == "" {
		e.Message = defaultMessage(e.Kind)
	}
	return e
}

func defaultMessage(k baton.ProviderErrorKind) string {
	switch k {
	case baton.ProviderAuth:
		return "the API key was refused"
	case baton.ProviderRateLimit:
		return "rate limit or quota exceeded"
	case baton.ProviderContextLength:
		return "the conversation exceeds the model's context length"
	case baton.ProviderContentFilter:
		return "the reply was stopped by the provider's content filter"
	case baton.ProviderUnavailable:
		return "the provider is unavailable"
	case baton.ProviderBadRequest:
		return "the provider rejected the request"
	}
	return "unexpected response"
}

// Retryable reports whether a call that failed with err, before any delta,
// may be sent again: for 408, 409, 429 (unless the quota is exhausted), 5xx
// and connection failures.
func Retryable(err *baton.ProviderError) bool {
	switch err.Kind {
	case baton.ProviderRateLimit:
		return err.Code != "insufficient_quota"
	case baton.ProviderUnavailable:
		return true
	}
	return false
}

// Endpoint returns a base URL fit to show: without user info, query or
// fragment, so that credentials in a URL never reach a log or a client.
func Endpoint(baseURL string) string {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" {
		return "(invalid base URL)"
	}
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return strings.TrimSuffix(u.String(), "/")
}
