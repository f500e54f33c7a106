//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/host/cli"
)

// `looopy chat` is tested as a user meets it: the command runs as its own
// process (this test binary, re-run as the command) on a real
// pseudo-terminal, talking to a real host (the scripted model, the
// calculator and the ledger, which needs an approval) started by the test.
// Keys are typed into the terminal, Ctrl-C included, and the screen is
// read back.

func TestMain(m *testing.M) {
	if args := os.Getenv("LOOOPY_CLI_CHILD"); args != "" {
		var argv []string
		if err := json.Unmarshal([]byte(args), &argv); err != nil {
			fmt.Fprintln(os.Stderr, "LOOOPY_CLI_CHILD:", err)
			os.Exit(3)
		}
		os.Exit(cli.Main(context.Background(), argv, cli.Stdio()))
	}
	code := m.Run()
	if chatHostM != nil {
		_ = chatHostM.Close()
	}
	if chatHostDir != "" {
		_ = os.RemoveAll(chatHostDir)
	}
	if bin != "" {
		_ = os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

var (
	chatHostOnce sync.Once
	chatHostM    *host.Main
	chatHostDir  string
	chatLedger   string
	chatHostErr  error
)

const chatKey = "chat-test-key"

// chatHost is the package's host for the chat tests, with auth on: the
// scripted model, the calculator, the researcher sub-agent, echo, the
// dataset writer, and the ledger, whose ledger_append waits for an
// approval (which may edit its arguments). Each test talks in conversations of its own.
func chatHost(t *testing.T) (*host.Main, string) {
	t.Helper()
	chatHostOnce.Do(func() {
		if chatHostDir, chatHostErr = os.MkdirTemp("", "looopy-chat-test-"); chatHostErr != nil {
			return
		}
		plugins := filepath.Join(chatHostDir, "plugins")
		chatLedger = filepath.Join(chatHostDir, "ledger")
		if chatHostErr = os.MkdirAll(chatLedger, 0o755); chatHostErr != nil {
			return
		}
		for _, p := range []struct {
			name  string
			cfg   map[string]any
			paths []string
		}{
			{"scripted-model", map[string]any{}, nil},
			{"calculator", nil, nil},
			{"researcher", nil, nil},
			{"echo", nil, nil},
			{"dataset-writer", nil, nil},
			{"ledger", map[string]any{"dir": chatLedger}, []string{chatLedger}},
		} {
			if chatHostErr = copyExamplePlugin(plugins, p.name, p.cfg, p.paths); chatHostErr != nil {
				return
			}
		}
		m := host.NewMain()
		m.Config = host.Config{
			Addr:      "127.0.0.1:0",
			DataDir:   filepath.Join(chatHostDir, "data"),
			PluginDir: plugins,
			Plugins: host.PluginsConfig{
				Only:      []string{"scripted-model", "calculator", "ledger", "researcher", "echo", "dataset-writer"},
				CacheDir:  filepath.Join(os.TempDir(), "looopy-host-test-wasm-cache"),
				PathRoots: []string{chatHostDir},
				NoWatch:   true,
			},
			Auth:        host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: chatKey, Principal: "alice"}}},
			Interaction: host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_append"}, AllowEdits: true}},
			Limits:      host.LimitsConfig{Heartbeat: host.Duration(100 * time.Millisecond), ShutdownGrace: host.Duration(2 * time.Second)},
		}
		m.Stdout = io.Discard
		if os.Getenv("LOOOPY_TEST_LOG") != "" {
			m.Stdout = os.Stderr
		}
		chatHostErr = m.Run(context.Background())
		chatHostM = m
	})
	if chatHostErr != nil {
		t.Fatalf("start the chat tests' host: %v", chatHostErr)
	}
	return chatHostM, chatLedger
}

