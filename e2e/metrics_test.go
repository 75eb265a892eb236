package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/tcptest"
)

// A real Prometheus (Debian's), started here, scrapes a real thawd over
// TCP with the API token: the restore histogram counts the cold
// invocations just made, and the VM gauge sees the booted VM.
func TestPrometheusScrapesThawd(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not installed (scripts/install-deps.sh installs Debian's package)")
	}
	f, c := bootedFixture(t)
	ctx := ctxT(t)
	dir, addr := startPrometheus(t, prom, f.e)

	query := func(q string) (float64, bool) { return promQuery(addr, q) }
	waitFor := func(what, q string, ok func(float64) bool) float64 {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if v, found := query(q); found && ok(v) {
				return v
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
				v, found := query(q)
				t.Fatalf("%s: %s = %v (found %v) after 30 s; prometheus log:\n%s", what, q, v, found, b)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	// Scraped, authenticated: up is 1.
	waitFor("thawd scraped", `up{job="thawd"}`, func(v float64) bool { return v == 1 })
	count := `sum(thaw_restore_setup_seconds_count{strategy="vanilla",mode="cold"}) or vector(0)`
	before := waitFor("restore count read", count, func(float64) bool { return true })
	for range 2 {
		if inv, err := c.InvokeSnapshot(ctx, f.snap.ID, ev(`{}`), client.InvokeOptions{Strategy: "vanilla"}); err != nil || !inv.OK {
			t.Fatalf("cold invoke: %v %+v", err, inv)
		}
	}
	after := waitFor("restores counted", count, func(v float64) bool { return v >= before+2 })
	if after != before+2 {
		t.Errorf("restore histogram counts %v cold vanilla restores, want %v", after, before+2)
	}
	waitFor("booted VM seen", `thaw_vms{state="running"}`, func(v float64) bool { return v >= 1 })
	waitFor("API requests counted", `sum(thaw_api_requests_total{route="POST /v1/snapshots/{id}/invoke",status="200"})`,
		func(v float64) bool { return v >= 2 })
	t.Logf("prometheus counted %v cold vanilla restores (%v before this test)", after, before)
	// premap of a snapshot not in the memory store falls back, by reason.
	if inv, err := c.InvokeSnapshot(ctx, f.snap.ID, ev(`{}`), client.InvokeOptions{Strategy: "premap"}); err != nil || !inv.OK || inv.Strategy != "vanilla" {
		t.Fatalf("premap of an unstored snapshot: %v %+v", err, inv)
	}
	waitFor("fallback counted", `thaw_strategy_fallbacks_total{strategy="premap",reason="not_stored"}`, func(v float64) bool { return v >= 1 })
	checkDashboard(t, addr)
}

// startPrometheus writes a configuration scraping e over TCP with its API
// token, starts prometheus with it (killed at the end of the test), and
// returns its directory (holding prometheus.log) and address.
func startPrometheus(t *testing.T, prom string, e *env) (string, string) {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(e.token), 0o600); err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(e.srv.URL, "http://")
	config := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: thawd
    authorization: {credentials_file: %q}
    static_configs: [{targets: [%q]}]
`, tokenFile, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := tcptest.FreeAddr(t)
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	log, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return dir, addr
}

// promQuery asks the Prometheus at addr for q's first value.
func promQuery(addr, q string) (float64, bool) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&r) != nil || len(r.Data.Result) == 0 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// checkDashboard: every query of deploy/grafana-dashboard.json is valid
// PromQL to this Prometheus and names only series thawd exports.
func checkDashboard(t *testing.T, prom string) {
	t.Helper()
	b, err := os.ReadFile(repoPath("deploy/grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`\bthaw_[a-z_]+`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			q := strings.ReplaceAll(tg.Expr, "$__rate_interval", "1m")
			resp, err := http.Get("http://" + prom + "/api/v1/query?query=" + url.QueryEscape(q))
			if err != nil {
				t.Fatal(err)
			}
			var r struct{ Status, Error string }
			_ = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if r.Status != "success" {
				t.Errorf("dashboard %q: %s: %s", p.Title, tg.Expr, r.Error)
			}
			for _, n := range names.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")
				resp, err := http.Get("http://" + prom + "/api/v1/series?match[]=" + url.QueryEscape("{__name__=~\""+base+".*\"}"))
				if err != nil {
					t.Fatal(err)
				}
				var sr struct{ Data []map[string]string }
				_ = json.NewDecoder(resp.Body).Decode(&sr)
				resp.Body.Close()
				if len(sr.Data) == 0 {
					t.Errorf("dashboard %q uses %s, which thawd does not export", p.Title, n)
				}
			}
		}
	}
}
