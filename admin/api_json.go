package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slotpoller/slotpoller/client"
)

// apiError is an API call's error, sent as {"error": {...}}.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field is the request field (or query parameter) at fault.
	Field string `json:"field,omitempty"`
	// Index is the job's index in a batch when one job is at fault.
	Index *int `json:"index,omitempty"`
	// ID is the job a conflict is about: the one holding a unique key, or
	// the one that cannot be cancelled or retried in its state.
	ID int64 `json:"id,omitempty"`
	// State is the job's state when its state refused an action.
	State string `json:"state,omitempty"`
}

func (e *apiError) Error() string { return e.Message }

func writeAPIError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
	}
	writeJSON(w, ae.Status, struct {
		Error *apiError `json:"error"`
	}{ae})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = jsonEncoder(w).Encode(body)
}

// jsonEncoder writes JSON for people and tools, not for inlining in HTML:
// "<admin.token>" stays as it is, not \u003cadmin.token\u003e. A body is
// never HTML: its Content-Type is JSON and nosniff keeps a browser to it.
func jsonEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

// timeLayout is how the API writes a time: RFC 3339 in UTC to the
// millisecond, always 24 characters ("2026-12-01T02:00:00.000Z"), so that
// times line up in a listing and sort as text. Date.parse reads it.
const timeLayout = "2006-01-02T15:04:05.000Z"

// apiTime is a time as the API writes it (timeLayout).
type apiTime time.Time

// MarshalJSON writes the time in timeLayout.
func (t apiTime) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format(timeLayout) + `"`), nil
}

// UnmarshalJSON reads an RFC 3339 time, as a Go client of the API's
// exported views decodes them.
func (t *apiTime) UnmarshalJSON(b []byte) error {
	var v time.Time
	if err := v.UnmarshalJSON(b); err != nil {
		return err
	}
	*t = apiTime(v)
	return nil
}

// optTime is t as the API writes it; nil stays nil.
func optTime(t *time.Time) *apiTime {
	if t == nil {
		return nil
	}
	v := apiTime(*t)
	return &v
}

// apiError turns an error of a call into its answer.
func (a *api) apiError(err error) *apiError {
	var (
		ae     *apiError
		fe     *client.FieldError
		dup    *client.DuplicateError
		se     *client.StateError
		tooBig *http.MaxBytesError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &tooBig):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
			Message: fmt.Sprintf("the body is over %d bytes, the most this route takes (a batch takes %d: send more batches)", tooBig.Limit, maxBatchBody)}
	case errors.As(err, &fe):
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_field", Field: fe.Field, Message: fe.Error()}
	case errors.As(err, &dup):
		return duplicateError(dup, nil)
	case errors.As(err, &se):
		return &apiError{Status: http.StatusConflict, Code: "state_conflict", ID: se.ID, State: se.State, Message: se.Error()}
	case errors.Is(err, client.ErrNotFound):
		return &apiError{Status: http.StatusNotFound, Code: "not_found", Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable",
			Message: fmt.Sprintf("the database did not answer within %v", apiTimeout)}
	}
	return &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: a.n.maskDSN(err.Error())}
}

// inBatch names the batch's job a *client.FieldError is about.
func inBatch(err error) error {
	var fe *client.FieldError
	if !errors.As(err, &fe) || fe.Field == "jobs" {
		return err
	}
	i := fe.Index
	return &apiError{Status: http.StatusBadRequest, Code: "invalid_field", Field: fe.Field, Index: &i,
		Message: fmt.Sprintf("jobs[%d]: %s", i, fe.Error())}
}

func duplicateError(dup *client.DuplicateError, index *int) *apiError {
	return &apiError{Status: http.StatusConflict, Code: "duplicate", Field: "unique_key", Index: index, ID: dup.ID, Message: dup.Error()}
}

// checkJSONContentType refuses a POST that is not application/json: a
// form on another site can send text/plain or form data without asking,
// but not JSON.
func checkJSONContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	if ct == "" {
		ct = "none"
	}
	return &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
		Message: fmt.Sprintf("Content-Type %s: send Content-Type: application/json (UTF-8)", ct)}
}

// decodeBody decodes the request's JSON object into v: unknown fields,
// wrong types and anything after the object are refused, naming the
// field. emptyOK accepts an empty body as {}.
func decodeBody(r *http.Request, v any, emptyOK bool) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		if emptyOK {
			return nil
		}
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_json", Message: "the body is empty: send a JSON object"}
	}
	if err != nil {
		return jsonError(err, nil)
	}
	return checkTrailing(dec)
}

// checkTrailing refuses anything but white space after the JSON value.
func checkTrailing(dec *json.Decoder) error {
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil && isMaxBytes(err):
		return err
	}
	return &apiError{Status: http.StatusBadRequest, Code: "invalid_json",
		Message: fmt.Sprintf("trailing data after the JSON object, at byte %d: send one object", dec.InputOffset())}
}