// copyExamplePlugin copies an example plugin into dir with its config and
// granted paths replaced (nil config: the example's; nil paths: none).
func copyExamplePlugin(dir, name string, cfg map[string]any, paths []string) error {
	src := filepath.Join("..", "..", "examples", "plugins", name)
	wasm, err := os.ReadFile(filepath.Join(src, name+".wasm"))
	if err != nil {
		return fmt.Errorf("read %s.wasm (run make plugins-go): %w", name, err)
	}
	b, err := os.ReadFile(filepath.Join(src, "plugin.json"))
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	sum := sha256.Sum256(wasm)
	m["sha256"] = hex.EncodeToString(sum[:])
	if cfg != nil {
		m["config"] = cfg
	}
	caps, _ := m["capabilities"].(map[string]any)
	delete(caps, "allowedPaths")
	if paths != nil {
		var ap []any
		for _, p := range paths {
			ap = append(ap, map[string]any{"path": p})
		}
		caps["allowedPaths"] = ap
	}
	out := filepath.Join(dir, name)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	mb, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(out, name+".wasm"), wasm, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "plugin.json"), mb, 0o644)
}

// term is `looopy chat` running on a pseudo-terminal.
type term struct {
	t      *testing.T
	master *os.File
	cmd    *exec.Cmd
	mu     sync.Mutex
	screen bytes.Buffer
	read   int // how much of the screen expect has consumed
	exited chan error
}

// openPTY opens a pseudo-terminal pair (posix_openpt, unlockpt, ptsname).
func openPTY() (*os.File, *os.File, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		_ = master.Close()
		return nil, nil, fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		_ = master.Close()
		return nil, nil, fmt.Errorf("ptsname: %w", err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		_ = master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// startChat runs `looopy chat args...` on a new terminal, as the leader
// of its own session with the terminal as its controlling terminal (so
// that Ctrl-C typed there interrupts it, as in a shell).
func startChat(t *testing.T, env []string, args ...string) *term {
	t.Helper()
	master, slave, err := openPTY()
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	argv, _ := json.Marshal(append([]string{"chat"}, args...))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "LOOOPY_CLI_CHILD="+string(argv), "TERM=xterm", "NO_COLOR="), env...)
	cmd.Dir = t.TempDir()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start looopy chat: %v", err)
	}
	_ = slave.Close()
	tm := &term{t: t, master: master, cmd: cmd, exited: make(chan error, 1)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			tm.mu.Lock()
			tm.screen.Write(buf[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() { tm.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-tm.exited
		}
		_ = master.Close()
		if t.Failed() || os.Getenv("LOOOPY_TEST_SCREEN") != "" {
			t.Logf("screen:\n%s", tm.text())
		}
	})
	return tm
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// text is the screen so far, without colours and carriage returns.
func (tm *term) text() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return strings.ReplaceAll(ansi.ReplaceAllString(tm.screen.String(), ""), "\r", "")
}

func (tm *term) raw() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.screen.String()
}

