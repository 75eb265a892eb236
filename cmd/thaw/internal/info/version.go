package info

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/internal/buildinfo"
	"github.com/thaw-dev/thaw/internal/termtext"
)

func (a *app) newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show the versions of thaw and of the daemon",
		Long: `Show this thaw's version (taken from the build: git describe with make
build) and, if the daemon answers, thawd's version and the API version it
serves. An unreachable daemon is reported, not an error.`,
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(a.Stdout, "thaw ", buildinfo.String())
			info, err := a.C.Info(a.Ctx)
			if err != nil {
				fmt.Fprintf(a.Stdout, "thawd at %s: not reachable (%s)\n", a.URL, termtext.Line(err.Error()))
				return nil
			}
			fmt.Fprintf(a.Stdout, "thawd %s at %s, API %s\n", info.Version, a.URL, info.APIVersion)
			return nil
		},
	}
}
