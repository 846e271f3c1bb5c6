package tool

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/batonhq/baton"
)

// Command and HTTP tools answer in one format. The output (stdout, or the
// response body) is either a result object
//
//	{"content": "text for the model" | any JSON, "status": "ok" | "error",
//	 "ui": {…}, "context_updates": {"name": value, …}}
//
// — a JSON object with a "content" key and no keys besides these four — or
// anything else, which is the content as it is. Output beyond the registry's
// cap is cut and marked as truncated.
type resultObject struct {
	Content        json.RawMessage            `json:"content"`
	Status         string                     `json:"status"`
	UI             json.RawMessage            `json:"ui"`
	ContextUpdates map[string]json.RawMessage `json:"context_updates"`
}

func parseOutput(out []byte, total int64) baton.ToolResult {
	if total > int64(len(out)) {
		return baton.ToolResult{
			Status:  baton.ToolStatusOK,
			Content: fmt.Sprintf("%s\n[output truncated: %d of %d bytes shown]", bytes.ToValidUTF8(out, nil), len(out), total),
		}
	}
	trimmed := bytes.TrimSpace(out)
	if r, ok := decodeResultObject(trimmed); ok {
		return r
	}
	return baton.ToolResult{Status: baton.ToolStatusOK, Content: string(bytes.ToValidUTF8(trimmed, []byte("\uFFFD")))}
}

func decodeResultObject(b []byte) (baton.ToolResult, bool) {
	if len(b) == 0 || b[0] != '{' {
		return baton.ToolResult{}, false
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(b, &keys) != nil {
		return baton.ToolResult{}, false
	}
	if _, ok := keys["content"]; !ok {
		return baton.ToolResult{}, false
	}
	for k := range keys {
		switch k {
		case "content", "status", "ui", "context_updates":
		default:
			return baton.ToolResult{}, false
		}
	}
	var ro resultObject
	if json.Unmarshal(b, &ro) != nil {
		return baton.ToolResult{}, false
	}
	res := baton.ToolResult{Status: ro.Status, Updates: ro.ContextUpdates}
	switch ro.Status {
	case "", baton.ToolStatusOK:
		res.Status = baton.ToolStatusOK
	case baton.ToolStatusError:
	default:
		return baton.ToolResult{}, false
	}
	var s string
	if json.Unmarshal(ro.Content, &s) == nil {
		res.Content = s
	} else {
		res.Content = string(ro.Content)
	}
	if len(ro.UI) > 0 && !bytes.Equal(ro.UI, []byte("null")) {
		res.UI = ro.UI
	}
	return res, true
}

// capWriter keeps the first max bytes written to it and counts the rest, so
// a process writing without end is neither blocked nor held in memory.
type capWriter struct {
	buf   []byte
	max   int
	total int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.total += int64(len(p))
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