// expect waits until the screen, after what earlier expects consumed,
// shows want; it consumes up to the end of want and returns what came
// before it. The guard only fails fast; it never measures speed.
func (tm *term) expect(want string) string {
	tm.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		s := tm.text()
		if i := strings.Index(s[tm.read:], want); i >= 0 {
			before := s[tm.read : tm.read+i]
			tm.read += i + len(want)
			return before
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the chat never showed %q; after the last match it shows:\n%s", want, s[tm.read:])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// typeLine types a line and Enter.
func (tm *term) typeLine(s string) {
	tm.t.Helper()
	if _, err := tm.master.Write([]byte(s + "\r")); err != nil {
		tm.t.Fatalf("type %q: %v", s, err)
	}
}

// ctrlC types Ctrl-C: the terminal interrupts the chat.
func (tm *term) ctrlC() {
	tm.t.Helper()
	if _, err := tm.master.Write([]byte{0x03}); err != nil {
		tm.t.Fatalf("Ctrl-C: %v", err)
	}
}

// wait waits for the chat to exit and returns its exit code.
func (tm *term) wait() int {
	tm.t.Helper()
	select {
	case err := <-tm.exited:
		if err == nil {
			return 0
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		tm.t.Fatalf("looopy chat: %v", err)
	case <-time.After(60 * time.Second):
		tm.t.Fatalf("looopy chat did not exit; screen:\n%s", tm.text())
	}
	return -1
}

// A turn with a tool call: the call's name and arguments, then its
// result, then the streamed answer; colours on a terminal; /quit leaves.
func TestChatToolCallOnATerminal(t *testing.T) {
	m, _ := chatHost(t)
	tm := startChat(t, []string{"LOOOPY_API_KEY=" + chatKey}, m.URL())
	tm.expect("Connected to ")
	tm.expect("you> ")
	tm.typeLine("calc 2+2")
	tm.expect(`⚙ calc {"expression":"2+2"}`)
	tm.expect("↳ calc → 4")
	tm.expect("2+2 = 4")
	tm.expect("you> ")
	if !strings.Contains(tm.raw(), "\x1b[36m⚙ calc") {
		t.Errorf("the tool call is not coloured on a terminal")
	}
	tm.typeLine("/quit")
	if code := tm.wait(); code != 0 {
		t.Fatalf("exit code %d after /quit", code)
	}
}

// A sub-agent's activity (its own tool calls marked with its name) and an
// artifact (a dataset: name, type, size) saved from the chat.
func TestChatSubAgentAndArtifact(t *testing.T) {
	m, _ := chatHost(t)
	tm := startChat(t, []string{"LOOOPY_API_KEY=" + chatKey}, m.URL())
	tm.expect("you> ")
	tm.typeLine("research owls")
	tm.expect(`⚙ researcher {"prompt":"owls"}`)
	tm.expect("⤷ sub-agent researcher: owls")
	tm.expect(`[researcher] ⚙ echo {"text":"notes on owls"}`)
	tm.expect("↳ researcher → My notes on owls")
	tm.expect("The researcher says: My notes on owls")
	tm.expect("you> ")

	tm.typeLine("dataset 3")
	tm.expect("📎 artifact #1 demo: dataset, 3 rows, ")
	tm.expect("/save 1")
	tm.expect("Dataset written")
	tm.expect("you> ")
	out := filepath.Join(t.TempDir(), "rows.json")
	tm.typeLine("/save 1 " + out)
	tm.expect("saved artifact #1 to " + out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var saved struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(b, &saved); err != nil || len(saved.Rows) != 3 {
		t.Fatalf("saved dataset %s = %q (%v), want 3 rows", out, b, err)
	}
	tm.typeLine("/quit")
	tm.wait()
}

// Without the API key the host refuses the chat, which says so and exits
// with an error; the key from -api-key is sent.
func TestChatAPIKey(t *testing.T) {
	m, _ := chatHost(t)
	tm := startChat(t, nil, m.URL())
	tm.expect("you> ")
	tm.typeLine("calc 1+1")
	tm.expect("error: the agent refused the message")
	tm.expect("you> ")
	tm.typeLine("/quit")
	tm.wait()

	tm = startChat(t, nil, "-api-key", chatKey, m.URL())
	tm.expect("you> ")
	tm.typeLine("calc 1+1")
	tm.expect("1+1 = 2")
	tm.typeLine("/quit")
	tm.wait()
}

// An approval answered from the chat: the request shows the call, the
// plugin and its grant; nothing is written before the answer; y runs the
// call once; n with a reason rejects the next, which never runs.
func TestChatApproval(t *testing.T) {
	m, ledger := chatHost(t)
	tag := ledgerTag()
	tm := startChat(t, []string{"LOOOPY_API_KEY=" + chatKey}, m.URL())
	tm.expect("you> ")
	tm.typeLine("ledger pay 10 " + tag)
	tm.expect("? [approval] ")
	tm.expect(`call: ledger_append {"entry":"pay 10 ` + tag + `"}`)
	tm.expect("runs in: plugin ledger 1.0.0")
	tm.expect("grants: ")
	tm.expect("approve? [y/n reason")
	if b, err := os.ReadFile(filepath.Join(ledger, "ledger.log")); err == nil && strings.Contains(string(b), "pay 10 "+tag) {
		t.Fatalf("the ledger was written before the approval: %q", b)
	}
	tm.typeLine("maybe")
	tm.expect("answer y (approve), n [reason] (reject)")
	tm.typeLine("y")
	tm.expect(`⚙ ledger_append {"entry":"pay 10 ` + tag + `"}`)
	tm.expect("Ledger: ")
	tm.expect("you> ")
	b, err := os.ReadFile(filepath.Join(ledger, "ledger.log"))
	if err != nil || strings.Count(string(b), "pay 10 "+tag) != 1 {
		t.Fatalf("ledger after one approval = %q (%v), want pay 10 once", b, err)
	}

	// Edited arguments: refused when not JSON, run as edited when they are.
	tm.typeLine("ledger pay 30 " + tag)
	tm.expect("approve? [y/n reason/e {json}]")
	tm.typeLine("e pay 3")
	tm.expect("edited arguments must be a JSON object")
	tm.typeLine(`e {"entry":"pay 3 ` + tag + `"}`)
	tm.expect(`⚙ ledger_append {"entry":"pay 3 ` + tag + `"}`)
	tm.expect("Ledger: ")
	tm.expect("you> ")
	b, _ = os.ReadFile(filepath.Join(ledger, "ledger.log"))
	if strings.Contains(string(b), "pay 30 "+tag) || strings.Count(string(b), "pay 3 "+tag) != 1 {
		t.Fatalf("ledger after an edited approval = %q, want pay 3 once and no pay 30", b)
	}

	tm.typeLine("ledger pay 99 " + tag)
	tm.expect("approve? [y/n reason")
	tm.typeLine("n too much")
	tm.expect("ledger_append failed: ")
	tm.expect("you> ")
	b, _ = os.ReadFile(filepath.Join(ledger, "ledger.log"))
	if strings.Contains(string(b), "pay 99 "+tag) {
		t.Fatalf("a rejected call ran: ledger %q", b)
	}
	tm.typeLine("/quit")
	tm.wait()
}

// A chat that left while a task waited for an approval: resuming its
// context shows the request again, and the answer given there runs the
// call.
func TestChatResumeAPausedTask(t *testing.T) {
	m, ledger := chatHost(t)
	env := []string{"LOOOPY_API_KEY=" + chatKey}
	entry := "resume " + ledgerTag()
	tm := startChat(t, env, m.URL())
	tm.expect("you> ")
	tm.typeLine("ledger " + entry)
	tm.expect("approve? [y/n reason")
	match := contextLine.FindStringSubmatch(tm.text())
	if match == nil {
		t.Fatalf("no context id shown:\n%s", tm.text())
	}
	tm.typeLine("/quit")
	tm.wait()

	tm = startChat(t, env, "-context", match[1], m.URL())
	tm.expect("waits for an answer:")
	tm.expect(`call: ledger_append {"entry":"` + entry + `"}`)
	tm.expect("approve? [y/n reason")
	tm.typeLine("y")
	tm.expect("Ledger: ")
	tm.expect("you> ")
	b, err := os.ReadFile(filepath.Join(ledger, "ledger.log"))
	if err != nil || strings.Count(string(b), entry) != 1 {
		t.Fatalf("ledger after the approval from the resumed chat = %q (%v), want %s once", b, err, entry)
	}
	tm.typeLine("/quit")
	tm.wait()
}

// Ctrl-C cancels the running turn (it ends canceled, before its end), the
// chat goes on; at the prompt a first Ctrl-C only warns and a second
// quits.
func TestChatCtrlC(t *testing.T) {
	m, _ := chatHost(t)
	tm := startChat(t, []string{"LOOOPY_API_KEY=" + chatKey}, m.URL())
	tm.expect("you> ")
	tm.typeLine("SLOW 8s")
	tm.expect("tick1")
	tm.ctrlC()
	tm.expect("canceling the turn")
	got := tm.expect("⊘ canceled")
	tm.expect("you> ")
	if strings.Contains(got, "tick8") || strings.Contains(got, "Done.") {
		t.Fatalf("the canceled turn streamed to its end:\n%s", got)
	}
	tm.typeLine("calc 3+3")
	tm.expect("3+3 = 6")
	tm.expect("you> ")
	tm.ctrlC()
	tm.expect("Ctrl-C again (or /quit) leaves")
	tm.ctrlC()
	if code := tm.wait(); code != 0 {
		t.Fatalf("exit code %d after two Ctrl-C", code)
	}
	if s := tm.text(); strings.Contains(s, "tick8") {
		t.Fatalf("the canceled turn went on streaming:\n%s", s)
	}
}

var contextLine = regexp.MustCompile(`context ([0-9a-f-]{36})`)

// A conversation resumed by its context id: the agent remembers what was
// said in it before, and another conversation does not.
func TestChatResumeContext(t *testing.T) {
	m, _ := chatHost(t)
	env := []string{"LOOOPY_API_KEY=" + chatKey}
	tm := startChat(t, env, m.URL())
	tm.expect("you> ")
	tm.typeLine("remember the owl")
	tm.expect("You said: remember the owl")
	tm.expect("you> ")
	tm.typeLine("/context")
	tm.expect("you> ")
	match := contextLine.FindStringSubmatch(tm.text())
	if match == nil {
		t.Fatalf("no context id shown:\n%s", tm.text())
	}
	tm.typeLine("/quit")
	tm.wait()

	tm = startChat(t, env, "-context", match[1], m.URL())
	tm.expect("resuming context " + match[1])
	tm.expect("1 earlier task(s)")
	tm.expect("you> ")
	tm.typeLine("and the cat")
	tm.expect("You said: remember the owl | and the cat")
	tm.typeLine("/quit")
	tm.wait()

	tm = startChat(t, env, m.URL())
	tm.expect("you> ")
	tm.typeLine("and the cat")
	tm.expect("You said: ")
	// The answer, without the agent's thoughts the chat prints around it.
	var answer []string
	for _, line := range strings.Split(tm.expect("you> "), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "(thinking)") {
			answer = append(answer, line)
		}
	}
	if said := strings.TrimSpace(strings.Join(answer, "\n")); said != "and the cat" {
		t.Fatalf("a new conversation answered %q, want only its own message", said)
	}
	tm.typeLine("/quit")
	tm.wait()
}

// A credential typed in answer to an auth request is not echoed: the
// terminal's echo is off while it is typed, and on again after (the next
// message shows as typed).
func TestChatCredentialIsNotEchoed(t *testing.T) {
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	script := json.RawMessage(`{"rules": [{"name": "profile", "match": "(?i)^profile", "steps": [
		{"toolCall": {"name": "profile_read", "arguments": {}}},
		{"text": "Profile: {{lastToolResult}}"}]}]}`)
	for _, p := range []struct {
		name string
		cfg  map[string]any
	}{{"scripted-model", map[string]any{"script": script}}, {"authed-api", nil}} {
		if err := copyExamplePlugin(plugins, p.name, p.cfg, nil); err != nil {
			t.Fatal(err)
		}
	}
	m := host.NewMain()
	m.Config = host.Config{
		Addr:      "127.0.0.1:0",
		DataDir:   filepath.Join(dir, "data"),
		PluginDir: plugins,
		Plugins: host.PluginsConfig{
			Only:     []string{"scripted-model", "authed-api"},
			CacheDir: filepath.Join(os.TempDir(), "looopy-host-test-wasm-cache"),
			NoWatch:  true,
		},
		Limits: host.LimitsConfig{ShutdownGrace: host.Duration(2 * time.Second)},
	}
	m.Stdout = io.Discard
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })

	const token = "tok-9f3e21c7-never-on-screen"
	tm := startChat(t, nil, m.URL())
	tm.expect("you> ")
	tm.typeLine("profile please")
	tm.expect("credential> ")
	tm.typeLine(token)
	tm.expect("Profile: ")
	tm.expect("you> ")
	tm.typeLine("profile again")
	tm.expect("profile again") // echo is back on
	tm.expect("credential> ")
	tm.typeLine("/cancel")
	tm.expect("you> ")
	tm.typeLine("/quit")
	tm.wait()
	if strings.Contains(tm.raw(), token) {
		t.Fatalf("the credential was echoed:\n%s", tm.text())
	}
}
