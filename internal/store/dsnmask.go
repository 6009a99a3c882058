package store

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// passwordMask replaces a password in MaskDSN and in scrubbed errors.
const passwordMask = "xxxxx"

// MaskDSN hides the passwords in a DSN: the password of a URL's user info
// (postgres://user:pass@host/db, sqlserver://user:pass@host?database=x become
// user:xxxxx@) and the value of password-like keys in key=value form
// (password=secret, Password=secret;, pwd=..., also in a URL's query)
// become xxxxx. Anything else, such as a file path, is left untouched. When
// in doubt it hides more rather than less: a password holding an unescaped
// '@', '/', '?' or '#' is hidden whole, up to the last '@'.
func MaskDSN(dsn string) string {
	spans := secretSpans(dsn)
	if len(spans) == 0 {
		return dsn
	}
	var b strings.Builder
	copied := 0
	for _, sp := range spans {
		b.WriteString(dsn[copied:sp[0]])
		b.WriteString(passwordMask)
		copied = sp[1]
	}
	b.WriteString(dsn[copied:])
	return b.String()
}

// dsnSecrets returns every form in which a driver's error may quote the
// DSN's passwords: each as written, percent-decoded and unquoted, and its
// pieces between URL delimiters (a driver that misparses a password holding
// '@' or '/' quotes a piece of it as a host or a port). Longest first, so
// that replacing them in order leaves no tail behind.
func dsnSecrets(dsn string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, sp := range secretSpans(dsn) {
		raw := dsn[sp[0]:sp[1]]
		forms := []string{raw, strings.Trim(raw, `'"{}`)}
		if dec, err := url.PathUnescape(raw); err == nil {
			forms = append(forms, dec)
		}
		if dec, err := url.QueryUnescape(raw); err == nil {
			forms = append(forms, dec)
		}
		for _, f := range forms {
			add(f)
			for _, piece := range strings.FieldsFunc(f, func(r rune) bool { return strings.ContainsRune("@/?#:;&= \t'\"{}\\", r) }) {
				if len(piece) >= 3 { // shorter pieces would mangle the message and tell little
					add(piece)
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// secretSpans returns the sorted, non-overlapping [start, end) byte ranges
// of dsn that hold a password.
func secretSpans(dsn string) [][2]int {
	var spans [][2]int
	if sp, ok := urlPasswordSpan(dsn); ok {
		spans = append(spans, sp)
	} else if sp, ok := mysqlPasswordSpan(dsn); ok {
		spans = append(spans, sp)
	}
	for _, sp := range keyValuePasswordSpans(dsn) {
		if len(spans) > 0 && sp[0] < spans[0][1] && sp[1] > spans[0][0] {
			continue // inside the URL's password already hidden
		}
		spans = append(spans, sp)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	return spans
}

// urlPasswordSpan finds the password of a URL's user info.
func urlPasswordSpan(s string) ([2]int, bool) {
	i := strings.Index(s, "://")
	if i <= 0 || !validScheme(s[:i]) {
		return [2]int{}, false
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
			return [2]int{}, false // a user name only
		}
		return [2]int{start + colon + 1, start + at}, true
	}
	// No '@' in the authority proper. A later '@' after "user:..." means a
	// password holding an unescaped '/', '?' or '#'; hide up to that '@'
	// unless the ':' is clearly a port and the '@' sits in a query value
	// (host:5432/db?application_name=a@b).
	at := strings.LastIndexByte(rest, '@')
	colon := strings.IndexByte(authority, ':')
	if at < 0 || colon < 0 || strings.HasPrefix(authority, "[") {
		return [2]int{}, false
	}
	if between := rest[len(authority):at]; isPort(authority[colon+1:]) {
		if q := strings.IndexByte(between, '?'); q >= 0 && strings.Contains(between[q:], "=") {
			return [2]int{}, false
		}
	}
	return [2]int{start + colon + 1, start + at}, true
}

// mysqlPasswordSpan finds the password of a go-sql-driver/mysql DSN,
// user:password@protocol(address)/database?params, as that driver reads
// it: the user info ends at the last '@' before the last '/', and the
// password is what follows its first ':' (a user name holds no '/', a
// path does). The part between the '@' and the
// '/' must read as a protocol and an address (or nothing), so that a path
// or another form is not taken for one.
func mysqlPasswordSpan(s string) ([2]int, bool) {
	slash := strings.LastIndexByte(s, '/')
	if slash < 0 || strings.Contains(s, "://") {
		return [2]int{}, false
	}
	at := strings.LastIndexByte(s[:slash], '@')
	if at < 0 || !mysqlAddress.MatchString(s[at+1:slash]) {
		return [2]int{}, false
	}
	colon := strings.IndexByte(s[:at], ':')
	if colon < 0 || strings.ContainsRune(s[:colon], '/') {
		return [2]int{}, false // a user name only, or a path
	}
	return [2]int{colon + 1, at}, true
}

// mysqlAddress is the protocol(address) part of a MySQL DSN, or nothing.
var mysqlAddress = regexp.MustCompile(`^([a-z0-9]+(\([^()]*\))?)?$`)

// validScheme reports whether s is a URL scheme (RFC 3986).
func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if i == 0 && !letter || !(letter || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return s != ""
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

// keyValuePasswordSpans finds the values of password-like keys in libpq
// (key=value key='quoted'), ADO (Key=Value;Key="quoted";Key={braced}) and
// URL query (key=value&key=value) forms.
func keyValuePasswordSpans(s string) [][2]int {
	var spans [][2]int
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
		spans = append(spans, [2]int{v, end})
		pos = end
	}
	return spans
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

// DSNScheme returns the lower-case URL scheme of dsn ("postgres" for
// "postgres://..."), or "" when dsn is not in URL form.
func DSNScheme(dsn string) string {
	i := strings.Index(dsn, "://")
	if i <= 0 || !validScheme(dsn[:i]) {
		return ""
	}
	return strings.ToLower(dsn[:i])
}
