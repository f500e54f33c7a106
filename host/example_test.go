package host_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/gofiber/fiber/v2"

	"github.com/looopy-go/looopy/host"
)

// An application serves the agent host from its own Fiber v2 app, under a
// prefix of its choosing, beside its own routes. The official A2A client
// finds the agent through the card under that prefix.
func ExampleServer_Register() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	base := "http://" + ln.Addr().String() + "/agent"
	dir, _ := os.MkdirTemp("", "looopy-example")
	defer os.RemoveAll(dir)

	m := host.NewMain()
	m.Stdout = io.Discard
	m.Config = host.Config{
		DataDir:   dir,
		PublicURL: base, // where the routes are reachable: it goes on the agent card
		PluginDir: "../examples/plugins",
		Plugins:   host.PluginsConfig{Only: []string{"scripted-model", "calculator"}, CacheDir: filepath.Join(os.TempDir(), "looopy-host-test-wasm-cache")},
	}
	if err := m.Start(context.Background()); err != nil {
		fmt.Println("start:", err)
		return
	}
	defer m.Close()

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/hello", func(c *fiber.Ctx) error { return c.SendString("the application's own route") })
	m.Server().Register(app.Group("/agent"))
	go func() { _ = app.Listener(ln) }()
	defer app.Shutdown()

	ctx := context.Background()
	card, err := agentcard.DefaultResolver.Resolve(ctx, base)
	if err != nil {
		fmt.Println("card:", err)
		return
	}
	client, err := a2aclient.NewFromCard(ctx, card)
	if err != nil {
		fmt.Println("client:", err)
		return
	}
	defer client.Destroy()
	res, err := client.SendMessage(ctx, &a2a.SendMessageRequest{
		Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("calc 2+2")),
	})
	if err != nil {
		fmt.Println("send:", err)
		return
	}
	task := res.(*a2a.Task)
	fmt.Println(task.Status.State)
	for _, a := range task.Artifacts {
		for _, p := range a.Parts {
			fmt.Println(p.Text())
		}
	}
	// Output:
	// TASK_STATE_COMPLETED
	// 2+2 = 4
}
