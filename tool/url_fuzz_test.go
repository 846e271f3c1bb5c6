package tool

import (
	neturl "net/url"
	"strings"
	"testing"
)

// FuzzHTTPToolURL expands arbitrary tools.json url templates with an
// arbitrary secret: nothing panics, and whenever the url is accepted the
// secret chose neither the scheme, the user nor the host (they are those
// of the template with the secret left empty), and its text appears only
// URL-escaped.
func FuzzHTTPToolURL(f *testing.F) {
	f.Add("https://api.example.com/orders/${ACCOUNT}?key=${ACCOUNT}", "a/../admin?x=1&role=root#f")
	f.Add("http://${ACCOUNT}/x", "evil.example")
	f.Add("http://a${ACCOUNT}.example.com/", "b")
	f.Add("https://${ACCOUNT}@api.example.com/", "user:pw")
	f.Add("https://api.example.com:${ACCOUNT}/", "8080")
	f.Add("${ACCOUNT}", "http://169.254.169.254/")
	f.Add("https://api.example.com/$ACCOUNT", "@evil.example")
	f.Fuzz(func(t *testing.T, template, secret string) {
		secrets := map[string]string{"ACCOUNT": secret}
		u, err := requestURL(template, secrets)
		if err != nil || !strings.Contains(template, "ACCOUNT") {
			return
		}
		blank, err := expandEnv(template, map[string]string{"ACCOUNT": ""})
		if err != nil {
			t.Fatalf("accepted %q but it does not expand without the secret: %v", template, err)
		}
		if origin(u) != origin(blank) {
			t.Fatalf("template %q with secret %q goes to %s, not %s", template, secret, origin(u), origin(blank))
		}
		if esc := neturl.QueryEscape(secret); esc != secret && strings.Contains(secret, "/") && strings.Count(u, secret) > strings.Count(blank, secret) {
			t.Fatalf("the secret %q appears unescaped in %q", secret, u)
		}
	})
}
