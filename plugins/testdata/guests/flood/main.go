// Command flood is a hostile test plugin that writes as much as it can
// through every channel the host lends: log, progress, events, key-value,
// artifacts. Config "tools" makes describe offer that many tools, config
// "ref" adds a tool whose schema refers to that URL.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/looopy-go/looopy/pdk"
)

type floodArgs struct {
	Channel string `json:"channel" desc:"log, progress, event, kv, artifact, http"`
	N       int    `json:"n"`
	Size    int    `json:"size"`
	Start   int    `json:"start,omitempty" desc:"first key number (kv)"`
	URL     string `json:"url,omitempty" desc:"what to fetch (http): each response is read whole"`
}

func flood(ctx context.Context, a floodArgs) (string, error) {
	chunk := strings.Repeat("x", a.Size)
	read := 0
	for i := 0; i < a.N; i++ {
		var err error
		switch a.Channel {
		case "log":
			pdk.Log(pdk.LevelInfo, chunk)
		case "progress":
			err = pdk.Progress(ctx, float64(i)/float64(a.N), chunk)
		case "event":
			data, _ := json.Marshal(map[string]string{"content": chunk})
			err = pdk.Emit(ctx, "thought-stream", json.RawMessage(data))
		case "kv":
			err = pdk.KVSet("k"+strconv.Itoa(a.Start+i), []byte(chunk))
		case "artifact":
			_, err = pdk.WriteArtifact(ctx, &pdk.ArtifactWrite{ArtifactID: "a" + strconv.Itoa(i), Type: "file", Name: "flood", Text: chunk})
		case "http":
			var resp *pdk.HTTPResponse
			if resp, err = pdk.HTTP(ctx, &pdk.HTTPRequest{Method: "GET", URL: a.URL}); err == nil {
				var n int64
				n, err = io.Copy(io.Discard, resp.Body)
				read += int(n)
				resp.Body.Close()
			}
		default:
			return "", fmt.Errorf("unknown channel %q", a.Channel)
		}
		if err != nil {
			return "", fmt.Errorf("write %d refused after %d bytes read: %w", i, read, err)
		}
	}
	return "all written", nil
}

func init() {
	pdk.Tool("flood", "Writes n chunks of size bytes through a channel.", flood)
	n, _ := strconv.Atoi(pdk.Config("tools"))
	for i := 0; i < n; i++ {
		pdk.Tool(fmt.Sprintf("tool_%d", i), "One of many tools.", flood)
	}
	if ref := pdk.Config("ref"); ref != "" {
		pdk.Tool("refers", "A tool whose schema refers elsewhere.", flood,
			pdk.WithSchema(json.RawMessage(`{"type":"object","properties":{"x":{"$ref":"`+ref+`"}}}`)))
	}
	// Config "deep" adds a tool whose result's data nests n arrays deep;
	// config "schemaDepth" a tool whose schema nests "not" that deep.
	if pdk.Config("deep") != "" {
		pdk.Tool("deep", "Answers data nested n deep.", deep)
	}
	if d, _ := strconv.Atoi(pdk.Config("schemaDepth")); d > 0 {
		pdk.Tool("deepschema", "A tool whose schema nests deep.", flood,
			pdk.WithSchema(json.RawMessage(strings.Repeat(`{"not":`, d)+`{}`+strings.Repeat(`}`, d))))
	}
}

type deepArgs struct {
	N int `json:"n"`
}

func deep(_ context.Context, a deepArgs) (pdk.ToolResult, error) {
	data := strings.Repeat("[", a.N) + strings.Repeat("]", a.N)
	return pdk.ToolResult{Content: "deep", Data: json.RawMessage(data)}, nil
}

func main() {}
