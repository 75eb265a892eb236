package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/errdefs"
)

// memSecrets is a secret store in a map: one family served without a daemon.
type memSecrets map[string]daemon.SecretInfo

func (m memSecrets) ListSecrets(context.Context) ([]daemon.SecretInfo, error) {
	var out []daemon.SecretInfo
	for _, s := range m {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (m memSecrets) GetSecret(_ context.Context, name string) (daemon.SecretInfo, error) {
	s, ok := m[name]
	if !ok {
		return s, fmt.Errorf("secret %q: %w", name, errdefs.ErrNotFound)
	}
	return s, nil
}

func (m memSecrets) SetSecret(_ context.Context, name string, _ []byte) (daemon.SecretInfo, bool, error) {
	s, ok := m[name]
	s.Name, s.Version, s.UpdatedAt = name, s.Version+1, time.Now()
	m[name] = s
	return s, !ok, nil
}

func (m memSecrets) DeleteSecret(_ context.Context, name string) error {
	if _, ok := m[name]; !ok {
		return fmt.Errorf("secret %q: %w", name, errdefs.ErrNotFound)
	}
	delete(m, name)
	return nil
}

// A handler over one family serves that family's routes from it, maps its
// errors like the daemon's, and does not serve the others' routes.
func TestOneFamilyServed(t *testing.T) {
	sec := memSecrets{}
	h := NewServices(Services{Secrets: sec}, discard, Options{Token: testToken})

	if w := serveOne(h, localRequest("PUT", "/v1/secrets/db-password", "application/json", `{"value":"hunter2"}`)); w.Code != http.StatusOK {
		t.Fatalf("PUT secret: %d %s", w.Code, w.Body)
	}
	w := serveOne(h, localRequest("GET", "/v1/secrets", "", ""))
	var page struct {
		Items []struct {
			Name    string `json:"name"`
			Version int    `json:"version"`
		} `json:"items"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil || w.Code != http.StatusOK {
		t.Fatalf("GET secrets: %d %s (%v)", w.Code, w.Body, err)
	}
	if len(page.Items) != 1 || page.Items[0].Name != "db-password" || page.Items[0].Version != 1 {
		t.Errorf("secrets listed %+v, want db-password version 1", page.Items)
	}
	if w := serveOne(h, localRequest("DELETE", "/v1/secrets/nothing", "", "")); w.Code != http.StatusNotFound {
		t.Errorf("DELETE a missing secret: %d %s, want 404", w.Code, w.Body)
	}
	for _, path := range []string{"/v1/functions", "/v1/vms", "/v1/snapshots", "/v1/operations", "/v1/info"} {
		if w := serveOne(h, localRequest("GET", path, "", "")); w.Code != http.StatusNotFound {
			t.Errorf("GET %s without its family: %d, want 404", path, w.Code)
		}
	}
	if w := serveOne(h, localRequest("GET", "/v1/health", "", "")); w.Code != http.StatusOK {
		t.Errorf("GET /v1/health: %d %s", w.Code, w.Body)
	}
}
