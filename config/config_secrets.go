package config

import "github.com/slotpoller/slotpoller/internal/store"

// Redacted returns a copy of c whose Database.DSN is masked, fit for logs
// and `config show`.
func (c Config) Redacted() Config {
	c.Database.DSN = MaskDSN(c.Database.DSN)
	if c.Jobs.SigningKey != "" {
		c.Jobs.SigningKey = "xxxxx"
	}
	if c.Admin.Token != "" {
		c.Admin.Token = "xxxxx"
	}
	return c
}

// MaskDSN hides the passwords in a DSN (see store.MaskDSN, which the
// store's errors use too).
func MaskDSN(dsn string) string {
	return store.MaskDSN(dsn)
}

// IsSecret reports whether key holds a secret (the DSN, which may carry a
// password, the signing key and the admin token): its value is shown only
// masked.
func IsSecret(key string) bool {
	return key == dsnKey || key == "jobs.signing_key" || key == "admin.token"
}