func isMaxBytes(err error) bool {
	var tooBig *http.MaxBytesError
	return errors.As(err, &tooBig)
}

// jsonError turns a decoding error into a 400 naming the field (and the
// batch index) at fault; a body over the cap stays what it is (413).
func jsonError(err error, index *int) error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	at := ""
	if index != nil {
		at = fmt.Sprintf("jobs[%d]: ", *index)
	}
	switch {
	case isMaxBytes(err):
		return err
	case errors.As(err, &syn):
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_json", Index: index,
			Message: fmt.Sprintf("%smalformed JSON at byte %d: %s", at, syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_json", Index: index,
			Message: at + "malformed JSON: the body ends in the middle of a value"}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			what := "a JSON object"
			if index != nil {
				what = "a job object"
			}
			return &apiError{Status: http.StatusBadRequest, Code: "wrong_type", Index: index,
				Message: fmt.Sprintf("%sthe value must be %s, not %s", at, what, jsonKind(typ.Value))}
		}
		return &apiError{Status: http.StatusBadRequest, Code: "wrong_type", Field: field, Index: index,
			Message: fmt.Sprintf("%s%s must be %s, not %s", at, field, goKind(typ.Type), typ.Value)}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &apiError{Status: http.StatusBadRequest, Code: "unknown_field", Field: name, Index: index,
			Message: fmt.Sprintf("%sunknown field %q", at, name)}
	}
	return &apiError{Status: http.StatusBadRequest, Code: "invalid_json", Index: index, Message: at + err.Error()}
}

// jsonKind is "a number" for "number 5", and the like.
func jsonKind(v string) string {
	kind, _, _ := strings.Cut(v, " ")
	switch kind {
	case "array", "object":
		return "an " + kind
	case "bool":
		return "true or false"
	}
	return "a " + kind
}

// goKind names what a Go type takes in JSON.
func goKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a whole number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "an array"
	case reflect.Pointer:
		return goKind(t.Elem())
	}
	return "an object"
}

// jobRequest is one job to enqueue.
type jobRequest struct {
	Endpoint string `json:"endpoint"`
	Method   string `json:"method"`
	// Payload is the request body as text; PayloadBase64 is a binary one.
	Payload       *string `json:"payload"`
	PayloadBase64 *string `json:"payload_base64"`
	RunAt         string  `json:"run_at"` // RFC 3339
	Delay         string  `json:"delay"`  // a Go duration
	MaxAttempts   int     `json:"max_attempts"`
	Timeout       string  `json:"timeout"` // a Go duration
	UniqueKey     string  `json:"unique_key"`
	// IdempotencyKey is sent as Idempotency-Key on every attempt; ""
	// gets a random one.
	IdempotencyKey string `json:"idempotency_key"`
	// Queue is the job's queue; "" for the one its endpoint is routed to.
	Queue string `json:"queue"`
	// Traceparent is the W3C trace context the job belongs to; "" takes
	// the request's traceparent header, when it holds a valid one.
	Traceparent string `json:"traceparent"`
}

// job converts the request; the client validates the rest.
func (j jobRequest) job(index int) (client.Job, error) {
	out := client.Job{Endpoint: j.Endpoint, Method: j.Method, MaxAttempts: j.MaxAttempts, UniqueKey: j.UniqueKey,
		IdempotencyKey: j.IdempotencyKey, Queue: j.Queue, Traceparent: j.Traceparent}
	bad := func(field, problem string, args ...any) error {
		return &client.FieldError{Index: index, Field: field, Problem: fmt.Sprintf(problem, args...)}
	}
	switch {
	case j.Payload != nil && j.PayloadBase64 != nil:
		return out, bad("payload_base64", "give payload or payload_base64, not both")
	case j.Payload != nil:
		out.Payload = []byte(*j.Payload)
	case j.PayloadBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*j.PayloadBase64)
		if err != nil {
			return out, bad("payload_base64", "not standard base64 (RFC 4648, with padding): %v", err)
		}
		out.Payload = b
	}
	if j.RunAt != "" {
		t, err := time.Parse(time.RFC3339, j.RunAt)
		if err != nil {
			return out, bad("run_at", "%q is not an RFC 3339 time such as 2026-12-01T02:00:00Z", j.RunAt)
		}
		out.RunAt = t
	}
	var err error
	if out.Delay, err = apiDuration("delay", j.Delay, index); err != nil {
		return out, err
	}
	if out.Timeout, err = apiDuration("timeout", j.Timeout, index); err != nil {
		return out, err
	}
	return out, nil
}

// apiDuration parses a Go duration string; "" is 0.
func apiDuration(field, s string, index int) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &client.FieldError{Index: index, Field: field,
			Problem: fmt.Sprintf("%q is not a duration: give a Go duration string such as \"30s\", \"1m30s\" or \"250ms\"", s)}
	}
	return d, nil
}

