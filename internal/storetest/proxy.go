package storetest

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Proxy is a TCP relay in front of the database that a test can cut and
// restore, to take the database away from the nodes and give it back, or
// stall, to make it stop answering while every connection stays open (a
// half-open connection, a lock wait, a database frozen by its host).
type Proxy struct {
	t      testing.TB
	target string
	Addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
	// resumed is closed while the relay forwards; a stall replaces it with
	// an open channel that Resume closes.
	resumed chan struct{}
}

// NewProxy listens on a free loopback port and relays each connection to
// target (host:port) until the test ends; it starts forwarding.
func NewProxy(t testing.TB, target string) *Proxy {
	p := &Proxy{t: t, target: target, conns: map[net.Conn]bool{}, resumed: make(chan struct{})}
	close(p.resumed)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.Addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Cut)
	return p
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			go func() { p.relay(up, c); up.Close() }()
			go func() { p.relay(c, up); c.Close() }()
		}
	}()
}

// relay copies src to dst, holding each chunk while the proxy is stalled.
func (p *Proxy) relay(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.resumed
			p.mu.Unlock()
			<-gate
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Stall stops forwarding without closing anything: statements sent now get
// no answer until Resume.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
		p.resumed = make(chan struct{})
	default: // already stalled
	}
}

// Resume forwards again, including what was held during the stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
	default:
		close(p.resumed)
	}
}

// Cut closes the listener and every relayed connection: to the nodes the
// database is gone. A stall ends with it.
func (p *Proxy) Cut() {
	p.Resume()
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
	p.wg.Wait()
}

// Restore listens again on the same address.
func (p *Proxy) Restore() {
	ln, err := net.Listen("tcp", p.Addr)
	require.NoError(p.t, err)
	p.serve(ln)
}
