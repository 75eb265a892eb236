package api

import (
	"errors"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// TestReadDirectoryRequests: the JSON forms of create and deploy need a
// directory, and both map their settings and network onto the spec.
func TestReadDirectoryRequests(t *testing.T) {
	create := func(body string) (daemon.FunctionSpec, error) {
		return readCreateFunction(httptest.NewRecorder(), localRequest("POST", "/v1/functions", "application/json", body))
	}
	deploy := func(body string) (daemon.FunctionSpec, error) {
		r := localRequest("POST", "/v1/functions/hello/deploy", "application/json", body)
		r.SetPathValue("name", "hello")
		spec, err := readDeploy(httptest.NewRecorder(), r)
		return spec.FunctionSpec, err
	}
	settings := `"directory":"/srv/hello","memory_mib":256,"vcpus":2,"max_concurrency":3,"keep_alive_s":-1,` +
		`"vmm_pool":4,"vmm_pool_ttl_s":30,"env":{"A":"1"},"secrets":{"DB":"db"}`
	want := daemon.FunctionSpec{Name: "hello", Directory: "/srv/hello", MemoryMiB: 256, VCPUs: 2, MaxConcurrency: 3,
		KeepAliveS: -1, VMMPool: 4, VMMPoolTTLS: 30, Env: map[string]string{"A": "1"}, Secrets: map[string]string{"DB": "db"}}
	for _, c := range []struct {
		name, body string // body: the JSON object's start
		read       func(string) (daemon.FunctionSpec, error)
	}{{"create", `{"name":"hello",`, create}, {"deploy", `{`, deploy}} {
		name, body, read := c.name, c.body, c.read
		if _, err := read(body + `"memory_mib":256}`); !errors.Is(err, daemon.ErrInvalid) || !strings.Contains(err.Error(), "directory is required") {
			t.Errorf("%s without a directory: %v", name, err)
		}
		got, err := read(body + settings + `}`)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, %v; want %+v", name, got, err, want)
		}
		got, err = read(body + settings + `,"network":{"egress":"services","services":["db:5432"]}}`)
		wantNet := vmnet.Policy{Egress: vmnet.EgressServices, Services: []string{"db:5432"}}
		if err != nil || !reflect.DeepEqual(got.Network, wantNet) {
			t.Errorf("%s with a network: %+v, %v; want %+v", name, got.Network, err, wantNet)
		}
	}
}
