package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/pdk"
	"github.com/looopy-go/looopy/plugins"
)

// openArtifacts opens the artifact store in its own Badger database under
// the data directory (large parts go to artifact-blobs beside it), or in
// memory.
// handleArtifact serves GET /artifacts/{id}: the artifact's content as a
// download (?format=csv or jsonl for datasets). Another principal's
// artifact is not found.
func (s *Server) handleArtifact(c *fiber.Ctx) error {
	if s.artifacts == nil {
		return &loop.NotFoundError{What: "artifact", ID: c.Params("id")}
	}
	auth, err := s.principal(c)
	if err != nil {
		return err
	}
	// The body is read after the handler returns: keep a copy of the id,
	// not the request's memory.
	id := strings.Clone(c.Params("id"))
	info, err := s.artifacts.Get(c.UserContext(), id)
	// A missing artifact and another principal's answer the same.
	if errors.Is(err, loop.ErrNotFound) || (err == nil && info.Owner != auth.Principal) {
		return &loop.NotFoundError{What: "artifact", ID: id}
	}
	if err != nil {
		return err
	}
	f, err := artifacts.ParseFormat(c.Query("format"))
	if err != nil {
		return fmt.Errorf("%w: %v", loop.ErrInvalid, err)
	}
	rc, typ, info, err := artifacts.Export(c.UserContext(), s.artifacts, id, f)
	if err != nil {
		return err
	}
	// The content is a plugin's or the model's: a browser must never
	// render it on the host's origin (where its script could call the
	// host as the user). It is a download (attachment), of the type it
	// says or none, never sniffed, and the policy forbids everything
	// should a browser render it anyway (setSafeHeaders: nosniff, the
	// sandbox CSP).
	c.Set(fiber.HeaderContentType, downloadType(typ))
	// building, complete or failed: what is served is whole only when
	// complete.
	c.Set("Looopy-Artifact-Status", string(info.Status))
	c.Set(fiber.HeaderContentDisposition, attachment(info.Name, id))
	return c.SendStream(rc) // fasthttp closes rc when the body is sent
}

// downloadType is the Content-Type of a download of type typ: typ when it
// parses as a media type, else application/octet-stream.
func downloadType(typ string) string {
	mt, params, err := mime.ParseMediaType(typ)
	if err != nil {
		return fiber.MIMEOctetStream
	}
	if out := mime.FormatMediaType(mt, params); out != "" {
		return out
	}
	return fiber.MIMEOctetStream
}

// attachment is the Content-Disposition of a download named name (the
// artifact's name, or its id).
func attachment(name, id string) string {
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '/' || r == '\\' {
			return '_'
		}
		return r
	}, name)
	if strings.TrimSpace(name) == "" {
		name = id
	}
	if v := mime.FormatMediaType("attachment", map[string]string{"filename": name}); v != "" {
		return v
	}
	return "attachment"
}

// artifactBridge lets plugins write artifacts (the artifact_write host
// function) through the artifacts package's event-emitting Writer. A
// write without an artifact id creates the artifact first.
type artifactBridge struct {
	db    *artifacts.DB
	tasks loop.TaskStore
	// ttl is limits.taskTTL: how long an artifact written outside any
	// stored task (an MCP call) is kept.
	ttl time.Duration
}

var _ plugins.ArtifactWriter = (*artifactBridge)(nil)

func (b *artifactBridge) WriteArtifact(ctx context.Context, scope plugins.ArtifactScope, w *pdk.ArtifactWrite) (string, error) {
	if w == nil {
		return "", fmt.Errorf("artifact write: %w: empty", loop.ErrInvalid)
	}
	// An artifact always has an owner (the principal of the turn, so that
	// it can download it) and, one way or another, an expiry.
	sc := artifacts.Scope{ContextID: scope.ContextID, TaskID: scope.TaskID, Owner: scope.Owner}
	orphan := false // written outside any stored task: an MCP call
	if rec, err := b.tasks.LoadTask(ctx, scope.TaskID); err == nil {
		sc.Owner = rec.Owner // a task's end sets the expiry of its artifacts
	} else {
		orphan = true
		if sc.Owner == "" {
			sc.Owner = DefaultPrincipal
		}
	}
	wr := artifacts.NewWriter(b.db, sc, scope.Emit)
	id := w.ArtifactID
	if id == "" {
		op := artifacts.Op{Op: "create", Kind: artifacts.Kind(w.Type), Name: w.Name, Description: w.Description,
			MimeType: w.MimeType, Binary: w.Base64 != ""}
		if len(w.Columns) > 0 {
			op.Schema = &loop.DatasetSchema{}
			for _, col := range w.Columns {
				op.Schema.Columns = append(op.Schema.Columns, loop.DatasetColumn{Name: col.Name, Type: col.Type, Description: col.Description})
			}
		}
		res, err := wr.Apply(ctx, op)
		if err != nil {
			return "", err
		}
		id = res.ArtifactID
		if orphan && b.ttl > 0 {
			// No task's end will set its expiry: it gets one now (an MCP
			// call's end renews it, from then, like a task's end).
			if err := b.db.ExpireTask(context.WithoutCancel(ctx), scope.TaskID, b.ttl); err != nil {
				return "", fmt.Errorf("artifact write: expiry: %w", err)
			}
		}
	}
	op := artifacts.Op{ArtifactID: id, Last: w.Complete}
	switch {
	case w.Text != "":
		op.Op, op.Text = "append", &w.Text
	case w.Base64 != "":
		op.Op, op.Base64 = "append", &w.Base64
	case w.Data != nil:
		op.Op, op.Data = "write", w.Data
	case len(w.Rows) > 0:
		op.Op = "append"
		for _, r := range w.Rows {
			op.Rows = append(op.Rows, artifacts.Row(r))
		}
	case w.Complete:
		op = artifacts.Op{Op: "complete", ArtifactID: id}
	default:
		return id, nil // created, nothing more to write
	}
	if _, err := wr.Apply(ctx, op); err != nil {
		return "", err
	}
	return id, nil
}

// artifactErrors: the artifacts package's not-found matches loop.ErrNotFound
// and is in the error table through it.
var _ = errors.Is(artifacts.ErrNotFound, loop.ErrNotFound)

// abandonArtifacts ends failed, and empties, the artifacts left building
// whose writer is gone (artifacts/abandon.go): those of a finished task
// (its end normally does it; this catches an end that could not), and, at
// start (atStart) on a store no other process shares, those of an MCP call
// (no stored task): only the process that ran the call could write them.
// A task still unfinished keeps its artifacts: its turn resumes.
func abandonArtifacts(ctx context.Context, arts *artifacts.DB, tasks loop.TaskStore, atStart bool, log *slog.Logger) {
	reason := "abandoned: its task ended before it was complete"
	if atStart {
		reason = "abandoned: the host stopped while it was being written"
	}
	dead := func(i artifacts.Info) bool {
		rec, err := tasks.LoadTask(ctx, i.TaskID)
		switch {
		case err == nil:
			return rec.Status.Terminal()
		case errors.Is(err, loop.ErrNotFound):
			return atStart
		default:
			return false
		}
	}
	n, err := arts.AbandonBuilding(ctx, dead, reason)
	if err != nil && ctx.Err() == nil {
		log.Warn("artifacts left building not ended", "error", err.Error())
	}
	if n > 0 {
		log.Info("artifacts left building ended failed", "artifacts", n, "reason", reason)
	}
}
