// Package deploy holds the tests of toolq's deploy artefacts: the Helm chart
// (rendered with Helm's Go library and decoded strictly into the Kubernetes
// API types), the Dockerfile (parsed with BuildKit's parser) and the compose
// file (loaded with the compose-spec loader). It is a module of its own, so
// none of these libraries enters the main module's graph or the binary.
package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

const (
	chartDir    = "helm/toolq"
	releaseName = "tq"
	namespace   = "agents"
)

// object is one rendered manifest, decoded into its API type.
type object struct {
	file string
	kind string
	name string
	obj  any
}

// manifests is a rendered release.
type manifests struct {
	objs  []object
	notes string
}

// newObject returns the API type of apiVersion and kind; an object of any
// other type fails the test, so a typo in either is caught too.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &monitoringv1.PrometheusRule{}, nil
	case "keda.sh/v1alpha1 ScaledObject":
		return &ScaledObject{}, nil
	}
	return nil, fmt.Errorf("unexpected apiVersion %q kind %q", apiVersion, kind)
}

// decodeStrict decodes one YAML document into its API type the way the API
// server's strict field validation does: case-sensitive, and an unknown
// or duplicate field is an error.
func decodeStrict(doc []byte) (object, error) {
	data, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return object{}, err
	}
	var tm metav1.TypeMeta
	if err := k8sjson.UnmarshalCaseSensitivePreserveInts(data, &tm); err != nil {
		return object{}, err
	}
	obj, err := newObject(tm.APIVersion, tm.Kind)
	if err != nil {
		return object{}, err
	}
	strict, err := k8sjson.UnmarshalStrict(data, obj, k8sjson.DisallowDuplicateFields, k8sjson.DisallowUnknownFields)
	if err != nil {
		return object{}, err
	}
	if len(strict) > 0 {
		return object{}, fmt.Errorf("%s: %w", tm.Kind, errors.Join(strict...))
	}
	meta, ok := obj.(metav1.Object)
	if !ok {
		return object{}, fmt.Errorf("%s has no object metadata", tm.Kind)
	}
	if meta.GetName() == "" {
		return object{}, fmt.Errorf("%s without a name", tm.Kind)
	}
	return object{kind: tm.Kind, name: meta.GetName(), obj: obj}, nil
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// renderChart renders the chart at dir with vals over its values.yaml
// (strict: a template that reads a value that does not exist fails) and
// decodes every manifest.
func renderChart(dir string, vals map[string]any) (*manifests, error) {
	chrt, err := loader.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	return renderLoaded(chrt, vals)
}

func renderLoaded(chrt *chartv2.Chart, vals map[string]any) (*manifests, error) {
	opts := common.ReleaseOptions{Name: releaseName, Namespace: namespace, IsInstall: true, Revision: 1}
	rv, err := util.ToRenderValues(chrt, vals, opts, common.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Engine{Strict: true}.RenderWithContext(context.Background(), chrt, rv)
	if err != nil {
		return nil, err
	}
	m := &manifests{}
	for _, file := range slices.Sorted(maps.Keys(out)) {
		if strings.HasSuffix(file, "NOTES.txt") {
			m.notes = out[file]
			continue
		}
		for _, doc := range docSep.Split(out[file], -1) {
			if len(bytes.TrimSpace(stripComments([]byte(doc)))) == 0 {
				continue
			}
			o, err := decodeStrict([]byte(doc))
			if err != nil {
				return nil, fmt.Errorf("%s: %w\n%s", file, err, doc)
			}
			o.file = file
			m.objs = append(m.objs, o)
		}
	}
	return m, nil
}

func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}

// render renders the chart with the base values and overrides merged in.
func render(t *testing.T, overrides ...map[string]any) *manifests {
	t.Helper()
	m, err := renderChart(chartDir, values(overrides...))
	require.NoError(t, err)
	return m
}

// values are the base values every test starts from: an external NATS
// (the NATS chart cannot be fetched here), passwords and a snapshot key.
func values(overrides ...map[string]any) map[string]any {
	v := map[string]any{
		"bus": map[string]any{
			"url":                "nats://nats-0.bus.svc:4222,nats://nats-1.bus.svc:4222",
			"monitoringEndpoint": "nats-headless.bus.svc:8222",
		},
		"auth": map[string]any{
			"worker":    map[string]any{"password": "worker-password"},
			"scheduler": map[string]any{"password": "scheduler-password"},
		},
		"snapshotKey": map[string]any{"value": strings.Repeat("5a", 32)},
	}
	for _, o := range overrides {
		v = loader.MergeMaps(v, o)
	}
	return v
}

func (m *manifests) all(kind string) []object {
	var out []object
	for _, o := range m.objs {
		if o.kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func (m *manifests) find(kind, name string) (object, bool) {
	for _, o := range m.objs {
		if o.kind == kind && o.name == name {
			return o, true
		}
	}
	return object{}, false
}

func (m *manifests) deployment(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()
	o, ok := m.find("Deployment", name)
	require.True(t, ok, "no Deployment %s in %v", name, m.names("Deployment"))
	d, ok := o.obj.(*appsv1.Deployment)
	require.True(t, ok)
	return d
}

func (m *manifests) names(kind string) []string {
	var out []string
	for _, o := range m.all(kind) {
		out = append(out, o.name)
	}
	return out
}

func typed[T any](t *testing.T, objs []object) []T {
	t.Helper()
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		v, ok := o.obj.(T)
		require.True(t, ok, "%s %s is %T", o.kind, o.name, o.obj)
		out = append(out, v)
	}
	return out
}

// readFile reads a file of the repository, relative to this module.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	require.NoError(t, err)
	return b
}

// yamlUnmarshal decodes YAML leniently (a part of a larger document).
func yamlUnmarshal(b []byte, v any) error { return yaml.Unmarshal(b, v) }
