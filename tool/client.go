package tool

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/batonhq/baton"
)

// CheckClientTools checks the tools a client offers a chat
// (baton.ClientTool): at most baton.MaxClientTools, each named as a model
// API accepts (1 to 64 letters, digits, '_' or '-'), once, with parameters
// that compile as a plain JSON Schema of an object (checkPlainSchema: no
// $ref or $defs, bounded nesting and size), within the size limits. The
// error names the field at fault, as tools[i].name. Whether a name collides
// with a workflow's tool is the engine's to say (Engine.CheckClientTools).
func CheckClientTools(tools []baton.ClientTool) error {
	if len(tools) > baton.MaxClientTools {
		return baton.Errorf(baton.EINVALID, "tools: more than %d tools", baton.MaxClientTools)
	}
	seen := make(map[string]int, len(tools))
	total := 0
	for i, t := range tools {
		field := fmt.Sprintf("tools[%d]", i)
		if err := checkClientToolName(t.Name); err != nil {
			return baton.Errorf(baton.EINVALID, "%s.name: %v", field, err)
		}
		if j, dup := seen[t.Name]; dup {
			return baton.Errorf(baton.EINVALID, "%s.name: %q is offered twice (also tools[%d])", field, t.Name, j)
		}
		seen[t.Name] = i
		if err := baton.ValidateText(field+".description", t.Description); err != nil {
			return err
		}
		size := len(t.Name) + len(t.Description) + len(t.Parameters)
		if size > baton.MaxClientToolBytes {
			return baton.Errorf(baton.EINVALID, "%s: larger than %d bytes", field, baton.MaxClientToolBytes)
		}
		total += size
		if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
			if _, err := compileClientSchema(p); err != nil {
				return baton.Errorf(baton.EINVALID, "%s.parameters: %v", field, err)
			}
			if err := baton.ValidateJSONB(field+".parameters", p); err != nil {
				return err
			}
		}
	}
	if total > baton.MaxClientToolsBytes {
		return baton.Errorf(baton.EINVALID, "tools: larger than %d bytes together", baton.MaxClientToolsBytes)
	}
	return nil
}

func checkClientToolName(name string) error {
	if name == "" {
		return fmt.Errorf("required")
	}
	if len(name) > 64 {
		return fmt.Errorf("%q is longer than 64 characters", name[:64]+"…")
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%q must be 1 to 64 letters, digits, '_' or '-'", name)
		}
	}
	return nil
}

// ClientToolParameters returns a client tool's parameters as offered to a
// model: its schema, or an object with no properties when it gave none.
func ClientToolParameters(t baton.ClientTool) json.RawMessage {
	if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		return p
	}
	return json.RawMessage(`{"type":"object","properties":{}}`)
}

// CheckClientArgs checks a model's arguments for a call of client tool t
// against its parameters. It returns "" when they are valid, else a message
// for the model naming each problem (the call is then answered with it as
// an error, and the client never sees it).
//
// The schema is checked again here, not only when the client offered it: a
// set recorded before the check was as strict must not lock the run up.
//
// Arguments over MaxClientArgsBytes are refused unchecked: checking costs
// about their size times the schema's patterns. A failed check is kept
// (clientFailures), so the engine, which asks when it records the call and
// again for the message it answers it with, checks once.
func CheckClientArgs(t baton.ClientTool, args json.RawMessage) string {
	if len(args) > MaxClientArgsBytes {
		return fmt.Sprintf("the arguments are larger than %d bytes; they were not checked", MaxClientArgsBytes)
	}
	params := ClientToolParameters(t)
	key := failureKey(params, args)
	clientFailures.mu.Lock()
	msg, ok := clientFailures.m[key]
	clientFailures.mu.Unlock()
	if ok {
		return msg
	}
	s, err := compileClientSchema(params)
	if err != nil {
		return "the tool's parameters are " + err.Error()
	}
	clientFailures.mu.Lock()
	clientFailures.validated++
	clientFailures.mu.Unlock()
	if msg = s.validate(args); msg != "" {
		clientFailures.mu.Lock()
		if len(clientFailures.m) >= maxClientFailures {
			clear(clientFailures.m)
		}
		clientFailures.m[key] = msg
		clientFailures.mu.Unlock()
	}
	return msg
}

// MaxClientArgsBytes bounds the arguments of a call of a client's tool
// that CheckClientArgs checks against the tool's parameters.
const MaxClientArgsBytes = 64 << 10

// failureKey names a check of args against params: the SHA-256 of both,
// each length-prefixed.
func failureKey(params, args json.RawMessage) [32]byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(params)))
	h.Write(n[:])
	h.Write(params)
	h.Write(args)
	var key [32]byte
	h.Sum(key[:0])
	return key
}

// maxClientFailures bounds the failed checks kept.
const maxClientFailures = 256

// clientFailures holds the message of recent failed checks of a client
// tool call's arguments, by failureKey.
var clientFailures = struct {
	mu        sync.Mutex
	m         map[[32]byte]string
	validated int // how many arguments were validated, for the tests
}{m: map[[32]byte]string{}}

// compileClientSchema compiles the parameters of a client's tool, once they
// are found plain (checkPlainSchema). A schema compiled before is taken from
// clientSchemas: a call's arguments are checked twice, and a chat's set is
// offered again with every message.
func compileClientSchema(raw json.RawMessage) (*schema, error) {
	key := sha256.Sum256(raw)
	clientSchemas.mu.Lock()
	s, ok := clientSchemas.m[key]
	clientSchemas.mu.Unlock()
	if ok {
		return s, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if err := checkPlainSchema(doc); err != nil {
		return nil, fmt.Errorf("not a plain JSON Schema: %w", err)
	}
	s, err = compileSchema(raw)
	if err != nil {
		return nil, fmt.Errorf("not a usable JSON Schema: %w", err)
	}
	clientSchemas.mu.Lock()
	if len(clientSchemas.m) >= maxClientSchemas {
		clear(clientSchemas.m) // compiled again when next needed
	}
	clientSchemas.m[key] = s
	clientSchemas.compiled++
	clientSchemas.mu.Unlock()
	return s, nil
}

// maxClientSchemas bounds the compiled schemas of client tools kept.
const maxClientSchemas = 1024

// clientSchemas holds compiled client tool schemas by the SHA-256 of their
// text. A compiled schema is safe to validate with from many goroutines.
var clientSchemas = struct {
	mu       sync.Mutex
	m        map[[32]byte]*schema
	compiled int // how many were compiled, for the tests
}{m: map[[32]byte]*schema{}}
