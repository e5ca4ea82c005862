package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"

	"github.com/toolq/toolq/contracts"
)

const (
	general   = releaseName + "-toolq-worker-general"
	execGroup = releaseName + "-toolq-worker-exec"
	scheduler = releaseName + "-toolq-scheduler"
)

// checkRelease asserts what must hold for every values combination: names
// and labels are valid, selectors select their pods, every Secret and
// ConfigMap a pod reads is rendered (with the key it reads) or named as
// existing, probes point at a declared port, pods run as non-root, the
// grace period covers the stop timeout, and each autoscaler and PDB
// targets a Deployment of the release.
func checkRelease(t *testing.T, m *manifests, existing ...string) {
	t.Helper()
	require.NotEmpty(t, m.objs)
	seen := map[string]bool{}
	for _, o := range m.objs {
		key := o.kind + "/" + o.name
		require.False(t, seen[key], "%s rendered twice", key)
		seen[key] = true
		require.Empty(t, validation.IsDNS1123Subdomain(o.name), "%s: name", key)
		meta, ok := o.obj.(metav1.Object)
		require.True(t, ok)
		for k, v := range meta.GetLabels() {
			require.Empty(t, validation.IsQualifiedName(k), "%s: label key %q", key, k)
			require.Empty(t, validation.IsValidLabelValue(v), "%s: label %s=%q", key, k, v)
		}
		require.Equal(t, releaseName, meta.GetLabels()["app.kubernetes.io/instance"], "%s: instance label", key)
	}
	for _, d := range typed[*appsv1.Deployment](t, m.all("Deployment")) {
		checkDeployment(t, m, d, existing)
	}
	for _, p := range typed[*policyv1.PodDisruptionBudget](t, m.all("PodDisruptionBudget")) {
		require.NotEmpty(t, selected(t, m, p.Spec.Selector), "PDB %s selects no Deployment", p.Name)
	}
	for _, so := range typed[*ScaledObject](t, m.all("ScaledObject")) {
		checkScaledObject(t, m, so)
	}
	for _, h := range typed[*autoscalingv2.HorizontalPodAutoscaler](t, m.all("HorizontalPodAutoscaler")) {
		require.Equal(t, "Deployment", h.Spec.ScaleTargetRef.Kind)
		d := m.deployment(t, h.Spec.ScaleTargetRef.Name)
		require.Nil(t, d.Spec.Replicas, "%s: the HPA owns replicas", d.Name)
		require.NotNil(t, h.Spec.MinReplicas)
		require.LessOrEqual(t, *h.Spec.MinReplicas, h.Spec.MaxReplicas)
		require.NotNil(t, d.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu(), "%s: CPU utilization needs a request", d.Name)
		require.False(t, d.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().IsZero(), "%s: CPU utilization needs a request", d.Name)
	}
	for _, np := range typed[*networkingv1.NetworkPolicy](t, m.all("NetworkPolicy")) {
		require.NotEmpty(t, selected(t, m, &np.Spec.PodSelector), "NetworkPolicy %s selects no pod", np.Name)
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes)
	}
	for _, sm := range typed[*monitoringv1.ServiceMonitor](t, m.all("ServiceMonitor")) {
		checkServiceMonitor(t, m, sm)
	}
}

// selected returns the Deployments whose pods sel selects.
func selected(t *testing.T, m *manifests, sel *metav1.LabelSelector) []string {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	require.NoError(t, err)
	var out []string
	for _, d := range typed[*appsv1.Deployment](t, m.all("Deployment")) {
		if s.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d.Name)
		}
	}
	return out
}

func checkDeployment(t *testing.T, m *manifests, d *appsv1.Deployment, existing []string) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	require.NoError(t, err)
	require.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)), "%s: selector does not select its pods", d.Name)
	for _, other := range typed[*appsv1.Deployment](t, m.all("Deployment")) {
		if other.Name != d.Name {
			require.False(t, sel.Matches(labels.Set(other.Spec.Template.Labels)), "%s selects the pods of %s", d.Name, other.Name)
		}
	}
	pod := d.Spec.Template.Spec
	require.NotNil(t, pod.SecurityContext.RunAsNonRoot)
	require.True(t, *pod.SecurityContext.RunAsNonRoot, "%s: runAsNonRoot", d.Name)
	require.NotZero(t, *pod.SecurityContext.RunAsUser, "%s: runs as root", d.Name)
	require.NotNil(t, pod.AutomountServiceAccountToken)
	require.False(t, *pod.AutomountServiceAccountToken, "%s: mounts an API token it never uses", d.Name)
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, "toolq:0.1.0", c.Image)
	require.False(t, *c.SecurityContext.AllowPrivilegeEscalation, "%s", d.Name)
	require.True(t, *c.SecurityContext.ReadOnlyRootFilesystem, "%s", d.Name)
	require.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop, "%s", d.Name)
	require.Empty(t, c.SecurityContext.Capabilities.Add, "%s", d.Name)

	// The grace period covers the process's own stop timeout.
	stop, ok := flagValue(c.Args, "--stop-timeout")
	require.True(t, ok, "%s: no --stop-timeout in %v", d.Name, c.Args)
	dur, err := time.ParseDuration(stop)
	require.NoError(t, err)
	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	require.Greater(t, time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second, dur,
		"%s: terminationGracePeriodSeconds %d does not cover --stop-timeout %s", d.Name, *pod.TerminationGracePeriodSeconds, dur)

	// Probes point at a port the container declares.
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = true
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if p != nil {
			require.True(t, ports[p.HTTPGet.Port.StrVal], "%s: probe on undeclared port %q", d.Name, p.HTTPGet.Port.String())
		}
	}

	// Every Secret and ConfigMap the pod reads exists, with the key read.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
		switch {
		case v.Secret != nil:
			for _, it := range v.Secret.Items {
				requireKey(t, m, "Secret", v.Secret.SecretName, it.Key, existing)
			}
			requireObject(t, m, "Secret", v.Secret.SecretName, existing)
		case v.ConfigMap != nil:
			requireObject(t, m, "ConfigMap", v.ConfigMap.Name, existing)
		}
	}
	for _, vm := range c.VolumeMounts {
		_, ok := volumes[vm.Name]
		require.True(t, ok, "%s: mount of undeclared volume %s", d.Name, vm.Name)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			requireKey(t, m, "Secret", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key, existing)
		}
	}
	for _, e := range c.EnvFrom {
		requireObject(t, m, "Secret", e.SecretRef.Name, existing)
	}
	for _, a := range c.Args {
		if path, ok := strings.CutPrefix(a, "--snapshot-key-file="); ok {
			requireMounted(t, c, path)
		}
	}
}

