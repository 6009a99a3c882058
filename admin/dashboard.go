package admin

import (
	"crypto/sha256"
	"embed"
	"html"
	"io/fs"
	"net/http"
	"strings"
)

// The dashboard: one page at / and its two assets, embedded in the binary
// (nothing is fetched from elsewhere, so it works behind a firewall). The
// page reads the node's own API every few seconds, and acts through the
// same routes as any API client (api.go, api_farm.go), so every action is
// the CLI's code.
//
//go:embed dashboard
var dashboardFS embed.FS

// dashboardCSP keeps the page to its own assets and API: no inline script,
// nothing from another origin, no framing.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// dashboard serves the page, its assets and the sign-in form.
type dashboard struct {
	n           *endpoint
	ses         *sessions
	assets      fs.FS
	page, login []byte
	want        [sha256.Size]byte // the hash of admin.token
}

func newDashboard(n *endpoint, ses *sessions) *dashboard {
	assets, _ := fs.Sub(dashboardFS, "dashboard")
	page, _ := fs.ReadFile(assets, "index.html")
	login, _ := fs.ReadFile(assets, "login.html")
	d := &dashboard{n: n, ses: ses, assets: assets, page: page, login: login}
	if n.cfg.Admin.Token != "" {
		d.want = sha256.Sum256([]byte(n.cfg.Admin.Token))
	}
	return d
}

// index is the page, with its session's CSRF token written in.
func (d *dashboard) index(w http.ResponseWriter, r *http.Request) {
	n := d.n
	csrf := ""
	if s, ok := d.ses.find(r); ok {
		csrf = s.csrf
	}
	body := strings.NewReplacer("{{node}}", html.EscapeString(n.cfg.Node.Name), "{{csrf}}", csrf,
		"{{signout}}", signOutClass(n.cfg.Admin.Token != "")).Replace(string(d.page))
	pageHeaders(w, "text/html; charset=utf-8")
	_, _ = w.Write([]byte(body))
}

// asset is /assets/{name}: the page's script and style, nothing else.
func (d *dashboard) asset(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/assets/")
	if name != "app.js" && name != "style.css" {
		http.NotFound(w, r)
		return
	}
	b, _ := fs.ReadFile(d.assets, name)
	ct := "text/css; charset=utf-8"
	if strings.HasSuffix(name, ".js") {
		ct = "text/javascript; charset=utf-8"
	}
	pageHeaders(w, ct)
	_, _ = w.Write(b)
}

func (d *dashboard) showLogin(w http.ResponseWriter, code int, problem string) {
	body := strings.NewReplacer("{{node}}", html.EscapeString(d.n.cfg.Node.Name), "{{problem}}", html.EscapeString(problem)).Replace(string(d.login))
	pageHeaders(w, "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// loginForm is GET /login.
func (d *dashboard) loginForm(w http.ResponseWriter, r *http.Request) {
	if d.n.cfg.Admin.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther) // nothing to sign in to
		return
	}
	d.showLogin(w, http.StatusOK, "")
}

// signIn is POST /login: the token buys a session.
func (d *dashboard) signIn(w http.ResponseWriter, r *http.Request) {
	if d.n.cfg.Admin.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		d.showLogin(w, http.StatusBadRequest, "The form could not be read; send the token again.")
		return
	}
	if !tokenMatches(r.PostForm.Get("token"), d.want) {
		d.n.log.Warn("dashboard sign-in with a wrong token", "remote", r.RemoteAddr)
		d.showLogin(w, http.StatusUnauthorized, "That is not this node's admin.token.")
		return
	}
	d.ses.setCookie(w, r, d.ses.start(), int(sessionTTL.Seconds()))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// signOut is POST /logout. Signing out is a write: the guard wants the
// session's CSRF header.
func (d *dashboard) signOut(w http.ResponseWriter, r *http.Request) {
	d.ses.end(r)
	d.ses.setCookie(w, r, "", -1)
	w.WriteHeader(http.StatusNoContent)
}

func signOutClass(token bool) string {
	if token {
		return ""
	}
	return "hidden"
}

// pageHeaders are the headers of the dashboard's page and assets.
func pageHeaders(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // no-referrer would make a form post's Origin "null"
	h.Set("Content-Security-Policy", dashboardCSP)
}
