package admin

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
)

// A browser cannot send "Authorization: Bearer" when it opens a page, so
// with admin.token set the dashboard signs in with a form: the token,
// checked like the bearer one, buys a session cookie (HttpOnly, so no
// script reads it; SameSite=Strict, so no other site's page or link sends
// it). A session's writes also carry its CSRF token in a header, which
// only a page of this listener knows (it is written into the dashboard's
// HTML), and an Origin that is the listener's own.
const (
	// sessionCookiePrefix starts the session cookie's name, which ends in
	// the admin listener's port (sessionCookieName).
	sessionCookiePrefix = "slotpoller_session"
	// csrfHeader carries the session's CSRF token on every POST.
	csrfHeader = "X-Slotpoller-Csrf"
	sessionTTL = 12 * time.Hour
	// maxSessions bounds what sign-ins keep in memory; past it the oldest
	// session ends.
	maxSessions = 1000
)

// sessions are the signed-in browsers of one admin endpoint. They live in
// the node's memory: a restart signs everyone out, and each node of the
// farm has its own (a dashboard talks to one node).
type sessions struct {
	clk clock.Clock
	// cookie is the session cookie's name. A browser keeps cookies by
	// host, not by port: two nodes on one host under one name would
	// overwrite each other's cookie and sign each other's viewers out.
	cookie string

	mu   sync.Mutex
	byID map[[sha256.Size]byte]session // by the hash of the cookie's value
}

type session struct {
	csrf    string
	expires time.Duration // on the clock's monotonic reading
	// label names the session in the audit log: random, and nothing
	// like its cookie or CSRF token, so that the log gives neither away.
	label string
}

// name is how the audit log names who acted through the session.
func (s session) name() string { return s.label }

func newSessions(clk clock.Clock, cookie string) *sessions {
	return &sessions{clk: clk, cookie: cookie, byID: map[[sha256.Size]byte]session{}}
}

// sessionCookieName is the session cookie's name for an admin listener
// (admin.listen): "slotpoller_session_9090". Without a port (the handler
// served by an embedding program) it is the bare prefix.
func sessionCookieName(listen string) string {
	_, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" {
		return sessionCookiePrefix
	}
	// A service name ("http") is a valid port too; keep the characters a
	// cookie name may hold.
	clean := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' {
			return r
		}
		return -1
	}, port)
	return sessionCookiePrefix + "_" + clean
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// start opens a session and returns its cookie value.
func (s *sessions) start() string {
	id := randomHex(32)
	now := s.clk.Monotonic()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byID) >= maxSessions {
		var oldest [sha256.Size]byte
		first := true
		for k, v := range s.byID {
			if first || v.expires < s.byID[oldest].expires {
				oldest, first = k, false
			}
		}
		delete(s.byID, oldest)
	}
	s.byID[sha256.Sum256([]byte(id))] = session{csrf: randomHex(32), expires: now + sessionTTL, label: randomHex(4)}
	return id
}

// find returns the session of a request's cookie.
func (s *sessions) find(r *http.Request) (session, bool) {
	c, err := r.Cookie(s.cookie)
	if err != nil || c.Value == "" {
		return session{}, false
	}
	key := sha256.Sum256([]byte(c.Value))
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.byID[key]
	if ok && s.clk.Monotonic() >= v.expires {
		delete(s.byID, key)
		return session{}, false
	}
	return v, ok
}

// end closes the session of a request's cookie.
func (s *sessions) end(r *http.Request) {
	if c, err := r.Cookie(s.cookie); err == nil {
		s.mu.Lock()
		delete(s.byID, sha256.Sum256([]byte(c.Value)))
		s.mu.Unlock()
	}
}

// tokenMatches compares a presented token with admin.token in constant
// time; hashing first makes the time independent of the length too.
func tokenMatches(got string, want [sha256.Size]byte) bool {
	sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}

// sessionAllows decides a request that came with a session cookie and no
// Authorization header: reads pass; a write needs the session's CSRF
// token in its header and an Origin that is the listener's own (a browser
// sends one on every fetch that writes).
func sessionAllows(r *http.Request, ses session) *apiError {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	if o := r.Header.Get("Origin"); o == "" || !sameOrigin(o, r.Host) {
		return &apiError{Status: http.StatusForbidden, Code: "forbidden_origin",
			Message: "a write with a session cookie must come from this listener's own page (Origin)"}
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(ses.csrf)) != 1 {
		return &apiError{Status: http.StatusForbidden, Code: "csrf",
			Message: "a write with a session cookie needs the page's " + csrfHeader + " header: reload the dashboard"}
	}
	return nil
}

// wantsPage reports whether a request is a browser opening a page, which
// is sent to the sign-in form rather than given a JSON 401.
func wantsPage(r *http.Request) bool {
	return r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/api/") &&
		strings.Contains(r.Header.Get("Accept"), "text/html")
}

// setCookie gives the browser its session under this listener's name; Secure when the page
// came over TLS (directly or through a proxy that says so).
func (s *sessions) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: s.cookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")})
}
