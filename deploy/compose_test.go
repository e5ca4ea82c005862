package deploy

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

const composeFile = "compose/compose.yaml"

// composeEnv is what an operator exports before `docker compose up`.
func composeEnv() map[string]string {
	return map[string]string{
		"TOOLQ_WORKER_PASSWORD":    "worker-password",
		"TOOLQ_SCHEDULER_PASSWORD": "scheduler-password",
		"TOOLQ_SNAPSHOT_KEY":       strings.Repeat("5a", 32),
	}
}

// loadCompose loads the compose file with the compose-spec loader (schema
// validation, interpolation, merge keys), every profile active.
func loadCompose(t *testing.T, env map[string]string, profiles ...string) (*types.Project, error) {
	t.Helper()
	abs, err := filepath.Abs(composeFile)
	require.NoError(t, err)
	src, err := os.ReadFile(abs) //nolint:gosec // G304: the repository's compose file
	require.NoError(t, err)
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs, Content: src}},
		Environment: env,
	}, loader.WithProfiles(profiles))
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	require.NoError(t, err)
	return s
}

func TestCompose(t *testing.T) {
	t.Parallel()
	p, err := loadCompose(t, composeEnv(), "*")
	require.NoError(t, err)
	require.Equal(t, "toolq", p.Name)
	require.ElementsMatch(t, []string{"nats-1", "nats-2", "nats-3", "worker", "worker-exec", "scheduler", "redis", "jaeger"}, p.ServiceNames())

	// Three NATS nodes of one cluster, each its own name and store.
	nats := []string{"nats-1", "nats-2", "nats-3"}
	routes := routesOf(t)
	for _, name := range nats {
		s := service(t, p, name)
		require.Equal(t, name, s.Hostname)
		require.Equal(t, name, *s.Environment["SERVER_NAME"])
		require.Equal(t, "worker-password", *s.Environment["TOOLQ_WORKER_PASSWORD"])
		require.Equal(t, types.ShellCommand{"--config", "/etc/nats/cluster.conf"}, s.Command)
		require.Contains(t, routes, "nats://"+name+":6222", "the cluster's routes name %s", name)
		var data, conf bool
		for _, v := range s.Volumes {
			switch v.Target {
			case "/data":
				data = v.Type == types.VolumeTypeVolume && v.Source == name
			case "/etc/nats":
				conf = v.ReadOnly && v.Source == filepath.Join(p.WorkingDir, "..", "nats")
			}
		}
		require.True(t, data, "%s keeps JetStream in its own volume", name)
		require.True(t, conf, "%s mounts deploy/nats read-only", name)
		require.NotNil(t, s.HealthCheck)
	}

	// Two workers without exec; the exec worker only with its profile.
	w := service(t, p, "worker")
	require.Empty(t, w.Profiles)
	require.Equal(t, 2, *w.Deploy.Replicas)
	require.Equal(t, types.ShellCommand{"worker", "--replicas", "3", "--tools", "code_execution,code_mode"}, w.Command)
	require.Equal(t, "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222", *w.Environment["TOOLQ_NATS"])
	require.Equal(t, "worker", *w.Environment["TOOLQ_NATS_USER"])
	require.Equal(t, strings.Repeat("5a", 32), *w.Environment["TOOLQ_SNAPSHOT_KEY"])
	require.True(t, w.ReadOnly)
	require.Empty(t, w.SecurityOpt, "workers without exec keep Docker's default profiles")
	for _, name := range nats {
		require.Equal(t, types.ServiceConditionHealthy, w.DependsOn[name].Condition)
	}
	require.Greater(t, time.Duration(*w.StopGracePeriod), 30*time.Second, "more than the worker's --stop-timeout")

	we := service(t, p, "worker-exec")
	require.Equal(t, []string{"exec"}, we.Profiles)
	require.Equal(t, types.ShellCommand{"worker", "--replicas", "3", "--tools", "exec"}, we.Command)
	require.ElementsMatch(t, []string{"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"}, we.SecurityOpt)
	require.NotContains(t, we.Environment, "TOOLQ_SNAPSHOT_KEY")

	// The scheduler logs in as its own role; Redis only with its profile.
	s := service(t, p, "scheduler")
	require.Equal(t, types.ShellCommand{"scheduler", "--replicas", "3"}, s.Command)
	require.Equal(t, "scheduler", *s.Environment["TOOLQ_NATS_USER"])
	require.Equal(t, "scheduler-password", *s.Environment["TOOLQ_NATS_PASSWORD"])
	require.Equal(t, "nats", *s.Environment["TOOLQ_SCHEDULER_ENGINE"])
	require.False(t, s.DependsOn["redis"].Required, "the scheduler starts without Redis")
	require.Greater(t, time.Duration(*s.StopGracePeriod), 10*time.Second, "more than the scheduler's --stop-timeout")
	r := service(t, p, "redis")
	require.Equal(t, []string{"redis"}, r.Profiles)

	// Without profiles: no Redis, no exec worker.
	p, err = loadCompose(t, composeEnv())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"nats-1", "nats-2", "nats-3", "worker", "scheduler"}, p.ServiceNames())
}

