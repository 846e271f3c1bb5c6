package workflow

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"
	exprfile "github.com/expr-lang/expr/file"
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
// Its errors are *ConditionError: what is wrong in the workflow's terms
// (variables as ${name}, types as the workflow's type names), and the
// column of src it is at when one is known.
func CompileCondition(src string, types map[string]string) (*Condition, error) {
	if strings.TrimSpace(src) == "" {
		return nil, &ConditionError{Source: src, Message: "empty condition"}
	}
	tr, err := translate(src, types)
	if err != nil {
		return nil, err
	}
	for _, v := range tr.vars {
		if _, ok := types[v]; !ok {
			return nil, &ConditionError{Source: src, Column: tr.varCols[v], Message: fmt.Sprintf("unknown variable ${%s}", v)}
		}
	}
	// Type-check against sample values of the declared types, so that a
	// condition that can never be a bool fails at load.
	typed := make(map[string]any, len(types))
	for name, t := range types {
		typed[mangle(name)] = sampleValue(t)
	}
	if _, err := expr.Compile(tr.expr, expr.Env(typed), expr.AsBool()); err != nil {
		return nil, tr.exprError(src, err)
	}
	// The program that runs is untyped: context variables arrive as JSON
	// values (float64 for every number), and a missing one is nil.
	prog, err := expr.Compile(tr.expr, expr.Env(map[string]any{}), expr.AllowUndefinedVariables(), expr.AsBool())
	if err != nil {
		return nil, tr.exprError(src, err)
	}
	return &Condition{Source: src, Expr: tr.expr, Vars: tr.vars, program: prog}, nil
}

// ConditionError is a condition that does not compile: what is wrong, in
// the workflow's terms, and where.
type ConditionError struct {
	// Source is the condition as written.
	Source string
	// Column is the 1-based byte column of Source the mistake is at, 0 when
	// it is about the whole condition (say, a result that is not a bool).
	Column int
	// Message says what is wrong.
	Message string
}

