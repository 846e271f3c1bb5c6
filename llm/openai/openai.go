// Package openai is baton's model provider for OpenAI and every
// OpenAI-compatible server (vLLM, Ollama, LM Studio, …), built on the
// official SDK, github.com/openai/openai-go/v3. It streams Chat Completions
// with usage, parallel tool calls, strict json_schema response formats and a
// seed, retries failed and stalled calls (once from scratch after deltas
// were streamed, announced by a baton.DeltaRetry), and bounds each call with
// a timeout, the wait for its first token and the wait between two chunks.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/fastjson"
	"github.com/batonhq/baton/llm"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/tidwall/gjson"
)

// DefaultBaseURL is OpenAI's API, used when neither the configuration nor
// OPENAI_BASE_URL names another.
const DefaultBaseURL = "https://api.openai.com/v1"

// Defaults for the options.
const (
	DefaultTimeout    = 5 * time.Minute
	DefaultMaxRetries = 3
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
	// DefaultFirstTokenTimeout bounds the wait for the first delta of a
	// reply: long enough for a reasoning model that thinks before it
	// streams, short of the call's whole timeout.
	DefaultFirstTokenTimeout = 60 * time.Second
	// DefaultIdleTimeout bounds the wait between two chunks once a reply
	// streams.
	DefaultIdleTimeout = 30 * time.Second
	// maxRetryAfter caps how long a Retry-After header may make a call wait.
	maxRetryAfter = 2 * time.Minute
)

// Provider streams model replies from an OpenAI-compatible endpoint. It is
// safe for concurrent use.
type Provider struct {
	baseURL    string
	apiKey     string
	httpClient *http.Client
	timeout    time.Duration
	firstToken time.Duration
	idle       time.Duration
	maxRetries int
	minBackoff time.Duration
	maxBackoff time.Duration
	log        *slog.Logger
	client     sdk.Client
}

// Option configures a Provider.
type Option func(*Provider)

// WithBaseURL sets the endpoint, e.g. "http://localhost:11434/v1" for Ollama.
// Without it the provider uses OPENAI_BASE_URL, or OpenAI's API.
func WithBaseURL(u string) Option { return func(p *Provider) { p.baseURL = u } }

// WithAPIKey sets the API key. Without it the provider uses OPENAI_API_KEY.
func WithAPIKey(key string) Option { return func(p *Provider) { p.apiKey = key } }

// WithHTTPClient sets the HTTP client (for proxies, TLS settings or tests).
// Without it the provider uses a transport shared by all providers, like
// http.DefaultTransport but keeping up to 256 idle connections per endpoint.
func WithHTTPClient(c *http.Client) Option { return func(p *Provider) { p.httpClient = c } }

// WithTimeout bounds each call, streaming included, when the request does not
// set its own; the default is DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(p *Provider) { p.timeout = d } }

// WithStallTimeouts sets how long a call waits for its first delta
// (default DefaultFirstTokenTimeout) and, once deltas come, between two
// chunks (default DefaultIdleTimeout), when the request does not set its
// own. An attempt that waits longer is abandoned and retried. A negative
// value turns that timeout off; 0 keeps the default.
func WithStallTimeouts(firstToken, idle time.Duration) Option {
	return func(p *Provider) {
		if firstToken != 0 {
			p.firstToken = firstToken
		}
		if idle != 0 {
			p.idle = idle
		}
	}
}

// WithRetries sets how many times a failed or stalled call is sent again
// (default DefaultMaxRetries; 0 disables retries). Of those, at most one is
// a restart from scratch after deltas were streamed.
func WithRetries(n int) Option { return func(p *Provider) { p.maxRetries = max(n, 0) } }

// WithBackoff sets the first and the longest wait between retries; the wait
// doubles each time, with jitter, unless the server says Retry-After.
func WithBackoff(minWait, maxWait time.Duration) Option {
	return func(p *Provider) { p.minBackoff, p.maxBackoff = minWait, maxWait }
}

// WithLogger sets the logger for retries; the default is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.log = l } }

