package baton_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The documents a clone of the repository must be able to follow on its
// own: every link and file they name resolves inside it.
var docFiles = func() []string {
	files, _ := filepath.Glob("docs/*.md")
	return append([]string{"README.md", "web/README.md"}, files...)
}()

var (
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// A backquoted relative path with a file extension, such as
	// `docs/engine.md` or `server/openapi.json`.
	codePath = regexp.MustCompile("`([a-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+\\.(?:md|go|json|js|css|html|sql|sh|yml|yaml))`")
	// References to material outside the repository.
	outside = regexp.MustCompile(`\.\./shared|\bspec/[a-z-]+\.md|\bSeed [0-9]{3}|DESIGN\.md`)
)

// TestDocs_LinksResolveInsideTheRepository: every relative link of README.md
// and docs/ names a file of the repository (and, with a #fragment, one of
// its headings), every backquoted file path exists, and nothing points at
// documents outside the repository.
func TestDocs_LinksResolveInsideTheRepository(t *testing.T) {
	for _, doc := range docFiles {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		inFence := false
		for i, line := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inFence = !inFence
			}
			at := func(format string, args ...any) {
				t.Helper()
				t.Errorf("%s:%d: "+format, append([]any{doc, i + 1}, args...)...)
			}
			if m := outside.FindString(line); m != "" {
				at("%q refers to a document outside the repository", m)
			}
			if inFence {
				continue // code: a Go generic call reads like a link
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), file)
					if _, err := os.Stat(path); err != nil {
						at("link %q: no file %s in the repository", target, path)
						continue
					}
				}
				if frag != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[frag] {
					at("link %q: %s has no heading #%s", target, path, frag)
				}
			}
			for _, m := range codePath.FindAllStringSubmatch(line, -1) {
				if _, err := os.Stat(m[1]); err != nil {
					if _, err2 := os.Stat(filepath.Join(filepath.Dir(doc), m[1])); err2 != nil {
						at("file %s: not in the repository", m[1])
					}
				}
			}
		}
	}
}

// anchors returns the fragment ids of a Markdown file's headings, made as
// GitHub makes them: lower case, punctuation dropped, spaces to hyphens,
// and -1, -2… for repeats.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			out[id+"-"+itoa(n)] = true
		} else {
			out[id] = true
		}
		seen[id]++
	}
	return out
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for ; n > 0; n /= 10 {
		d = append([]byte{byte('0' + n%10)}, d...)
	}
	return string(d)
}
