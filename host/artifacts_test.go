package host_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
)

func TestPluginArtifactDownload(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Plugins.Only = []string{"scripted-model", "dataset-writer"}
	cfg.Auth.Enabled = true
	cfg.Auth.Keys = []host.APIKey{{Key: "alice-key", Principal: "alice"}, {Key: "bob-key", Principal: "bob"}}
	h := startHost(t, cfg)
	c := client10(t, h.URL(), "alice-key")
	ids := map[a2a.ArtifactID]bool{}
	var last a2a.Event
	for ev, err := range c.SendStreamingMessage(context.Background(), &a2a.SendMessageRequest{Message: userMsg("dataset 5")}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		last = ev
		if au, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok && !strings.HasPrefix(string(au.Artifact.ID), "content-") {
			ids[au.Artifact.ID] = true
		}
	}
	if su, ok := last.(*a2a.TaskStatusUpdateEvent); !ok || su.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("stream ended with %#v", last)
	}
	if len(ids) != 1 {
		t.Fatalf("dataset artifacts streamed: %v, want one", ids)
	}
	var id string
	for k := range ids {
		id = string(k)
	}
	get := func(token, query string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodGet, h.URL()+"/artifacts/"+id+query, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("get artifact: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	status, mime, body := get("alice-key", "")
	if status != 200 || !strings.Contains(mime, "ndjson") || strings.Count(body, "\n") != 5 {
		t.Fatalf("jsonl download: %d %s %q", status, mime, body)
	}
	status, mime, body = get("alice-key", "?format=csv")
	if status != 200 || !strings.Contains(mime, "csv") || strings.Count(strings.TrimSpace(body), "\n") != 5 {
		t.Fatalf("csv download: %d %s %q", status, mime, body)
	}
	status, mime, foreign := get("bob-key", "")
	if status != 404 {
		t.Fatalf("bob downloads alice's artifact: status %d, want 404", status)
	}
	// Another principal's artifact answers exactly as one that does not
	// exist (the id aside): nothing tells bob that alice's id is in use.
	foreignMime := mime
	known := id
	id = "art-does-not-exist-0001"
	status, mime, missing := get("bob-key", "")
	id = known
	if status != 404 || mime != foreignMime ||
		strings.ReplaceAll(foreign, known, "ID") != strings.ReplaceAll(missing, "art-does-not-exist-0001", "ID") {
		t.Fatalf("foreign artifact: %s %q; missing one: %d %s %q", foreignMime, foreign, status, mime, missing)
	}
	if status, _, _ = get("alice-key", "?format=xml"); status != 400 {
		t.Fatalf("unknown format: status %d, want 400", status)
	}
}

// CSV and JSON lines apply to datasets: asked of a file artifact they are
// the client's error (400 naming why), not a server fault (it was 500).
func TestArtifactFormatOfAFileIs400(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Plugins.Only = []string{"scripted-model", "dataset-writer"}
	h := startHost(t, cfg)
	c := client10(t, h.URL(), "")
	var id string
	for ev, err := range c.SendStreamingMessage(context.Background(), &a2a.SendMessageRequest{Message: userMsg("file 100")}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if au, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok && !strings.HasPrefix(string(au.Artifact.ID), "content-") {
			id = string(au.Artifact.ID)
		}
	}
	if id == "" {
		t.Fatal("no file artifact streamed")
	}
	for _, f := range []string{"csv", "jsonl"} {
		resp, err := http.Get(h.URL() + "/artifacts/" + id + "?format=" + f)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "apply to datasets only") {
			t.Fatalf("?format=%s of a file: %d %s, want 400 saying why", f, resp.StatusCode, b)
		}
	}
}
