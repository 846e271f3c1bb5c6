package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/suggest"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/batonhq/baton"
)

// node is one JSON value of a workflow file, with where it starts, so that
// every error can name its line and column. Objects keep their keys in file
// order.
type node struct {
	kind  byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	off   int64
	num   string
	keys  []string
	koffs []int64 // where each key starts
	vals  []*node
	elems []*node
}

// get returns the value of key in an object node, or nil.
func (n *node) get(key string) *node {
	if n == nil || n.kind != 'o' {
		return nil
	}
	for i, k := range n.keys {
		if k == key {
			return n.vals[i]
		}
	}
	return nil
}

// objectKeys returns the keys of the object at the given key path, in file order.
func (n *node) objectKeys(path ...string) []string {
	for _, p := range path {
		n = n.get(p)
	}
	if n == nil || n.kind != 'o' {
		return nil
	}
	return n.keys
}

// file is one parsed workflow file: its name (as shown in errors), its bytes
// and its tree.
type file struct {
	name string
	data []byte
	root *node
}

// maxFileSize bounds each workflow file; a larger file is an error, not a
// slow load.
const maxFileSize = 4 << 20

// maxDepth bounds the nesting of JSON values in a workflow file.
const maxDepth = 64

// parse reads data into a node tree. A syntax error is returned as a
// FieldError with line and column.
func parse(name string, data []byte) (*file, *FieldError) {
	f := &file{name: name, data: data}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	p := &parser{dec: dec, data: data}
	root, err := p.value(0)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = fmt.Errorf("unexpected data after the top-level value")
			p.errOff = dec.InputOffset()
		}
	}
	if err != nil {
		off := p.errOff
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = se.Offset
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			off = int64(len(data))
			err = errors.New("unexpected end of file")
		}
		line, col := baton.LineCol(data, off)
		return nil, &FieldError{File: name, Line: line, Col: col, Message: "malformed JSON: " + err.Error()}
	}
	if root.kind != 'o' {
		line, col := baton.LineCol(data, root.off)
		return nil, &FieldError{File: name, Line: line, Col: col, Message: "must be a JSON object, not " + kindName(root.kind)}
	}
	f.root = root
	return f, nil
}

type parser struct {
	dec    *json.Decoder
	data   []byte
	errOff int64
}

// start returns the offset of the next token: the decoder's offset after
// skipping whitespace and separators.
func (p *parser) start() int64 {
	off := p.dec.InputOffset()
	for off < int64(len(p.data)) {
		switch p.data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
			continue
		}
		break
	}
	return off
}

func (p *parser) value(depth int) (*node, error) {
	off := p.start()
	tok, err := p.dec.Token()
	if err != nil {
		p.errOff = off
		return nil, err
	}
	return p.fromToken(tok, off, depth)
}

func (p *parser) fromToken(tok json.Token, off int64, depth int) (*node, error) {
	if depth > maxDepth {
		p.errOff = off
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	n := &node{off: off}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n.kind = 'o'
			for p.dec.More() {
				koff := p.start()
				kt, err := p.dec.Token()
				if err != nil {
					p.errOff = koff
					return nil, err
				}
				key, _ := kt.(string)
				for _, k := range n.keys {
					if k == key {
						p.errOff = koff
						return nil, fmt.Errorf("duplicate key %q", key)
					}
				}
				v, err := p.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, key)
				n.koffs = append(n.koffs, koff)
				n.vals = append(n.vals, v)
			}
		case '[':
			n.kind = 'a'
			for p.dec.More() {
				v, err := p.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, v)
			}
		default:
			p.errOff = off
			return nil, fmt.Errorf("unexpected %q", rune(t))
		}
		if _, err := p.dec.Token(); err != nil { // the closing delimiter
			p.errOff = p.start()
			return nil, err
		}
	case string:
		n.kind = 's'
	case json.Number:
		n.kind, n.num = 'n', string(t)
	case bool:
		n.kind = 'b'
	case nil:
		n.kind = 'z'
	}
	return n, nil
}

// lineCol returns the position of path (where its key starts for an
// object member, where its value starts otherwise), or of the deepest part
// of it that exists.
func (f *file) lineCol(path string) (int, int) {
	n, off := f.root, f.root.off
	for path != "" && n != nil {
		if path[0] == '[' {
			end := strings.IndexByte(path, ']')
			i, err := strconv.Atoi(path[1:max(end, 1)])
			if end < 0 || err != nil || n.kind != 'a' || i < 0 || i >= len(n.elems) {
				break
			}
			n, off = n.elems[i], n.elems[i].off
			path = strings.TrimPrefix(path[end+1:], ".")
			continue
		}
		end := strings.IndexAny(path, ".[")
		if end < 0 {
			end = len(path)
		}
		key := path[:end]
		found := false
		for i, k := range n.keys {
			if k == key {
				n, off, found = n.vals[i], n.koffs[i], true
				break
			}
		}
		if !found {
			break
		}
		path = strings.TrimPrefix(path[end:], ".")
	}
	return baton.LineCol(f.data, off)
}

