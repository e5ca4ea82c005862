{{- define "toolq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "toolq.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "toolq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "toolq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "toolq.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "toolq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "toolq.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "toolq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "toolq.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The NATS client URL: bus.url, else the NATS chart's Service. */}}
{{- define "toolq.natsURL" -}}
{{- if .Values.bus.url }}
{{- .Values.bus.url }}
{{- else if .Values.nats.enabled }}
{{- printf "nats://%s-nats.%s.svc:4222" .Release.Name .Release.Namespace }}
{{- else }}
{{- fail "bus.url is required when nats.enabled is false" }}
{{- end }}
{{- end }}

{{/* host:port of NATS monitoring for KEDA. */}}
{{- define "toolq.natsMonitoring" -}}
{{- if .Values.bus.monitoringEndpoint }}
{{- .Values.bus.monitoringEndpoint }}
{{- else if .Values.nats.enabled }}
{{- printf "%s-nats-headless.%s.svc:8222" .Release.Name .Release.Namespace }}
{{- else }}
{{- fail "bus.monitoringEndpoint is required for KEDA when nats.enabled is false" }}
{{- end }}
{{- end }}

{{/* Stream names, as contracts.Subjects names them. */}}
{{- define "toolq.jobsStream" -}}
{{- printf "%s_JOBS" (upper .Values.bus.prefix) }}
{{- end }}

{{/* The durable consumer of a tool: worker_<tool with "." as ":">. */}}
{{- define "toolq.consumer" -}}
{{- printf "worker_%s" (replace "." ":" .) }}
{{- end }}

{{/*
toolq.group: a worker group's settings, workerDefaults overridden by the
group's own. Input: dict root, name, group. Output: YAML.
*/}}
{{- define "toolq.group" -}}
{{- $g := mergeOverwrite (deepCopy .root.Values.workerDefaults) (deepCopy .group) }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .name) }}
{{- fail (printf "workers.%s: a group name is a DNS label (lower-case letters, digits, -)" .name) }}
{{- end }}
{{- $g | toYaml }}
{{- end }}

{{/* The tool packs a group serves, as toolq worker --tools takes them:
exactly these, so the group consumes no other tool. Input: dict name, g. */}}
{{- define "toolq.groupPacks" -}}
{{- $packs := list }}
{{- if .g.codeExecution }}{{ $packs = append $packs "code_execution" }}{{ end }}
{{- if .g.codeMode }}{{ $packs = append $packs "code_mode" }}{{ end }}
{{- if .g.exec }}{{ $packs = append $packs "exec" }}{{ end }}
{{- if .g.mcpConfig }}{{ $packs = append $packs "mcp" }}{{ end }}
{{- if not $packs }}
{{- fail (printf "workers.%s serves no tool pack: turn on codeExecution, codeMode, exec or give it an mcpConfig" .name) }}
{{- end }}
{{- join "," $packs }}
{{- end }}

{{/* The tools a group consumes, one per line. Input: dict root, g. */}}
{{- define "toolq.groupTools" -}}
{{- $tools := list }}
{{- if .g.codeExecution }}{{ $tools = append $tools "code_execution" }}{{ end }}
{{- if .g.codeMode }}{{ $tools = concat $tools (list "code_mode.exec" "code_mode.wait" "code_mode.result") }}{{ end }}
{{- if .g.exec }}
{{- $tools = append $tools "exec" }}
{{- if or .root.Values.approvers.publicKeys .root.Values.approvers.existingSecret .root.Values.tenants.enabled }}
{{- $tools = append $tools "exec.decide" }}
{{- end }}
{{- end }}
{{- if .g.builtins }}{{ $tools = concat $tools (list "noop" "sleep") }}{{ end }}
{{- $tools = concat $tools (.g.extraTools | default list) }}
{{- $tools | toYaml }}
{{- end }}

{{- define "toolq.snapshotKeySecret" -}}
{{- .Values.snapshotKey.existingSecret | default (printf "%s-snapshot-key" (include "toolq.fullname" .)) }}
{{- end }}
{{- define "toolq.providersSecret" -}}
{{- .Values.providers.existingSecret | default (printf "%s-providers" (include "toolq.fullname" .)) }}
{{- end }}
{{- define "toolq.approversSecret" -}}
{{- .Values.approvers.existingSecret | default (printf "%s-approvers" (include "toolq.fullname" .)) }}
{{- end }}
{{- define "toolq.redisSecret" -}}
{{- .Values.scheduler.redis.existingSecret | default (printf "%s-redis" (include "toolq.fullname" .)) }}
{{- end }}

{{/* Env and mounts for logging in to NATS. Input: dict root, role (worker|scheduler). */}}
{{- define "toolq.natsEnv" -}}
{{- $a := get .root.Values.auth .role }}
- name: TOOLQ_NATS
  value: {{ include "toolq.natsURL" .root | quote }}
{{- if eq .root.Values.auth.mode "password" }}
- name: TOOLQ_NATS_USER
  valueFrom:
    secretKeyRef: {name: {{ $a.secretName }}, key: user}