// New returns a provider. Configuration not given by options comes from the
// environment (OPENAI_BASE_URL, OPENAI_API_KEY) and the defaults.
func New(opts ...Option) *Provider {
	p := &Provider{
		timeout:    DefaultTimeout,
		firstToken: DefaultFirstTokenTimeout,
		idle:       DefaultIdleTimeout,
		maxRetries: DefaultMaxRetries,
		minBackoff: DefaultMinBackoff,
		maxBackoff: DefaultMaxBackoff,
	}
	for _, o := range opts {
		o(p)
	}
	if p.baseURL == "" {
		p.baseURL = os.Getenv("OPENAI_BASE_URL")
	}
	if p.baseURL == "" {
		p.baseURL = DefaultBaseURL
	}
	if p.apiKey == "" {
		p.apiKey = os.Getenv("OPENAI_API_KEY")
	}
	if p.httpClient == nil {
		p.httpClient = &http.Client{Transport: sharedTransport()}
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	p.client = sdk.NewClient(
		option.WithBaseURL(p.baseURL),
		option.WithAPIKey(p.apiKey),
		option.WithHTTPClient(p.httpClient),
		// The SDK's own retries would re-send a call whose stream failed
		// after it started; baton retries itself, only before the first delta.
		option.WithMaxRetries(0),
		option.WithMiddleware(inMemoryBody),
	)
	return p
}

// inMemoryBody gives the transport the request's body as the in-memory
// reader it is. The SDK wraps each attempt's body in a type of its own,
// which net/http cannot tell from a body that may block, so it sent the
// headers in one write and the body in another: two packets, and two
// system calls on each side, for a model call whose request fits the
// transport's write buffer (4 KiB) — one write now. A longer request takes
// as many writes as before.
func inMemoryBody(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	if req.GetBody != nil && req.ContentLength > 0 {
		if b, err := req.GetBody(); err == nil {
			req.Body = b
		}
	}
	return next(req)
}

// maxIdleConnsPerHost is how many idle keep-alive connections the shared
// transport keeps to one endpoint: as many as the model calls a busy runtime
// has in flight at once, so that each call finds a connection the previous
// one left rather than dialling (and, over HTTPS, a TLS handshake).
const maxIdleConnsPerHost = 256

// sharedTransport is the transport of every provider not given its own
// client: http.DefaultTransport's settings (proxies from the environment,
// timeouts, HTTP/2) with room for maxIdleConnsPerHost idle connections per
// endpoint instead of its two, beyond which, at 50 calls in flight, nearly
// every call dialled a new connection. One transport for all providers, so
// that workflows calling the same endpoint share its connections; the pool
// is per host, idle connections close after IdleConnTimeout.
var sharedTransport = sync.OnceValue(func() http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		// Replaced by the program (a test's recorder, a tracer): use it as it is.
		return http.DefaultTransport
	}
	t = t.Clone()
	t.MaxIdleConnsPerHost = maxIdleConnsPerHost
	t.MaxIdleConns = max(t.MaxIdleConns, 4*maxIdleConnsPerHost)
	return t
})

// BaseURL returns the endpoint the provider calls by default.
func (p *Provider) BaseURL() string { return p.baseURL }

// ProviderName is the provider's name in traces (gen_ai.provider.name): the
// OpenAI API, whichever server speaks it.
func (p *Provider) ProviderName() string { return "openai" }

var (
	errCallTimeout = errors.New("model call timed out")
	errStalled     = errors.New("model call stalled")
)

// Stream sends req and yields the reply's deltas: text, reasoning (from the
// reasoning_content or reasoning fields some servers add), tool-call
// fragments by index, the finish reason and, last, the usage.
//
// A failed attempt is sent again, up to the provider's retries, with
// backoff (honouring Retry-After): for 408, 409, 429, 5xx, connection
// errors, a malformed chunk, a dropped stream, and a stall — no delta within
// the first-token timeout, or no chunk within the idle timeout once deltas
// came. Before each retry it yields a baton.DeltaRetry. An attempt that had
// yielded deltas is restarted from scratch at most once per call: the
// caller records nothing of a call before it ends, so the void attempt
// leaves no trace but its retracted stream. Every error is a
// *baton.ProviderError, or ctx's error when ctx was cancelled.
func (p *Provider) Stream(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	return func(yield func(baton.Delta, error) bool) {
		baseURL := p.baseURL
		var reqOpts []option.RequestOption
		if req.Params.BaseURL != "" {
			baseURL = req.Params.BaseURL
			reqOpts = append(reqOpts, option.WithBaseURL(baseURL))
		}
		if req.Params.APIKey != "" {
			reqOpts = append(reqOpts, option.WithAPIKey(req.Params.APIKey))
		}
		c := call{p: p, endpoint: llm.Endpoint(baseURL), model: req.Params.Model}
		body, err := requestBody(req, isOpenAI(baseURL))
		if err != nil {
			yield(baton.Delta{}, c.errorf(baton.ProviderBadRequest, err, "%v", err))
			return
		}
		timeout := req.Params.Timeout
		if timeout <= 0 {
			timeout = p.timeout
		}
		c.firstToken, c.idle = p.firstToken, p.idle
		if d := req.Params.FirstTokenTimeout; d != 0 {
			c.firstToken = d
		}
		if d := req.Params.IdleTimeout; d != 0 {
			c.idle = d
		}
		ctx, cancel := context.WithTimeoutCause(ctx, timeout, errCallTimeout)
		defer cancel()
		c.run(ctx, body, reqOpts, yield)
	}
}

