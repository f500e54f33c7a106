package artifacts

import (
	"context"

	"github.com/looopy-go/looopy/loop"
)

var _ loop.ArtifactLister = (*DB)(nil)

// ContextArtifacts implements loop.ArtifactLister.
func (d *DB) ContextArtifacts(ctx context.Context, contextID string) ([]loop.ArtifactSummary, error) {
	return summaries(d.ListByContext(ctx, contextID))
}

func summaries(infos []Info, err error) ([]loop.ArtifactSummary, error) {
	if err != nil {
		return nil, err
	}
	out := make([]loop.ArtifactSummary, len(infos))
	for i, in := range infos {
		out[i] = loop.ArtifactSummary{ID: in.ID, Kind: string(in.Kind), TaskID: in.TaskID, Name: in.Name,
			MimeType: in.MimeType, Status: string(in.Status), Size: in.Size, UpdatedAt: in.UpdatedAt}
	}
	return out, nil
}