- name: TOOLQ_NATS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ $a.secretName }}, key: password}
{{- else if eq .root.Values.auth.mode "creds" }}
- name: TOOLQ_CREDS
  value: /etc/toolq/nats/creds
{{- else if ne .root.Values.auth.mode "none" }}
{{- fail "auth.mode is password, creds or none" }}
{{- end }}
{{- if .root.Values.bus.tls.enabled }}
- name: TOOLQ_TLS_CA
  value: /etc/toolq/tls/ca.crt
{{- if .root.Values.bus.tls.mutual }}
- name: TOOLQ_TLS_CERT
  value: /etc/toolq/tls/tls.crt
- name: TOOLQ_TLS_KEY
  value: /etc/toolq/tls/tls.key
{{- end }}
{{- end }}
{{- end }}

{{- define "toolq.natsMounts" -}}
{{- if eq .root.Values.auth.mode "creds" }}
- name: nats-creds
  mountPath: /etc/toolq/nats
  readOnly: true
{{- end }}
{{- if .root.Values.bus.tls.enabled }}
- name: nats-tls
  mountPath: /etc/toolq/tls
  readOnly: true
{{- end }}
{{- end }}

{{- define "toolq.natsVolumes" -}}
{{- $a := get .root.Values.auth .role }}
{{- if eq .root.Values.auth.mode "creds" }}
- name: nats-creds
  secret:
    secretName: {{ $a.secretName }}
    items: [{key: creds, path: creds}]
{{- end }}
{{- if .root.Values.bus.tls.enabled }}
- name: nats-tls
  secret:
    secretName: {{ required "bus.tls.secretName is required with bus.tls.enabled" .root.Values.bus.tls.secretName }}
{{- end }}
{{- end }}

{{/* Probes on the health port. */}}
{{- define "toolq.probes" -}}
{{- if .Values.health.enabled }}
startupProbe:
  httpGet: {path: {{ .Values.health.livenessPath }}, port: {{ .Values.health.portName }}}
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  httpGet: {path: {{ .Values.health.livenessPath }}, port: {{ .Values.health.portName }}}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet: {path: {{ .Values.health.readinessPath }}, port: {{ .Values.health.portName }}}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
{{- end }}
{{- end }}

{{- define "toolq.healthPorts" -}}
{{- if .Values.health.enabled }}
ports:
  - name: {{ .Values.health.portName }}
    containerPort: {{ .Values.health.port }}
    protocol: TCP
{{- end }}
{{- end }}

{{- define "toolq.healthArgs" -}}
{{- if .Values.health.enabled }}
- {{ printf "%s=0.0.0.0:%v" .Values.health.listenFlag .Values.health.port | quote }}
{{- end }}
{{- end }}

{{/* The OTLP flags of a worker or the scheduler: none with tracing off. */}}
{{- define "toolq.tracingArgs" -}}
{{- $tr := .Values.tracing }}
{{- if $tr.enabled }}
{{- $ep := required "tracing.endpoint is required with tracing.enabled" $tr.endpoint }}
{{- if not (regexMatch "^(https?://[^\\s/?#]+(/[^\\s]*)?|[^\\s/:?#]+:[0-9]{1,5})$" $ep) }}
{{- fail (printf "tracing.endpoint %q: want http(s)://host:port[/path] or host:port" $ep) }}
{{- end }}
- {{ printf "--otlp-endpoint=%s" $ep | quote }}
- {{ printf "--otlp-protocol=%s" $tr.protocol | quote }}
- {{ printf "--trace-sample-ratio=%v" $tr.sampleRatio | quote }}
{{- end }}
{{- end }}

{{/* The OTLP environment: the exporter's headers from a Secret, and
resource attributes naming the pod. Input: dict root, component. */}}
{{- define "toolq.tracingEnv" -}}
{{- $tr := .root.Values.tracing }}
{{- if $tr.enabled }}
{{- if $tr.headers.existingSecret }}
- name: OTEL_EXPORTER_OTLP_TRACES_HEADERS
  valueFrom:
    secretKeyRef: {name: {{ $tr.headers.existingSecret }}, key: {{ $tr.headers.key }}}
{{- end }}
- name: TOOLQ_POD_NAME
  valueFrom:
    fieldRef: {fieldPath: metadata.name}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ printf "k8s.namespace.name=%s,k8s.deployment.name=%s-%s,k8s.pod.name=$(TOOLQ_POD_NAME)" .root.Release.Namespace (include "toolq.fullname" .root) .component | quote }}
{{- end }}
{{- end }}

{{/* The collector's TCP port, from tracing.endpoint: its own, else 443
for https and 80 for http. */}}
{{- define "toolq.otlpPort" -}}
{{- $ep := .Values.tracing.endpoint }}
{{- $host := $ep }}
{{- if contains "://" $ep }}
{{- $host = (urlParse $ep).host }}
{{- end }}
{{- if regexMatch ":[0-9]+$" $host }}
{{- regexFind "[0-9]+$" $host }}
{{- else if hasPrefix "https://" $ep }}
{{- 443 }}
{{- else }}
{{- 80 }}
{{- end }}
{{- end }}
