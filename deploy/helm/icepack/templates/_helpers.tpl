{{/* Names and labels */}}
{{- define "icepack.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "icepack.fullname" -}}
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

{{- define "icepack.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "icepack.selectorLabels" -}}
app.kubernetes.io/name: {{ include "icepack.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "icepack.labels" -}}
helm.sh/chart: {{ include "icepack.chart" . }}
{{ include "icepack.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: compactor
{{- end -}}

{{- define "icepack.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "icepack.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "icepack.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{- define "icepack.pvcName" -}}
{{- .Values.persistence.existingClaim | default (printf "%s-state" (include "icepack.fullname" .)) -}}
{{- end -}}

{{/*
TOML rendering of values.config. A value: strings, numbers and booleans as JSON literals (valid
TOML), lists as arrays, maps as inline tables with quoted keys. Whole numbers are written
without a fraction (YAML numbers arrive as float64).
*/}}
{{- define "icepack.tomlValue" -}}
{{- $v := . -}}
{{- if kindIs "map" $v -}}
{ {{- range $i, $k := keys $v | sortAlpha -}}{{- if $i }}, {{ else }} {{ end }}{{ toJson (toString $k) }} = {{ include "icepack.tomlValue" (get $v $k) }}{{- end }} }
{{- else if kindIs "slice" $v -}}
[{{- range $i, $x := $v -}}{{- if $i }}, {{ end }}{{ include "icepack.tomlValue" $x }}{{- end -}}]
{{- else if or (kindIs "float64" $v) (kindIs "float32" $v) -}}
{{- if eq (float64 (int64 $v)) (float64 $v) -}}{{ int64 $v }}{{- else -}}{{ $v }}{{- end -}}
{{- else if kindIs "invalid" $v -}}
{{- fail "icepack: null values cannot be written to icepack.toml; remove the key instead" -}}
{{- else -}}
{{- toJson $v -}}
{{- end -}}
{{- end -}}

{{- define "icepack.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" (toString .) -}}{{ . }}{{- else -}}{{ toJson (toString .) }}{{- end -}}
{{- end -}}

{{/* key = value lines of a map, keys sorted; null values skipped. */}}
{{- define "icepack.tomlBody" -}}
{{- $m := . -}}
{{- range $k := keys $m | sortAlpha }}
{{- $v := get $m $k }}
{{- if not (kindIs "invalid" $v) }}
{{ include "icepack.tomlKey" $k }} = {{ include "icepack.tomlValue" $v }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "icepack.configToml" -}}
{{- $c := deepCopy (.Values.config | default dict) -}}
# icepack.toml rendered by the icepack Helm chart ({{ include "icepack.chart" . }}) from values.config.
# Secrets are not here: they come from the environment (Secrets referenced by the Deployment).
{{- $service := merge (dict "state_dir" "/var/lib/icepack/state" "http_listen" (printf "0.0.0.0:%d" (int .Values.httpPort))) ($c.service | default dict) }}

[service]
{{- include "icepack.tomlBody" $service }}
{{- $sqs := merge ($c.sqs | default dict) (dict "region" .Values.aws.region) }}
{{- if not $sqs.queue_url }}{{ fail "icepack: config.sqs.queue_url is required" }}{{ end }}

[sqs]
{{- include "icepack.tomlBody" $sqs }}
{{- with $c.defaults }}

[defaults]
{{- include "icepack.tomlBody" . }}
{{- end }}
{{- if not $c.tables }}{{ fail "icepack: config.tables needs at least one table (table, bucket, prefix)" }}{{ end }}
{{- range $c.tables }}

[[tables]]
{{- include "icepack.tomlBody" . }}
{{- end }}
{{- range $name := keys ($c.catalogs | default dict) | sortAlpha }}

[catalogs.{{ include "icepack.tomlKey" $name }}]
{{- include "icepack.tomlBody" (get $c.catalogs $name) }}
{{- end }}
{{- with $c.spark }}

[spark]
{{- include "icepack.tomlBody" . }}
{{- end }}
{{- with $c.slack }}

[slack]
{{- include "icepack.tomlBody" . }}
{{- end }}
{{- range $c.webhooks }}

[[webhooks]]
{{- include "icepack.tomlBody" . }}
{{- end }}
{{- /* Sections this chart does not know yet are passed through. */}}
{{- range $k := keys $c | sortAlpha }}
{{- if not (has $k (list "service" "sqs" "defaults" "tables" "catalogs" "spark" "slack" "webhooks")) }}
{{- $v := get $c $k }}
{{- if kindIs "map" $v }}

[{{ include "icepack.tomlKey" $k }}]
{{- include "icepack.tomlBody" $v }}
{{- else if kindIs "slice" $v }}
{{- range $v }}

[[{{ include "icepack.tomlKey" $k }}]]
{{- include "icepack.tomlBody" . }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{ end -}}
