package wire

import (
	"encoding/json"
	"testing"
	"time"
)

// An AsyncConfig is one flat JSON object, its settings between the
// function and the update time, as the API has always answered it.
func TestAsyncConfigJSON(t *testing.T) {
	two := 2
	c := AsyncConfig{Function: "web", AsyncConfigRequest: AsyncConfigRequest{MaxRetries: &two, MaxEventAgeS: 60, BackoffMS: 500,
		Concurrency: 4, OnSuccess: "dlq", OnFailure: "https://hook.example/fail"}, UpdatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"function":"web","max_retries":2,"max_event_age_s":60,"backoff_ms":500,"concurrency":4,` +
		`"on_success":"dlq","on_failure":"https://hook.example/fail","updated_at":"2026-01-02T03:04:05Z"}`
	if string(b) != want {
		t.Fatalf("json %s\nwant %s", b, want)
	}
	var back AsyncConfig
	if err := json.Unmarshal(b, &back); err != nil || back.Concurrency != 4 || *back.MaxRetries != 2 || back.Function != "web" {
		t.Fatalf("decoded %+v (%v)", back, err)
	}
}
