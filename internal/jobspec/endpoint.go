package jobspec

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// neutralBase is the base ValidateEndpoint resolves against.
var neutralBase = &url.URL{Scheme: "http", Host: "localhost"}

// ResolveEndpoint joins an endpoint path to the node's base URL (e.g.
// http://localhost or http://localhost:8080/app). The result keeps the base's
// path prefix: base http://h/app and endpoint /jobs/x give http://h/app/jobs/x.
// A query string in the endpoint is kept as written, except that bytes not
// allowed in a URL query (space, backslash, non-ASCII...) are percent-encoded.
//
// It refuses, with an error saying why, anything that could send the node
// elsewhere or is ambiguous: empty endpoints, endpoints not starting with "/",
// absolute URLs (any scheme), scheme-relative "//host/x", control characters,
// backslashes in the path, fragments, invalid percent-encoding, and paths with
// "." or ".." segments, also when percent-encoded (%2e%2e, %2F.., even
// double-encoded).
func ResolveEndpoint(base *url.URL, endpoint string) (*url.URL, error) {
	if base == nil {
		return nil, errors.New("no base URL to resolve the endpoint against")
	}
	if base.Scheme != "http" && base.Scheme != "https" {
		return nil, fmt.Errorf("base URL %q: scheme must be http or https", base.Redacted())
	}
	if base.Host == "" || base.Opaque != "" {
		return nil, fmt.Errorf("base URL %q has no host", base.Redacted())
	}
	if err := checkEndpoint(endpoint); err != nil {
		return nil, err
	}
	ref, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	if ref.Scheme != "" || ref.Host != "" || ref.User != nil || ref.Opaque != "" {
		// checkEndpoint already refuses these; this is the last line of defence.
		return nil, fmt.Errorf("endpoint %q is not a path on the node's base URL", endpoint)
	}

	u := *base
	prefixPath := strings.TrimSuffix(base.Path, "/")
	prefixRaw := strings.TrimSuffix(base.EscapedPath(), "/")
	u.Path = prefixPath + ref.Path
	u.RawPath = prefixRaw + ref.EscapedPath()
	if u.RawPath == u.Path {
		u.RawPath = ""
	}
	switch query := escapeQuery(ref.RawQuery); {
	case base.RawQuery == "":
		u.RawQuery = query
	case query != "":
		u.RawQuery = base.RawQuery + "&" + query
	}
	u.ForceQuery = false
	u.Fragment, u.RawFragment = "", ""

	if u.Scheme != base.Scheme || u.Host != base.Host {
		return nil, fmt.Errorf("endpoint %q would leave the base URL %q", endpoint, base.Redacted())
	}
	return &u, nil
}

// ValidateEndpoint reports whether ResolveEndpoint would accept endpoint. It
// resolves against a neutral base, so enqueue can check endpoints on a
// machine other than the nodes.
func ValidateEndpoint(endpoint string) error {
	_, err := ResolveEndpoint(neutralBase, endpoint)
	return err
}

// checkEndpoint applies the textual rules of ResolveEndpoint.
func checkEndpoint(endpoint string) error {
	if endpoint == "" {
		return errors.New("endpoint is empty; it must be a path starting with /")
	}
	if i := indexControl(endpoint); i >= 0 {
		return fmt.Errorf("endpoint %q contains a control character at byte %d", endpoint, i)
	}
	path, _, _ := strings.Cut(endpoint, "?")
	if strings.Contains(path, `\`) {
		return fmt.Errorf("endpoint %q contains a backslash, which some servers treat as /", endpoint)
	}
	if strings.Contains(endpoint, "#") {
		return fmt.Errorf("endpoint %q contains a fragment (#), which is never sent to a server", endpoint)
	}
	if hasScheme(endpoint) {
		return fmt.Errorf("endpoint %q is an absolute URL; only a path on the node's own base URL is allowed", endpoint)
	}
	if strings.HasPrefix(endpoint, "//") {
		return fmt.Errorf("endpoint %q is a scheme-relative URL (//host); only a path on the node's own base URL is allowed", endpoint)
	}
	if !strings.HasPrefix(endpoint, "/") {
		return fmt.Errorf("endpoint %q must start with /", endpoint)
	}
	// Check the path as written and every percent-decoded form of it, so
	// that %2e%2e, %2f.. and double encodings cannot smuggle a dot segment.
	decoded := path
	for round := 0; round < 4; round++ {
		if round > 0 {
			next, err := url.PathUnescape(decoded)
			if err != nil {
				if round == 1 {
					return fmt.Errorf("endpoint %q has invalid percent-encoding: %v", endpoint, err)
				}
				break // a literal % after decoding: nothing more to decode
			}
			if next == decoded {
				break
			}
			decoded = next
			if indexControl(decoded) >= 0 {
				return fmt.Errorf("endpoint %q contains an encoded control character", endpoint)
			}
			if strings.Contains(decoded, `\`) {
				return fmt.Errorf("endpoint %q contains an encoded backslash", endpoint)
			}
			if strings.HasPrefix(decoded, "//") {
				return fmt.Errorf("endpoint %q starts with an encoded //", endpoint)
			}
		}
		for seg := range strings.SplitSeq(decoded, "/") {
			if isDotSegment(seg) {
				return fmt.Errorf("endpoint %q has a %q path segment (after percent-decoding); dot segments are not allowed", endpoint, seg)
			}
		}
	}
	return nil
}

// escapeQuery percent-encodes the bytes of a raw query that may not appear
// in a request line as they are (space, backslash, quotes, non-ASCII...),
// leaving existing escapes and everything else exactly as written.
func escapeQuery(q string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		c := q[i]
		if isQueryChar(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// isQueryChar reports whether c may appear unescaped in a URI query
// (RFC 3986: unreserved, sub-delims, ":", "@", "/", "?"), or is "%".
func isQueryChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/?%", c) >= 0
}

// hasScheme reports whether s starts with "scheme:" as in an absolute URL.
func hasScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.':
			if i == 0 {
				return false
			}
		case c == ':':
			return i > 0
		default:
			return false
		}
	}
	return false
}

// indexControl returns the index of the first ASCII control byte in s, or -1.
func indexControl(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return i
		}
	}
	return -1
}
