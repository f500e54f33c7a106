package plugins

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchConfig configures a Watcher. A zero field means its default.
type WatchConfig struct {
	// Dir is the plugin folder: each plugin in a subfolder holding
	// plugin.json and its .wasm.
	Dir string
	// Debounce is how long the folder must be quiet before a change is
	// acted on (default 200ms): a .wasm being copied is not loaded half-way.
	Debounce time.Duration
	// Rescan is the period of a full rescan, in case a file-system event
	// was missed (default 30s; negative: never).
	Rescan time.Duration
	// Settle is how long a plugin's files must have been left alone (by
	// modification time) before they are read (default 1s): a plain `cp`
	// still writing a .wasm is waited for, not reported as a broken plugin.
	// It applies to the changes seen while watching, not to Scan.
	Settle time.Duration
	Logger *slog.Logger // nil: the registry's
}

// scanParallel is how many plugins a scan loads at once.
const scanParallel = 4

// Watcher keeps a Registry in step with a plugin folder: a new or changed
// plugin is loaded (and replaces the old version only once it validated), a
// removed one is unloaded.
type Watcher struct {
	r   *Registry
	cfg WatchConfig
	log *slog.Logger

	mu        sync.Mutex
	known     map[string]string   // manifest path -> fingerprint of manifest and wasm
	unsettled bool                // the last scan left a plugin whose files are still being written
	loads     map[string]*loadJob // manifest path -> its load running now
	jobs      sync.WaitGroup      // the loads running
	slots     chan struct{}       // loads at once
	ended     chan struct{}       // a load ended: look at the folder again
	now       func() time.Time
}

// loadJob is one load the watcher started.
type loadJob struct {
	cancel context.CancelFunc
	name   string // the plugin its manifest names, when it could be read
}

// NewWatcher returns a watcher of cfg.Dir for r. Run starts it.
func NewWatcher(r *Registry, cfg WatchConfig) (*Watcher, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("plugins: watcher: no folder")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("plugins: watcher: %w", err)
	}
	cfg.Dir = dir
	if cfg.Debounce <= 0 {
		cfg.Debounce = 200 * time.Millisecond
	}
	if cfg.Rescan == 0 {
		cfg.Rescan = 30 * time.Second
	}
	if cfg.Settle == 0 {
		cfg.Settle = time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = r.log
	}
	return &Watcher{r: r, cfg: cfg, log: log.With("watch", dir), known: map[string]string{}, now: time.Now,
		loads: map[string]*loadJob{}, slots: make(chan struct{}, scanParallel), ended: make(chan struct{}, 1)}, nil
}

// Run scans the folder, then watches it until ctx is done. It returns nil
// when ctx is done (its loads cancelled and ended), or an error when the
// folder cannot be watched at all. Loads run on their own: the watcher never
// waits for one, so a plugin slow to load holds up no change to another.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.jobs.Wait()
	if err := os.MkdirAll(w.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("plugins: watcher: %w", err)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("plugins: watcher: %w", err)
	}
	// Only this goroutine calls into fsnotify (Add, Close); another one
	// drains its Events and Errors at all times, so that fsnotify's reader
	// never waits on a receiver that is itself waiting inside Add: a
	// folder replaced by rename hundreds of times a second once wedged
	// the watcher that way.
	changed := make(chan struct{}, 1)
	var errs atomic.Int64
	pumped := make(chan struct{})
	go pump(fw, changed, &errs, pumped)
	defer w.closeNotify(fw, pumped)
	if err := fw.Add(w.cfg.Dir); err != nil {
		return fmt.Errorf("plugins: watcher: %w", err)
	}
	w.watchSubdirs(fw)
	w.scan(ctx, false)

	var rescan <-chan time.Time
	if w.cfg.Rescan > 0 {
		t := time.NewTicker(w.cfg.Rescan)
		defer t.Stop()
		rescan = t.C
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-pumped:
			return nil // fsnotify stopped on its own
		case <-changed:
			debounce.Reset(w.cfg.Debounce)
		case <-debounce.C:
			if n := errs.Swap(0); n > 0 {
				// an overflow or a watch that failed: events may have
				// been lost, and the scan below reads the whole folder
				w.log.Warn("plugin folder watch errors; rescanning", "errors", n)
			}
			w.watchSubdirs(fw)
			w.scan(ctx, true)
		case <-rescan:
			w.watchSubdirs(fw)
			w.scan(ctx, true)
		case <-w.ended:
			// what changed while the load ran, or a folder removed then
			w.scan(ctx, true)
		}
		if w.isUnsettled() {
			debounce.Reset(w.cfg.Settle) // look again once the writer is done
		}
	}
}

// closeWait bounds how long the watcher waits for fsnotify to stop.
const closeWait = 5 * time.Second

// pump drains fsnotify's Events and Errors until both are closed, and only
// says that something changed (an error too: the folder is then read in
// full). It never blocks on its receiver.
func pump(fw *fsnotify.Watcher, changed chan<- struct{}, errs *atomic.Int64, done chan<- struct{}) {
	defer close(done)
	events, errors := fw.Events, fw.Errors
	for events != nil || errors != nil {
		select {
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
		case _, ok := <-errors:
			if !ok {
				errors = nil
				continue
			}
			errs.Add(1)
		}
		select {
		case changed <- struct{}{}:
		default:
		}
	}
}

// closeNotify stops fsnotify, waiting at most closeWait for its reader.
func (w *Watcher) closeNotify(fw *fsnotify.Watcher, pumped <-chan struct{}) {
	closed := make(chan struct{})
	go func() {
		_ = fw.Close()
		close(closed)
	}()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		w.log.Warn("plugin folder watch did not stop; left behind", "waited", closeWait)
		return
	}
	select {
	case <-pumped:
	case <-t.C:
	}
}