// call is the state of one Stream call.
type call struct {
	p            *Provider
	endpoint     string
	model        string
	firstToken   time.Duration // ≤ 0: no first-token timeout
	idle         time.Duration // ≤ 0: no idle timeout
	started      bool          // the attempt has yielded a delta
	finished     bool          // the attempt received a finish reason
	finishReason string
}

func (c *call) run(ctx context.Context, body []byte, reqOpts []option.RequestOption, yield func(baton.Delta, error) bool) {
	maxAttempts := c.p.maxRetries + 1
	restarted := false // an attempt that had yielded deltas was sent again
	for attempt := 1; ; attempt++ {
		c.started, c.finished, c.finishReason = false, false, ""
		ok, err := c.attempt(ctx, body, reqOpts, yield)
		if !ok {
			return // the consumer stopped
		}
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			yield(baton.Delta{}, c.contextError(ctx, err))
			return
		}
		var pe *baton.ProviderError
		if !errors.As(err, &pe) {
			pe = c.classify(err, c.started)
		}
		if attempt >= maxAttempts || !llm.Retryable(pe) || (c.started && restarted) {
			yield(baton.Delta{}, pe)
			return
		}
		restarted = restarted || c.started
		wait := c.p.backoff(attempt-1, pe.RetryAfter)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			yield(baton.Delta{}, pe) // waiting would outlast the call's timeout
			return
		}
		c.p.log.LogAttrs(ctx, slog.LevelWarn, "model call failed; retrying",
			slog.String("endpoint", c.endpoint), slog.String("model", c.model),
			slog.Int("attempt", attempt+1), slog.Int("max_attempts", maxAttempts), slog.Bool("restart", c.started),
			slog.Duration("wait", wait), slog.String("error", pe.Error()))
		if !yield(baton.Delta{Kind: baton.DeltaRetry, Retry: &baton.Retry{Attempt: attempt + 1, MaxAttempts: maxAttempts, Err: pe, Wait: wait}}, nil) {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			yield(baton.Delta{}, c.contextError(ctx, pe))
			return
		case <-t.C:
		}
	}
}

// attempt sends the request once and reads its stream, yielding its deltas.
// It returns false when the consumer stopped, and the attempt's error
// otherwise. A watchdog cancels the attempt (with cause errStalled) when no
// delta comes within the first-token timeout, or no chunk within the idle
// timeout after the first delta; chunks before the first delta (a role, an
// empty content, a keep-alive) do not count as progress.
func (c *call) attempt(ctx context.Context, body []byte, reqOpts []option.RequestOption, yield func(baton.Delta, error) bool) (bool, error) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var watchdog *time.Timer
	if c.firstToken > 0 {
		watchdog = time.AfterFunc(c.firstToken, func() { cancel(errStalled) })
		defer watchdog.Stop()
	}
	stream := c.p.newStream(actx, body, reqOpts)
	defer stream.Close()
	chunks := 0
	for stream.Next() {
		chunks++
		wasStarted := c.started
		if !c.emit(stream.Current(), yield) {
			return false, nil
		}
		if c.started && c.idle > 0 {
			if watchdog == nil {
				watchdog = time.AfterFunc(c.idle, func() { cancel(errStalled) })
				defer watchdog.Stop()
			} else {
				watchdog.Reset(c.idle)
			}
		} else if c.started && !wasStarted && watchdog != nil {
			watchdog.Stop() // no idle timeout: the first-token one is done
		}
	}
	err := stream.Err()
	if ctx.Err() == nil && context.Cause(actx) == errStalled {
		if c.finished {
			// The reply is whole: only what follows its finish reason (the
			// usage) did not come, or the watchdog fired as it completed.
			err = nil
		} else if c.started {
			return true, c.errorf(baton.ProviderTimeoutIdle, err, "the reply stalled: no chunk within %v", c.idle)
		} else {
			return true, c.errorf(baton.ProviderTimeoutFirstToken, err, "no reply within the first-token timeout (%v)", c.firstToken)
		}
	}
	if err != nil {
		return true, c.classify(err, chunks > 0)
	}
	if !c.finished {
		return true, c.errorf(baton.ProviderConnectionDropped, io.ErrUnexpectedEOF, "the stream ended before the model finished")
	}
	if c.finishReason == "content_filter" {
		return true, c.errorf(baton.ProviderContentFilter, nil, "the reply was stopped by the provider's content filter")
	}
	return true, nil
}

