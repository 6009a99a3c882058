package admin

import (
	"github.com/slotpoller/slotpoller/service"
)

// The API's views of the reports the CLI shows (package service): the
// same fields under the same names, their times written as the API writes
// every time (timeLayout).

// scheduleView is a service.ScheduleStatus.
type scheduleView struct {
	Name       string   `json:"name"`
	When       string   `json:"when"` // "every 10s" or "cron ... (zone)"
	Endpoint   string   `json:"endpoint"`
	Enabled    bool     `json:"enabled"`
	Source     string   `json:"source"` // config or cli
	NextFireAt *apiTime `json:"next_fire_at,omitempty"`
	LastFireAt *apiTime `json:"last_fire_at,omitempty"`
	LastResult string   `json:"last_result,omitempty"` // state of the latest finished occurrence
	LastStatus int      `json:"last_status,omitempty"`
	LastError  string   `json:"last_error,omitempty"`
	Missed     int64    `json:"missed"`
	Misfire    string   `json:"misfire"`
	Overlap    string   `json:"overlap"`
	Tolerance  string   `json:"tolerance"`
}

func scheduleViews(in []service.ScheduleStatus) []scheduleView {
	out := make([]scheduleView, 0, len(in))
	for _, s := range in {
		out = append(out, scheduleView{Name: s.Name, When: s.When, Endpoint: s.Endpoint, Enabled: s.Enabled, Source: s.Source,
			NextFireAt: optTime(s.NextFireAt), LastFireAt: optTime(s.LastFireAt), LastResult: s.LastResult,
			LastStatus: s.LastStatus, LastError: s.LastError, Missed: s.Missed, Misfire: s.Misfire, Overlap: s.Overlap,
			Tolerance: s.Tolerance})
	}
	return out
}

// taskView is a service.TaskStatus.
type taskView struct {
	Name       string   `json:"name"`
	Endpoint   string   `json:"endpoint"`
	Every      string   `json:"every"`
	State      string   `json:"state"`
	Owner      string   `json:"owner,omitempty"` // node name while held
	Since      *apiTime `json:"since,omitempty"` // database time the owner took it
	Token      int64    `json:"token"`
	Calls      int64    `json:"calls"`
	Failures   int      `json:"failures"` // consecutive failed calls
	LastCallAt *apiTime `json:"last_call_at,omitempty"`
	LastStatus int      `json:"last_status,omitempty"`
	LastError  string   `json:"last_error,omitempty"`
}

func taskViews(in []service.TaskStatus) []taskView {
	out := make([]taskView, 0, len(in))
	for _, t := range in {
		out = append(out, taskView{Name: t.Name, Endpoint: t.Endpoint, Every: t.Every, State: t.State, Owner: t.Owner,
			Since: optTime(t.Since), Token: t.Token, Calls: t.Calls, Failures: t.Failures, LastCallAt: optTime(t.LastCallAt),
			LastStatus: t.LastStatus, LastError: t.LastError})
	}
	return out
}

// nodeView is a service.NodeStatus.
type nodeView struct {
	Name          string  `json:"name"`
	Live          bool    `json:"live"`
	State         string  `json:"state"`
	Incarnation   string  `json:"incarnation"`
	Capacity      int     `json:"capacity"`
	Free          int     `json:"free"`
	OffsetMS      float64 `json:"offset_ms"`       // database clock minus the node's clock, as last measured
	OffsetErrorMS float64 `json:"offset_error_ms"` // the measurement's error bound
	LastSeen      apiTime `json:"last_seen"`       // database time of the node's last registry write
	Started       apiTime `json:"started"`
}
