{{- define "external-secrets.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "external-secrets.fullname" -}}
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

{{- define "external-secrets.selectorLabels" -}}
app.kubernetes.io/name: {{ include "external-secrets.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "external-secrets.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "external-secrets.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "external-secrets.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "external-secrets.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "external-secrets.webhookServiceName" -}}
{{- printf "%s-webhook" (include "external-secrets.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "external-secrets.webhookSecretName" -}}
{{- printf "%s-webhook-tls" (include "external-secrets.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "external-secrets.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* Labels and annotations of a CRD: (list $root <whether it converts through the webhook>). */}}
{{- define "external-secrets.crdMetadata" -}}
{{- $root := index . 0 }}
{{- $injected := and (index . 1) $root.Values.webhook.create $root.Values.webhook.certManager.enabled }}
labels:
  {{- include "external-secrets.labels" $root | nindent 2 }}
{{- if or $root.Values.crds.keep $root.Values.crds.annotations $injected }}
annotations:
  {{- if $root.Values.crds.keep }}
  helm.sh/resource-policy: keep
  {{- end }}
  {{- if $injected }}
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" $root.Release.Namespace (include "external-secrets.webhookServiceName" $root) }}
  {{- end }}
  {{- with $root.Values.crds.annotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* "true" when provider (list $root "<store key>") is enabled, "" otherwise. */}}
{{- define "external-secrets.providerEnabled" -}}
{{- $root := index . 0 }}
{{- $provider := get ($root.Values.providers | default dict) (index . 1) | default dict }}
{{- if $provider.enabled }}true{{ end }}
{{- end }}

{{/* The enabled provider kinds, as a YAML list of the generated table's entries. */}}
{{- define "external-secrets.enabledProviders" -}}
{{- $root := . }}
{{- $enabled := list }}
{{- range include "external-secrets.providerKinds" . | fromYamlArray }}
{{- if include "external-secrets.providerEnabled" (list $root .key) }}
{{- $enabled = append $enabled . }}
{{- end }}
{{- end }}
{{- toYaml $enabled }}
{{- end }}

{{/* The CEL rule on a store's spec.provider: it names one of the enabled providers. */}}
{{- define "external-secrets.providerRule" -}}
{{- $has := list }}
{{- range include "external-secrets.enabledProviders" . | fromYamlArray }}
{{- $has = append $has (printf "has(self.%s)" .key) }}
{{- end }}
{{- if $has }}{{ join " || " $has }}{{ else }}false{{ end }}
{{- end }}

{{- define "external-secrets.providerMessage" -}}
{{- $keys := list }}
{{- range include "external-secrets.enabledProviders" . | fromYamlArray }}
{{- $keys = append $keys .key }}
{{- end }}
{{- printf "spec.provider: this installation serves only the providers %s; another provider is installed by the chart value providers.<name>.enabled=true" (join ", " $keys | default "(none)") }}
{{- end }}