// decodeBatch reads {"jobs": [...]}, each job decoded on its own so an
// error names its index.
func decodeBatch(r *http.Request) ([]client.Job, error) {
	var req struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err := decodeBody(r, &req, false); err != nil {
		return nil, err
	}
	switch {
	case len(req.Jobs) == 0:
		return nil, &client.FieldError{Field: "jobs", Problem: "no jobs: give a jobs array of 1 or more"}
	case len(req.Jobs) > client.MaxBatch:
		return nil, &client.FieldError{Field: "jobs", Problem: fmt.Sprintf("a batch of %d jobs; at most %d are allowed", len(req.Jobs), client.MaxBatch)}
	}
	js := make([]client.Job, len(req.Jobs))
	for i, raw := range req.Jobs {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var jr jobRequest
		if err := dec.Decode(&jr); err != nil {
			return nil, jsonError(err, &i)
		}
		j, err := jr.job(i)
		if err != nil {
			return nil, inBatch(err)
		}
		js[i] = j
	}
	return js, nil
}

// jobView is a job as the API shows it.
type jobView struct {
	ID       int64  `json:"id"`
	Endpoint string `json:"endpoint"`
	Method   string `json:"method"`
	State    string `json:"state"`    // ready, running, done, failed, dead, cancelled or missed
	Retrying bool   `json:"retrying"` // ready after a failed attempt: backing off
	// Payload is the body as text when it is UTF-8, else PayloadBase64
	// holds it (a job's page only; a list gives PayloadBytes alone).
	Payload        *string     `json:"payload,omitempty"`
	PayloadBase64  *string     `json:"payload_base64,omitempty"`
	PayloadBytes   int         `json:"payload_bytes"`
	RunAt          apiTime     `json:"run_at"`
	Attempt        int         `json:"attempt"`
	MaxAttempts    int         `json:"max_attempts"`
	Timeout        string      `json:"timeout,omitempty"` // a Go duration; absent: the node's jobs.timeout
	UniqueKey      string      `json:"unique_key,omitempty"`
	IdempotencyKey string      `json:"idempotency_key"`
	Node           string      `json:"node,omitempty"`
	LeaseUntil     *apiTime    `json:"lease_until,omitempty"`
	Created        apiTime     `json:"created"`
	Started        *apiTime    `json:"started,omitempty"`
	Finished       *apiTime    `json:"finished,omitempty"`
	LastStatus     int         `json:"last_status,omitempty"`
	LastError      string      `json:"last_error,omitempty"`
	Schedule       string      `json:"schedule,omitempty"`
	ScheduledFor   *apiTime    `json:"scheduled_for,omitempty"`
	Queue          string      `json:"queue"`
	Traceparent    string      `json:"traceparent,omitempty"`
	History        []eventView `json:"history,omitempty"`
	// A running job whose cancel was requested (a job's page only): who
	// asked and when; its node stops the call at its next lease renewal.
	CancelRequestedBy string   `json:"cancel_requested_by,omitempty"`
	CancelRequestedAt *apiTime `json:"cancel_requested_at,omitempty"`
}

// eventView is a client.Event as the API shows it.
type eventView struct {
	Attempt int      `json:"attempt"`
	Node    string   `json:"node"`
	Started *apiTime `json:"started,omitempty"`
	Ended   apiTime  `json:"ended"`
	Outcome string   `json:"outcome"`
	Status  int      `json:"status,omitempty"`
	Error   string   `json:"error,omitempty"`
}

func view(j client.JobInfo, full bool) jobView {
	v := jobView{ID: j.ID, Endpoint: j.Endpoint, Method: j.Method, State: j.State, Retrying: j.Retrying,
		PayloadBytes: len(j.Payload), RunAt: apiTime(j.RunAt), Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		UniqueKey: j.UniqueKey, IdempotencyKey: j.IdempotencyKey, Node: j.Node, LeaseUntil: optTime(j.LeaseUntil),
		Created: apiTime(j.Created), Started: optTime(j.Started), Finished: optTime(j.Finished), LastStatus: j.LastStatus, LastError: j.LastError,
		Schedule: j.Schedule, ScheduledFor: optTime(j.ScheduledFor), Queue: j.Queue, Traceparent: j.Traceparent}
	if j.Timeout != 0 {
		v.Timeout = j.Timeout.String()
	}
	if full {
		v.CancelRequestedBy, v.CancelRequestedAt = j.CancelRequestedBy, optTime(j.CancelRequestedAt)
		for _, e := range j.History {
			v.History = append(v.History, eventView{Attempt: e.Attempt, Node: e.Node, Started: optTime(e.Started),
				Ended: apiTime(e.Ended), Outcome: e.Outcome, Status: e.Status, Error: e.Error})
		}
		if utf8.Valid(j.Payload) {
			s := string(j.Payload)
			v.Payload = &s
		} else {
			s := base64.StdEncoding.EncodeToString(j.Payload)
			v.PayloadBase64 = &s
		}
	}
	return v
}
