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
	// browserZone is the browser's time zone: 13 hours from UTC in
	// November, so that no time in it passes for UTC.
	browserZone = "Pacific/Auckland"
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
	// The browser runs in an operator's zone far from UTC (and the
	// chromium it starts inherits it): a time the pages show in the
	// browser's zone, not UTC like the rest, differs by hours.
	cmd.Env = append(os.Environ(), "TZ="+browserZone)
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

// resize sets the browser window's size (its page is as wide in
// headless Chromium).
func (b *browser) resize(width, height int) {
	b.t.Helper()
	b.do("POST", "/window/rect", map[string]int{"width": width, "height": height}, nil)
	b.waitJS(fmt.Sprintf("a window %d px wide", width), "return window.innerWidth === arguments[0]", width)
}

// layoutProblems measures what an operator misreads on the page on
// screen: the page or a card scrolling sideways (a column off screen), the
// farm's slot number or a schedule's rule broken across lines (read as two
// numbers, or a cron field as two), and an "updated" time not in UTC's
// 24-hour form or not the time of the database's clock, in which every
// other time is shown. Each text is measured by the line boxes of its
// characters, whatever the elements around them.
func (b *browser) layoutProblems() []string {
	b.t.Helper()
	var got []string
	err := b.eval(`
const out = [];
// lines counts the lines on which the characters [start, end) of node's text lie.
const lines = (node, start, end) => {
  const tops = [];
  const w = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
  let at = 0;
  for (let t = w.nextNode(); t; t = w.nextNode()) {
    const a = Math.max(start, at), z = Math.min(end, at + t.length);
    if (a < z) {
      const r = document.createRange();
      r.setStart(t, a - at);
      r.setEnd(t, z - at);
      for (const q of r.getClientRects()) if (q.width > 0 && !tops.some((y) => Math.abs(y - q.top) < 3)) tops.push(q.top);
    }
    at += t.length;
  }
  return tops.length;
};
const doc = document.scrollingElement;
if (doc.scrollWidth > doc.clientWidth) out.push('the page scrolls sideways: ' + doc.scrollWidth + ' px in a window ' + doc.clientWidth + ' wide');
for (const c of document.querySelectorAll('.card'))
  if (c.scrollWidth > c.clientWidth) out.push('a card (' + (c.querySelector('table, h2')?.id || c.querySelector('h2')?.textContent || c.className) + ') scrolls sideways: ' + c.scrollWidth + ' px in ' + c.clientWidth);
for (const s of document.querySelectorAll('.stat')) {
  if (s.querySelector('.k')?.textContent !== 'Slot now') continue;
  const v = s.querySelector('.v');
  const n = lines(v, 0, v.textContent.length);
  if (n !== 1 || v.scrollWidth > v.clientWidth) out.push('the slot number "' + v.textContent + '" on ' + n + ' lines, ' + v.scrollWidth + ' px in ' + v.clientWidth);
}
for (const tr of document.querySelectorAll('#schedules tbody tr')) {
  const td = tr.children[1];
  const rule = td.textContent.replace(/ \([^()]*\)$/, ''); // its zone may go below it
  const n = lines(td, 0, rule.length);
  if (n !== 1) out.push('schedule ' + tr.dataset.schedule + ': its rule "' + rule + '" on ' + n + ' lines');
}
const up = document.getElementById('updated');
if (up) {
  const m = /^updated (\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d) UTC$/.exec(up.textContent);
  if (!m) out.push('the header says "' + up.textContent + '", not "updated YYYY-MM-DD HH:MM:SS UTC"');
  else {
    const at = Date.parse(m[1] + 'T' + m[2] + 'Z');
    if (Math.abs(at - Date.now()) > 15000) out.push('the header\'s "' + up.textContent + '" read as UTC is ' + Math.round((at - Date.now()) / 1000) + ' s from now');
    // The farm's database time, shown as every time is (fmtTime, UTC).
    const db = /database time (\S+) (\S+) UTC/.exec(document.querySelector('[title^="database time"]')?.title || '');
    if (db && Math.abs(Date.parse(db[1] + 'T' + db[2] + 'Z') - at) > 15000)
      out.push('the header\'s "' + up.textContent + '" and the database time ' + db[1] + ' ' + db[2] + ' UTC are in different zones');
  }
}
return out;`, &got)
	if err != nil {
		b.t.Fatalf("browser: measure the layout: %v", err)
	}
	return got
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
