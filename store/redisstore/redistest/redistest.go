// Package redistest starts a real redis-server on loopback for tests: a
// free port, a temporary folder, the append-only file synced on every
// write (appendfsync always, the setting the stores' durability promise
// needs), no RDB snapshots and no other configuration read from anywhere.
//
// The server binary is $LOOOPY_REDIS_SERVER or redis-server on the PATH
// (Debian's redis-server package). When it is missing the test is skipped
// with a loud reason, except under CI (CI=true), where it fails: CI
// installs it and must run the tests.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is a running redis-server.
type Server struct {
	// Addr is host:port on loopback.
	Addr string
	// Dir holds its append-only files.
	Dir string
	// Password is the one the server requires ("" when none).
	Password string

	cmd  *exec.Cmd
	conf string
	done chan struct{}
}

// Binary returns the path of redis-server, or "" when it is not installed.
func Binary() string {
	if p := os.Getenv("LOOOPY_REDIS_SERVER"); p != "" {
		return p
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return ""
	}
	return p
}

// Require returns the redis-server binary, or skips (fails under CI) t.
func Require(t testing.TB) string {
	t.Helper()
	bin := Binary()
	if bin == "" {
		msg := "REDIS TESTS NOT RUN: redis-server is not installed (apt-get install -y redis-server, " +
			"or set LOOOPY_REDIS_SERVER to its path)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// Options tune a server. The zero value is the tests' default.
type Options struct {
	// Password, when set, is required from clients (requirepass).
	Password string
	// Dir, when set, is the folder of the data (to restart a server on the
	// data of a previous one); default a new temporary folder.
	Dir string
	// Port, when set, is the port to listen on (to restart on the same
	// address); default a free one.
	Port int
}

// Start starts a redis-server for t and stops it when t ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Require(t)
	s, err := StartServer(bin, opts, t.TempDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

// StartServer starts a redis-server outside of a test (benchmarks, tools);
// tempDir makes the folder when opts.Dir is empty. The caller must Stop it.
func StartServer(bin string, opts Options, tempDir func() string) (*Server, error) {
	dir := opts.Dir
	if dir == "" {
		dir = tempDir()
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port := opts.Port
		if port == 0 {
			p, err := freePort()
			if err != nil {
				return nil, err
			}
			port = p
		}
		s, err := start(bin, dir, port, opts.Password)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if opts.Port != 0 {
			break
		}
	}
	return nil, lastErr
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func start(bin, dir string, port int, password string) (*Server, error) {
	conf := filepath.Join(dir, "redis.conf")
	lines := []string{
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"dir " + dir,
		"daemonize no",
		"protected-mode no",
		"save \"\"",
		"appendonly yes",
		"appendfsync always",
		"appendfilename \"appendonly.aof\"",
		"loglevel warning",
		"logfile \"\"",
		"databases 16",
	}
	if password != "" {
		lines = append(lines, "requirepass "+password)
	}
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, conf)
	out, err := os.Create(filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	out.Close()
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir, Password: password, cmd: cmd, conf: conf, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	// Ready when it answers PING (a loaded machine may take a while; the
	// guard fails fast if the process died).
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := s.ping(); err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)))
			return nil, fmt.Errorf("redis-server on port %d exited: %s", port, strings.TrimSpace(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			return nil, fmt.Errorf("redis-server on port %d did not answer within 30 s", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping sends PING over a raw connection (no client library needed).
func (s *Server) ping() error {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	cmd := "PING\r\n"
	if s.Password != "" {
		cmd = fmt.Sprintf("AUTH %s\r\nPING\r\n", s.Password)
	}
	if _, err := c.Write([]byte(cmd)); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.HasPrefix(line, "+PONG") {
			return nil
		}
		if strings.HasPrefix(line, "-") {
			return fmt.Errorf("redis: %s", strings.TrimSpace(line))
		}
	}
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Kill stops the server at once (SIGKILL): what was acknowledged must be
// in its append-only file.
func (s *Server) Kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 s).
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.Kill()
	}
}

// Restart kills the server and starts a new one on the same folder and
// port, as a crash and restart of Redis would.
func (s *Server) Restart(ctx context.Context) (*Server, error) {
	s.Kill()
	_, portStr, _ := net.SplitHostPort(s.Addr)
	port, _ := strconv.Atoi(portStr)
	var err error
	for ctx.Err() == nil {
		var ns *Server
		ns, err = start(s.cmd.Path, s.Dir, port, s.Password)
		if err == nil {
			return ns, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("restart redis-server: %w", err)
}
