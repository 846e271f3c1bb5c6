package workflow

import (
	"strconv"
	"strings"

	"github.com/batonhq/baton"
)

// FieldError is one mistake in a workflow file: the file (relative to the
// loaded file system, e.g. "generator/agents.json"), the JSON path of the
// offending value (e.g. "agents.InterviewAgent.sytem_message"; empty for a
// mistake in the whole file), its line and column when known (always for
// malformed JSON), and what is wrong.
type FieldError struct {
	File    string
	Path    string
	Line    int
	Col     int
	Message string
	// Err is the error the message was made from, when there is one: a
	// *ConditionError for a handoff condition, whose column Line and Col
	// point at.
	Err error
}

// Error formats the mistake as "FILE:LINE:COL: PATH: MESSAGE", so that
// editors and terminals jump to it; the position is left out when it is
// not known (a missing file) and the path when the mistake is about the
// whole file (malformed JSON).
func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line) + ":" + strconv.Itoa(e.Col))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// ValidationErrors is every mistake found while loading workflows, sorted by
// file and position. Load and LoadAll return it as their error. It matches
// baton.ErrInvalid with errors.Is, and errors.As finds a *baton.Error with
// code baton.EINVALID in it, so a server shows it as a 400 with the full text.
type ValidationErrors []*FieldError

// Error returns one line per mistake.
func (v ValidationErrors) Error() string {
	lines := make([]string, len(v))
	for i, e := range v {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Is reports whether target is baton.ErrInvalid (or another EINVALID code
// sentinel).
func (v ValidationErrors) Is(target error) bool {
	t, ok := target.(*baton.Error)
	return ok && t.Code == baton.EINVALID && t.Message == "" && t.Err == nil
}

// As sets a **baton.Error target to an EINVALID error carrying the text of
// every mistake, so that baton.ErrorCode and baton.ErrorMessage work on it.
func (v ValidationErrors) As(target any) bool {
	p, ok := target.(**baton.Error)
	if !ok {
		return false
	}
	*p = &baton.Error{Code: baton.EINVALID, Message: v.Error()}
	return true
}