// requireMounted checks that path is under one of c's mounts.
func requireMounted(t *testing.T, c corev1.Container, path string) {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		if strings.HasPrefix(path, vm.MountPath+"/") {
			return
		}
	}
	require.Failf(t, "not mounted", "%s is under no mount of %s", path, c.Name)
}

func requireObject(t *testing.T, m *manifests, kind, name string, existing []string) {
	t.Helper()
	if slices.Contains(existing, name) {
		return
	}
	_, ok := m.find(kind, name)
	require.True(t, ok, "%s %s is read but not rendered (have %v)", kind, name, m.names(kind))
}

func requireKey(t *testing.T, m *manifests, kind, name, key string, existing []string) {
	t.Helper()
	if slices.Contains(existing, name) {
		return
	}
	o, ok := m.find(kind, name)
	require.True(t, ok, "%s %s is read but not rendered", kind, name)
	s, ok := o.obj.(*corev1.Secret)
	require.True(t, ok)
	_, ok = s.StringData[key]
	require.True(t, ok, "Secret %s has no key %s", name, key)
}

func checkScaledObject(t *testing.T, m *manifests, so *ScaledObject) {
	t.Helper()
	ref := so.Spec.ScaleTargetRef
	require.Equal(t, "apps/v1", ref.APIVersion)
	require.Equal(t, "Deployment", ref.Kind)
	d := m.deployment(t, ref.Name)
	require.Nil(t, d.Spec.Replicas, "%s: KEDA owns replicas; a fixed count fights it on every apply", d.Name)
	require.NotEmpty(t, so.Spec.Triggers)
	require.LessOrEqual(t, *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount)
	require.Positive(t, *so.Spec.MinReplicaCount, "%s: a worker must run to create its consumers", so.Name)
	names := map[string]bool{}
	for _, tr := range so.Spec.Triggers {
		require.Equal(t, "nats-jetstream", tr.Type)
		require.False(t, names[tr.Name], "%s: trigger name %s twice", so.Name, tr.Name)
		names[tr.Name] = true
		for k := range tr.Metadata {
			_, known := natsJetStreamMetadata[k]
			require.True(t, known, "%s: trigger %s: metadata %q is not read by the nats-jetstream scaler", so.Name, tr.Name, k)
		}
		for k, req := range natsJetStreamMetadata {
			if req {
				require.NotEmpty(t, tr.Metadata[k], "%s: trigger %s: no %s", so.Name, tr.Name, k)
			}
		}
		for _, k := range []string{"lagThreshold", "activationLagThreshold"} {
			_, err := strconv.ParseInt(tr.Metadata[k], 10, 64)
			require.NoError(t, err, "%s: %s", so.Name, k)
		}
		_, err := strconv.ParseBool(tr.Metadata["useHttps"])
		require.NoError(t, err)
	}
}

func checkServiceMonitor(t *testing.T, m *manifests, sm *monitoringv1.ServiceMonitor) {
	t.Helper()
	var svc *corev1.Service
	for _, s := range typed[*corev1.Service](t, m.all("Service")) {
		if labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(s.Labels)) {
			require.Nil(t, svc, "ServiceMonitor selects two Services")
			svc = s
		}
	}
	require.NotNil(t, svc, "ServiceMonitor selects no Service")
	require.Len(t, sm.Spec.Endpoints, 1)
	require.Equal(t, svc.Spec.Ports[0].Name, sm.Spec.Endpoints[0].Port)
	pods := selected(t, m, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
	require.ElementsMatch(t, m.names("Deployment"), pods, "the metrics Service selects every toolq pod")
}

func flagValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func scaledObject(t *testing.T, m *manifests, name string) *ScaledObject {
	t.Helper()
	o, ok := m.find("ScaledObject", name)
	require.True(t, ok, "no ScaledObject %s in %v", name, m.names("ScaledObject"))
	so, ok := o.obj.(*ScaledObject)
	require.True(t, ok)
	return so
}

