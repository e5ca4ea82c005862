package testutil

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// StartCluster starts an n-node JetStream cluster of nats-server processes
// on loopback, server i named toolq-<i> with a store and a monitoring port
// of its own (its /jsz names the meta leader), and returns them with the
// monitoring ports once the cluster's JetStream answers (a meta leader is
// elected). On a failed test it logs each server's output.
func StartCluster(tb testing.TB, n int) (servers []*ServerProcess, monitors []int) {
	tb.Helper()
	ports := FreePorts(tb, 3*n)
	clients, routes, monitors := ports[:n], ports[n:2*n], ports[2*n:]
	var urls []string
	for _, p := range routes {
		urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(p))
	}
	servers = make([]*ServerProcess, n)
	for i := range servers {
		servers[i] = StartServerProcessOn(tb, clients[i], tb.TempDir(),
			"-n", fmt.Sprintf("toolq-%d", i),
			"--cluster_name", "toolq-test",
			"--cluster", "nats://127.0.0.1:"+strconv.Itoa(routes[i]),
			"--routes", strings.Join(urls, ","),
			"-m", strconv.Itoa(monitors[i]),
		)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			for i, s := range servers {
				tb.Logf("--- nats-server %d ---\n%s", i, s.Log())
			}
		}
	})
	nc, err := nats.Connect(ClusterURL(servers))
	if err != nil {
		tb.Fatal(err)
	}
	defer nc.Close()
	for deadline := time.Now().Add(60 * time.Second); ; {
		// Unanswered until a meta leader exists.
		_, err := nc.Request("$JS.API.INFO", nil, 2*time.Second)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the cluster's JetStream is not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling the cluster
	}
	return servers, monitors
}

// ClusterURL is the client URLs of servers, comma-separated.
func ClusterURL(servers []*ServerProcess) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}
