package deps

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
)

// maxIndexPage bounds one page read from an index (PyPI's largest
// projects list a few MB).
const maxIndexPage = 32 << 20

// projectFiles lists the distribution files of project name on the index
// and in the find-links locations; found is false when none of them knows
// the project.
func (r *Resolver) projectFiles(ctx context.Context, name string) (files []string, found bool, err error) {
	if r.indexURL() != NoIndex {
		u := strings.TrimSuffix(r.indexURL(), "/") + "/" + url.PathEscape(name) + "/"
		fs, ok, err := r.readPage(ctx, u, "")
		if err != nil {
			return nil, false, err
		}
		files, found = append(files, fs...), found || ok
	}
	for _, loc := range r.FindLinks {
		var fs []string
		var err error
		if dir, ok := localDir(loc); ok {
			fs, err = dirFiles(dir, name)
		} else {
			fs, _, err = r.readPage(ctx, loc, name)
		}
		if err != nil {
			return nil, false, err
		}
		files, found = append(files, fs...), found || len(fs) > 0
	}
	return files, found, nil
}

// localDir is the directory a find-links location names, if it is one.
func localDir(loc string) (string, bool) {
	if u, err := url.Parse(loc); err == nil && u.Scheme == "file" {
		return u.Path, true
	}
	if strings.Contains(loc, "://") {
		return "", false
	}
	return loc, true
}

// dirFiles lists the distribution files of project name in dir.
func dirFiles(dir, name string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("find-links %s: %w", dir, err)
	}
	var out []string
	for _, e := range ents {
		if _, ok := fileVersion(e.Name(), name); ok {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// readPage reads a simple-index page (PEP 691 JSON if the server offers
// it, else PEP 503 HTML) or a find-links page and returns the file names
// it links to, those of project only when project is set. A 404 is a
// project the index does not know (ok false).
func (r *Resolver) readPage(ctx context.Context, u, project string) (files []string, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", u, err)
	}
	req.Header.Set("Accept", "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("%s did not answer: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, false, fmt.Errorf("%s answered %s", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxIndexPage))
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", u, err)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/vnd.pypi.simple.v1+json" {
		files, err = parseSimpleJSON(body)
	} else {
		files = parseSimpleHTML(body)
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", u, err)
	}
	if project != "" {
		var mine []string
		for _, f := range files {
			if _, ok := fileVersion(f, project); ok {
				mine = append(mine, f)
			}
		}
		files = mine
	}
	return files, true, nil
}

// parseSimpleJSON reads a PEP 691 project page.
func parseSimpleJSON(body []byte) ([]string, error) {
	var page struct {
		Files []struct {
			Filename string `json:"filename"`
		} `json:"files"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, fmt.Errorf("malformed PEP 691 page: %w", err)
	}
	out := make([]string, 0, len(page.Files))
	for _, f := range page.Files {
		out = append(out, f.Filename)
	}
	return out, nil
}

var anchorRE = regexp.MustCompile(`(?is)<a\s[^>]*href\s*=\s*["']([^"']*)["'][^>]*>`)

// parseSimpleHTML reads a PEP 503 page: the file name is the last path
// segment of each link.
func parseSimpleHTML(body []byte) []string {
	var out []string
	for _, m := range anchorRE.FindAllSubmatch(body, -1) {
		href := html.UnescapeString(string(m[1]))
		if i := strings.IndexAny(href, "#?"); i >= 0 {
			href = href[:i]
		}
		name := path.Base(href)
		if un, err := url.PathUnescape(name); err == nil {
			name = un
		}
		if name != "" && name != "." && name != "/" {
			out = append(out, name)
		}
	}
	return out
}
