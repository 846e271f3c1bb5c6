package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/batonhq/baton"
)

// Step is one recorded event as a replay compares it: what it says about
// the conversation, without the ids and times that differ from run to run.
type Step struct {
	Sequence int64
	Type     string
	// Key is what is compared; Show is its one-line form for people.
	Key, Show string
	// Digest is a model call's request digest (chat.usage_summary), compared
	// only when both sides have one.
	Digest string
}

// Steps projects recorded events onto what a replay compares: speakers,
// texts, tool calls and their arguments, tool results' status, structured
// outputs, context variables, handoffs, input requests and the end of the
// run, and each model call's request digest. Notices (retries, recoveries)
// are left out: they say how the run went, not what it did.
func Steps(evs []baton.Event) []Step {
	steps := make([]Step, 0, len(evs))
	for i := range evs {
		if s, ok := stepOf(&evs[i]); ok {
			steps = append(steps, s)
		}
	}
	return steps
}

func stepOf(ev *baton.Event) (Step, bool) {
	s := Step{Sequence: ev.Sequence, Type: ev.Type}
	switch ev.Type {
	case baton.TypeChatSelectSpeaker:
		p, _ := baton.DecodePayload[baton.SelectSpeakerPayload](ev)
		s.Key = "speaker " + p.Agent
		if p.Synthetic {
			s.Key += " (synthetic)"
		}
	case baton.TypeChatText:
		p, _ := baton.DecodePayload[baton.TextPayload](ev)
		hidden := ""
		if p.UIHidden {
			hidden = " (hidden)"
		}
		s.Key = fmt.Sprintf("text %s%s: %s", p.Agent, hidden, p.Content)
		s.Show = fmt.Sprintf("text %s%s: %s", p.Agent, hidden, clip(p.Content, 100))
	case baton.TypeChatToolCall:
		p, _ := baton.DecodePayload[baton.ToolCallPayload](ev)
		s.Key = fmt.Sprintf("tool_call %s → %s %s", p.Agent, p.ToolName, canonical(p.Arguments))
		s.Show = fmt.Sprintf("tool_call %s → %s %s", p.Agent, p.ToolName, clip(canonical(p.Arguments), 100))
	case baton.TypeChatToolResponse:
		p, _ := baton.DecodePayload[baton.ToolResponsePayload](ev)
		s.Key = fmt.Sprintf("tool_response %s: %s", p.ToolName, p.Status)
	case baton.TypeChatStructuredOutputReady:
		p, _ := baton.DecodePayload[baton.StructuredOutputPayload](ev)
		s.Key = fmt.Sprintf("structured_output %s %s", p.Agent, canonical(p.Data))
		s.Show = fmt.Sprintf("structured_output %s %s", p.Agent, clip(canonical(p.Data), 100))
	case baton.TypeChatContextUpdated:
		p, _ := baton.DecodePayload[baton.ContextUpdatedPayload](ev)
		var parts []string
		for _, k := range sortedKeys(p.Variables) {
			if !baton.IsReservedVariable(k) {
				parts = append(parts, k+"="+canonical(p.Variables[k]))
			}
		}
		if len(parts) == 0 {
			return s, false
		}
		s.Key = "context " + strings.Join(parts, " ")
		s.Show = clip(s.Key, 120)
	case baton.TypeChatHandoff:
		p, _ := baton.DecodePayload[baton.HandoffPayload](ev)
		to := p.To
		if to == "" {
			to = p.TransitionTarget
		}
		s.Key = fmt.Sprintf("handoff %s → %s (%s)", p.From, to, p.HandoffType)
	case baton.TypeChatInputRequest:
		p, _ := baton.DecodePayload[baton.InputRequestPayload](ev)
		s.Key = "input_request " + p.Agent
	case baton.TypeChatWorkflowResumed:
		p, _ := baton.DecodePayload[baton.WorkflowResumedPayload](ev)
		s.Key = "resumed " + p.Reason
	case baton.TypeChatRunComplete:
		p, _ := baton.DecodePayload[baton.RunCompletePayload](ev)
		s.Key = "run_complete " + p.Status
	case baton.TypeChatError:
		p, _ := baton.DecodePayload[baton.ErrorPayload](ev)
		s.Key = fmt.Sprintf("error %s: %s", p.Code, p.Message)
	case baton.TypeChatUsageSummary:
		p, _ := baton.DecodePayload[baton.UsageSummaryPayload](ev)
		s.Key = "model_call " + p.Agent
		s.Digest = p.RequestDigest
	default:
		return s, false
	}
	if s.Show == "" {
		s.Show = s.Key
	}
	return s, true
}

// same reports whether two steps say the same.
func same(a, b *Step) bool {
	return a.Key == b.Key && (a.Digest == "" || b.Digest == "" || a.Digest == b.Digest)
}

// Op is one line of a diff: an expected step missing from the replay
// (Want only), a replayed step the recording lacks (Got only), or both
// when they match (Equal).
type Op struct {
	Equal     bool
	Want, Got *Step
}

