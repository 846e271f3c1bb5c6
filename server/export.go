package server

import (
	"bytes"
	"mime"
	"net/http"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/chatlog"
)

// handleExport is GET /api/chats/{app}/{chat_id}/export: the chat as an
// export file (chatlog.Export), or with ?format=scripted as a scripted.json
// of its model replies, for download. The whole file is built before the
// first byte is sent, so a failure is an error answer, never a cut file.
func (s *Server) handleExport(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		p, err := s.principal(r, r.PathValue("app"))
		if err != nil {
			return err
		}
		format := r.URL.Query().Get("format")
		switch format {
		case "", "jsonl", "scripted":
		default:
			return baton.Errorf(baton.EINVALID, "format: %q, want jsonl (the default) or scripted", truncate(format, 32))
		}
		c, err := s.chatIn(r.Context(), p.scope, r.PathValue("chat_id"))
		if err != nil {
			return err
		}
		wf := s.workflowOf(c.Workflow)
		o := chatlog.ExportOptions{View: chatlog.ViewFull, Workflow: wf}
		if !s.cfg.FullExport {
			if format == "scripted" {
				return baton.Errorf(baton.EFORBIDDEN, "format: a scripted.json holds the replies of agents this chat's person does not see; this server exports only what the person sees (its operator allows full exports with baton serve --export-full)")
			}
			o.View = chatlog.ViewClient
			o.Keep = func(ev *baton.Event) bool { return Visible(wf, ev) }
		}
		var buf bytes.Buffer
		if err := chatlog.Export(r.Context(), s.cfg.Store, p.scope, c.ID, &buf, o); err != nil {
			return err
		}
		body, ctype, name := buf.Bytes(), "application/x-ndjson", "chat-"+c.ID+".jsonl"
		if format == "scripted" {
			f, err := chatlog.Read(bytes.NewReader(body))
			if err != nil {
				return err
			}
			if body, err = f.Scripted(); err != nil {
				return err
			}
			ctype, name = "application/json", "scripted.json"
		}
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
		return nil
	}()
	if err != nil {
		s.writeError(w, r, err)
	}
}
