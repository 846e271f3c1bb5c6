package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton"
	"golang.org/x/time/rate"
)

// KeyPrefix starts every API key baton makes, so that a leaked key is easy to
// recognise (and to scan for).
const KeyPrefix = "bk_"

// DevUser is the user of every request in --dev mode without a key.
const DevUser = "dev"

var errUnauthorized = baton.Errorf(baton.EUNAUTHORIZED, "missing or invalid API key: send Authorization: Bearer <key>")

// NewKey returns a fresh API key (KeyPrefix and 32 random bytes, base64url)
// and the hash to store for it. The key itself must be shown once and
// never stored.
func NewKey() (key, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	key = KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return key, HashKey(key), nil
}

// HashKey returns the stored form of an API key: the hex SHA-256. Keys are
// 256 random bits, so a fast hash is enough; nothing else is stored.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// bearer returns the token of an "Authorization: Bearer …" header, or "".
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// principal is who a request acts as.
type principal struct {
	scope baton.Scope
	limit string // the rate-limit (and stream-count) bucket: the key's hash, or the client address in dev mode
	// keyHash is the hash of the key the principal was authenticated with;
	// "" in dev mode without a key. Open streams re-check it (keyLive), so
	// that revoking a key ends its streams too.
	keyHash string
}

// authenticate resolves a token (or, in dev mode, none) to a principal.
// app is the app the request names ("" when it names none). A key of
// another app is ENOTFOUND: the request names something the caller may not
// know exists (invariant 8). ctx bounds the key lookup: a WebSocket's auth
// message comes after its request is hijacked.
func (s *Server) authenticate(ctx context.Context, r *http.Request, token, app string) (principal, error) {
	if token == "" {
		if !s.cfg.Dev {
			return principal{}, errUnauthorized
		}
		if app == "" {
			return principal{}, baton.Errorf(baton.EINVALID, "app: required in dev mode without a key")
		}
		// The same rule as an API key's app (baton.Scope.Validate), so that
		// no store is handed a scope it keeps differently from the other.
		scope := baton.Scope{App: app, User: DevUser}
		if err := scope.Validate(); err != nil {
			return principal{}, err
		}
		return principal{scope: scope, limit: devLimitKey(r)}, nil
	}
	// Wrong keys cost their client address (clientAddr): once its bucket
	// of failures is empty, a wrong key is 429, so keys cannot be guessed
	// at the rate requests arrive. A right key is always looked up and
	// served: behind a reverse proxy every client shares one address, and
	// one guesser must not lock every tenant out.
	addr := clientAddr(r)
	failed := func() error {
		if !s.authFails.allow(addr) {
			return errAuthFails
		}
		return errUnauthorized
	}
	if len(token) > 256 {
		return principal{}, failed()
	}
	hash := HashKey(token)
	k, err := s.cfg.Keys.LookupKey(ctx, hash)
	if err != nil {
		if baton.ErrorCode(err) == baton.ENOTFOUND {
			return principal{}, failed()
		}
		return principal{}, err
	}
	if app != "" && app != k.App {
		return principal{}, baton.Errorf(baton.ENOTFOUND, "not found")
	}
	return principal{scope: k.Scope(), limit: hash, keyHash: hash}, nil
}

// errRevoked ends a stream whose key was revoked after it opened.
var errRevoked = baton.Errorf(baton.EUNAUTHORIZED, "API key revoked")

// keyLive re-checks, for a stream that is already open, that p's key is
// still live: a key is checked once at the handshake, and a stream can last
// for days. Dev-mode principals without a key have nothing to re-check. A
// key found live is remembered for Config.KeyCacheTTL, so that a burst of
// messages costs one store read; a revoked key is never cached. It returns
// errRevoked for a revoked (or deleted) key, and the store's error when the
// store cannot tell: the caller keeps the stream then, as it was authorized
// and the store may be back in a moment.
func (s *Server) keyLive(ctx context.Context, p principal) error {
	if p.keyHash == "" {
		return nil
	}
	now := time.Now()
	s.keysMu.Lock()
	at, ok := s.liveKeys[p.keyHash]
	s.keysMu.Unlock()
	if ok && now.Sub(at) < s.cfg.KeyCacheTTL {
		return nil
	}
	if _, err := s.cfg.Keys.LookupKey(ctx, p.keyHash); err != nil {
		if baton.ErrorCode(err) == baton.ENOTFOUND {
			s.keysMu.Lock()
			delete(s.liveKeys, p.keyHash)
			s.keysMu.Unlock()
			return errRevoked
		}
		return fmt.Errorf("re-check API key: %w", err)
	}
	s.keysMu.Lock()
	if len(s.liveKeys) >= 10000 {
		clear(s.liveKeys) // bound the memory; a forgotten key is looked up again
	}
	s.liveKeys[p.keyHash] = now
	s.keysMu.Unlock()
	return nil
}

// streamSlot is one open stream counted against its principal's bucket
// (Config.MaxStreamsPerKey): a key that opens streams without end would
// otherwise hold a goroutine pair, a queue and a hub entry each.
type streamSlot struct {
	s   *Server
	key string // the bucket counted; "" once released
}

