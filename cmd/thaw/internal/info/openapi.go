package info

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

func (a *app) newOpenAPICmd() *cobra.Command {
	return &cobra.Command{
		Use:   "openapi",
		Short: "Print the daemon's OpenAPI document",
		Long: `Print the daemon's OpenAPI document, which describes its REST API under
/v1. It is indented for reading; with -o json (--json) it is printed as
the daemon sends it, with -o yaml as YAML.`,
		Example: `  thaw openapi > openapi.json`,
		Args:    cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := a.C.OpenAPI(a.Ctx)
			if err != nil {
				return err
			}
			doc = bytes.TrimSpace(doc)
			if a.Format == cli.FormatYAML {
				return a.PrintDocument(doc)
			}
			if !a.JSON {
				var buf bytes.Buffer
				if err := json.Indent(&buf, doc, "", "  "); err == nil {
					doc = buf.Bytes()
				}
			}
			_, err = fmt.Fprintf(a.Stdout, "%s\n", doc)
			return err
		},
	}
}
