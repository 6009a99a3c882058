package admin

import (
	"crypto/sha256"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/slotpoller/slotpoller/config"
)

// guard protects everything the admin endpoint serves but the public
// routes of the table (/healthz and /readyz, which load balancers probe
// without credentials). In order:
//
//   - With no admin.token (only possible on loopback), the Host header
//     must name loopback (localhost, 127.0.0.1, [::1]): a page on another
//     site that rebinds its DNS name to 127.0.0.1 sends its own name.
//   - An Origin header must be the listener's own (a browser sends it on a
//     cross-site fetch or form post); no CORS header is ever sent, so a
//     preflight fails and a page elsewhere can neither send JSON nor read
//     an answer.
//   - With admin.token set, "Authorization: Bearer <token>", compared in
//     constant time; or the dashboard's session cookie, whose writes also
//     need its CSRF header (dashboard_auth.go). The table's sign-in
//     routes (the form at /login, the page's assets) are open; a browser
//     opening another page without either is sent there.
func (n *endpoint) guard(next http.Handler, ses *sessions, table []route) http.Handler {
	accessOf := accessOf(table)
	token := n.cfg.Admin.Token
	var want [sha256.Size]byte
	if token != "" {
		want = sha256.Sum256([]byte(token))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		need := accessOf(r.URL.Path)
		if need == public {
			next.ServeHTTP(w, r)
			return
		}
		if token == "" && !loopbackHostHeader(r.Host) {
			writeAPIError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden_host",
				Message: "the Host header must name this host's loopback (localhost, 127.0.0.1 or [::1]) while admin.token is not set"})
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
			writeAPIError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden_origin",
				Message: "cross-origin requests are refused: Origin " + o + " is not this listener's own"})
			return
		}
		if token == "" {
			next.ServeHTTP(w, withCredential(r, credential{kind: credLoopback}))
			return
		}
		auth := r.Header.Get("Authorization")
		if auth == "" {
			if need == signIn {
				// The sign-in form and the page's script and style: nothing
				// in them is secret.
				next.ServeHTTP(w, r)
				return
			}
			if s, ok := ses.find(r); ok {
				if err := sessionAllows(r, s); err != nil {
					writeAPIError(w, err)
					return
				}
				next.ServeHTTP(w, withCredential(r, credential{kind: credSession, session: s.name()}))
				return
			}
			if wantsPage(r) {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
		}
		scheme, got, ok := strings.Cut(auth, " ")
		if auth == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="slotpoller"`)
			writeAPIError(w, &apiError{Status: http.StatusUnauthorized, Code: "unauthorized",
				Message: "send the admin token: Authorization: Bearer <admin.token>"})
			return
		}
		if !tokenMatches(got, want) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="slotpoller", error="invalid_token"`)
			writeAPIError(w, &apiError{Status: http.StatusUnauthorized, Code: "unauthorized",
				Message: "the bearer token is not admin.token"})
			return
		}
		next.ServeHTTP(w, withCredential(r, credential{kind: credToken}))
	})
}

// loopbackHostHeader reports whether a Host header names loopback.
func loopbackHostHeader(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return config.IsLoopbackHost(strings.Trim(host, "[]"))
}

// sameOrigin reports whether origin is the listener's own: http or https
// (a TLS proxy in front) with the host and port the request was sent to.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Path == "" &&
		u.User == nil && strings.EqualFold(u.Host, host)
}
