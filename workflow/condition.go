package workflow

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
)

// Condition is a compiled handoff condition: an expr-lang expression over
// context variables, written as in the seeds ("${interview_complete} ==
// True and ${attempts} < 3"). ${name} and a bare name both refer to the
// variable name; True, False and None mean true, false and nil; "is" and
// "is not" mean == and !=; and, or, not, comparisons and string and number
// literals are expr-lang's. It is safe for concurrent use.
type Condition struct {
	// Source is the condition as written.
	Source string
	// Expr is the translated expr-lang expression.
	Expr string
	// Vars are the context variables it names, in order of first use.
	Vars    []string
	program *vm.Program
}

var positionRe = regexp.MustCompile(` \(\d+:\d+\)$`)

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// exprReserved are words a context variable may not be called, because a
// condition could not name them.
var exprReserved = map[string]bool{
	"and": true, "or": true, "not": true, "in": true, "nil": true, "true": true, "false": true,
	"let": true, "if": true, "else": true, "matches": true, "contains": true, "startsWith": true,
	"endsWith": true, "True": true, "False": true, "None": true, "is": true,
}

// CompileCondition compiles src. types maps every variable the condition
// may name to its type (TypeBool, TypeInt, TypeFloat, TypeStr, TypeList,
// TypeDict or TypeAny); a variable not in types, a type mismatch the
// expression makes certain, or a result that cannot be a bool is an error.
func CompileCondition(src string, types map[string]string) (*Condition, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty condition")
	}
	translated, vars, err := translate(src, types)
	if err != nil {
		return nil, err
	}
	for _, v := range vars {
		if _, ok := types[v]; !ok {
			return nil, fmt.Errorf("unknown variable ${%s}", v)
		}
	}
	// Type-check against sample values of the declared types, so that a
	// condition that can never be a bool fails at load.
	typed := make(map[string]any, len(types))
	for name, t := range types {
		typed[mangle(name)] = sampleValue(t)
	}
	if _, err := expr.Compile(translated, expr.Env(typed), expr.AsBool()); err != nil {
		return nil, exprError(err)
	}
	// The program that runs is untyped: context variables arrive as JSON
	// values (float64 for every number), and a missing one is nil.
	prog, err := expr.Compile(translated, expr.Env(map[string]any{}), expr.AllowUndefinedVariables(), expr.AsBool())
	if err != nil {
		return nil, exprError(err)
	}
	return &Condition{Source: src, Expr: translated, Vars: vars, program: prog}, nil
}

// mangle is the name a context variable has inside an expression, so that
// variables called like expr-lang's builtins (count, len, max…) stay variables.
func mangle(name string) string { return "__v_" + name }

// Eval evaluates the condition against the chat's context variables. A
// variable missing from vars is nil (None).
func (c *Condition) Eval(vars map[string]any) (bool, error) {
	env := make(map[string]any, len(c.Vars))
	for _, v := range c.Vars {
		env[mangle(v)] = vars[v]
	}
	out, err := expr.Run(c.program, env)
	if err != nil {
		return false, fmt.Errorf("condition %q: %w", c.Source, exprError(err))
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("condition %q: result is %T, not a bool", c.Source, out)
	}
	return b, nil
}

// String returns the condition as written.
func (c *Condition) String() string { return c.Source }

func sampleValue(t string) any {
	switch t {
	case TypeBool:
		return false
	case TypeInt:
		return 0
	case TypeFloat:
		return 0.0
	case TypeStr:
		return ""
	case TypeList:
		return []any{}
	case TypeDict:
		return map[string]any{}
	}
	return nil
}

// exprError keeps the first line of an expr-lang error (the rest is a
// picture of the source) and turns its wording into the workflow's.
func exprError(err error) error {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	// The position refers to the translated expression, not to what the
	// author wrote; leave it out.
	msg = positionRe.ReplaceAllString(msg, "")
	switch {
	case strings.HasPrefix(msg, "unknown name "):
		name, _, _ := strings.Cut(strings.TrimPrefix(msg, "unknown name "), " ")
		return fmt.Errorf("unknown variable %s", name)
	case strings.HasPrefix(msg, "expected bool, but got "):
		return fmt.Errorf("must be a bool expression, but it is %s", strings.TrimPrefix(msg, "expected bool, but got "))
	}
	return errors.New(msg)
}