// consumers returns the stream/consumer pairs of a ScaledObject's triggers.
func consumers(so *ScaledObject) []string {
	var out []string
	for _, tr := range so.Spec.Triggers {
		out = append(out, tr.Metadata["stream"]+"/"+tr.Metadata["consumer"])
	}
	return out
}

func TestChartDefaults(t *testing.T) {
	t.Parallel()
	m := render(t)
	checkRelease(t, m)

	require.ElementsMatch(t, []string{general, execGroup, scheduler}, m.names("Deployment"))
	require.ElementsMatch(t, []string{general, execGroup, scheduler}, m.names("PodDisruptionBudget"))
	require.ElementsMatch(t, []string{general, execGroup}, m.names("ScaledObject"))
	require.Empty(t, m.all("HorizontalPodAutoscaler"))
	require.Len(t, m.all("ServiceMonitor"), 1)
	require.Len(t, m.all("NetworkPolicy"), 2)
	// No NATS chart objects: it is off, the bus is external.
	_, ok := m.find("ConfigMap", "toolq-nats-accounts")
	require.False(t, ok)

	for _, name := range []string{general, execGroup, scheduler} {
		c := m.deployment(t, name).Spec.Template.Spec.Containers[0]
		nats, ok := env(c, "TOOLQ_NATS")
		require.True(t, ok)
		require.Equal(t, "nats://nats-0.bus.svc:4222,nats://nats-1.bus.svc:4222", nats.Value, "%s: the external URL", name)
		require.Contains(t, c.Args, "--metrics-listen=0.0.0.0:9090", name)
		require.Contains(t, c.Args, "--replicas=3", name)
		require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
		require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
		require.Equal(t, "metrics", c.ReadinessProbe.HTTPGet.Port.StrVal)
		require.NotContains(t, c.Args, "--tenants", name)
		require.NotContains(t, c.Args, "--session-lanes", name)
	}

	// Workers log in as the worker role, the scheduler as its own.
	for name, secret := range map[string]string{general: "toolq-nats-worker", execGroup: "toolq-nats-worker", scheduler: "toolq-nats-scheduler"} {
		c := m.deployment(t, name).Spec.Template.Spec.Containers[0]
		pw, ok := env(c, "TOOLQ_NATS_PASSWORD")
		require.True(t, ok)
		require.Equal(t, secret, pw.ValueFrom.SecretKeyRef.Name, name)
	}

	// general: code mode with the snapshot key, no exec, no sandbox rights.
	gd := m.deployment(t, general)
	gc := gd.Spec.Template.Spec.Containers[0]
	require.Contains(t, gc.Args, "--tools=code_execution,code_mode", "exactly its packs: no exec")
	require.Contains(t, gc.Args, "--snapshot-key-file=/etc/toolq/snapshot/snapshot.key")
	require.Nil(t, gd.Spec.Template.Spec.HostUsers)
	require.Nil(t, gc.SecurityContext.ProcMount)
	require.Nil(t, gc.SecurityContext.SeccompProfile, "the pod's RuntimeDefault applies")
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, gd.Spec.Template.Spec.SecurityContext.SeccompProfile.Type)
	require.Equal(t, int64(45), *gd.Spec.Template.Spec.TerminationGracePeriodSeconds)

	// exec: the sandbox's needs, and nothing of code mode.
	ed := m.deployment(t, execGroup)
	ec := ed.Spec.Template.Spec.Containers[0]
	require.Contains(t, ec.Args, "--tools=exec", "exactly exec: no code mode, no code_execution")
	require.NotNil(t, ed.Spec.Template.Spec.HostUsers)
	require.False(t, *ed.Spec.Template.Spec.HostUsers, "procMount Unmasked needs a pod user namespace")
	require.Equal(t, corev1.UnmaskedProcMount, *ec.SecurityContext.ProcMount)
	require.Equal(t, corev1.SeccompProfileTypeUnconfined, ec.SecurityContext.SeccompProfile.Type)
	require.Equal(t, corev1.AppArmorProfileTypeUnconfined, ec.SecurityContext.AppArmorProfile.Type)
	for _, v := range ed.Spec.Template.Spec.Volumes {
		require.NotEqual(t, "snapshot-key", v.Name, "exec workers get no snapshot key")
	}
	_, ok = env(ec, "TOOLQ_APPROVERS")
	require.False(t, ok, "no approvers configured")

	// The triggers name the streams and consumers the worker creates
	// (contracts.Subjects), one per tool and level of the group
	// (code_mode.result is NormalOnly: one).
	subj := contracts.Subjects{}
	var want []string
	for _, tool := range []string{contracts.ToolCodeExecution, contracts.ToolCodeModeExec, contracts.ToolCodeModeWait, contracts.ToolCodeModeResult} {
		levels := []contracts.Priority{contracts.PriorityNormal, contracts.PriorityHigh, contracts.PriorityLow}
		if tool == contracts.ToolCodeModeResult {
			levels = levels[:1]
		}
		for _, p := range levels {
			want = append(want, subj.JobsStream()+"/"+subj.ConsumerNameAt(tool, p))
		}
	}
	so := scaledObject(t, m, general)
	require.Equal(t, want, consumers(so))
	require.Equal(t, "nats-headless.bus.svc:8222", so.Spec.Triggers[0].Metadata["natsServerMonitoringEndpoint"])
	require.Equal(t, "TOOLQ", so.Spec.Triggers[0].Metadata["account"])
	require.Equal(t, "32", so.Spec.Triggers[0].Metadata["lagThreshold"])
	require.Equal(t, int32(2), so.Spec.Fallback.Replicas)
	require.Equal(t, []string{
		subj.JobsStream() + "/" + subj.ConsumerName(contracts.ToolExec),
		subj.JobsStream() + "/" + subj.ConsumerNameAt(contracts.ToolExec, contracts.PriorityHigh),
		subj.JobsStream() + "/" + subj.ConsumerNameAt(contracts.ToolExec, contracts.PriorityLow),
	}, consumers(scaledObject(t, m, execGroup)), "the exec group serves exec alone (--tools=exec)")

	// The scheduler: two replicas, a fixed count (no autoscaler).
	sd := m.deployment(t, scheduler)
	require.Equal(t, int32(2), *sd.Spec.Replicas)
	require.Contains(t, sd.Spec.Template.Spec.Containers[0].Args, "--engine=nats")
	require.Equal(t, int64(25), *sd.Spec.Template.Spec.TerminationGracePeriodSeconds)
	_, ok = m.find("Secret", releaseName+"-toolq-redis")
	require.False(t, ok)
}

