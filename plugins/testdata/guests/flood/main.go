// Command flood is a hostile test plugin that writes as much as it can
// through every channel the host lends: log, progress, events, key-value,
// artifacts. Config "tools" makes describe offer that many tools, config
// "ref" adds a tool whose schema refers to that URL.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/looopy-go/looopy/pdk"
)

type floodArgs struct {
	Channel string `json:"channel" desc:"log, progress, event, kv, artifact"`
	N       int    `json:"n"`
	Size    int    `json:"size"`
	Start   int    `json:"start,omitempty" desc:"first key number (kv)"`
}

func flood(ctx context.Context, a floodArgs) (string, error) {
	chunk := strings.Repeat("x", a.Size)
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
			_, err = pdk.WriteArtifact(ctx, &pdk.ArtifactWrite{ArtifactID: "a", Type: "file", Name: "flood", Text: chunk})
		default:
			return "", fmt.Errorf("unknown channel %q", a.Channel)
		}
		if err != nil {
			return "", fmt.Errorf("write %d refused: %w", i, err)
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
}

func main() {}
