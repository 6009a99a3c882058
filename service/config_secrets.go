package service

import (
	"strings"
)

// Redacted returns a copy of c whose Database.DSN is masked, fit for logs
// and `config show`.
func (c Config) Redacted() Config {
	c.Database.DSN = MaskDSN(c.Database.DSN)
	if c.Jobs.SigningKey != "" {
		c.Jobs.SigningKey = "xxxxx"
	}
	return c
}

// MaskDSN hides the passwords in a DSN: the password of a URL's user info
// (postgres://user:pass@host/db, sqlserver://user:pass@host?database=x become
// user:xxxxx@) and the value of password-like keys in key=value form
// (password=secret, Password=secret;, pwd=..., also in a URL's query)
// become xxxxx. Anything else, such as a file path, is left untouched. When
// in doubt it hides more rather than less.
func MaskDSN(dsn string) string {
	return maskKeyValuePasswords(maskURLPassword(dsn))
}

func maskURLPassword(s string) string {
	i := strings.Index(s, "://")
	if i <= 0 || !validScheme(s[:i]) {
		return s
	}
	start := i + len("://")
	rest := s[start:]
	authority := rest
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		authority = rest[:end]
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		colon := strings.IndexByte(authority[:at], ':')
		if colon < 0 {
			return s // a user name only
		}
		return s[:start+colon+1] + passwordMask + s[start+at:]
	}
	// No '@' in the authority proper. A later '@' after "user:..." means a
	// password holding an unescaped '/', '?' or '#'; hide up to that '@'
	// unless the ':' is clearly a port and the '@' is in the query.
	at := strings.LastIndexByte(rest, '@')
	colon := strings.IndexByte(authority, ':')
	if at < 0 || colon < 0 || strings.HasPrefix(authority, "[") {
		return s
	}
	if isPort(authority[colon+1:]) && strings.Contains(rest[len(authority):at], "?") {
		return s
	}
	return s[:start+colon+1] + passwordMask + s[start+at:]
}

func isPort(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// maskKeyValuePasswords hides the values of password-like keys in libpq
// (key=value key='quoted'), ADO (Key=Value;Key="quoted";Key={braced}) and
// URL query (key=value&key=value) forms.
func maskKeyValuePasswords(s string) string {
	var b strings.Builder
	copied := 0
	for pos := 0; pos < len(s); {
		eq := strings.IndexByte(s[pos:], '=')
		if eq < 0 {
			break
		}
		eq += pos
		pos = eq + 1
		keyEnd := eq
		for keyEnd > 0 && s[keyEnd-1] == ' ' {
			keyEnd--
		}
		keyStart := keyEnd
		for keyStart > 0 && isKeyChar(s[keyStart-1]) {
			keyStart--
		}
		if keyStart == keyEnd || (keyStart > 0 && !isPairSeparator(s[keyStart-1]) && s[keyStart-1] != '?') ||
			!isSecretKey(s[keyStart:keyEnd]) {
			continue
		}
		v := eq + 1
		for v < len(s) && s[v] == ' ' {
			v++
		}
		end := valueEnd(s, v)
		b.WriteString(s[copied:v])
		b.WriteString(passwordMask)
		copied, pos = end, end
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

func isKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

func isPairSeparator(c byte) bool {
	return c == ';' || c == '&' || c == ' ' || c == '\t' || c == '\r' || c == '\n'
}

func isSecretKey(key string) bool {
	k := strings.ToLower(key)
	return k == "pwd" || k == "pass" || k == "passwd" || strings.Contains(k, "password")
}

// valueEnd returns the end of the value starting at s[v]: a quoted value
// ends at its closing quote, an unquoted one at the separator before the
// next key=, else at the end of s.
func valueEnd(s string, v int) int {
	if v >= len(s) {
		return v
	}
	switch q := s[v]; q {
	case '\'', '"', '{':
		closing := q
		if q == '{' {
			closing = '}'
		}
		for j := v + 1; j < len(s); j++ {
			switch {
			case s[j] == '\\' && q != '{':
				j++
			case s[j] == closing:
				if j+1 < len(s) && s[j+1] == closing { // doubled: escaped
					j++
					continue
				}
				return j + 1
			}
		}
		return len(s) // unterminated: hide the rest
	}
	for j := v; j < len(s); j++ {
		if isPairSeparator(s[j]) && nextIsPair(s, j) {
			return j
		}
	}
	return len(s)
}

// nextIsPair reports whether the separator at s[j] ends a value: what
// follows is another key= (or nothing but separators).
func nextIsPair(s string, j int) bool {
	spacesInKey := s[j] == ';' // ADO keys may hold spaces: "User ID=sa"
	for j < len(s) && isPairSeparator(s[j]) {
		j++
	}
	if j == len(s) {
		return true
	}
	k := j
	for k < len(s) && (isKeyChar(s[k]) || spacesInKey && s[k] == ' ') {
		k++
	}
	if k == j {
		return false
	}
	for k < len(s) && s[k] == ' ' {
		k++
	}
	return k < len(s) && s[k] == '='
}

// IsSecret reports whether key holds a secret (the DSN, which may carry a
// password, and the signing key): its value is shown only masked.
func IsSecret(key string) bool {
	return key == dsnKey || key == "jobs.signing_key"
}