func TestChartCombinations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values map[string]any
		check  func(t *testing.T, m *manifests)
	}{
		{
			name:   "keda off: an HPA per group",
			values: map[string]any{"autoscaling": map[string]any{"keda": map[string]any{"enabled": false}}},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				require.Empty(t, m.all("ScaledObject"))
				require.ElementsMatch(t, []string{general, execGroup}, m.names("HorizontalPodAutoscaler"))
				h := typed[*autoscalingv2.HorizontalPodAutoscaler](t, m.all("HorizontalPodAutoscaler"))[0]
				require.Equal(t, corev1.ResourceCPU, h.Spec.Metrics[0].Resource.Name)
			},
		},
		{
			// values.schema.json once typed these lists as strings.
			name: "network policy: NATS peers and extra egress rules",
			values: map[string]any{"networkPolicy": map[string]any{
				"natsTo":      []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/8"}}},
				"extraEgress": []any{map[string]any{"ports": []any{map[string]any{"port": 5432, "protocol": "TCP"}}}},
			}},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				for _, np := range typed[*networkingv1.NetworkPolicy](t, m.all("NetworkPolicy")) {
					require.Contains(t, egressPorts(np), int32(5432), np.Name)
					require.True(t, slices.ContainsFunc(np.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool {
						return slices.Contains(portsOf(r), 4222) && len(r.To) == 1 && r.To[0].IPBlock.CIDR == "10.0.0.0/8"
					}), np.Name)
				}
			},
		},
		{
			name:   "no autoscaling: fixed replicas",
			values: map[string]any{"autoscaling": map[string]any{"keda": map[string]any{"enabled": false}, "hpa": map[string]any{"enabled": false}}},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				require.Empty(t, m.all("ScaledObject"))
				require.Empty(t, m.all("HorizontalPodAutoscaler"))
				require.Equal(t, int32(2), *m.deployment(t, general).Spec.Replicas)
				require.Equal(t, int32(1), *m.deployment(t, execGroup).Spec.Replicas)
			},
		},
		{
			name:   "exec group off",
			values: map[string]any{"workers": map[string]any{"exec": map[string]any{"enabled": false}}},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				require.ElementsMatch(t, []string{general, scheduler}, m.names("Deployment"))
				require.Equal(t, []string{general}, m.names("ScaledObject"))
				require.ElementsMatch(t, []string{general, scheduler}, m.names("PodDisruptionBudget"))
			},
		},
		{
			name:   "session lanes on",
			values: map[string]any{"bus": map[string]any{"sessionLanes": true}},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				for _, name := range []string{general, execGroup} {
					require.Contains(t, m.deployment(t, name).Spec.Template.Spec.Containers[0].Args, "--session-lanes", name)
				}
				// A trigger per level and lane, named as the worker names
				// the consumers; code_mode.result (NormalOnly) keeps one.
				subj := contracts.Subjects{}
				var want []string
				for _, p := range []contracts.Priority{contracts.PriorityNormal, contracts.PriorityHigh, contracts.PriorityLow} {
					for lane := range contracts.SessionLanes {
						want = append(want, subj.JobsStream()+"/"+subj.ConsumerNameLane(contracts.ToolExec, p, lane))
					}
				}
				require.Equal(t, want, consumers(scaledObject(t, m, execGroup)))
				got := consumers(scaledObject(t, m, general))
				require.Contains(t, got, subj.JobsStream()+"/"+subj.ConsumerName(contracts.ToolCodeModeResult))
				require.NotContains(t, got, subj.JobsStream()+"/"+subj.ConsumerNameLane(contracts.ToolCodeModeResult, contracts.PriorityNormal, 1))
				require.Len(t, got, 3*3*contracts.SessionLanes+1)
			},
		},
		{
			name: "tenants on",
			values: map[string]any{
				"tenants":   map[string]any{"enabled": true, "names": []any{"ACME"}, "queueLimit": 5000},
				"approvers": map[string]any{"publicKeys": []any{"UB67T6C5ATSMBT4ZJ7AELG52PIQ2DUFW54YI6CPMPCCKGBAR6CWGXM3Z"}},
			},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				for _, name := range []string{general, execGroup} {
					args := m.deployment(t, name).Spec.Template.Spec.Containers[0].Args
					require.Contains(t, args, "--tenants", name)
					require.Contains(t, args, "--tenant-queue-limit=5000", name)
				}
				subj := contracts.Subjects{}
				got := consumers(scaledObject(t, m, execGroup))
				for _, stream := range []string{subj.JobsStream(), subj.TenantJobsStream("ACME")} {
					for _, tool := range []string{contracts.ToolExec, contracts.ToolExecDecide} {
						require.Contains(t, got, stream+"/"+subj.ConsumerName(tool))
					}
					for _, p := range []contracts.Priority{contracts.PriorityHigh, contracts.PriorityLow} {
						require.Contains(t, got, stream+"/"+subj.ConsumerNameAt(contracts.ToolExec, p))
						require.NotContains(t, got, stream+"/"+subj.ConsumerNameAt(contracts.ToolExecDecide, p), "exec.decide is NormalOnly")
					}
				}
				require.Len(t, got, 8)
				ec := m.deployment(t, execGroup).Spec.Template.Spec.Containers[0]
				a, ok := env(ec, "TOOLQ_APPROVERS")
				require.True(t, ok)
				require.Equal(t, releaseName+"-toolq-approvers", a.ValueFrom.SecretKeyRef.Name)
				_, ok = env(m.deployment(t, general).Spec.Template.Spec.Containers[0], "TOOLQ_APPROVERS")
				require.False(t, ok, "only exec workers hold the approvers")
			},
		},
		{
			name: "the NATS chart in the release",
			values: map[string]any{
				"nats": map[string]any{"enabled": true},
				"bus":  map[string]any{"url": "", "monitoringEndpoint": ""},
			},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				c := m.deployment(t, general).Spec.Template.Spec.Containers[0]
				nats, _ := env(c, "TOOLQ_NATS")
				require.Equal(t, "nats://tq-nats.agents.svc:4222", nats.Value)
				require.Equal(t, "tq-nats-headless.agents.svc:8222",
					scaledObject(t, m, general).Spec.Triggers[0].Metadata["natsServerMonitoringEndpoint"])
				o, ok := m.find("ConfigMap", "toolq-nats-accounts")
				require.True(t, ok)
				cm, ok := o.obj.(*corev1.ConfigMap)
				require.True(t, ok)
				require.Equal(t, string(readFile(t, "nats/tenants.conf")), cm.Data["accounts.conf"])
				np, ok := m.find("NetworkPolicy", releaseName+"-toolq-worker")
				require.True(t, ok)
				egress := np.obj.(*networkingv1.NetworkPolicy).Spec.Egress[1]
				require.Equal(t, "nats", egress.To[0].PodSelector.MatchLabels["app.kubernetes.io/name"])
			},
		},
		{
			name: "credentials files instead of passwords",
			values: map[string]any{"auth": map[string]any{
				"mode":      "creds",
				"worker":    map[string]any{"creds": "user-jwt-and-seed"}, //nolint:gosec // G101: a placeholder, not a credential
				"scheduler": map[string]any{"creds": "x"},
			}},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				c := m.deployment(t, general).Spec.Template.Spec.Containers[0]
				creds, ok := env(c, "TOOLQ_CREDS")
				require.True(t, ok)
				requireMounted(t, c, creds.Value)
				_, ok = env(c, "TOOLQ_NATS_PASSWORD")
				require.False(t, ok)
			},
		},
		{
			name: "asynq scheduler",
			values: map[string]any{
				"scheduler": map[string]any{"engine": "asynq", "redis": map[string]any{"url": "redis://redis:6379/0"}},
				"bus":       map[string]any{"tls": map[string]any{"enabled": true, "secretName": "nats-ca", "mutual": true}},
			},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				c := m.deployment(t, scheduler).Spec.Template.Spec.Containers[0]
				require.Contains(t, c.Args, "--engine=asynq")
				r, ok := env(c, "TOOLQ_REDIS")
				require.True(t, ok)
				require.Equal(t, releaseName+"-toolq-redis", r.ValueFrom.SecretKeyRef.Name)
				ca, ok := env(c, "TOOLQ_TLS_KEY")
				require.True(t, ok)
				requireMounted(t, c, ca.Value)
			},
		},
		{
			name:   "no health port: no probes, no ServiceMonitor",
			values: map[string]any{"health": map[string]any{"enabled": false}},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				require.Empty(t, m.all("ServiceMonitor"))
				require.Empty(t, m.all("Service"))
				c := m.deployment(t, general).Spec.Template.Spec.Containers[0]
				require.Nil(t, c.ReadinessProbe)
				require.Empty(t, c.Ports)
				_, ok := flagValue(c.Args, "--metrics-listen")
				require.False(t, ok)
			},
		},
		{
			name: "a longer stop timeout, another port and prefix",
			values: map[string]any{
				"workerDefaults": map[string]any{"stopTimeoutSeconds": 120}, "bus": map[string]any{"prefix": "acme"},
				"health": map[string]any{"port": 8080, "portName": "http", "readinessPath": "/ready"},
			},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				d := m.deployment(t, general)
				require.Equal(t, int64(135), *d.Spec.Template.Spec.TerminationGracePeriodSeconds)
				c := d.Spec.Template.Spec.Containers[0]
				require.Contains(t, c.Args, "--stop-timeout=120s")
				require.Contains(t, c.Args, "--metrics-listen=0.0.0.0:8080")
				require.Equal(t, "/ready", c.ReadinessProbe.HTTPGet.Path)
				subj := contracts.Subjects{Prefix: "acme"}
				require.Contains(t, consumers(scaledObject(t, m, general)), subj.JobsStream()+"/"+subj.ConsumerName(contracts.ToolCodeModeWait))
			},
		},
		{
			name: "existing Secrets",
			values: map[string]any{
				"auth":        map[string]any{"worker": map[string]any{"existingSecret": true, "secretName": "my-worker", "password": ""}},
				"snapshotKey": map[string]any{"existingSecret": "my-snapshot-key", "value": ""},
			},
			check: func(t *testing.T, m *manifests) {
				t.Helper()
				_, ok := m.find("Secret", "my-worker")
				require.False(t, ok)
				_, ok = m.find("Secret", releaseName+"-toolq-snapshot-key")
				require.False(t, ok)
				pw, _ := env(m.deployment(t, general).Spec.Template.Spec.Containers[0], "TOOLQ_NATS_PASSWORD")
				require.Equal(t, "my-worker", pw.ValueFrom.SecretKeyRef.Name)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, tc.values)
			checkRelease(t, m, "my-worker", "my-snapshot-key", "nats-ca")
			tc.check(t, m)
		})
	}
}