// newStream posts body (requestBody) through the SDK's client — its path,
// authentication, headers and transport, as NewStreaming sends it — and
// reads the reply with the SDK's SSE decoder (chunkStream).
func (p *Provider) newStream(ctx context.Context, body []byte, reqOpts []option.RequestOption) *chunkStream {
	var raw *http.Response
	err := p.client.Post(ctx, "chat/completions", body, &raw, reqOpts...)
	// Over HTTP/1.1 the connection is kept only for a body read to its end
	// (drain); over HTTP/2 closing the body resets its stream alone.
	drain := raw != nil && raw.ProtoMajor < 2 && !raw.Close
	return &chunkStream{dec: ssestream.NewDecoder(raw), err: err, drain: drain}
}

// chunkStream is the SDK's ssestream.Stream for streamChunk — the SDK's
// SSE decoder, its end at [DONE], its StreamError for an {"error": …}
// event — but it decodes each chunk into streamChunk rather than
// sdk.ChatCompletionChunk (whose decoder walks a large generated struct by
// reflection and keeps each field's raw JSON, which cost more than the
// rest of a model call: BenchmarkStream against BenchmarkSDKBaseline), with
// internal/fastjson (segmentio/encoding/json for a chunk of up to 8 KiB,
// encoding/json's answer wherever the two could differ: half the time per
// chunk), into one chunk reused from one to the next.
type chunkStream struct {
	dec   ssestream.Decoder
	err   error
	cur   streamChunk
	done  bool
	drain bool // read to the end of the body after [DONE] (drain)
}

// Next decodes the next chunk; false at the end of the stream or on an
// error (Err).
func (s *chunkStream) Next() bool {
	if s.err != nil || s.done || s.dec == nil {
		return s.finish(s.err)
	}
	if !s.dec.Next() {
		return s.finish(s.dec.Err())
	}
	ev := s.dec.Event()
	if bytes.HasPrefix(ev.Data, []byte("[DONE]")) {
		s.drainRest()
		return s.finish(nil)
	}
	if e := gjson.GetBytes(ev.Data, "error"); e.Exists() {
		return s.finish(&ssestream.StreamError{Message: "received error while streaming: " + e.String(), Event: ev})
	}
	if err := decodeChunk(ev.Data, &s.cur); err != nil {
		return s.finish(err)
	}
	return true
}

// decodeChunk decodes data into ch, which it empties first (keeping the
// room of its choices).
func decodeChunk(data []byte, ch *streamChunk) error {
	choices := ch.Choices[:0]
	clear(choices[:cap(choices)])
	*ch = streamChunk{Choices: choices}
	return fastjson.Unmarshal(data, ch)
}

// Current returns the chunk Next decoded, valid until the next call of Next.
func (s *chunkStream) Current() *streamChunk { return &s.cur }

// Err returns the error that ended the stream, if any.
func (s *chunkStream) Err() error { return s.err }

// Close closes the reply's body.
func (s *chunkStream) Close() error {
	s.done = true
	if s.dec != nil {
		d := s.dec
		s.dec = nil
		return d.Close()
	}
	return nil
}

// drainWait bounds how long a stream waits, after [DONE], for its body's
// end. A server sends it at once (the end of the chunked body); one that
// keeps the stream open after [DONE] costs a call this much, and its
// connection.
const drainWait = 100 * time.Millisecond

