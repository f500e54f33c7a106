// Command kitchen is a test tool plugin that uses every host function a tool
// may: key-value, HTTP, files, progress, log, config and secrets.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/looopy-go/looopy/pdk"
)

type kvArgs struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

type urlArgs struct {
	URL string `json:"url" desc:"what to fetch"`
}

type pathArgs struct {
	Path string `json:"path"`
}

type writeArgs struct {
	Path string `json:"path"`
	Text string `json:"text"`
}

type empty struct{}

func init() {
	pdk.Tool("kv_put", "Stores a value.", func(ctx context.Context, a kvArgs) (string, error) {
		return "ok", pdk.KVSet(a.Key, []byte(a.Value))
	})
	pdk.Tool("kv_read", "Reads a value.", func(ctx context.Context, a kvArgs) (string, error) {
		v, ok, err := pdk.KVGet(a.Key)
		if err != nil {
			return "", err
		}
		if !ok {
			return "(absent)", nil
		}
		return string(v), nil
	})
	pdk.Tool("kv_del", "Deletes a value.", func(ctx context.Context, a kvArgs) (string, error) {
		return "ok", pdk.KVDelete(a.Key)
	})
	pdk.Tool("fetch", "Fetches a URL.", func(ctx context.Context, a urlArgs) (string, error) {
		resp, err := pdk.HTTP(ctx, &pdk.HTTPRequest{URL: a.URL})
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d %s", resp.Status, b), nil
	})
	pdk.Tool("read_file", "Reads a file.", func(ctx context.Context, a pathArgs) (string, error) {
		b, err := os.ReadFile(a.Path)
		return string(b), err
	})
	pdk.Tool("write_file", "Writes a file.", func(ctx context.Context, a writeArgs) (string, error) {
		return "ok", os.WriteFile(a.Path, []byte(a.Text), 0o644)
	})
	pdk.Tool("progress", "Reports progress, logs, and answers.", func(ctx context.Context, a empty) (string, error) {
		pdk.Log(pdk.LevelInfo, "working on it")
		if err := pdk.Progress(ctx, 0.5, "half way"); err != nil {
			return "", err
		}
		m := pdk.Meta(ctx)
		return "done " + m.ContextID + "/" + m.TaskID + "/" + m.ToolCallID, nil
	})
	pdk.Tool("settings", "Answers config and secret.", func(ctx context.Context, a empty) (string, error) {
		return pdk.Config("greeting") + "|" + pdk.Config("limit") + "|" + pdk.Secret("token") + "|" + os.Getenv("HOME"), nil
	})
}

func main() {}
