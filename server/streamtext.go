package server

import (
	"unicode/utf8"
)

// streamDelta is what the protocol adapters read of a stream.text
// envelope: the data's message id, agent and text.
type streamDelta struct {
	MessageID string
	Agent     string
	Delta     string
}

// decodeStreamText reads a stream.text envelope's data.message_id,
// data.agent and data.delta without encoding/json's reflection: a streamed
// reply is one such envelope per delta, and decoding them was the largest
// cost the AG-UI and Chat Completions streams had over the WebSocket, which
// sends the hub's bytes as they are.
//
// It handles the shape the hub encodes (llm.StreamEvent's payload in
// baton.Event.AppendEnvelope): an object whose "data" is an object of
// string fields message_id, agent, delta and chat_id, its other members
// strings or literals. On anything else — another member in data, a
// number, a nested value, a key with an escape or in another case, a
// surrogate escape, invalid UTF-8, invalid JSON — ok is false and the
// caller decodes with encoding/json, which stays the reference: where ok
// is true the result is what json.Unmarshal gives (FuzzDecodeStreamText).
func decodeStreamText(envelope []byte) (d streamDelta, ok bool) {
	s := jsonScan{b: envelope}
	if !s.skipByte('{') {
		return d, false
	}
	data := false
	for {
		key, ok := s.key()
		if !ok {
			return d, false
		}
		if string(key) == "data" {
			if data || !s.streamData(&d) {
				return d, false // a second "data" merges into the first: encoding/json's
			}
			data = true
		} else if equalFoldASCII(key, "data") || !s.skipScalar() {
			return d, false
		}
		s.space()
		if s.skipByte(',') {
			continue
		}
		if !s.skipByte('}') {
			return d, false
		}
		break
	}
	s.space()
	return d, data && s.i == len(s.b)
}

// jsonScan reads the few JSON shapes decodeStreamText accepts, and fails
// on anything else.
type jsonScan struct {
	b []byte
	i int
}

// space skips JSON whitespace.
func (s *jsonScan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// skipByte skips whitespace and then c, if c is next.
func (s *jsonScan) skipByte(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// key reads an object member's key and its colon. A key with an escape is
// refused: encoding/json matches keys after unescaping, and case-folded.
func (s *jsonScan) key() ([]byte, bool) {
	s.space()
	raw, esc, ok := s.str()
	if !ok || esc || !s.skipByte(':') {
		return nil, false
	}
	return raw, true
}

// str reads a string at s.i: its raw content between the quotes, and
// whether it holds an escape. It fails on a control character, invalid
// UTF-8 or a bad escape.
func (s *jsonScan) str() (raw []byte, esc, ok bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, false
	}
	start := s.i + 1
	ascii := true
	for i := start; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '"':
			raw = s.b[start:i]
			if !ascii && !utf8.Valid(raw) {
				return nil, false, false // encoding/json replaces it with U+FFFD
			}
			s.i = i + 1
			return raw, esc, true
		case c == '\\':
			esc = true
			i++
			if i >= len(s.b) {
				return nil, false, false
			}
			switch s.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if _, ok := hex4(s.b[i+1:]); !ok {
					return nil, false, false
				}
				i += 4
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false, false
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// text reads a string value, unescaped. A surrogate escape (a character
// outside the BMP, or half of one) is refused: encoding/json's pairing
// rules are its own.
func (s *jsonScan) text() (string, bool) {
	s.space()
	raw, esc, ok := s.str()
	if !ok {
		return "", false
	}
	if !esc {
		return string(raw), true
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++ // str checked that an escape is whole
		switch raw[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, _ := hex4(raw[i+1:])
			if utf8.RuneLen(r) < 0 || (r >= 0xd800 && r < 0xe000) {
				return "", false
			}
			out = utf8.AppendRune(out, r)
			i += 4
		default: // '"', '\\', '/'
			out = append(out, raw[i])
		}
	}
	return string(out), true
}

// skipScalar skips a string or a literal; a number or a nested value fails.
func (s *jsonScan) skipScalar() bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '"' {
		_, _, ok := s.str()
		return ok
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
			s.i += len(lit)
			return true
		}
	}
	return false
}

// streamData reads the data object of a stream.text envelope into d.
func (s *jsonScan) streamData(d *streamDelta) bool {
	if !s.skipByte('{') {
		return false
	}
	if s.skipByte('}') {
		return true
	}
	for {
		key, ok := s.key()
		if !ok {
			return false
		}
		var dst *string
		switch string(key) {
		case "message_id":
			dst = &d.MessageID
		case "agent":
			dst = &d.Agent
		case "delta":
			dst = &d.Delta
		case "chat_id": // no adapter reads it: checked, not copied
			s.space()
			if _, _, ok := s.str(); !ok {
				return false
			}
		default:
			// Another member may be one an adapter's struct decodes
			// (oaiEvent's content, say): encoding/json's to decide.
			return false
		}
		if dst != nil {
			if *dst, ok = s.text(); !ok {
				return false
			}
		}
		if s.skipByte(',') {
			continue
		}
		return s.skipByte('}')
	}
}

// equalFoldASCII reports whether a and b are equal ignoring ASCII case, as
// encoding/json matches a key to a field (b is lower case ASCII).
func equalFoldASCII(a []byte, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != b[i] {
			return false
		}
	}
	return true
}