func TestChartRejects(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		values map[string]any
		err    string
	}{
		"no bus":              {map[string]any{"bus": map[string]any{"url": ""}}, "bus.url is required"},
		"no worker password":  {map[string]any{"auth": map[string]any{"worker": map[string]any{"password": ""}}}, "auth.worker.password is required"},
		"no snapshot key":     {map[string]any{"snapshotKey": map[string]any{"value": ""}}, "snapshotKey.value"},
		"bad group name":      {map[string]any{"workers": map[string]any{"Big_Group": map[string]any{"enabled": true}}}, "a group name is a DNS label"},
		"bad approver key":    {map[string]any{"approvers": map[string]any{"publicKeys": []any{"SUAB"}}}, "not a public user or account nkey"},
		"bad tenant name":     {map[string]any{"tenants": map[string]any{"enabled": true, "names": []any{"a.b"}}}, "not a tenant name"},
		"unknown engine":      {map[string]any{"scheduler": map[string]any{"engine": "cron"}}, "/scheduler/engine': value must be one of 'nats', 'asynq'"},
		"unknown auth mode":   {map[string]any{"auth": map[string]any{"mode": "token"}}, "/auth/mode': value must be one of 'password', 'creds', 'none'"},
		"not a provider key":  {map[string]any{"providers": map[string]any{"keys": map[string]any{"PATH": "x"}}}, "not a provider key variable"},
		"asynq without redis": {map[string]any{"scheduler": map[string]any{"engine": "asynq"}}, "scheduler.redis.url"},
		"a group of no tools": {map[string]any{"workers": map[string]any{"exec": map[string]any{"exec": false}}}, "workers.exec serves no tool pack"},
		// values.schema.json: types, names and enumerations before any template runs.
		"a misspelt value":        {map[string]any{"workerDefault": map[string]any{"replicas": 3}}, "additional properties 'workerDefault' not allowed"},
		"a misspelt group switch": {map[string]any{"workers": map[string]any{"general": map[string]any{"codemode": true}}}, "additional properties 'codemode' not allowed"},
		"a count as a string":     {map[string]any{"workerDefaults": map[string]any{"concurrency": "many"}}, "concurrency"},
		"no replicas":             {map[string]any{"workers": map[string]any{"general": map[string]any{"replicas": 0}}}, "replicas"},
		"two stream replicas":     {map[string]any{"bus": map[string]any{"streamReplicas": 2}}, "streamReplicas"},
		"an unknown pull policy":  {map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, "pullPolicy"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := renderChart(chartDir, values(tc.values))
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// TestChartStrictDecoding breaks a copy of the chart the ways a typo would
// and checks that rendering and decoding fail: a misspelt field, a field
// at the wrong level, a misspelt value name.
func TestChartStrictDecoding(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		file, old, new, err string
	}{
		"misspelt field":       {"worker-deployment.yaml", "imagePullPolicy:", "imagePullPolicyy:", `unknown field "spec.template.spec.containers[0].imagePullPolicyy"`},
		"field case":           {"worker-deployment.yaml", "terminationGracePeriodSeconds:", "terminationGracePeriodseconds:", "unknown field"},
		"field at wrong level": {"worker-deployment.yaml", "          imagePullPolicy:", "          terminationGracePeriodSeconds: 30\n          imagePullPolicy:", `unknown field "spec.template.spec.containers[0].terminationGracePeriodSeconds"`},
		"duplicate key":        {"pdb.yaml", "  maxUnavailable:", "  selector: {}\n  maxUnavailable:", `key "selector" already set`},
		"scaledobject field":   {"autoscaling.yaml", "  pollingInterval:", "  pollInterval:", `unknown field "spec.pollInterval"`},
		"misspelt value":       {"worker-deployment.yaml", "$g.concurrency", "$g.concurency", "concurency"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := copyChart(t)
			path := filepath.Join(dir, "templates", tc.file)
			b, err := os.ReadFile(path) //nolint:gosec // G304: a file of the test's own copy of the chart
			require.NoError(t, err)
			require.Contains(t, string(b), tc.old)
			require.NoError(t, os.WriteFile(path, //nolint:gosec // G703: the test's own copy of the chart
				[]byte(strings.Replace(string(b), tc.old, tc.new, 1)), 0o600))
			_, err = renderChart(dir, values())
			require.ErrorContains(t, err, tc.err)
		})
	}
}

