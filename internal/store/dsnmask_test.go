package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pw is the password every shape below carries; no piece of it three
// characters or longer may survive masking.
const pw = "Tr0ub4dor"

// passwordShapes are DSNs whose password is pw, written well and badly.
var passwordShapes = []string{
	"postgres://farm:Tr0ub4dor@127.0.0.1:1/farm",
	"postgresql://farm:Tr0ub4dor@127.0.0.1:1/farm?sslmode=disable",
	"postgres://farm:Tr0@ub4dor@127.0.0.1:1/farm",
	"postgres://farm:Tr0/ub4dor@127.0.0.1:1/farm",
	"postgres://farm:Tr0?ub4dor@127.0.0.1:1/farm",
	"postgres://farm:Tr0#ub4dor@127.0.0.1:1/farm",
	"postgres://farm:Tr0:ub4dor@127.0.0.1:1/farm",
	"postgres://farm:12?Tr0ub4dor@127.0.0.1:1/farm",
	"postgres://farm:12/Tr0ub4dor@127.0.0.1:1/farm",
	"postgres://farm:Tr0@ub/4d?or@127.0.0.1:1/farm",
	"postgres://farm:Tr0ub4dor@@127.0.0.1:1/farm",
	"postgres://farm:Tr0%40ub4dor@127.0.0.1:1/farm",
	"postgres://farm:Tr0%2Fub4dor@127.0.0.1:1/farm",
	"postgres://:Tr0ub4dor@127.0.0.1:1/farm",
	"postgres://farm:Tr0ub4dor@[::1]:1/farm",
	"postgres://farm:Tr0ub4dor@h1:1,h2:1/farm",
	"postgres://127.0.0.1:1/farm?user=farm&password=Tr0ub4dor",
	"postgres://127.0.0.1:1/farm?password=Tr0%26ub4dor&user=farm",
	"host=127.0.0.1 port=1 user=farm password=Tr0ub4dor",
	"host=127.0.0.1 port=1 user=farm password=Tr0 ub4dor",
	"host=127.0.0.1 port=1 user=farm password='Tr0 ub4dor'",
	`host=127.0.0.1 port=1 user=farm password='Tr0\'ub4dor'`,
	"host=127.0.0.1 port=1 user=farm password = Tr0ub4dor",
	"host=127.0.0.1 port=1 user=farm PASSWORD=Tr0ub4dor",
	"password=Tr0ub4dor host=127.0.0.1 port=1",
	"sqlserver://sa:Tr0ub4dor@127.0.0.1:1?database=farm",
	"sqlserver://sa:Tr0;ub4dor@127.0.0.1:1?database=farm",
	"sqlserver://sa:Tr0/ub4dor@127.0.0.1:1?database=farm",
	"Server=127.0.0.1,1;User ID=sa;Password=Tr0ub4dor;Database=farm",
	"Server=127.0.0.1,1;User ID=sa;Password=Tr0;ub4dor;Database=farm",
	`Server=127.0.0.1,1;User ID=sa;Password="Tr0;ub4dor";Database=farm`,
	"Server=127.0.0.1,1;User ID=sa;Password={Tr0;ub}}4dor};Database=farm",
	"Server=127.0.0.1,1;User ID=sa;Pwd=Tr0ub4dor",
	"odbc:server=127.0.0.1;user id=sa;password=Tr0ub4dor",
	"farm:Tr0ub4dor@tcp(127.0.0.1:1)/farm?parseTime=true&loc=UTC",
	"farm:Tr0@ub4dor@tcp(127.0.0.1:1)/farm?parseTime=true",
	"farm:Tr0:ub4dor@unix(/nonexistent/mysqld.sock)/farm?parseTime=true&loc=UTC",
	"farm:Tr0ub4dor@/farm",
}

// leaks reports the pieces of pw that s shows.
func leaks(s string) []string {
	var shown []string
	for i := 0; i+3 <= len(pw); i++ {
		if strings.Contains(s, pw[i:i+3]) {
			shown = append(shown, pw[i:i+3])
		}
	}
	return shown
}

func TestMaskDSNHidesEveryShapeOfPassword(t *testing.T) {
	for _, dsn := range passwordShapes {
		got := MaskDSN(dsn)
		require.Empty(t, leaks(got), "%s became %s", dsn, got)
		require.Contains(t, got, passwordMask, dsn)
	}
	for _, keep := range []string{
		"postgres://host:5432/db?application_name=a@b",
		"postgres://user@host/db",
		"/var/lib/slotpoller/slotpoller.db",
		"file:slotpoller.db?_pragma=busy_timeout(5000)",
		"root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC",
		"/srv/a:b@c/slotpoller.db",
	} {
		require.Equal(t, keep, MaskDSN(keep))
	}
}

func TestScrubLeavesOtherWordsAlone(t *testing.T) {
	err := scrub(errors.New(`cannot parse "host=db password=pa": failed to parse`), "host=db password=pa")
	require.Equal(t, `cannot parse "host=db password=xxxxx": failed to parse`, err.Error())
}
