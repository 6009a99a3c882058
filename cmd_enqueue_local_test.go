package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/slotpoller/slotpoller/config"
	"github.com/stretchr/testify/require"
)

func TestEnqueueLocalPostsToTheNodesAPI(t *testing.T) {
	var got localJob
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/api/v1/jobs", r.URL.Path)
		auth = r.Header.Get("Authorization")
		require.NoError(t, json.NewDecoder(r.Body).Decode(&got))
		if got.UniqueKey == "taken" {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":{"code":"duplicate","message":"a job with unique key \"taken\" exists (id 3)"}}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":7}`))
	}))
	defer srv.Close()
	admin := config.AdminConfig{Listen: strings.TrimPrefix(srv.URL, "http://"), Token: "0123456789abcdef"}

	id, err := enqueueLocal(admin, localJob{Endpoint: "/jobs/x", Method: "PUT", PayloadBase64: "AQI=", MaxAttempts: 2, Timeout: "5s"})
	require.NoError(t, err)
	require.EqualValues(t, 7, id)
	require.Equal(t, localJob{Endpoint: "/jobs/x", Method: "PUT", PayloadBase64: "AQI=", MaxAttempts: 2, Timeout: "5s"}, got)
	require.Equal(t, "Bearer 0123456789abcdef", auth)

	_, err = enqueueLocal(admin, localJob{Endpoint: "/jobs/x", UniqueKey: "taken"})
	require.ErrorContains(t, err, `unique key "taken" exists`)
	require.NotErrorIs(t, err, errNodeAway)

	// No node listening: the caller enqueues through the database.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	_, err = enqueueLocal(config.AdminConfig{Listen: addr}, localJob{Endpoint: "/jobs/x"})
	require.ErrorIs(t, err, errNodeAway)
}