func copyChart(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS(chartDir)))
	return dst
}

// TestChartNATSValues checks the NATS chart's values against what this
// chart renders: the Secrets the NATS pods read the passwords from and the
// accounts ConfigMap they mount are the ones the chart makes, and the
// bundled accounts file is deploy/nats/tenants.conf.
func TestChartNATSValues(t *testing.T) {
	t.Parallel()
	require.Equal(t, string(readFile(t, "nats/tenants.conf")), string(readFile(t, chartDir+"/files/accounts.conf")),
		"files/accounts.conf is a copy of deploy/nats/tenants.conf")

	m := render(t, map[string]any{"nats": map[string]any{"enabled": true}})
	var v struct {
		NATS struct {
			Config struct {
				Cluster struct {
					Enabled  bool
					Replicas int
				}
				Jetstream struct{ Enabled bool }
				Merge     map[string]string
			}
			Container struct {
				Env map[string]struct {
					ValueFrom corev1.EnvVarSource `json:"valueFrom"`
				}
				Merge struct {
					VolumeMounts []corev1.VolumeMount `json:"volumeMounts"`
				}
			}
			PodTemplate struct {
				Merge struct {
					Spec corev1.PodSpec
				}
			} `json:"podTemplate"`
		} `json:"nats"`
	}
	require.NoError(t, yamlUnmarshal(readFile(t, chartDir+"/values.yaml"), &v))
	require.True(t, v.NATS.Config.Cluster.Enabled)
	require.Equal(t, 3, v.NATS.Config.Cluster.Replicas)
	require.True(t, v.NATS.Config.Jetstream.Enabled)
	for _, name := range []string{"TOOLQ_WORKER_PASSWORD", "TOOLQ_SCHEDULER_PASSWORD"} {
		ref := v.NATS.Container.Env[name].ValueFrom.SecretKeyRef
		require.NotNil(t, ref, name)
		requireKey(t, m, "Secret", ref.Name, ref.Key, nil)
	}
	require.Len(t, v.NATS.PodTemplate.Merge.Spec.Volumes, 1)
	vol := v.NATS.PodTemplate.Merge.Spec.Volumes[0]
	requireObject(t, m, "ConfigMap", vol.ConfigMap.Name, nil)
	require.Equal(t, vol.Name, v.NATS.Container.Merge.VolumeMounts[0].Name)
	// The NATS chart's config lives in /etc/nats-config; its include is
	// relative to that file.
	require.Equal(t, "/etc/nats-config/toolq", v.NATS.Container.Merge.VolumeMounts[0].MountPath)
	require.Equal(t, "./toolq/accounts.conf", v.NATS.Config.Merge["$include"])
}

