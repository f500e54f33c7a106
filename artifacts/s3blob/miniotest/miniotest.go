// Package miniotest starts a real MinIO server on loopback for tests: a
// free port, a temporary folder, fixed root credentials.
//
// The binary is $LOOOPY_MINIO, else ~/.cache/looopy-test/bin/minio (where
// .ci/run builds it: GOBIN=~/.cache/looopy-test/bin go install
// github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c), else minio
// on the PATH. When it is missing the test is skipped with a loud reason,
// except under CI (CI=true), where it fails.
package miniotest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Credentials of every server started here.
const (
	AccessKey = "looopy-test"
	SecretKey = "looopy-test-secret-key"
)

// Server is a running MinIO.
type Server struct {
	// Endpoint is host:port (plain HTTP).
	Endpoint string
	Dir      string
	cmd      *exec.Cmd
	done     chan struct{}
}

// Binary returns the path of the minio binary, or "".
func Binary() string {
	if p := os.Getenv("LOOOPY_MINIO"); p != "" {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "looopy-test", "bin", "minio")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	return ""
}

// Require returns the binary, or skips (fails under CI) t.
func Require(t testing.TB) string {
	t.Helper()
	bin := Binary()
	if bin == "" {
		msg := "S3 TESTS NOT RUN: no MinIO server binary (build it with GOBIN=$HOME/.cache/looopy-test/bin " +
			"go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c, or set LOOOPY_MINIO)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// Start starts a MinIO for t, stopped when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Require(t)
	s, err := StartServer(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartServer starts a MinIO on dir outside of a test; Stop it.
func StartServer(bin, dir string) (*Server, error) {
	var last error
	for range 5 {
		s, err := start(bin, dir)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func start(bin, dir string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	console, err := freePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "server", data, "--address", addr, "--console-address", fmt.Sprintf("127.0.0.1:%d", console), "--quiet")
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+AccessKey, "MINIO_ROOT_PASSWORD="+SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1")
	logPath := filepath.Join(dir, fmt.Sprintf("minio-%d.log", port))
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start minio: %w", err)
	}
	out.Close()
	s := &Server{Endpoint: addr, Dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get("http://" + addr + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("minio on %s exited: %s", addr, strings.TrimSpace(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("minio on %s was not ready within 60 s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the server (SIGTERM, SIGKILL after 10 s).
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
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}
