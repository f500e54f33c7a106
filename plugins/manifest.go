package plugins

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/looopy-go/looopy/pdk"
)

// ManifestFile is the name of a plugin's manifest, beside its .wasm.
const ManifestFile = "plugin.json"

// Manifest describes a plugin: plugin.json beside the .wasm.
type Manifest struct {
	// Schema is ignored: it lets editors find docs/plugin.schema.json.
	Schema       string            `json:"$schema,omitempty"`
	Name         string            `json:"name"`
	Version      string            `json:"version"`
	Kind         pdk.Kind          `json:"kind"`
	Wasm         string            `json:"wasm"`   // file name, relative to the manifest's folder
	SHA256       string            `json:"sha256"` // hex digest of the .wasm
	Description  string            `json:"description,omitempty"`
	Capabilities Capabilities      `json:"capabilities"`
	Config       map[string]any    `json:"config,omitempty"`
	Secrets      map[string]string `json:"secrets,omitempty"` // secret name -> host environment variable

	// Dir is the folder the manifest was read from (not part of the file).
	Dir string `json:"-"`
	// File is the manifest's path (not part of the file).
	File string `json:"-"`
}

// Capabilities is what a plugin asks for. Nothing is granted that is not
// asked for here and allowed by the host's Policy.
type Capabilities struct {
	AllowedHosts        []string    `json:"allowedHosts,omitempty"`
	AllowPrivateNetwork bool        `json:"allowPrivateNetwork,omitempty"`
	AllowedPaths        []PathGrant `json:"allowedPaths,omitempty"`
	MemoryPages         uint32      `json:"memoryPages,omitempty"` // 64 KiB pages
	CallTimeout         Duration    `json:"callTimeout,omitempty"`
	OutputLimit         int64       `json:"outputLimit,omitempty"` // bytes
	Instances           int         `json:"instances,omitempty"`
	HostFunctions       []string    `json:"hostFunctions,omitempty"`
}

// PathGrant is a host folder mounted into the guest at the same path.
type PathGrant struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// Resolved is, in a Grant, the folder Path named when the plugin
	// loaded, every link followed: what the guest's file operations are
	// confined to.
	Resolved string `json:"-"`
}

// Duration is the one duration format of manifests and the host's config:
// a string like "30s" (see pdk.Duration); a bare number is refused.
type Duration = pdk.Duration

var (
	nameRE    = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$`)
	sha256RE  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	hostFuncs = map[string]bool{
		pdk.HostLog: true, pdk.HostEmit: true, pdk.HostResultRead: true,
		pdk.HostKVGet: true, pdk.HostKVSet: true, pdk.HostKVDelete: true,
		pdk.HostHTTPRequest: true, pdk.HostHTTPRead: true, pdk.HostHTTPClose: true,
		pdk.HostModelCall: true, pdk.HostToolCall: true, pdk.HostArtifactWrite: true,
		pdk.HostCredential: true,
	}
)

// ReadManifest reads and checks a manifest file (plugin.json, or a folder
// holding one). Decoding is strict: an unknown field is an error, and every
// error names the file.
func ReadManifest(path string) (*Manifest, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, ManifestFile)
	}
	b, err := readRegular(path, MaxManifestBytes, "manifest size in bytes")
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	m.File = path
	m.Dir = filepath.Dir(path)
	return m, nil
}

// ParseManifest decodes and checks a manifest.
func ParseManifest(b []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode: data after the manifest object")
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return &m, nil
}

func (m *Manifest) check() error {
	var errs []error
	if !nameRE.MatchString(m.Name) {
		errs = append(errs, fmt.Errorf("name %q: want 1-64 letters, digits, '_', '-' or '.'", m.Name))
	}
	if m.Version == "" {
		errs = append(errs, errors.New("version is missing"))
	}
	if !m.Kind.Valid() {
		errs = append(errs, fmt.Errorf("kind %q: want tool, model or agent", m.Kind))
	}
	if m.Wasm == "" || filepath.Base(m.Wasm) != m.Wasm || !strings.HasSuffix(m.Wasm, ".wasm") {
		errs = append(errs, fmt.Errorf("wasm %q: want a .wasm file name beside the manifest", m.Wasm))
	}
	if !sha256RE.MatchString(m.SHA256) {
		errs = append(errs, fmt.Errorf("sha256 %q: want 64 lowercase hex digits", m.SHA256))
	}
	c := m.Capabilities
	for _, h := range c.AllowedHosts {
		if err := ValidateEgressHost(h); err != nil {
			errs = append(errs, fmt.Errorf("capabilities.allowedHosts: %w", err))
		}
	}
	for _, p := range c.AllowedPaths {
		if !filepath.IsAbs(p.Path) {
			errs = append(errs, fmt.Errorf("capabilities.allowedPaths: %q is not an absolute path", p.Path))
		}
	}
	if c.MemoryPages > 65536 {
		errs = append(errs, fmt.Errorf("capabilities.memoryPages %d: at most 65536", c.MemoryPages))
	}
	if c.CallTimeout < 0 || c.OutputLimit < 0 || c.Instances < 0 {
		errs = append(errs, errors.New("capabilities: negative limit"))
	}
	for _, f := range c.HostFunctions {
		if !hostFuncs[f] {
			errs = append(errs, fmt.Errorf("capabilities.hostFunctions: the host has no function %q", f))
		}
	}
	for name, env := range m.Secrets {
		if name == "" || env == "" {
			errs = append(errs, fmt.Errorf("secrets: empty name or variable (%q: %q)", name, env))
		}
	}
	return errors.Join(errs...)
}