// drainRest reads what follows [DONE] up to the end of the body, for at
// most drainWait, when the reply came over HTTP/1.1 on a connection the
// server keeps (chunkStream.drain) — the wire of most self-hosted and
// proxied endpoints. There a body closed before its end costs its
// connection (the transport cannot tell what is left on the wire, so it
// closes it), and the next call dials anew: a TCP handshake, over TLS a TLS
// one too, both in the next call's latency. The end of the body usually
// comes in its own packet just after [DONE]: BenchmarkProductionTurn saw a
// new connection for about one call in seven, one turn at a time, before
// this. Over HTTP/2 closing the body resets its stream only: no drain.
func (s *chunkStream) drainRest() {
	if !s.drain {
		return
	}
	d := s.dec
	t := time.AfterFunc(drainWait, func() { _ = d.Close() }) // a Close unblocks the read
	defer t.Stop()
	for d.Next() {
	}
}

func (s *chunkStream) finish(err error) bool {
	s.err = err
	_ = s.Close()
	return false
}

// streamChunk is the part of a streamed chat.completion.chunk the provider reads.
// Fields it does not name are skipped by the decoder.
type streamChunk struct {
	ID      string        `json:"id"`
	Choices []chunkChoice `json:"choices"`
	Usage   *chunkUsage   `json:"usage"`
}

type chunkChoice struct {
	Index        int64      `json:"index"`
	Delta        chunkDelta `json:"delta"`
	FinishReason string     `json:"finish_reason"`
}

type chunkDelta struct {
	Content string `json:"content"`
	Refusal string `json:"refusal"`
	// Reasoning fragments some OpenAI-compatible servers send beside the
	// content: "reasoning_content" (vLLM, DeepSeek, LM Studio) or
	// "reasoning" (Ollama, OpenRouter).
	ReasoningContent looseString     `json:"reasoning_content"`
	Reasoning        looseString     `json:"reasoning"`
	ToolCalls        []chunkToolCall `json:"tool_calls"`
}