// Error returns the message, with "at column N: " before it when the
// column is known.
func (e *ConditionError) Error() string {
	if e.Column > 0 {
		return fmt.Sprintf("at column %d: %s", e.Column, e.Message)
	}
	return e.Message
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
		return false, fmt.Errorf("condition %q: %s", c.Source, runtimeMessage(err))
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

var (
	unexpectedRe = regexp.MustCompile(`^unexpected token (\w+)\((.*)\)$`)
	mismatchRe   = regexp.MustCompile(`^invalid operation: (\S+) \(mismatched types (.+) and (.+)\)$`)
	mangledRe    = regexp.MustCompile(`__v_([A-Za-z_][A-Za-z0-9_]*)`)
)

// runtimeMessage is the first line of an expr-lang run-time error (the
// rest is a picture of the translated source), with variables named as
// the author wrote them.
func runtimeMessage(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	msg = positionRe.ReplaceAllString(msg, "")
	return mangledRe.ReplaceAllString(msg, "$${$1}")
}

// exprError turns an expr-lang compile error into a ConditionError: its
// wording into the workflow's, and its position (a byte offset of the
// translated expression) into a column of src.
func (tr *translation) exprError(src string, err error) *ConditionError {
	ce := &ConditionError{Source: src}
	var fe *exprfile.Error
	if errors.As(err, &fe) {
		ce.Message = fe.Message
		if fe.Line <= 1 && fe.From >= 0 {
			ce.Column = tr.column(tr.byteOffset(fe.From))
		}
	} else {
		ce.Message = runtimeMessage(err)
	}
	msg := ce.Message
	switch {
	case strings.HasPrefix(msg, "unknown name "):
		name, _, _ := strings.Cut(strings.TrimPrefix(msg, "unknown name "), " ")
		ce.Message = "unknown variable " + name
	case strings.HasPrefix(msg, "expected bool, but got "):
		// About the whole condition: no column.
		ce.Column = 0
		ce.Message = "must be a bool expression, but it is " + typeName(strings.TrimPrefix(msg, "expected bool, but got "))
	case msg == "unexpected token EOF":
		ce.Column = tr.end + 1 // expr-lang points at the last token; the mistake is after it
		ce.Message = "the condition ends too early: a value, an operand or a closing bracket is missing"
	case msg == "literal not terminated":
		ce.Message = "string not terminated"
	default:
		if m := unexpectedRe.FindStringSubmatch(msg); m != nil {
			tok, _ := strconv.Unquote(m[2])
			if tok == "" {
				tok = m[2]
			}
			tok = mangledRe.ReplaceAllString(tok, "$${$1}")
			switch {
			case tok == "=":
				ce.Message = `"=" is not a comparison: write "==" to compare (conditions assign nothing)`
			case m[1] == "Identifier" || m[1] == "Number" || m[1] == "String":
				ce.Message = fmt.Sprintf("unexpected %s: an operator (==, and, or …) is missing before it", tok)
			default:
				ce.Message = fmt.Sprintf("unexpected %q", tok)
			}
		} else if m := mismatchRe.FindStringSubmatch(msg); m != nil {
			ce.Message = fmt.Sprintf("%q cannot be used between %s and %s", m[1], typeName(m[2]), typeName(m[3]))
		} else {
			ce.Message = mangledRe.ReplaceAllString(msg, "$${$1}")
		}
	}
	return ce
}

// typeName names an expr-lang (Go) type as the workflow's types do.
func typeName(t string) string {
	switch t {
	case "string":
		return TypeStr
	case "float64":
		return TypeFloat
	case "int", "int64":
		return TypeInt
	case "[]interface {}", "[]any":
		return TypeList
	case "map[string]interface {}", "map[string]any":
		return TypeDict
	case "interface {}", "any", "<nil>":
		return "None"
	}
	return t
}

// translate rewrites the seeds' syntax to expr-lang: ${x} and a bare
// declared variable x → its mangled name, True → true, False → false, None
// → nil, "is not" → !=, "is" → ==. String literals, member names after a
// dot and function names are copied unchanged. It returns the variables
// named, in order of first use, and where each byte of the translation
// comes from.
func translate(src string, declared map[string]string) (*translation, error) {
	var b strings.Builder
	tr := &translation{varCols: map[string]int{}}
	// write appends s, translated from the source bytes starting at from.
	write := func(s string, from int) {
		for range len(s) {
			tr.from = append(tr.from, from)
		}
		b.WriteString(s)
	}
	add := func(v string, at int) {
		if !slices.Contains(tr.vars, v) {
			tr.vars = append(tr.vars, v)
			tr.varCols[v] = at + 1
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
				return nil, &ConditionError{Source: src, Column: i + 1, Message: "string not terminated"}
			}
			write(src[i:j+1], i)
			i = j + 1
		case c == '$' && i+1 < len(src) && src[i+1] == '{':
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				return nil, &ConditionError{Source: src, Column: i + 1, Message: "${ without its closing }"}
			}
			name := strings.TrimSpace(src[i+2 : i+end])
			if !identRe.MatchString(name) {
				return nil, &ConditionError{Source: src, Column: i + 1, Message: fmt.Sprintf("${%s} is not a variable name", name)}
			}
			add(name, i)
			write(mangle(name), i)
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
				write(word, i)
			case isVar:
				add(word, i)
				write(mangle(word), i)
			case word == "True":
				write("true", i)
			case word == "False":
				write("false", i)
			case word == "None":
				write("nil", i)
			case word == "is":
				rest := strings.TrimLeft(src[j:], " \t")
				if strings.HasPrefix(rest, "not") && (len(rest) == 3 || !isIdentByte(rest[3])) {
					write("!=", i)
					j = len(src) - len(rest) + 3
				} else {
					write("==", i)
				}
			default:
				write(word, i)
			}
			i = j
		case c >= '0' && c <= '9':
			// A number, including forms such as 1e5 and 0x1F.
			j := i
			for j < len(src) && (isIdentByte(src[j]) || src[j] == '.') {
				j++
			}
			write(src[i:j], i)
			i = j
		default:
			write(src[i:i+1], i)
			i++
		}
	}
	tr.expr = b.String()
	tr.end = len(src)
	return tr, nil
}

// translation is a condition rewritten to expr-lang.
type translation struct {
	expr    string
	vars    []string       // the variables named, in order of first use
	varCols map[string]int // the 1-based column of each variable's first use
	from    []int          // from[i] is the source offset byte i of expr comes from
	end     int            // len of the source
}

// byteOffset converts expr-lang's position (in runes) to a byte offset of
// the translated expression.
func (tr *translation) byteOffset(runes int) int {
	n := 0
	for i := range tr.expr {
		if n == runes {
			return i
		}
		n++
	}
	return len(tr.expr) + runes - n
}

// column maps an offset of the translated expression to a 1-based column
// of the source; past the end it is the column after the source's last byte.
func (tr *translation) column(off int) int {
	if off >= 0 && off < len(tr.from) {
		return tr.from[off] + 1
	}
	return tr.end + 1
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
