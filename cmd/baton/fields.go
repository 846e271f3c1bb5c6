package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// A structured output is printed to the terminal as indented fields in the
// order the model wrote them, not as a JSON blob:
//
//	workflow:
//	  name: Weekly Newsletter
//	  phases:
//	    - name: Collect
//	      agents: CollectorAgent
//	  integrations: Notion, Mailchimp

// member is one field of a JSON object, kept in order.
type member struct {
	key string
	val any
}

// object is a JSON object with its fields in order.
type object []member

// writeFields writes raw (a JSON value) as indented fields; what does not
// decode is written as it is.
func writeFields(w io.Writer, raw json.RawMessage, indent string) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err != nil {
		fmt.Fprintf(w, "%s%s\n", indent, oneLine(string(raw), 2000))
		return
	}
	o, ok := v.(object)
	if !ok {
		fmt.Fprintf(w, "%s%s\n", indent, scalar(v))
		return
	}
	for _, line := range objectLines(o) {
		fmt.Fprintf(w, "%s%s\n", indent, line)
	}
}

// decodeOrdered decodes the next JSON value, objects as object.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		var o object
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			o = append(o, member{key: fmt.Sprint(k), val: v})
		}
		_, err := dec.Token() // }
		return o, err
	case json.Delim('['):
		list := []any{}
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		_, err := dec.Token() // ]
		return list, err
	}
	return tok, nil
}

// objectLines renders an object's fields as lines, without indent.
func objectLines(o object) []string {
	if len(o) == 0 {
		return []string{"(empty)"}
	}
	var lines []string
	for _, m := range o {
		switch v := m.val.(type) {
		case object:
			lines = append(lines, m.key+":")
			lines = append(lines, indented("  ", objectLines(v))...)
		case []any:
			if allScalars(v) {
				parts := make([]string, len(v))
				for i, e := range v {
					parts[i] = scalar(e)
				}
				if len(parts) == 0 {
					parts = []string{"(none)"}
				}
				lines = append(lines, m.key+": "+strings.Join(parts, ", "))
				continue
			}
			lines = append(lines, m.key+":")
			for _, e := range v {
				item := []string{scalar(e)}
				if eo, ok := e.(object); ok {
					item = objectLines(eo)
				} else if el, ok := e.([]any); ok {
					raw, _ := json.Marshal(el)
					item = []string{string(raw)}
				}
				lines = append(lines, "  - "+item[0])
				lines = append(lines, indented("    ", item[1:])...)
			}
		default:
			lines = append(lines, m.key+": "+scalar(v))
		}
	}
	return lines
}

func indented(prefix string, lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = prefix + l
	}
	return out
}

func allScalars(list []any) bool {
	for _, e := range list {
		switch e.(type) {
		case object, []any:
			return false
		}
	}
	return true
}

// scalar renders a JSON scalar for people: strings without quotes, null
// as a dash.
func scalar(v any) string {
	switch v := v.(type) {
	case nil:
		return "-"
	case string:
		return oneLine(v, 2000)
	case object:
		return "(object)"
	}
	return fmt.Sprint(v)
}

// isJSONObject reports whether s is a JSON object.
func isJSONObject(s string) bool {
	s = strings.TrimSpace(s)
	return strings.HasPrefix(s, "{") && json.Valid([]byte(s))
}
