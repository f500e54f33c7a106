package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/common/expfmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// hostMetrics are the instruments the server observes at each collection
// (gauges of what is open now) and the ones it records as things happen.
type hostMetrics struct {
	requests metric.Int64Counter
}

// registerMetrics registers the server's observable instruments: open
// streams, running turns, cached agents, plugin calls and health, store
// size on disk.
func (s *Server) registerMetrics(m metric.Meter) error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	streams, err := m.Int64ObservableGauge("looopy.sse.streams", metric.WithUnit("{stream}"),
		metric.WithDescription("Server-Sent Event streams open now, by kind (a2a, looopy)."))
	add(err)
	running, err := m.Int64ObservableGauge("looopy.turns.running", metric.WithUnit("{turn}"),
		metric.WithDescription("Turns running now."))
	add(err)
	agents, err := m.Int64ObservableGauge("looopy.agents.cached", metric.WithUnit("{agent}"),
		metric.WithDescription("Conversations (agents) held in memory."))
	add(err)
	pCalls, err := m.Int64ObservableCounter("looopy.plugin.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Calls of each plugin version since it was loaded."))
	add(err)
	pFailures, err := m.Int64ObservableCounter("looopy.plugin.failures", metric.WithUnit("{call}"),
		metric.WithDescription("Failed calls of each plugin version since it was loaded."))
	add(err)
	pHealthy, err := m.Int64ObservableGauge("looopy.plugin.healthy",
		metric.WithDescription("1 when the plugin serves and its recent calls succeed, else 0."))
	add(err)
	storeSize, err := m.Int64ObservableGauge("looopy.store.size", metric.WithUnit("By"),
		metric.WithDescription("Bytes of the Badger store on disk, by part (lsm, vlog)."))
	add(err)
	convExpired, err := m.Int64ObservableCounter("looopy.conversations.expired", metric.WithUnit("{conversation}"),
		metric.WithDescription("Conversations deleted after limits.conversationTTL idle, since the host started."))
	add(err)
	s.metrics.requests, err = m.Int64Counter("looopy.rpc.requests", metric.WithUnit("{request}"),
		metric.WithDescription("JSON-RPC requests, by method and outcome."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("host metrics: %w", err)
	}
	a2aAttrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", "a2a")))
	looopyAttrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", "looopy")))
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		a2a := s.taskStreams.Load()
		o.ObserveInt64(streams, a2a, a2aAttrs)
		o.ObserveInt64(streams, s.openStreams.Load()-a2a, looopyAttrs)
		nRunning, nAgents := s.tasks.Stats()
		o.ObserveInt64(running, int64(nRunning))
		o.ObserveInt64(agents, int64(nAgents))
		o.ObserveInt64(convExpired, s.tasks.ExpiredConversations())
		if s.plugins != nil {
			ps, err := s.plugins.Plugins(ctx)
			if err == nil {
				for _, p := range ps {
					attrs := metric.WithAttributes(attribute.String("plugin", p.Name), attribute.String("version", p.Version))
					o.ObserveInt64(pCalls, p.Calls, attrs)
					o.ObserveInt64(pFailures, p.Failures, attrs)
					h := int64(0)
					if p.Healthy {
						h = 1
					}
					o.ObserveInt64(pHealthy, h, attrs)
				}
			}
		}
		if !s.cfg.InMemory && s.cfg.DataDir != "" {
			lsm, vlog := badgerSize(s.cfg.DataDir)
			o.ObserveInt64(storeSize, lsm, metric.WithAttributes(attribute.String("part", "lsm")))
			o.ObserveInt64(storeSize, vlog, metric.WithAttributes(attribute.String("part", "vlog")))
		}
		return nil
	}, streams, running, agents, convExpired, pCalls, pFailures, pHealthy, storeSize)
	if err != nil {
		return fmt.Errorf("host metrics: %w", err)
	}
	return nil
}

// badgerSize adds up the Badger files under dir: tables (.sst) are the LSM
// tree, .vlog the value log. It counts the space the files take on disk,
// not their length: Badger preallocates its value log as a sparse file of
// gigabytes.
func badgerSize(dir string) (lsm, vlog int64) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if d.Name() == "wasm-cache" {
				return fs.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".sst":
			if fi, err := d.Info(); err == nil {
				lsm += diskUsage(fi)
			}
		case ".vlog":
			if fi, err := d.Info(); err == nil {
				vlog += diskUsage(fi)
			}
		}
		return nil
	})
	return lsm, vlog
}

// handleMetrics serves every metric in the Prometheus text format.
func (s *Server) handleMetrics(c *fiber.Ctx) error {
	// The metrics name principals and plugins: with auth on they need a
	// credential (the metrics token, or the admin token when none is set).
	tok, _ := strings.CutPrefix(c.Get(fiber.HeaderAuthorization), "Bearer ")
	switch {
	case s.metricsToken != nil:
		sum := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(sum[:], s.metricsToken) != 1 {
			return c.Status(fiber.StatusUnauthorized).JSON(fiber.Map{"error": "metrics need the metrics token"})
		}
	case s.cfg.Auth.Enabled:
		if !s.auth.adminOK(tok) {
			return c.Status(fiber.StatusUnauthorized).JSON(fiber.Map{
				"error": "with auth on, metrics need observability.metricsToken, or the admin token when none is set"})
		}
	}
	mfs, err := s.tel.registry.Gather()
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			return fmt.Errorf("encode metrics: %w", err)
		}
	}
	c.Set(fiber.HeaderContentType, "text/plain; version=0.0.4; charset=utf-8")
	return c.Send(buf.Bytes())
}