type chunkToolCall struct {
	Index    int64  `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chunkUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// looseString is a string field that some servers fill with another kind
// of value: anything but a string reads as "", instead of failing the chunk.
type looseString string

// UnmarshalJSON implements json.Unmarshaler.
func (s *looseString) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		*s = ""
		return nil
	}
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = looseString(v)
	return nil
}

// emit yields the deltas of one chunk. It allocates nothing: the strings are
// the decoded chunk's.
func (c *call) emit(chunk *streamChunk, yield func(baton.Delta, error) bool) bool {
	for i := range chunk.Choices {
		ch := &chunk.Choices[i]
		if ch.Index != 0 {
			continue // baton asks for one choice
		}
		d := &ch.Delta
		r := d.ReasoningContent
		if r == "" {
			r = d.Reasoning
		}
		if r != "" {
			c.started = true
			if !yield(baton.Delta{Kind: baton.DeltaReasoning, Text: string(r)}, nil) {
				return false
			}
		}
		if d.Content != "" {
			c.started = true
			if !yield(baton.Delta{Kind: baton.DeltaText, Text: d.Content}, nil) {
				return false
			}
		}
		if d.Refusal != "" {
			c.started = true
			if !yield(baton.Delta{Kind: baton.DeltaText, Text: d.Refusal}, nil) {
				return false
			}
		}
		for j := range d.ToolCalls {
			tc := &d.ToolCalls[j]
			c.started = true
			if !yield(baton.Delta{Kind: baton.DeltaToolCall, ToolCall: baton.ToolCallDelta{
				Index: int(tc.Index), ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments,
			}}, nil) {
				return false
			}
		}
		if ch.FinishReason != "" {
			c.started = true
			c.finished = true
			c.finishReason = ch.FinishReason
			if !yield(baton.Delta{Kind: baton.DeltaFinish, FinishReason: ch.FinishReason, ResponseID: chunk.ID}, nil) {
				return false
			}
		}
	}
	if u := chunk.Usage; u != nil {
		c.started = true
		if !yield(baton.Delta{Kind: baton.DeltaUsage, Usage: baton.Usage{
			PromptTokens:     u.PromptTokens,
			CompletionTokens: u.CompletionTokens,
			CachedTokens:     u.PromptTokensDetails.CachedTokens,
			ReasoningTokens:  u.CompletionTokensDetails.ReasoningTokens,
		}}, nil) {
			return false
		}
	}
	return true
}

// classify turns an SDK or transport error into a provider error. streaming
// says the response had begun (a chunk came): a transport error then is a
// dropped stream, not a failed connection.
func (c *call) classify(err error, streaming bool) *baton.ProviderError {
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		var retryAfter time.Duration
		if apiErr.Response != nil {
			retryAfter = parseRetryAfter(apiErr.Response.Header, time.Now())
		}
		msg := apiErr.Message
		if msg == "" {
			msg = strings.TrimSpace(http.StatusText(apiErr.StatusCode))
		}
		pe := llm.ErrorForStatus(apiErr.StatusCode, apiErr.Code, msg, c.endpoint, c.model, retryAfter)
		pe.Err = err
		return pe
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		// An {"error": …} event inside a 200 stream: classify by its code and message.
		var body struct {
			Error struct {
				Code    any    `json:"code"`
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		_ = json.Unmarshal(streamErr.Event.Data, &body)
		code := fmt.Sprint(body.Error.Code)
		if body.Error.Code == nil {
			code = body.Error.Type
		}
		status := 500
		if n, convErr := strconv.Atoi(code); convErr == nil && n >= 400 && n < 600 {
			status = n
		}
		pe := llm.ErrorForStatus(status, code, body.Error.Message, c.endpoint, c.model, 0)
		pe.Status = 0
		pe.Err = err
		return pe
	}
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) {
		return c.errorf(baton.ProviderMalformedChunk, err, "malformed chunk in the response stream: %v", err)
	}
	var urlErr *url.Error
	if streaming || (!errors.As(err, &urlErr) && !errors.Is(err, context.Canceled)) {
		// Not the request failing (net/http wraps those in *url.Error):
		// reading the response body did, after the 200.
		return c.errorf(baton.ProviderConnectionDropped, err, "the connection dropped mid-stream: %v", redact(err))
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "connection") {
		return c.errorf(baton.ProviderUnavailable, err, "connection failed: %v", redact(err))
	}
	return c.errorf(baton.ProviderUnavailable, err, "%v", redact(err))
}

// contextError returns the error for a call ended by its context: a timeout
// provider error for the call's own timeout, ctx's error otherwise.
func (c *call) contextError(ctx context.Context, cause error) error {
	if context.Cause(ctx) == errCallTimeout {
		return c.errorf(baton.ProviderTimeout, cause, "no complete reply within the call's timeout")
	}
	return fmt.Errorf("model %q at %s: %w", c.model, c.endpoint, ctx.Err())
}

func (c *call) errorf(kind baton.ProviderErrorKind, cause error, format string, args ...any) *baton.ProviderError {
	return &baton.ProviderError{Kind: kind, Message: fmt.Sprintf(format, args...),
		Endpoint: c.endpoint, Model: c.model, Err: cause}
}

// redact returns err's message without the request URL that url.Error adds
// (a URL may carry credentials).
func redact(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}

// backoff returns the wait before retry attempt+1: the server's Retry-After
// when it gave one (capped), else exponential from minBackoff with jitter.
func (p *Provider) backoff(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, maxRetryAfter)
	}
	d := p.minBackoff << min(attempt, 16)
	if d <= 0 || d > p.maxBackoff {
		d = p.maxBackoff
	}
	// Full jitter in [d/2, d): spreads retries of many chats apart.
	return d/2 + rand.N(d/2+1)
}

// parseRetryAfter reads retry-after-ms (OpenAI) or Retry-After (seconds or an
// HTTP date).
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func isOpenAI(baseURL string) bool {
	return strings.Contains(baseURL, "api.openai.com")
}

// chatRequest is the body of a streamed chat completion, the JSON the SDK's
// ChatCompletionNewParams marshals to for the fields baton sets. It is
// encoded with encoding/json: the SDK's reflective encoder of its params
// (and the decoding of each tool's parameters into a map for it to encode
// again) took as much CPU as the rest of a model call's request.
// TestRequestMatchesSDK holds it to the SDK's encoding.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Stream              bool            `json:"stream"`
	StreamOptions       streamOptions   `json:"stream_options"`
	Tools               []chatTool      `json:"tools,omitempty"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	ResponseFormat      *responseFormat `json:"response_format,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	MaxTokens           int64           `json:"max_tokens,omitempty"`
	MaxCompletionTokens int64           `json:"max_completion_tokens,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role       string         `json:"role"`
	Name       string         `json:"name,omitempty"`
	Content    *string        `json:"content,omitempty"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string      `json:"type"`
	Function functionDef `json:"function"`
}

type functionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      bool            `json:"strict,omitempty"`
}

type responseFormat struct {
	Type       string     `json:"type"`
	JSONSchema jsonSchema `json:"json_schema"`
}

type jsonSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict bool            `json:"strict"`
}

// requestBody encodes req as a streamed chat completion's body. openAI
// says the endpoint is OpenAI's own (see MaxTokens).
func requestBody(req *baton.Request, openAI bool) ([]byte, error) {
	if req.Params.Model == "" {
		return nil, errors.New("no model configured")
	}
	body := chatRequest{
		Model:         req.Params.Model,
		Messages:      make([]chatMessage, len(req.Messages)),
		Stream:        true,
		StreamOptions: streamOptions{IncludeUsage: true},
	}
	for i := range req.Messages {
		if err := body.Messages[i].set(&req.Messages[i]); err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
	}
	if len(req.Tools) > 0 {
		body.Tools = make([]chatTool, len(req.Tools))
		for i, t := range req.Tools {
			if len(t.Parameters) > 0 && !isJSONObject(t.Parameters) {
				return nil, fmt.Errorf("tools[%d] %q: parameters: not a JSON object", i, t.Name)
			}
			body.Tools[i] = chatTool{Type: "function", Function: functionDef{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}}
		}
		yes := true
		body.ParallelToolCalls = &yes
	}
	if rf := req.ResponseFormat; rf != nil {
		if !json.Valid(rf.Schema) {
			return nil, fmt.Errorf("response format %q: schema is not valid JSON", rf.Name)
		}
		body.ResponseFormat = &responseFormat{Type: "json_schema", JSONSchema: jsonSchema{Name: rf.Name, Schema: rf.Schema, Strict: true}}
	}
	body.Temperature = req.Params.Temperature
	body.Seed = req.Params.Seed
	if n := req.Params.MaxTokens; n > 0 {
		// OpenAI's reasoning models accept only max_completion_tokens; many
		// compatible servers know only max_tokens.
		if openAI {
			body.MaxCompletionTokens = int64(n)
		} else {
			body.MaxTokens = int64(n)
		}
	}
	return json.Marshal(&body)
}

// isJSONObject reports whether b is valid JSON holding an object.
func isJSONObject(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return json.Valid(b)
		}
		return false
	}
	return false
}

// set makes m the API's form of the baton message b.
func (m *chatMessage) set(b *baton.Message) error {
	m.Name = speakerName(b.Name)
	switch b.Role {
	case baton.RoleSystem, baton.RoleUser:
		m.Role, m.Content = string(b.Role), &b.Content
	case baton.RoleAssistant:
		m.Role = "assistant"
		if b.Content != "" || len(b.ToolCalls) == 0 {
			m.Content = &b.Content
		}
		if len(b.ToolCalls) > 0 {
			m.ToolCalls = make([]chatToolCall, len(b.ToolCalls))
			for i, tc := range b.ToolCalls {
				args := tc.Arguments
				if args == "" {
					args = "{}"
				}
				m.ToolCalls[i] = chatToolCall{ID: tc.ID, Type: "function", Function: chatFunction{Name: tc.Name, Arguments: args}}
			}
		}
	case baton.RoleTool:
		if b.ToolCallID == "" {
			return errors.New("tool message without tool_call_id")
		}
		m.Role, m.Name, m.Content, m.ToolCallID = "tool", "", &b.Content, b.ToolCallID
	default:
		return fmt.Errorf("unknown role %q", b.Role)
	}
	return nil
}

// speakerName makes a speaker's name fit OpenAI's `name` field
// (^[a-zA-Z0-9_-]{1,64}$): other characters become '_'.
func speakerName(s string) string {
	if s == "" {
		return ""
	}
	ok := len(s) <= 64
	for i := 0; ok && i < len(s); i++ {
		ok = isNameByte(s[i])
	}
	if ok {
		return s
	}
	b := make([]byte, 0, min(len(s), 64))
	for i := 0; i < len(s) && len(b) < 64; i++ {
		if isNameByte(s[i]) {
			b = append(b, s[i])
		} else if s[i] < 0x80 || s[i] >= 0xC0 { // one '_' per rune
			b = append(b, '_')
		}
	}
	return string(b)
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
