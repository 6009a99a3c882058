// Package otlptest is an OTLP/HTTP trace receiver for tests: it takes
// what a node's recorder exports (protobuf, gzip or not) and keeps the
// spans, as a collector would.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is an exported span, its ids in hex as a traceparent writes them.
type Span struct {
	Name                    string
	TraceID, SpanID, Parent string // Parent "" for a root span
	Attributes              map[string]string
	Links                   []string // the linked spans' trace ids
	Service                 string   // the resource's service.name
}

// Receiver is an OTLP/HTTP endpoint.
type Receiver struct {
	URL string // give it as tracing.otlp_endpoint
	mu  sync.Mutex
	all []Span
	bad []string
}

// Start starts a receiver that stops with the test.
func Start(t testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.refuse(w, "gzip: "+err.Error())
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		r.refuse(w, err.Error())
		return
	}
	var msg collectortrace.ExportTraceServiceRequest
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		r.refuse(w, "not an OTLP/HTTP protobuf export: "+req.URL.Path+" "+req.Header.Get("Content-Type"))
		return
	}
	if err := proto.Unmarshal(data, &msg); err != nil {
		r.refuse(w, err.Error())
		return
	}
	var got []Span
	for _, rs := range msg.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				s := Span{Name: sp.Name, TraceID: hex.EncodeToString(sp.TraceId), SpanID: hex.EncodeToString(sp.SpanId),
					Parent: hex.EncodeToString(sp.ParentSpanId), Attributes: map[string]string{}, Service: service}
				for _, a := range sp.Attributes {
					switch v := a.GetValue().GetValue().(type) {
					case *common.AnyValue_StringValue:
						s.Attributes[a.Key] = v.StringValue
					case *common.AnyValue_IntValue:
						s.Attributes[a.Key] = strconv.FormatInt(v.IntValue, 10)
					default:
						s.Attributes[a.Key] = a.GetValue().String()
					}
				}
				for _, l := range sp.Links {
					s.Links = append(s.Links, hex.EncodeToString(l.TraceId))
				}
				got = append(got, s)
			}
		}
	}
	r.mu.Lock()
	r.all = append(r.all, got...)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

func (r *Receiver) refuse(w http.ResponseWriter, why string) {
	r.mu.Lock()
	r.bad = append(r.bad, why)
	r.mu.Unlock()
	http.Error(w, why, http.StatusBadRequest)
}

// Spans are the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.all...)
}

// Refused says what the receiver could not take (none, for a recorder
// that speaks OTLP/HTTP).
func (r *Receiver) Refused() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bad...)
}
