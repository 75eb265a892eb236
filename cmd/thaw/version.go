package main

import (
	"fmt"

	"github.com/spf13/cobra"

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
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(a.stdout, "thaw ", buildinfo.String())
			info, err := a.c.Info(a.ctx)
			if err != nil {
				fmt.Fprintf(a.stdout, "thawd at %s: not reachable (%s)\n", a.url, termtext.Line(err.Error()))
				return nil
			}
			fmt.Fprintf(a.stdout, "thawd %s at %s, API %s\n", info.Version, a.url, info.APIVersion)
			return nil
		},
	}
}
