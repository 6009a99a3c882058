//go:build unix

package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A small WebDriver client (the W3C protocol, plain JSON over HTTP) for
// Debian's chromium and chromium-driver: the dashboard's tests drive a
// real headless browser without a Go dependency for it.

const (
	chromiumPath     = "/usr/bin/chromium"
	chromedriverPath = "/usr/bin/chromedriver"
)

type browser struct {
	t       *testing.T
	base    string // the driver's session URL
	http    *http.Client
	timeout time.Duration
}

// freePort asks the system for a free TCP port on loopback.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startBrowser starts chromedriver and a headless Chromium session, or
// skips the test when they are not installed.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	for _, p := range []string{chromiumPath, chromedriverPath} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("the dashboard's browser test needs Debian's chromium and chromium-driver (%s is missing): apt-get install -y chromium chromium-driver", p)
		}
	}
	port := freePort(t)
	cmd := exec.Command(chromedriverPath, "--port="+strconv.Itoa(port))
	cmd.SysProcAttr = dieWithTheTest()
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromedriver: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	root := fmt.Sprintf("http://127.0.0.1:%d", port)
	b := &browser{t: t, http: &http.Client{Timeout: 60 * time.Second}, timeout: 20 * time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		res, err := b.http.Get(root + "/status")
		if err == nil {
			res.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromedriver did not answer within 15s: %v\n%s", err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromiumPath, "args": []string{
			"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1360,1000",
			"--user-data-dir=" + t.TempDir(),
		}},
	}}}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	b.base = root
	b.do("POST", "/session", caps, &sess)
	b.base = root + "/session/" + sess.SessionID
	t.Cleanup(func() { b.do("DELETE", "", nil, nil) })
	return b
}

// do sends one WebDriver command and decodes its value into out.
func (b *browser) do(method, path string, body, out any) {
	b.t.Helper()
	if err := b.try(method, path, body, out); err != nil {
		b.t.Fatalf("webdriver %s %s: %v", method, path, err)
	}
}

func (b *browser) try(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := b.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	raw, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s: %s", res.Status, raw)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", res.Status, env.Value)
	}
	if out != nil {
		return json.Unmarshal(env.Value, out)
	}
	return nil
}

func (b *browser) open(url string) { b.do("POST", "/url", map[string]string{"url": url}, nil) }

// eval runs a script in the page (its body, with arguments) and decodes
// what it returns.
func (b *browser) eval(script string, out any, args ...any) error {
	if args == nil {
		args = []any{}
	}
	return b.try("POST", "/execute/sync", map[string]any{"script": script, "args": args}, out)
}

// waitJS waits until the script returns true.
func (b *browser) waitJS(what, script string, args ...any) {
	b.t.Helper()
	deadline := time.Now().Add(b.timeout)
	for {
		var ok bool
		err := b.eval(script, &ok, args...)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			var text string
			_ = b.eval("return document.getElementById('main') ? document.getElementById('main').innerText : document.body.innerText", &text)
			b.t.Fatalf("browser: timed out after %v waiting for %s (last error %v); the page says:\n%s", b.timeout, what, err, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFor waits for an element matching css.
func (b *browser) waitFor(css string) {
	b.t.Helper()
	b.waitJS(css, "return document.querySelector(arguments[0]) !== null", css)
}

// click finds the element matching css and clicks it as a user would,
// trying again while the page redraws it under the pointer.
func (b *browser) click(css string) {
	b.t.Helper()
	deadline := time.Now().Add(b.timeout)
	for {
		var el map[string]string
		err := b.try("POST", "/element", map[string]string{"using": "css selector", "value": css}, &el)
		if err == nil {
			err = b.try("POST", "/element/"+elementID(el)+"/click", map[string]any{}, nil)
			if err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("browser: could not click %s within %v: %v", css, b.timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// requireInCard fails the test unless every element matching css (at
// least one) lies wholly inside the card that holds it and the window: a
// table that runs past its card cuts its buttons off or puts them off
// screen, which no click through WebDriver would notice (it scrolls).
func (b *browser) requireInCard(css string) {
	b.t.Helper()
	var got struct {
		N       int      `json:"n"`
		Outside []string `json:"outside"`
	}
	err := b.eval(`
const out = {n: 0, outside: []};
const box = (r) => '[' + [r.left, r.top, r.right, r.bottom].map(Math.round).join(' ') + ']';
for (const e of document.querySelectorAll(arguments[0])) {
  out.n++;
  const card = e.closest('.card');
  const r = e.getBoundingClientRect();
  if (!card) { out.outside.push(e.textContent + ' is in no card'); continue; }
  const c = card.getBoundingClientRect();
  if (r.left < c.left || r.right > c.right || r.top < c.top || r.bottom > c.bottom || r.right > window.innerWidth)
    out.outside.push('"' + e.textContent + '" ' + box(r) + ' outside its card ' + box(c) + ' (window ' + window.innerWidth + ' wide)');
}
return out;`, &got, css)
	if err != nil {
		b.t.Fatalf("browser: measure %s: %v", css, err)
	}
	if got.N == 0 {
		b.t.Fatalf("browser: no element matches %s", css)
	}
	if len(got.Outside) > 0 {
		b.t.Fatalf("browser: %d of %d elements %s lie outside their card:\n%s", len(got.Outside), got.N, css, strings.Join(got.Outside, "\n"))
	}
}

// typeInto types text into the input matching css.
func (b *browser) typeInto(css, text string) {
	b.t.Helper()
	var el map[string]string
	b.do("POST", "/element", map[string]string{"using": "css selector", "value": css}, &el)
	b.do("POST", "/element/"+elementID(el)+"/value", map[string]string{"text": text}, nil)
}

// screenshot returns a PNG of the window.
func (b *browser) screenshot() []byte {
	b.t.Helper()
	var s string
	b.do("GET", "/screenshot", nil, &s)
	png, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	return png
}

// elementID is the id in an element reference: an object whose one key
// is the protocol's web element identifier.
func elementID(ref map[string]string) string {
	for _, id := range ref {
		return id
	}
	return ""
}