// acquireStream counts a new stream of p, or refuses it with ERATELIMITED
// when p's bucket holds Config.MaxStreamsPerKey streams already. Dev mode
// without a key has no cap: it serves one developer on loopback, whose
// tools and load tests (baton bench, BenchmarkWS) open many streams.
func (s *Server) acquireStream(p principal) (*streamSlot, error) {
	if p.keyHash == "" {
		return &streamSlot{s: s}, nil // counted nowhere; release is a no-op
	}
	if err := s.countStream(p.limit); err != nil {
		return nil, err
	}
	return &streamSlot{s: s, key: p.limit}, nil
}

func (s *Server) countStream(key string) error {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.cfg.MaxStreamsPerKey > 0 && s.openStreams[key] >= s.cfg.MaxStreamsPerKey {
		return baton.Errorf(codeRateLimited, "too many open streams for this key (at most %d): close some first", s.cfg.MaxStreamsPerKey)
	}
	s.openStreams[key]++
	return nil
}

func (s *Server) uncountStream(key string) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.openStreams[key]--; s.openStreams[key] <= 0 {
		delete(s.openStreams, key)
	}
}

// move counts the stream against p's bucket instead (a dev-mode stream
// that authenticated with a key); the old count is kept if p's is full.
func (sl *streamSlot) move(p principal) error {
	if p.limit == sl.key {
		return nil
	}
	if err := sl.s.countStream(p.limit); err != nil {
		return err
	}
	if sl.key != "" {
		sl.s.uncountStream(sl.key)
	}
	sl.key = p.limit
	return nil
}

// release uncounts the stream; it is idempotent.
func (sl *streamSlot) release() {
	if sl != nil && sl.key != "" {
		sl.s.uncountStream(sl.key)
		sl.key = ""
	}
}

// devLimitKey is the rate bucket of a dev-mode request without a key: its
// client address.
func devLimitKey(r *http.Request) string {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	return "dev:" + host
}

// errAuthFails refuses a client address that sent too many wrong keys.
var errAuthFails = baton.Errorf(codeRateLimited, "too many failed API key attempts from this address: retry later")

// clientAddr is the bucket of a client's connection address for the
// limits that apply before anyone is known (failed keys, unauthenticated
// WebSocket handshakes): the IP, or for IPv6 its /64, which one client
// usually holds whole. Behind a reverse proxy every client shares the
// proxy's address.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// limiter is a token bucket per key.
type limiter struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newLimiter(perSecond float64, burst int) *limiter {
	if perSecond <= 0 {
		return nil
	}
	return &limiter{rate: rate.Limit(perSecond), burst: max(burst, 1), buckets: map[string]*rate.Limiter{}}
}

// allow takes a token from key's bucket.
func (l *limiter) allow(key string) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= 100000 {
			clear(l.buckets) // bound the memory; a reset bucket starts full
		}
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[key] = b
	}
	l.mu.Unlock()
	return b.Allow()
}

// originAllowed reports whether a request's Origin may use the API: no
// Origin (not a browser), the request's own host, or one of the allowed
// origins. A pattern is matched like coder/websocket's OriginPatterns:
// against "scheme://host" when it has a scheme, else against the host.
func originAllowed(r *http.Request, allowed []string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, p := range allowed {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}

// devHostAllowed reports whether a --dev request may be served: its Host,
// and its Origin when it has one, must name this machine. The dev server
// needs no key, so without this a page on attacker.example whose DNS name
// is rebound to 127.0.0.1 would drive it from the person's browser: the
// browser sends Host and Origin "attacker.example", which the Origin check
// alone takes for the server's own host.
func devHostAllowed(r *http.Request) bool {
	if !loopbackHost(r.Host) {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && loopbackHost(u.Host)
}

// loopbackHost reports whether a Host (or an origin's host), with or
// without a port, is localhost, 127.0.0.0/8 or [::1].
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1] // an IPv6 literal without a port
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IsLoopback reports whether a listen address only accepts connections from
// this machine (127.0.0.0/8, ::1 or localhost). --dev requires it.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// preauth is a request authenticated before its body is read: a request
// with a key, or with none outside dev mode, is settled (401 or a
// principal) before a byte of its body is parsed, so that an
// unauthenticated client learns nothing from how its body is judged and
// costs no decoding. Only a dev-mode request without a key, whose app is
// in the body, waits for it.
type preauth struct {
	p    principal
	done bool
}

// authFirst authenticates r before its body is read (see preauth).
func (s *Server) authFirst(r *http.Request) (preauth, error) {
	if bearer(r) == "" && s.cfg.Dev {
		return preauth{}, nil
	}
	p, err := s.principal(r, "")
	if err != nil {
		return preauth{}, err
	}
	return preauth{p: p, done: true}, nil
}

// forApp returns the principal for the app the body names ("" for none):
// a key of another app is ENOTFOUND, as in authenticate.
func (a preauth) forApp(s *Server, r *http.Request, app string) (principal, error) {
	if !a.done {
		return s.principal(r, app)
	}
	if app != "" && app != a.p.scope.App {
		return principal{}, baton.Errorf(baton.ENOTFOUND, "not found")
	}
	return a.p, nil
}
