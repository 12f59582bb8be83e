{{/* Names and labels. */}}
{{- define "kineticd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kineticd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kineticd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kineticd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kineticd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kineticd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "kineticd.secretName" -}}
{{- .Values.existingSecret | default (printf "%s-users" (include "kineticd.fullname" .)) -}}
{{- end -}}

{{/* Where the users Secret is mounted; kineticd.toml's users_file. */}}
{{- define "kineticd.usersDir" -}}/etc/kineticd-users{{- end -}}

{{/*
Shutdown timing: the grace period covers the preStop sleep, kineticd's own
drain (shutdown_timeout_ms, rounded up to seconds) and a margin.
*/}}
{{- define "kineticd.shutdownMs" -}}
{{- $server := .Values.config.server | default dict -}}
{{- $ms := $server.shutdown_timeout_ms -}}
{{- if kindIs "invalid" $ms }}{{ $ms = 30000 }}{{ end -}}
{{- int64 $ms -}}
{{- end -}}

{{- define "kineticd.terminationGracePeriodSeconds" -}}
{{- $ms := include "kineticd.shutdownMs" . | int64 -}}
{{- $needed := add (int64 .Values.preStopSleepSeconds) (div (add $ms 999) 1000) (int64 .Values.terminationGraceMarginSeconds) -}}
{{- $set := .Values.terminationGracePeriodSeconds -}}
{{- if kindIs "invalid" $set -}}
{{- $needed -}}
{{- else if lt (int64 $set) (int64 $needed) -}}
{{- fail (printf "terminationGracePeriodSeconds %d is shorter than preStopSleepSeconds + shutdown_timeout_ms (%d ms) + terminationGraceMarginSeconds = %d" (int64 $set) $ms $needed) -}}
{{- else -}}
{{- int64 $set -}}
{{- end -}}
{{- end -}}

{{/*
A TOML renderer for kineticd.toml: kineticd reads TOML, and its decoding is
strict (an integer key given 10000.0 is an error), while Helm holds every
YAML number as a float64; toToml would print those as floats. Whole numbers
are printed as integers here.

kineticd.toml.value: a scalar or an array of scalars.
*/}}
{{- define "kineticd.toml.value" -}}
{{- if kindIs "string" . -}}
{{- toJson . -}}
{{- else if kindIs "bool" . -}}
{{- . -}}
{{- else if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- if eq (float64 .) (floor .) }}{{ int64 . }}{{ else }}{{ . }}{{ end -}}
{{- else if kindIs "slice" . -}}
[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ include "kineticd.toml.value" $v }}{{ end }}]
{{- else -}}
{{- fail (printf "kineticd.toml: cannot write %v (%s) as a TOML value" . (kindOf .)) -}}
{{- end -}}
{{- end -}}

{{/*
kineticd.toml.table: (dict "path" "a.b" "table" MAP). Scalars first, then
sub-tables ([a.b.c]) and arrays of tables ([[a.b.c]]), each followed by its
own sub-tables, as TOML requires. Null values are left out.
*/}}
{{- define "kineticd.toml.table" -}}
{{- $path := .path -}}
{{- range $k, $v := .table -}}
{{- $tables := or (kindIs "map" $v) (and (kindIs "slice" $v) (gt (len $v) 0) (kindIs "map" (first $v))) -}}
{{- if and (not (kindIs "invalid" $v)) (not $tables) }}
{{ $k }} = {{ include "kineticd.toml.value" $v }}
{{- end -}}
{{- end -}}
{{- range $k, $v := .table -}}
{{- $name := ternary $k (printf "%s.%s" $path $k) (eq $path "") -}}
{{- if kindIs "map" $v }}

[{{ $name }}]
{{- include "kineticd.toml.table" (dict "path" $name "table" $v) -}}
{{- else if and (kindIs "slice" $v) (gt (len $v) 0) (kindIs "map" (first $v)) -}}
{{- range $v }}

[[{{ $name }}]]
{{- include "kineticd.toml.table" (dict "path" $name "table" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* kineticd.toml, from .Values.config (the users are in users_file). */}}
{{- define "kineticd.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $server := $cfg.server | default dict -}}
{{- if hasKey $server "listen" -}}
{{- fail "config.server.listen is set by the chart (\":<service.port>\"): remove it" -}}
{{- end -}}
{{- $_ := set $server "listen" (printf ":%d" (int64 .Values.service.port)) -}}
{{- $_ = set $cfg "server" $server -}}
{{- $metrics := $cfg.metrics | default dict -}}
{{- if hasKey $metrics "listen" -}}
{{- fail "config.metrics.listen is set by the chart (\":<metricsPort>\"): remove it" -}}
{{- end -}}
{{- $_ = set $metrics "listen" (printf ":%d" (int64 .Values.metricsPort)) -}}
{{- $_ = set $cfg "metrics" $metrics -}}
{{- if hasKey $cfg "users" -}}
{{- fail "config.users: put users in .Values.users (they are rendered into the users Secret)" -}}
{{- end -}}
{{- if hasKey $cfg "users_file" -}}
{{- fail "config.users_file is set by the chart (the users Secret): remove it" -}}
{{- end -}}
{{- $_ = set $cfg "users_file" (printf "%s/users.toml" (include "kineticd.usersDir" .)) -}}
# kineticd.toml rendered by the kineticd Helm chart from its values.
# docs/configuration.md is the reference of every key.
{{ include "kineticd.toml.table" (dict "path" "" "table" $cfg) }}
{{ end -}}

{{/* users.toml: the [[users]] of .Values.users, for the users Secret. */}}
{{- define "kineticd.users" -}}
{{- if not .Values.users -}}
{{- fail "users: kineticd needs at least one user (or set existingSecret)" -}}
{{- end -}}
# users.toml rendered by the kineticd Helm chart from its values: the
# [[users]] entries kineticd.toml's users_file names.
{{ include "kineticd.toml.table" (dict "path" "" "table" (dict "users" .Values.users)) }}
{{ end -}}