// otelVars are the OpenTelemetry variables every toolq service passes on.
var otelVars = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_TRACES_SAMPLER_ARG"}

// TestComposeTracing: traces are off unless the operator sets the
// endpoint (toolq exports when OTEL_EXPORTER_OTLP_ENDPOINT is not empty),
// and with it set every worker and the scheduler get the same settings; the
// endpoint of the profile's Jaeger names a service and a port it takes.
func TestComposeTracing(t *testing.T) {
	t.Parallel()
	toolq := []string{"worker", "worker-exec", "scheduler"}

	p, err := loadCompose(t, composeEnv(), "*")
	require.NoError(t, err)
	for _, name := range toolq {
		s := service(t, p, name)
		for _, v := range otelVars {
			val, ok := s.Environment[v]
			require.True(t, ok, "%s passes %s on", name, v)
			require.Empty(t, *val, "%s: %s is empty, so tracing is off", name, v)
		}
	}

	env := composeEnv()
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://jaeger:4318"
	env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
	env["OTEL_EXPORTER_OTLP_HEADERS"] = "x-team=ops"
	env["OTEL_TRACES_SAMPLER_ARG"] = "0.25"
	p, err = loadCompose(t, env, "tracing")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"nats-1", "nats-2", "nats-3", "worker", "scheduler", "jaeger"}, p.ServiceNames())
	_, err = p.GetService("worker-exec")
	require.Error(t, err, "the exec worker is not in the tracing profile")
	for _, name := range []string{"worker", "scheduler"} {
		s := service(t, p, name)
		for _, v := range otelVars {
			require.Equal(t, env[v], *s.Environment[v], "%s: %s", name, v)
		}
	}
	u, err := url.Parse(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
	require.NoError(t, err)
	j := service(t, p, u.Hostname())
	require.Equal(t, []string{"tracing"}, j.Profiles)
	require.Contains(t, j.Expose, u.Port(), "the endpoint's port")
	require.Contains(t, j.Expose, "4317", "OTLP/gRPC's port")
	require.Len(t, j.Ports, 1)
	require.Equal(t, "127.0.0.1", j.Ports[0].HostIP, "the UI on loopback only")
	require.Equal(t, uint32(16686), j.Ports[0].Target)
}

func TestComposeNeedsSecrets(t *testing.T) {
	t.Parallel()
	for _, missing := range []string{"TOOLQ_WORKER_PASSWORD", "TOOLQ_SCHEDULER_PASSWORD", "TOOLQ_SNAPSHOT_KEY"} {
		env := composeEnv()
		delete(env, missing)
		_, err := loadCompose(t, env)
		require.ErrorContains(t, err, missing, "a missing %s stops the load", missing)
	}
}

// routesOf returns the cluster routes of deploy/nats/cluster.conf, parsed
// by nats-server itself with the environment a compose node has; the
// include of tenants.conf (accounts, users, permissions) is parsed too.
func routesOf(t *testing.T) []string {
	t.Helper()
	opts := clusterOpts(t)
	var out []string
	for _, u := range opts.Routes {
		out = append(out, u.String())
	}
	return out
}

// TestMain sets the environment of a compose NATS node: nats-server
// resolves the $VARIABLES of cluster.conf and tenants.conf from the process
// environment (t.Setenv would rule out parallel tests).
func TestMain(m *testing.M) {
	for k, v := range map[string]string{"SERVER_NAME": "nats-2", "TOOLQ_WORKER_PASSWORD": "w", "TOOLQ_SCHEDULER_PASSWORD": "s"} {
		if err := os.Setenv(k, v); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// clusterOpts parses cluster.conf as a compose node's nats-server does.
func clusterOpts(t *testing.T) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(filepath.FromSlash("nats/cluster.conf"))
	require.NoError(t, err)
	return opts
}

func TestNATSClusterConfig(t *testing.T) {
	t.Parallel()
	opts := clusterOpts(t)
	require.Equal(t, "nats-2", opts.ServerName)
	require.True(t, opts.JetStream)
	require.Equal(t, "/data", opts.StoreDir)
	require.Equal(t, "toolq", opts.Cluster.Name)
	require.Equal(t, 6222, opts.Cluster.Port)
	require.Equal(t, 8222, opts.HTTPPort)
	require.Len(t, opts.Routes, 3)
	var accounts []string
	for _, a := range opts.Accounts {
		accounts = append(accounts, a.Name)
	}
	require.Contains(t, accounts, "TOOLQ")
	var users []string
	for _, u := range opts.Users {
		users = append(users, u.Username)
	}
	slices.Sort(users)
	require.Equal(t, []string{"scheduler", "worker"}, users)
}
