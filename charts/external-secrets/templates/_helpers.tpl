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

{{/* A provider server's image, (list $root <provider key>): its own image (hack/build-images.sh),
whose entrypoint is `external-secrets provider serve --kind=<Kind>`. */}}
{{- define "external-secrets.providerServerImage" -}}
{{- $root := index . 0 }}
{{- $key := index . 1 }}
{{- $settings := (get $root.Values.providers $key).outOfProcess }}
{{- $repository := (($settings.image | default dict).repository) | default (printf "%s-provider-%s" $root.Values.image.repository $key) }}
{{- printf "%s:%s" $repository ($root.Values.image.tag | default $root.Chart.AppVersion) }}
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

{{/* The enabled providers served out of process (providers.<key>.outOfProcess.enabled), as a
YAML list of the generated table's entries. */}}
{{- define "external-secrets.outOfProcessProviders" -}}
{{- $root := . }}
{{- $out := list }}
{{- range include "external-secrets.enabledProviders" . | fromYamlArray }}
{{- $provider := get $root.Values.providers .key | default dict }}
{{- if ($provider.outOfProcess | default dict).enabled }}
{{- $out = append $out . }}
{{- end }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* What a provider's clients read besides its own kind, as the provider's code names them
(its credential references): Secrets, ConfigMaps, ServiceAccount tokens. The controller needs
these for the providers it runs itself; a provider server for its own. */}}
{{- define "external-secrets.providerCredentials" -}}
fake: {}
vault: {secrets: true, configMaps: true, serviceAccountTokens: true}
gitlab: {secrets: true, configMaps: true}
kubernetes: {secrets: true, configMaps: true, serviceAccountTokens: true}
aws: {secrets: true, serviceAccountTokens: true}
{{- end }}

{{/* "true" when an enabled provider that logs in with ServiceAccount tokens runs in the
controller's process. */}}
{{- define "external-secrets.controllerRequestsTokens" -}}
{{- $root := . }}
{{- $credentials := include "external-secrets.providerCredentials" . | fromYaml }}
{{- $outOfProcess := list }}
{{- range include "external-secrets.outOfProcessProviders" . | fromYamlArray }}
{{- $outOfProcess = append $outOfProcess .key }}
{{- end }}
{{- range include "external-secrets.enabledProviders" . | fromYamlArray }}
{{- if and (get $credentials .key | default dict).serviceAccountTokens (not (has .key $outOfProcess)) }}true{{ end }}
{{- end }}
{{- end }}

{{/* A provider server's name, for its Deployment, Service, ServiceAccount and RBAC:
(list $root "<store key>"). */}}
{{- define "external-secrets.providerServerName" -}}
{{- $root := index . 0 }}
{{- $suffix := printf "-provider-%s" (index . 1) }}
{{- printf "%s%s" (include "external-secrets.fullname" $root | trunc (int (sub 63 (len $suffix))) | trimSuffix "-") $suffix }}
{{- end }}

{{/* The Secret with a provider server's mutual TLS, which the controller fills. */}}
{{- define "external-secrets.providerServerTLSSecret" -}}
{{- printf "%s-tls" (include "external-secrets.providerServerName" .) }}
{{- end }}

{{/* The ClusterProviderClass of a provider served out of process: (list $root "<store key>"). */}}
{{- define "external-secrets.providerClassName" -}}
{{- $root := index . 0 }}
{{- $provider := get $root.Values.providers (index . 1) | default dict }}
{{- ($provider.outOfProcess | default dict).className | default (index . 1) }}
{{- end }}

{{/* Selector labels of a provider server's pods: (list $root "<store key>"). Not the
controller's: its Services and NetworkPolicy must not select these pods. */}}
{{- define "external-secrets.providerServerSelectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ printf "%s-provider-%s" (include "external-secrets.name" $root) (index . 1) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
{{- end }}

{{- define "external-secrets.providerServerLabels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "external-secrets.providerServerSelectorLabels" . }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/component: provider-server
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}
