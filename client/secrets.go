package client

import (
	"context"
	"net/url"

	"github.com/thaw-dev/thaw/wire"
)

// Secret is what the API shows of a secret: never its value.
type Secret = wire.Secret

// SetSecret sets a secret's value (a new secret, or its next version).
// The value is sent once and never comes back.
func (c *Client) SetSecret(ctx context.Context, name string, value []byte) (*Secret, error) {
	return call[Secret](ctx, c, "PUT", "/v1/secrets/"+url.PathEscape(name), wire.SetSecretRequest{Value: string(value)})
}

// GetSecret gets a secret's version and digest.
func (c *Client) GetSecret(ctx context.Context, name string) (*Secret, error) {
	return call[Secret](ctx, c, "GET", "/v1/secrets/"+url.PathEscape(name), nil)
}

// ListSecrets lists every secret, by name.
func (c *Client) ListSecrets(ctx context.Context) ([]Secret, error) {
	return all[Secret](ctx, c, "/v1/secrets", url.Values{}, 0)
}

// DeleteSecret deletes a secret no function references.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.doJSON(ctx, "DELETE", "/v1/secrets/"+url.PathEscape(name), nil, nil)
}

// WithEnv sets the function's environment (set at boot, before its
// handler is imported; part of its snapshots).
func WithEnv(env map[string]string) FunctionOption {
	return func(o *functionOptions) { o.env = env }
}

// WithSecrets sets the function's secret references: environment variable
// name -> secret name, set in VMs restored from a snapshot only.
func WithSecrets(refs map[string]string) FunctionOption {
	return func(o *functionOptions) { o.secrets = refs }
}

// configQuery adds the function's environment and secret references to
// an archive upload's query.
func (o *functionOptions) configQuery(q url.Values) {
	for k, v := range o.env {
		q.Add("env", k+"="+v)
	}
	for k, v := range o.secrets {
		q.Add("secret", k+"="+v)
	}
}
