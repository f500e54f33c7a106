package host_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/examples/plugins/wasmtest/chatserver"
)

// chatProcessEnv, set in this test binary's environment, makes it a
// chat-completions server in a process of its own instead of running tests
// (see TestMain): the real-model benchmark's variant that keeps the model
// server's goroutines, timers and garbage collector apart from the host's.
const chatProcessEnv = "LOOOPY_CHATSERVER_PROCESS"

func TestMain(m *testing.M) {
	if spec := os.Getenv(chatProcessEnv); spec != "" {
		serveChatProcess(spec)
		return
	}
	if os.Getenv(convMemoryChildEnv) == "" {
		// (A child measuring one conversation's heap uses the cache
		// its parent warmed.)
		warmCompileCache()
	}
	code := m.Run()
	if looopyBin != "" {
		// the binaries built once for this run (see binaries) are 70 MB
		_ = os.RemoveAll(filepath.Dir(looopyBin))
	}
	os.Exit(code)
}

// serveChatProcess serves the default reply "chunks,delay" (a count and a
// Go duration), prints its base URL, then answers each line "last" on
// stdin with the last streamed answer's first and last flush (Unix
// nanoseconds) until stdin closes.
func serveChatProcess(spec string) {
	n, d, _ := strings.Cut(spec, ",")
	chunks, err := strconv.Atoi(n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chat process: chunks:", err)
		os.Exit(2)
	}
	delay, err := time.ParseDuration(d)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chat process: delay:", err)
		os.Exit(2)
	}
	var closers []func()
	srv := chatserver.Start(func(f func()) { closers = append(closers, f) })
	srv.Default = chatserver.Reply{Text: benchWords(chunks), ChunkDelay: delay}
	fmt.Println(srv.BaseURL())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		first, done := srv.LastStream()
		fmt.Println(first.UnixNano(), done.UnixNano())
	}
	for _, f := range closers {
		f()
	}
}

// benchWords is the reply's text, one word a chunk.
func benchWords(n int) []string {
	text := make([]string, n)
	for i := range text {
		text[i] = fmt.Sprintf(" w%d", i)
	}
	return text
}

// chatProcess is a chat server running in a child process.
type chatProcess struct {
	base string
	in   io.WriteCloser
	out  *bufio.Scanner
}

// startChatProcess runs this test binary as a chat server with the given
// reply shape; it is stopped when the benchmark ends.
func startChatProcess(b *testing.B, chunks int, delay time.Duration) *chatProcess {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%s", chatProcessEnv, chunks, delay))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	p := &chatProcess{in: in, out: bufio.NewScanner(out)}
	if !p.out.Scan() {
		b.Fatalf("chat process printed no URL: %v", p.out.Err())
	}
	p.base = p.out.Text()
	if !strings.HasPrefix(p.base, "http://127.0.0.1:") {
		b.Fatalf("chat process printed %q", p.base)
	}
	return p
}

// LastStream asks the process when its last streamed answer's first chunk
// and [DONE] were flushed.
func (p *chatProcess) LastStream() (first, done time.Time, err error) {
	if _, err := io.WriteString(p.in, "last\n"); err != nil {
		return first, done, err
	}
	if !p.out.Scan() {
		return first, done, fmt.Errorf("chat process: %v", p.out.Err())
	}
	var f, d int64
	if _, err := fmt.Sscan(p.out.Text(), &f, &d); err != nil {
		return first, done, fmt.Errorf("chat process answered %q: %v", p.out.Text(), err)
	}
	return time.Unix(0, f), time.Unix(0, d), nil
}
