{{/* Names: "<release>" alone when the release is called "meshplane", else "<release>-meshplane". */}}
{{- define "meshplane.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "meshplane.server.name" -}}{{ include "meshplane.fullname" . }}-server{{- end -}}
{{- define "meshplane.agent.name" -}}{{ include "meshplane.fullname" . }}-agent{{- end -}}

{{/* The image both parts run. */}}
{{- define "meshplane.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Labels of every object of one part ("server" or "agent"); the selector labels are their first two. */}}
{{- define "meshplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meshplane.fullname" .root }}-{{ .part }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "meshplane.labels" -}}
{{ include "meshplane.selectorLabels" . }}
app.kubernetes.io/part-of: meshplane
app.kubernetes.io/component: {{ .part }}
{{- end -}}

{{- define "meshplane.podLabels" -}}
{{ include "meshplane.labels" . }}
app.kubernetes.io/version: {{ .root.Values.image.tag | default .root.Chart.AppVersion | quote }}
{{- end -}}

{{/* The pod and container hardening both parts share: uid 10001, read-only root, no capabilities. */}}
{{- define "meshplane.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "meshplane.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* A TOML line `key = value` per entry of .settings (values written as JSON, which TOML reads the same);
a key the chart itself writes (.reserved) fails, naming .path: TOML refuses a key given twice. */}}
{{- define "meshplane.tomlSettings" -}}
{{- $lines := list -}}
{{- range $key, $value := .settings -}}
{{- if has $key $.reserved -}}
{{- fail (printf "%s.%s: the chart sets it from its own values" $.path $key) -}}
{{- end -}}
{{- $lines = append $lines (printf "%s = %s" $key (toJson $value)) -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}

{{/* The address agents dial: the value given, else this release's server Service when the server is on. */}}
{{- define "meshplane.agent.serverAddress" -}}
{{- if .Values.agent.serverAddress -}}
{{- .Values.agent.serverAddress -}}
{{- else if .Values.server.enabled -}}
{{- printf "%s.%s.svc:18000" (include "meshplane.server.name" .) .Release.Namespace -}}
{{- else -}}
{{- fail "agent.serverAddress: set the host:port of the management server's agent sync (the server is not part of this release)" -}}
{{- end -}}
{{- end -}}
