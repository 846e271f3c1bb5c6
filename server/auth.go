package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"

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
	limit string // the rate-limit bucket: the key's hash, or the client address in dev mode
}

// authenticate resolves a token (or, in dev mode, none) to a principal.
// app is the app the request names ("" when it names none). A key of
// another app is ENOTFOUND: the request names something the caller may not
// know exists (invariant 8).
func (s *Server) authenticate(r *http.Request, token, app string) (principal, error) {
	if token == "" {
		if !s.cfg.Dev {
			return principal{}, errUnauthorized
		}
		if app == "" {
			return principal{}, baton.Errorf(baton.EINVALID, "app: required in dev mode without a key")
		}
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		return principal{scope: baton.Scope{App: app, User: DevUser}, limit: "dev:" + host}, nil
	}
	if len(token) > 256 {
		return principal{}, errUnauthorized
	}
	hash := HashKey(token)
	k, err := s.cfg.Keys.LookupKey(r.Context(), hash)
	if err != nil {
		if baton.ErrorCode(err) == baton.ENOTFOUND {
			return principal{}, errUnauthorized
		}
		return principal{}, err
	}
	if app != "" && app != k.App {
		return principal{}, baton.Errorf(baton.ENOTFOUND, "not found")
	}
	return principal{scope: k.Scope(), limit: hash}, nil
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
