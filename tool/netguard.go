package tool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	neturl "net/url"
	"strings"
	"syscall"
	"time"

	"github.com/batonhq/baton"
)

// An http tool may reach only public addresses unless its spec sets
// AllowPrivateNetwork: a workflow must not turn baton into a way into the
// operator's network (cloud metadata at 169.254.169.254, a database on
// 10.0.0.5, an admin port on localhost). The address is checked where the
// connection is made, after DNS resolution, so a name that resolves (or
// re-resolves) to a private address is refused too, and every redirect is
// a new connection checked the same way.

// nonPublic are the ranges netip's own predicates do not cover.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),  // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, and broadcast
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64: an IPv4 address inside
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("2002::/16"),      // 6to4: an IPv4 address inside
	netip.MustParsePrefix("2001::/32"),      // Teredo
	netip.MustParsePrefix("100::/64"),       // discard-only
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated)
	netip.MustParsePrefix("ff00::/8"),       // multicast
	netip.MustParsePrefix("::ffff:0:0/96"),  // IPv4-mapped, checked unmapped
	netip.MustParsePrefix("::/128"),         // unspecified
	netip.MustParsePrefix("192.88.99.0/24"), // 6to4 relay anycast
}

// errPrivateAddress is why a connection of a guarded http tool was refused.
var errPrivateAddress = errors.New("a loopback, link-local or private address (set allow_private_network on the tool to allow it)")

// publicAddr reports whether ip is a public unicast address.
func publicAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// guardControl is a net.Dialer Control that refuses a connection to a
// non-public address; it sees the address after resolution.
func guardControl(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", address, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !publicAddr(ip) {
		return fmt.Errorf("connect to %s: %w", host, errPrivateAddress)
	}
	return nil
}

// guardedClient returns a copy of base whose connections go only to
// public addresses and whose redirects never carry credentials to another
// origin. base's Transport, when it is an *http.Transport (the default),
// keeps its settings with the guarded dialer and no proxy (a proxy would
// make the connection, and the check, somewhere else). Any other
// RoundTripper is checked before each request by resolving the host, which
// a DNS answer that changes between the check and the connection could
// get past; tests and in-process transports use it.
func guardedClient(base *http.Client, guard bool, credentials []string) *http.Client {
	c := *base
	if guard {
		var rt http.RoundTripper
		switch t := base.Transport.(type) {
		case nil:
			rt = guardedTransport(http.DefaultTransport.(*http.Transport))
		case *http.Transport:
			rt = guardedTransport(t)
		default:
			rt = resolveCheck{base: t}
		}
		c.Transport = rt
	}
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		first := via[0].URL
		if req.URL.Scheme != first.Scheme || !strings.EqualFold(req.URL.Host, first.Host) {
			// Another origin: nothing the operator or the person gave the
			// tool's own endpoint follows it there.
			for _, h := range credentials {
				req.Header.Del(h)
			}
			for _, h := range []string{"Authorization", "Proxy-Authorization", "Cookie"} {
				req.Header.Del(h)
			}
		}
		if base.CheckRedirect != nil {
			return base.CheckRedirect(req, via)
		}
		return nil
	}
	return &c
}

func guardedTransport(t *http.Transport) *http.Transport {
	g := t.Clone()
	g.Proxy = nil
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: guardControl}
	g.DialContext = d.DialContext
	g.DialTLSContext = nil
	return g
}

// resolveCheck checks, before each request, that the host resolves only
// to public addresses (for a RoundTripper whose dialing baton does not
// control).
type resolveCheck struct{ base http.RoundTripper }

func (r resolveCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := checkHost(req.Context(), req.URL.Hostname()); err != nil {
		return nil, err
	}
	return r.base.RoundTrip(req)
}

func checkHost(ctx context.Context, host string) error {
	if ip, err := netip.ParseAddr(host); err == nil {
		if !publicAddr(ip) {
			return fmt.Errorf("connect to %s: %w", host, errPrivateAddress)
		}
		return nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", host, err)
	}
	for _, ip := range addrs {
		if !publicAddr(ip) {
			return fmt.Errorf("connect to %s (%s): %w", host, ip, errPrivateAddress)
		}
	}
	return nil
}

// requestURL expands an http tool's url template: ${VAR} is a secret of
// the call (URL-escaped, so the person's text adds no path segment, query
// parameter or fragment) or else the operator's environment variable (used
// as it is). A secret can never choose where the request goes: the URL's
// scheme, user info and host must be the same whatever the secrets hold.
func requestURL(template string, secrets map[string]string) (string, error) {
	escaped := make(map[string]string, len(secrets))
	blank := make(map[string]string, len(secrets))
	probe := make(map[string]string, len(secrets))
	for k, v := range secrets {
		escaped[k] = neturl.QueryEscape(v)
		blank[k] = ""
		probe[k] = "x0"
	}
	u, err := expandEnv(template, escaped)
	if err != nil {
		return "", err
	}
	if len(secrets) > 0 {
		a, errA := expandEnv(template, blank)
		b, errB := expandEnv(template, probe)
		if errA != nil || errB != nil || origin(a) != origin(b) || origin(a) != origin(u) {
			return "", baton.Errorf(baton.EINVALID, "a secret may not choose the url's scheme, user or host")
		}
	}
	return u, nil
}

// origin is the part of a URL that says where a request goes, or "" when
// s does not parse.
func origin(s string) string {
	u, err := neturl.Parse(s)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.User.String() + "@" + u.Host
}
