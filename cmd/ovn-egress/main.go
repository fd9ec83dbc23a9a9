// Command ovn-egress implements the EgressService API (k8s.ovn.org/v1) for
// Kubernetes clusters whose network is OVN. This package only wires the CLI:
// flags become Config structs, logging is set up, and a signal context is
// handed to the component a subcommand runs. Each subcommand lives in the
// file named after it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/urfave/cli/v2"
)

// version and commit are stamped by the Makefile and the image builds
// (-X main.version=... -X main.commit=...).
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newApp().RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "ovn-egress:", err)
		os.Exit(exitCode(err))
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:    "ovn-egress",
		Usage:   "EgressService (k8s.ovn.org/v1) for Kubernetes clusters on OVN",
		Version: version,
		Commands: []*cli.Command{
			masterCommand(),
			nodeCommand(),
			translateCommand(),
			verifyCommand(),
			migrateCommand(),
			versionCommand(),
		},
		HideHelpCommand: true,
		// main prints the error and exits with its code; the library must
		// not call os.Exit itself (tests run the app in-process).
		ExitErrHandler: func(*cli.Context, error) {},
	}
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Action: func(c *cli.Context) error {
			fmt.Fprintf(c.App.Writer, "ovn-egress %s (commit %s, %s, %s/%s)\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// exitCode maps an error to the process exit code: a cli.ExitCoder keeps its
// own, anything else is 1.
func exitCode(err error) int {
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}
