package completion

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

func (a *app) newCompletionCmd() *cobra.Command {
	var noDesc bool
	cmd := &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print a shell completion script",
		Long: `Print the completion script of a shell: TAB then completes commands,
flags, function names, VM and snapshot ids and strategies (asking the
daemon at --url or $THAW_URL, within 2 seconds).

bash: the script works in a plain bash; with the bash-completion package
installed it uses that package's word splitting and file completion.
  source <(thaw completion bash)                          # this shell
  thaw completion bash > /etc/bash_completion.d/thaw      # every shell (the package installs it)
zsh: thaw completion zsh > "${fpath[1]}/_thaw" (compinit must be on)
fish: thaw completion fish > ~/.config/fish/completions/thaw.fish`,
		Args:      cli.ExactArgs("SHELL"),
		ValidArgs: []cobra.Completion{"bash", "zsh", "fish", "powershell"},
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return writeBashCompletion(root, a.Stdout, !noDesc)
			case "zsh":
				if noDesc {
					return root.GenZshCompletionNoDesc(a.Stdout)
				}
				return root.GenZshCompletion(a.Stdout)
			case "fish":
				return root.GenFishCompletion(a.Stdout, !noDesc)
			case "powershell":
				if noDesc {
					return root.GenPowerShellCompletion(a.Stdout)
				}
				return root.GenPowerShellCompletionWithDesc(a.Stdout)
			}
			return cli.Usagef("no completion for shell %q: use bash, zsh, fish or powershell", args[0])
		},
	}
	cmd.Flags().BoolVar(&noDesc, "no-descriptions", false, "candidates without their descriptions")
	return cmd
}

// writeBashCompletion writes cobra's bash completion (V2) for root, made
// to work in a plain bash too: cobra's script calls two functions of the
// bash-completion package, _get_comp_words_by_ref and _filedir, which a
// bash without that package lacks ("command not found" on every TAB). The
// script calls stand-ins instead, which use the package's functions when
// they are there.
func writeBashCompletion(root *cobra.Command, w io.Writer, desc bool) error {
	var b bytes.Buffer
	if err := root.GenBashCompletionV2(&b, desc); err != nil {
		return err
	}
	script := b.String()
	name := root.Name()
	words := `_get_comp_words_by_ref "$@" cur prev words cword`
	if !strings.Contains(script, words) || !strings.Contains(script, "_filedir") {
		return fmt.Errorf("bash completion: cobra's script has changed; the plain-bash stand-ins no longer fit it")
	}
	script = strings.Replace(script, words, "__"+name+`_get_comp_words "$@"`, 1)
	script = filedirCall.ReplaceAllString(script, "${1}__"+name+"_filedir")
	header, rest, _ := strings.Cut(script, "\n")
	_, err := fmt.Fprintf(w, "%s\n%s%s", header, strings.ReplaceAll(plainBash, "__NAME", "__"+name), rest)
	return err
}

// filedirCall matches a call of bash-completion's _filedir (not a longer
// name that ends in it).
var filedirCall = regexp.MustCompile(`(^|[^A-Za-z0-9_])_filedir\b`)

// plainBash are the stand-ins for bash-completion's functions.
const plainBash = `
# Without the bash-completion package (a plain bash) these stand in for its
# _get_comp_words_by_ref and _filedir; with it they call them.
__NAME_get_comp_words()
{
    if declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
        _get_comp_words_by_ref "$@" cur prev words cword
        return
    fi
    # The line up to the cursor, split at blanks only: '=' and ':' stay in
    # their words, as -n =: asks.
    local line=${COMP_LINE:0:COMP_POINT}
    read -r -a words <<<"$line"
    if [[ ${#words[@]} -eq 0 || $line =~ [[:blank:]]$ ]]; then
        words+=("")
    fi
    cword=$((${#words[@]} - 1))
    cur=${words[cword]}
    prev=""
    if ((cword > 0)); then
        prev=${words[cword-1]}
    fi
}

__NAME_filedir()
{
    if declare -F _filedir >/dev/null 2>&1; then
        _filedir "$@"
        return
    fi
    local IFS=$'\n' ext=${1-} extglob
    if [[ $ext == -d ]]; then
        COMPREPLY+=($(compgen -d -- "$cur"))
    elif [[ -n $ext ]]; then
        extglob=$(shopt -p extglob)
        shopt -s extglob
        COMPREPLY+=($(compgen -d -- "$cur") $(compgen -f -X "!*.@(${ext%|})" -- "$cur"))
        eval "$extglob"
    else
        COMPREPLY+=($(compgen -f -- "$cur"))
    fi
    compopt -o filenames 2>/dev/null
}
`