func (w *Watcher) watchSubdirs(fw *fsnotify.Watcher) {
	entries, err := os.ReadDir(w.cfg.Dir)
	if err != nil {
		return
	}
	watched := map[string]bool{}
	for _, p := range fw.WatchList() {
		watched[p] = true
	}
	for _, e := range entries {
		if p := filepath.Join(w.cfg.Dir, e.Name()); e.IsDir() && !watched[p] {
			_ = fw.Add(p)
		}
	}
}

// Scan brings the registry in step with the folder once: loads what is new
// or changed, unloads what is gone, and returns when its loads have ended.
// Failures are reported by the registry (log and event) and leave the
// previous version serving.
func (w *Watcher) Scan(ctx context.Context) {
	for w.scan(ctx, false) && ctx.Err() == nil {
		w.jobs.Wait() // a folder waits for another naming its plugin
	}
	w.jobs.Wait()
}

// scan starts the loads of what is new or changed and unloads what is gone,
// without waiting for the loads; with settle, a plugin whose files changed
// less than Settle ago is left for a later scan (a change seen while the
// folder is watched may be a copy in progress; at start the files are what
// they are). A plugin whose load still runs is left alone: when the load
// ends, the watcher looks again (a change meanwhile loads again; a folder
// removed meanwhile cancels the load, then unloads what it made).
//
// Of the folders naming one plugin, one loads at a time, the first in path
// order first: whoever's load ends first would own the name otherwise (see
// Registry.swap), and which folder serves a name after a start would be a
// matter of timing. A folder left waiting is looked at again when the load
// ends; scan reports whether it left one.
func (w *Watcher) scan(ctx context.Context, settle bool) (waiting bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	found := map[string]string{}
	entries, err := os.ReadDir(w.cfg.Dir)
	if err != nil {
		w.log.Warn("read plugin folder", "err", err)
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		mf := filepath.Join(w.cfg.Dir, e.Name(), ManifestFile)
		fp, err := fingerprint(mf)
		if errors.Is(err, fs.ErrNotExist) {
			continue // no manifest (yet)
		}
		if err != nil {
			// a manifest too big, a FIFO, a device: the load reports it
			fp = "unreadable: " + err.Error()
		}
		found[mf] = fp
	}
	var paths []string
	for mf := range found {
		paths = append(paths, mf)
	}
	sort.Strings(paths)
	w.unsettled = false
	loading := map[string]bool{} // plugin names whose loads run
	for _, job := range w.loads {
		if job.name != "" {
			loading[job.name] = true
		}
	}
	for _, mf := range paths {
		if w.known[mf] == found[mf] || w.loads[mf] != nil {
			continue
		}
		if age, ok := youngest(filepath.Dir(mf), w.now()); settle && ok && age < w.cfg.Settle {
			// Still being written (or just written): read it once it has
			// been left alone for Settle, not half-way.
			w.unsettled = true
			continue
		}
		name := ""
		if m, err := ReadManifest(mf); err == nil {
			name = m.Name // a manifest that cannot be read: the load reports it
		}
		if name != "" && loading[name] {
			waiting = true // not known yet: looked at when that load ends
			continue
		}
		w.known[mf] = found[mf]
		w.startLoad(ctx, mf, name)
		if name != "" {
			loading[name] = true
		}
	}
	for mf := range w.known {
		if _, ok := found[mf]; ok {
			continue
		}
		if job := w.loads[mf]; job != nil {
			job.cancel() // unloaded once the load has ended
			continue
		}
		delete(w.known, mf)
		if err := w.r.unloadSource(ctx, mf); err != nil {
			w.log.Warn("unload removed plugin", "manifest", mf, "err", err)
		}
	}
	return waiting
}

// startLoad loads a manifest on its own goroutine (at most scanParallel at
// once), and says when it ended. Called with w.mu held.
func (w *Watcher) startLoad(ctx context.Context, mf, name string) {
	lctx, cancel := context.WithCancel(ctx)
	w.loads[mf] = &loadJob{cancel: cancel, name: name}
	w.jobs.Add(1)
	go func() {
		defer w.jobs.Done()
		defer cancel()
		select {
		case w.slots <- struct{}{}:
			_, _ = w.r.Load(lctx, mf) // the registry logs and reports failures
			<-w.slots
		case <-lctx.Done():
		}
		w.mu.Lock()
		delete(w.loads, mf)
		w.mu.Unlock()
		select {
		case w.ended <- struct{}{}:
		default:
		}
	}()
}

func (w *Watcher) isUnsettled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unsettled
}

// youngest returns the age of the most recently modified file of a
// plugin's folder.
func youngest(dir string, now time.Time) (time.Duration, bool) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, false
	}
	var newest time.Time
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && !e.IsDir() && fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
	}
	if newest.IsZero() {
		return 0, false
	}
	return now.Sub(newest), true
}

// fingerprint digests a manifest and names the size and time of the files
// beside it, so that a changed .wasm is seen even when the manifest is not.
func fingerprint(manifest string) (string, error) {
	b, err := readRegular(manifest, MaxManifestBytes, "manifest size in bytes")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(b)
	entries, _ := os.ReadDir(filepath.Dir(manifest))
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && !e.IsDir() && e.Name() != ManifestFile {
			fmt.Fprintf(h, "%s %d %d\n", e.Name(), fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}

var _ io.Closer = (*Registry)(nil)