// otlpArgs are the tracing flags of toolq worker and toolq scheduler.
var otlpArgs = []string{"--otlp-endpoint", "--otlp-protocol", "--trace-sample-ratio"}

// TestChartTracing: with tracing off no Deployment gets a tracing flag or
// variable and no NetworkPolicy opens a collector's port; with it on every
// worker group and the scheduler get the same flags, the headers from the
// named Secret, resource attributes naming their own Deployment and pod,
// and egress to the endpoint's port.
func TestChartTracing(t *testing.T) {
	t.Parallel()
	deployments := []string{general, execGroup, scheduler}

	t.Run("off", func(t *testing.T) {
		t.Parallel()
		m := render(t, map[string]any{"tracing": map[string]any{"endpoint": "otel.observability.svc:4317"}})
		checkRelease(t, m)
		require.ElementsMatch(t, deployments, m.names("Deployment"))
		for _, name := range deployments {
			c := m.deployment(t, name).Spec.Template.Spec.Containers[0]
			for _, f := range otlpArgs {
				_, ok := flagValue(c.Args, f)
				require.False(t, ok, "%s: %s with tracing off", name, f)
			}
			for _, e := range c.Env {
				require.False(t, strings.HasPrefix(e.Name, "OTEL_"), "%s: %s with tracing off", name, e.Name)
			}
		}
		for _, np := range typed[*networkingv1.NetworkPolicy](t, m.all("NetworkPolicy")) {
			require.NotContains(t, egressPorts(np), int32(4317), np.Name)
		}
	})

	for _, tc := range []struct {
		name, endpoint, protocol string
		ratio                    any
		port                     int32
		to                       []any
	}{
		{name: "grpc host:port", endpoint: "otel.observability.svc:4317", protocol: "grpc", ratio: 0.25, port: 4317},
		{name: "http URL with a path", endpoint: "http://otel.observability.svc:4318/v1/traces", protocol: "http/protobuf", ratio: 1, port: 4318},
		{
			name: "https URL without a port", endpoint: "https://otlp.vendor.example", protocol: "http/protobuf", ratio: 0.01, port: 443,
			to: []any{map[string]any{"ipBlock": map[string]any{"cidr": "203.0.113.0/24"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, map[string]any{
				"tracing": map[string]any{
					"enabled": true, "endpoint": tc.endpoint, "protocol": tc.protocol, "sampleRatio": tc.ratio,
					"headers": map[string]any{"existingSecret": "otel-headers", "key": "api"}, //nolint:gosec // G101: the name of a Secret and its key, no credential
				},
				"networkPolicy": map[string]any{"otlpTo": tc.to},
			})
			checkRelease(t, m, "otel-headers")
			for _, name := range deployments {
				c := m.deployment(t, name).Spec.Template.Spec.Containers[0]
				for f, want := range map[string]string{
					"--otlp-endpoint": tc.endpoint, "--otlp-protocol": tc.protocol, "--trace-sample-ratio": fmt.Sprint(tc.ratio),
				} {
					got, ok := flagValue(c.Args, f)
					require.True(t, ok, "%s: no %s in %v", name, f, c.Args)
					require.Equal(t, want, got, "%s: %s", name, f)
				}
				h, ok := env(c, "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
				require.True(t, ok, name)
				require.Equal(t, &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "otel-headers"}, Key: "api"},
					h.ValueFrom.SecretKeyRef, name)
				// $(TOOLQ_POD_NAME) expands only after its definition.
				pod := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "TOOLQ_POD_NAME" })
				attrs := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "OTEL_RESOURCE_ATTRIBUTES" })
				require.NotEqual(t, -1, pod, name)
				require.Greater(t, attrs, pod, "%s: the attributes follow the pod name they expand", name)
				require.Equal(t, "metadata.name", c.Env[pod].ValueFrom.FieldRef.FieldPath)
				require.Equal(t, "k8s.namespace.name="+namespace+",k8s.deployment.name="+name+",k8s.pod.name=$(TOOLQ_POD_NAME)",
					c.Env[attrs].Value, name)
			}
			nps := typed[*networkingv1.NetworkPolicy](t, m.all("NetworkPolicy"))
			require.Len(t, nps, 2, "the workers' and the scheduler's")
			for _, np := range nps {
				require.Contains(t, egressPorts(np), tc.port, np.Name)
				if tc.to != nil {
					require.True(t, slices.ContainsFunc(np.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool {
						return slices.Contains(portsOf(r), tc.port) && len(r.To) == 1 && r.To[0].IPBlock != nil && r.To[0].IPBlock.CIDR == "203.0.113.0/24"
					}), "%s: the collector's port, to otlpTo only", np.Name)
				}
			}
		})
	}

	t.Run("no headers secret", func(t *testing.T) {
		t.Parallel()
		m := render(t, map[string]any{"tracing": map[string]any{"enabled": true, "endpoint": "otel:4317"}})
		checkRelease(t, m)
		for _, name := range deployments {
			c := m.deployment(t, name).Spec.Template.Spec.Containers[0]
			_, ok := env(c, "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
			require.False(t, ok, name)
			p, _ := flagValue(c.Args, "--otlp-protocol")
			require.Equal(t, "http/protobuf", p, "%s: the default protocol", name)
			r, _ := flagValue(c.Args, "--trace-sample-ratio")
			require.Equal(t, "1", r, "%s: the default ratio", name)
		}
	})

	for name, tc := range map[string]struct {
		values map[string]any
		err    string
	}{
		"no endpoint":       {map[string]any{"enabled": true}, "tracing.endpoint is required"},
		"a path, no scheme": {map[string]any{"enabled": true, "endpoint": "otel/v1/traces"}, "want http(s)://host:port[/path] or host:port"},
		"another scheme":    {map[string]any{"enabled": true, "endpoint": "udp://otel:4317"}, "want http(s)://host:port[/path] or host:port"},
		"unknown protocol":  {map[string]any{"enabled": true, "endpoint": "otel:4317", "protocol": "thrift"}, "/tracing/protocol': value must be one of 'http/protobuf', 'grpc'"},
		"ratio above 1":     {map[string]any{"enabled": true, "endpoint": "otel:4317", "sampleRatio": 2}, "sampleRatio"},
		"misspelt value":    {map[string]any{"enabled": true, "endpoint": "otel:4317", "ratio": 0.5}, "additional properties 'ratio' not allowed"},
	} {
		t.Run("rejects "+name, func(t *testing.T) {
			t.Parallel()
			_, err := renderChart(chartDir, values(map[string]any{"tracing": tc.values}))
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// portsOf returns the ports of an egress rule.
func portsOf(r networkingv1.NetworkPolicyEgressRule) []int32 {
	var out []int32
	for _, p := range r.Ports {
		out = append(out, p.Port.IntVal)
	}
	return out
}

// egressPorts returns every port a NetworkPolicy lets its pods reach.
func egressPorts(np *networkingv1.NetworkPolicy) []int32 {
	var out []int32
	for _, r := range np.Spec.Egress {
		out = append(out, portsOf(r)...)
	}
	return out
}