// Diff aligns the recorded steps (want) with the replayed ones (got) on
// their longest common subsequence and returns the diff, in order.
func Diff(want, got []Step) []Op {
	// The common prefix and suffix need no table: a replay that matches
	// until late (the usual case) costs little whatever the chat's length.
	pre := 0
	for pre < len(want) && pre < len(got) && same(&want[pre], &got[pre]) {
		pre++
	}
	suf := 0
	for suf < len(want)-pre && suf < len(got)-pre && same(&want[len(want)-1-suf], &got[len(got)-1-suf]) {
		suf++
	}
	ops := make([]Op, 0, max(len(want), len(got)))
	for i := range pre {
		ops = append(ops, Op{Equal: true, Want: &want[i], Got: &got[i]})
	}
	ops = append(ops, diffMiddle(want[pre:len(want)-suf], got[pre:len(got)-suf])...)
	for k := suf; k > 0; k-- {
		ops = append(ops, Op{Equal: true, Want: &want[len(want)-k], Got: &got[len(got)-k]})
	}
	return ops
}

// maxDiffCells bounds the table of diffMiddle (4 bytes a cell); longer
// differing middles are reported as all removed, then all added.
const maxDiffCells = 16 << 20

// diffMiddle aligns two sequences that differ at both ends.
func diffMiddle(want, got []Step) []Op {
	n, m := len(want), len(got)
	if n*m > maxDiffCells {
		ops := make([]Op, 0, n+m)
		for i := range want {
			ops = append(ops, Op{Want: &want[i]})
		}
		for j := range got {
			ops = append(ops, Op{Got: &got[j]})
		}
		return ops
	}
	// lcs[i][j] is the LCS length of want[i:] and got[j:].
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if same(&want[i], &got[j]) {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []Op
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && same(&want[i], &got[j]):
			ops = append(ops, Op{Equal: true, Want: &want[i], Got: &got[j]})
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			ops = append(ops, Op{Got: &got[j]})
			j++
		default:
			ops = append(ops, Op{Want: &want[i]})
			i++
		}
	}
	// A replaced step reads best as "expected, then got": put a run of
	// missing steps before the run of added ones it sits next to.
	for k := 0; k < len(ops); {
		if ops[k].Equal {
			k++
			continue
		}
		e := k
		for e < len(ops) && !ops[e].Equal {
			e++
		}
		slices.SortStableFunc(ops[k:e], func(a, b Op) int {
			switch {
			case a.Want != nil && b.Want == nil:
				return -1
			case a.Want == nil && b.Want != nil:
				return 1
			}
			return 0
		})
		k = e
	}
	return ops
}

// Diverged reports whether a diff has any difference.
func Diverged(ops []Op) bool {
	return slices.ContainsFunc(ops, func(o Op) bool { return !o.Equal })
}

// WriteDiff prints a diff for people: the first divergence, with the
// sequence numbers of both sides and what was expected and got, then every
// other difference with one matching step of context around each run.
func WriteDiff(w io.Writer, ops []Op) {
	first := slices.IndexFunc(ops, func(o Op) bool { return !o.Equal })
	if first < 0 {
		fmt.Fprintln(w, "no divergence: the replay recorded the same steps")
		return
	}
	// The sequences around the first divergence, on both sides.
	var wantSeq, gotSeq int64
	for _, o := range ops[:first] {
		wantSeq, gotSeq = o.Want.Sequence, o.Got.Sequence
	}
	o := ops[first]
	fmt.Fprintln(w, "first divergence:")
	if o.Want != nil {
		fmt.Fprintf(w, "  expected #%d %s\n", o.Want.Sequence, o.Want.Show)
	} else {
		fmt.Fprintf(w, "  expected (after #%d) nothing here\n", wantSeq)
	}
	var got *Step
	for _, p := range ops[first:] {
		if p.Equal {
			break
		}
		if p.Got != nil {
			got = p.Got
			break
		}
	}
	switch {
	case got != nil:
		fmt.Fprintf(w, "  got      #%d %s\n", got.Sequence, got.Show)
		if o.Want != nil && o.Want.Key == got.Key && o.Want.Digest != got.Digest {
			fmt.Fprintf(w, "           the model was asked something else (request digest %s, recorded %s)\n", short(got.Digest), short(o.Want.Digest))
		}
	default:
		fmt.Fprintf(w, "  got      (after #%d) nothing\n", gotSeq)
	}
	fmt.Fprintln(w, "\ndiff (- recorded, + replayed):")
	shown := -1
	for k := range ops {
		if ops[k].Equal {
			continue
		}
		if k-1 > shown && k-1 >= 0 && ops[k-1].Equal {
			if k-1 > shown+1 {
				fmt.Fprintln(w, "  …")
			}
			writeOp(w, ops[k-1])
		}
		writeOp(w, ops[k])
		shown = k
		if k+1 < len(ops) && ops[k+1].Equal {
			writeOp(w, ops[k+1])
			shown = k + 1
		}
	}
	if shown < len(ops)-1 {
		fmt.Fprintln(w, "  …")
	}
}

func writeOp(w io.Writer, o Op) {
	switch {
	case o.Equal:
		fmt.Fprintf(w, "  #%-4d       %s\n", o.Want.Sequence, o.Want.Show)
	case o.Want != nil:
		fmt.Fprintf(w, "- #%-4d       %s\n", o.Want.Sequence, o.Want.Show)
	default:
		fmt.Fprintf(w, "+       #%-4d %s\n", o.Got.Sequence, o.Got.Show)
	}
}

func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	if d == "" {
		return "(none)"
	}
	return d
}

// canonical returns JSON with sorted keys and no spaces ("null" for none),
// so that equal values compare equal whatever their formatting.
func canonical(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// clip shortens s to n runes on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
