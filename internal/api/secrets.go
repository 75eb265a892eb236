package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/fnconfig"
	"github.com/thaw-dev/thaw/wire"
)

// maxSecretBody bounds PUT /v1/secrets/{name}: a value of the most the
// store takes, escaped as JSON.
const maxSecretBody = 512 << 10

// secretRoutes are the secret store's routes.
func (h *Handler) secretRoutes() []route {
	return []route{
		{"GET", "/v1/secrets", list(h, func(ctx context.Context, _ *http.Request) ([]daemon.SecretInfo, error) {
			return h.svc.ListSecrets(ctx)
		}, func(s daemon.SecretInfo) string { return s.Name }, daemon.SecretBody)},
		{"GET", "/v1/secrets/{name}", one(h, "name", http.StatusOK, h.svc.GetSecret, daemon.SecretBody)},
		{"PUT", "/v1/secrets/{name}", readThen(h, readSetSecret, h.setSecret)},
		{"DELETE", "/v1/secrets/{name}", done(h, "name", h.svc.DeleteSecret)},
	}
}

// readSetSecret decodes PUT /v1/secrets/{name}. A body that does not
// decode is refused without the decoder's words, which could quote the
// value.
func readSetSecret(w http.ResponseWriter, r *http.Request) (wire.SetSecretRequest, error) {
	var req wire.SetSecretRequest
	if err := decode(w, r, maxSecretBody, &req); err != nil {
		if strings.Contains(err.Error(), "malformed JSON") {
			err = fmt.Errorf("%w: the body is not a JSON object {\"value\": \"...\"} (the decoder's message is withheld: it could quote the value)", daemon.ErrInvalid)
		}
		return req, err
	}
	return req, nil
}

// setSecret serves PUT /v1/secrets/{name} (a new secret has version 1).
func (h *Handler) setSecret(w http.ResponseWriter, r *http.Request, req wire.SetSecretRequest) {
	info, _, err := h.svc.SetSecret(r.Context(), r.PathValue("name"), []byte(req.Value))
	replyAs(h, w, r, http.StatusOK, info, err, daemon.SecretBody)
}

// readConfigParams reads a function's environment (env=NAME=VALUE) and
// secret references (secret=ENV=SECRET), repeatable, from the query of
// an archive upload.
func readConfigParams(q url.Values) (env, refs map[string]string, err error) {
	if env, err = assignments(q["env"], "env"); err == nil {
		refs, err = assignments(q["secret"], "secret")
	}
	return env, refs, err
}

// assignments parses NAME=VALUE items; a name given twice is an error.
func assignments(items []string, what string) (map[string]string, error) {
	m, err := fnconfig.Assignments(items)
	var ae *fnconfig.AssignmentError
	switch {
	case errors.As(err, &ae) && ae.Twice:
		return nil, fmt.Errorf("%w: %s %s is given twice", daemon.ErrInvalid, what, ae.Item)
	case errors.As(err, &ae):
		return nil, fmt.Errorf("%w: %s %.80q: want NAME=VALUE", daemon.ErrInvalid, what, ae.Item)
	}
	return m, err
}
