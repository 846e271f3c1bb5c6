// Package fastjson decodes the small JSON documents baton reads on every
// event — a model's stream chunks, the view of a recorded payload, the
// fields the metrics collector counts — with segmentio/encoding/json,
// which behaves as encoding/json does at about half its cost, and keeps
// encoding/json's answer wherever the two could differ:
//
//   - a document longer than MaxFast goes to encoding/json: segmentio's
//     decoder recurses without a depth limit, and a deep enough document
//     would overflow the goroutine's stack, a fatal error no recover
//     catches; encoding/json refuses depths over 10,000, and a document of
//     MaxFast bytes cannot nest deeper than that;
//   - a document segmentio refuses is decoded again by encoding/json, into
//     a zeroed value: encoding/json fills the fields after one of the wrong
//     type where segmentio stops, and its error is the one returned.
package fastjson

import (
	"encoding/json"
	"reflect"

	segjson "github.com/segmentio/encoding/json"
)

// MaxFast is the longest document decoded with segmentio/encoding/json.
const MaxFast = 8 << 10

// Unmarshal decodes data into v (a non-nil pointer) as encoding/json.Unmarshal
// does into a zero value; v must point to one. Into a value that holds
// something the result depends on the path: a document either decoder
// takes is merged into it, as encoding/json merges, but one segmentio
// refuses is decoded again into a zeroed *v, so that the answer is
// encoding/json's, whatever segmentio left there. Every caller decodes
// into a value it has just emptied.
func Unmarshal(data []byte, v any) error {
	if len(data) > MaxFast {
		return json.Unmarshal(data, v)
	}
	if segjson.Unmarshal(data, v) == nil {
		return nil
	}
	if p := reflect.ValueOf(v); p.Kind() == reflect.Pointer && !p.IsNil() {
		p.Elem().SetZero()
	}
	return json.Unmarshal(data, v)
}

// Valid reports whether data is valid JSON, as encoding/json.Valid does.
func Valid(data []byte) bool {
	if len(data) > MaxFast {
		return json.Valid(data)
	}
	return segjson.Valid(data)
}
