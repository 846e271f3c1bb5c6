package llm

import (
	"errors"
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

// Retryable reports whether a call that failed with err may be sent again:
// for 408, 409, 429 (unless the quota is exhausted), 5xx, connection
// failures, a dropped stream, a malformed chunk and a stall (first-token or
// idle timeout). The call's own timeout is not: it bounds the retries too.
func Retryable(err *baton.ProviderError) bool {
	switch err.Kind {
	case baton.ProviderRateLimit:
		return err.Code != "insufficient_quota"
	case baton.ProviderUnavailable, baton.ProviderConnectionDropped, baton.ProviderMalformedChunk,
		baton.ProviderTimeoutFirstToken, baton.ProviderTimeoutIdle:
		return true
	}
	return false
}

// Stream error codes, the machine-readable "code" of a stream.error
// (StreamCode). Beside these, a provider error's kind is its code (auth,
// bad_request, context_length, content_filter, protocol, timeout,
// connection_dropped, malformed_chunk, timeout_first_token, timeout_idle).
const (
	CodeRateLimited      = "rate_limited"      // 429
	CodeServerError      = "server_error"      // 408, 409, 5xx, or an error event in the stream
	CodeConnectionFailed = "connection_failed" // no response: refused, reset, DNS
	CodeError            = "error"             // not a provider error
)

// StreamCode returns the machine code of the failure err for a stream.error:
// the provider error's kind, with rate_limit as rate_limited and unavailable
// split into server_error and connection_failed.
func StreamCode(err error) string {
	var pe *baton.ProviderError
	if !errors.As(err, &pe) {
		return CodeError
	}
	switch pe.Kind {
	case baton.ProviderRateLimit:
		return CodeRateLimited
	case baton.ProviderUnavailable:
		if pe.Status != 0 || pe.Code != "" {
			return CodeServerError
		}
		return CodeConnectionFailed
	}
	return string(pe.Kind)
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