// translate rewrites the seeds' syntax to expr-lang: ${x} and a bare
// declared variable x → its mangled name, True → true, False → false, None
// → nil, "is not" → !=, "is" → ==. String literals, member names after a
// dot and function names are copied unchanged. It returns the variables
// named, in order of first use.
func translate(src string, declared map[string]string) (string, []string, error) {
	var b strings.Builder
	var vars []string
	add := func(v string) {
		if !slices.Contains(vars, v) {
			vars = append(vars, v)
		}
	}
	prevNonSpace := func() byte {
		out := b.String()
		for i := len(out) - 1; i >= 0; i-- {
			if out[i] != ' ' && out[i] != '\t' {
				return out[i]
			}
		}
		return 0
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(src) {
				return "", nil, fmt.Errorf("unterminated string starting at column %d", i+1)
			}
			b.WriteString(src[i : j+1])
			i = j + 1
		case c == '$' && i+1 < len(src) && src[i+1] == '{':
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				return "", nil, fmt.Errorf("unterminated ${ at column %d", i+1)
			}
			name := strings.TrimSpace(src[i+2 : i+end])
			if !identRe.MatchString(name) {
				return "", nil, fmt.Errorf("${%s} at column %d is not a variable name", name, i+1)
			}
			add(name)
			b.WriteString(mangle(name))
			i += end + 1
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(src) && isIdentByte(src[j]) {
				j++
			}
			word := src[i:j]
			member := prevNonSpace() == '.'
			call := strings.HasPrefix(strings.TrimLeft(src[j:], " \t"), "(")
			_, isVar := declared[word]
			switch {
			case member || call:
				b.WriteString(word)
			case isVar:
				add(word)
				b.WriteString(mangle(word))
			case word == "True":
				b.WriteString("true")
			case word == "False":
				b.WriteString("false")
			case word == "None":
				b.WriteString("nil")
			case word == "is":
				rest := strings.TrimLeft(src[j:], " \t")
				if strings.HasPrefix(rest, "not") && (len(rest) == 3 || !isIdentByte(rest[3])) {
					b.WriteString("!=")
					j = len(src) - len(rest) + 3
				} else {
					b.WriteString("==")
				}
			default:
				b.WriteString(word)
			}
			i = j
		case c >= '0' && c <= '9':
			// A number, including forms such as 1e5 and 0x1F.
			j := i
			for j < len(src) && (isIdentByte(src[j]) || src[j] == '.') {
				j++
			}
			b.WriteString(src[i:j])
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), vars, nil
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// segment is a piece of a system-message template: literal text or a
// variable reference.
type segment struct {
	text string
	name string // the variable, when text is empty
}

// parseTemplate splits a system message at its ${name} references. "$${"
// stands for a literal "${".
func parseTemplate(s string) ([]segment, []string, error) {
	var segs []segment
	var names []string
	var lit strings.Builder
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "$${") {
			lit.WriteString("${")
			i += 3
			continue
		}
		if strings.HasPrefix(s[i:], "${") {
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, nil, fmt.Errorf("unterminated ${ at offset %d (write $${ for a literal ${)", i)
			}
			name := strings.TrimSpace(s[i+2 : i+end])
			if !identRe.MatchString(name) {
				return nil, nil, fmt.Errorf("${%s} is not a variable name (write $${ for a literal ${)", name)
			}
			if lit.Len() > 0 {
				segs = append(segs, segment{text: lit.String()})
				lit.Reset()
			}
			segs = append(segs, segment{name: name})
			names = append(names, name)
			i += end + 1
			continue
		}
		lit.WriteByte(s[i])
		i++
	}
	if lit.Len() > 0 {
		segs = append(segs, segment{text: lit.String()})
	}
	return segs, names, nil
}