// stringLineCol returns the position of byte idx (0-based) of the string
// value at path, counting its escapes as the bytes they stand for. ok is
// false when path is not a string value.
func (f *file) stringLineCol(path string, idx int) (line, col int, ok bool) {
	n := f.root
	for path != "" && n != nil {
		if path[0] == '[' {
			end := strings.IndexByte(path, ']')
			i, err := strconv.Atoi(path[1:max(end, 1)])
			if end < 0 || err != nil || n.kind != 'a' || i < 0 || i >= len(n.elems) {
				return 0, 0, false
			}
			n, path = n.elems[i], strings.TrimPrefix(path[end+1:], ".")
			continue
		}
		end := strings.IndexAny(path, ".[")
		if end < 0 {
			end = len(path)
		}
		n, path = n.get(path[:end]), strings.TrimPrefix(path[end:], ".")
	}
	if n == nil || n.kind != 's' || n.off >= int64(len(f.data)) || f.data[n.off] != '"' {
		return 0, 0, false
	}
	raw := n.off + 1
	for decoded := 0; decoded < idx && raw < int64(len(f.data)) && f.data[raw] != '"'; {
		if f.data[raw] != '\\' {
			raw++
			decoded++
			continue
		}
		if raw+1 < int64(len(f.data)) && f.data[raw+1] == 'u' && raw+6 <= int64(len(f.data)) {
			r, err := strconv.ParseUint(string(f.data[raw+2:raw+6]), 16, 32)
			raw += 6
			if err != nil {
				decoded++
				continue
			}
			decoded += utf8.RuneLen(rune(r))
			continue
		}
		raw += 2
		decoded++
	}
	line, col = baton.LineCol(f.data, raw)
	return line, col, true
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(k byte) string {
	switch k {
	case 'o':
		return "an object"
	case 'a':
		return "an array"
	case 's':
		return "a string"
	case 'n':
		return "a number"
	case 'b':
		return "a boolean"
	default:
		return "null"
	}
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// check compares the tree with the Go type it will be decoded into and
// reports every unknown field and every value of the wrong JSON type. It
// returns false when something under n was wrong.
func (f *file) check(n *node, t reflect.Type, path string, report func(path, msg string)) {
	if t == rawMessageType || t.Kind() == reflect.Interface {
		return
	}
	if t.Kind() == reflect.Pointer {
		if n.kind == 'z' {
			return
		}
		t = t.Elem()
	}
	if n.kind == 'z' {
		return // null leaves the zero value; required fields are checked later
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.kind != 'o' {
			report(path, "must be an object, not "+kindName(n.kind))
			return
		}
		fields := jsonFields(t)
		for i, k := range n.keys {
			sf, ok := fields[k]
			if !ok {
				msg := "unknown field"
				if s := closestField(k, fields); s != "" {
					msg += " (did you mean " + s + "?)"
				}
				report(joinPath(path, k), msg)
				continue
			}
			f.check(n.vals[i], sf.Type, joinPath(path, k), report)
		}
	case reflect.Map:
		if n.kind != 'o' {
			report(path, "must be an object, not "+kindName(n.kind))
			return
		}
		for i, k := range n.keys {
			f.check(n.vals[i], t.Elem(), joinPath(path, k), report)
		}
	case reflect.Slice:
		if n.kind != 'a' {
			report(path, "must be an array, not "+kindName(n.kind))
			return
		}
		for i, e := range n.elems {
			f.check(e, t.Elem(), path+"["+strconv.Itoa(i)+"]", report)
		}
	case reflect.String:
		if n.kind != 's' {
			report(path, "must be a string, not "+kindName(n.kind))
		}
	case reflect.Bool:
		if n.kind != 'b' {
			report(path, "must be a boolean (true or false), not "+kindName(n.kind))
		}
	case reflect.Int, reflect.Int64:
		if n.kind != 'n' {
			report(path, "must be an integer, not "+kindName(n.kind))
		} else if _, err := strconv.ParseInt(n.num, 10, 64); err != nil {
			report(path, "must be an integer, not "+n.num)
		}
	case reflect.Float64:
		if n.kind != 'n' {
			report(path, "must be a number, not "+kindName(n.kind))
		}
	}
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.StructField

// jsonFields maps the JSON names of t's fields to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.StructField)
	}
	m := make(map[string]reflect.StructField, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !sf.IsExported() || name == "" {
			continue
		}
		m[name] = sf
	}
	fieldCache.Store(t, m)
	return m
}

// closestField returns the known field closest to k when it is a likely typo.
func closestField(k string, fields map[string]reflect.StructField) string {
	best, bestD := "", 3
	for name := range fields {
		d := suggest.Distance(strings.ToLower(k), name)
		if d < bestD || d == bestD && best != "" && name < best {
			best, bestD = name, d
		}
	}
	if bestD > len(k)/3+1 {
		return ""
	}
	return best
}
