package registry

import (
	"net/http"
	"testing"
)

// WrapTransport makes every Store opened during t send its requests
// through wrap(transport).
func WrapTransport(t testing.TB, wrap func(http.RoundTripper) http.RoundTripper) {
	old := wrapTransport
	wrapTransport = wrap
	t.Cleanup(func() { wrapTransport = old })
}
