// Package cli is the looopy command line: the server (the default, or
// "looopy serve") and the subcommands beside it ("looopy chat", ...). Each
// command is one entry of the table in commands.go and one file here that
// parses its own flags and returns an exit code; cmd/host only calls Main.
//
// cli is the one package that may import every command's package (host,
// host/chat, ...); no package imports cli.
package cli
