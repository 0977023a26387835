{{/* Names, labels and the few decisions several templates share. */}}

{{- define "tensorkiln.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<chart>", or the release name alone when it already contains the chart name. */}}
{{- define "tensorkiln.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "tensorkiln.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tensorkiln.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tensorkiln.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "tensorkiln.labels" -}}
{{ include "tensorkiln.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tensorkiln
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "tensorkiln.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tensorkiln.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "tensorkiln.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* TENSORKILN_REGISTRY_URI: pvc://claim/path (the operator reads it under /mnt/pvc/<claim>), s3://bucket[/prefix]
or oci://host[:port]/repository. */}}
{{- define "tensorkiln.registryUri" -}}
{{- $r := .Values.registry -}}
{{- if eq $r.kind "oci" -}}
{{- printf "oci://%s" (trimAll "/" $r.oci.repository) -}}
{{- else if eq $r.kind "s3" -}}
{{- $prefix := trimAll "/" (default "" $r.s3.prefix) -}}
{{- if $prefix -}}
{{- printf "s3://%s/%s" $r.s3.bucket $prefix -}}
{{- else -}}
{{- printf "s3://%s" $r.s3.bucket -}}
{{- end -}}
{{- else -}}
{{- printf "pvc://%s/%s" $r.filesystem.existingClaim (trimAll "/" $r.filesystem.path) -}}
{{- end -}}
{{- end -}}

{{/* The registry's credentials Secrets, as a JSON list (empty: none): S3's existingSecret, or an
oci registry's push and pull Secrets (those set, each name once). */}}
{{- define "tensorkiln.registrySecrets" -}}
{{- $r := .Values.registry -}}
{{- if eq $r.kind "s3" -}}
{{- toJson (compact (list $r.s3.existingSecret)) -}}
{{- else if eq $r.kind "oci" -}}
{{- toJson (compact (list $r.oci.pushSecret $r.oci.pullSecret) | uniq) -}}
{{- else -}}
{{- toJson (list) -}}
{{- end -}}
{{- end -}}

{{/* Namespaces where the operator may get the registry Secrets, as a JSON list. */}}
{{- define "tensorkiln.secretNamespaces" -}}
{{- if .Values.registry.secretNamespaces -}}
{{- toJson .Values.registry.secretNamespaces -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{- define "tensorkiln.webhookName" -}}
{{- printf "%s-webhook" (include "tensorkiln.fullname" .) -}}
{{- end -}}

{{- define "tensorkiln.webhookCertSecret" -}}
{{- default (printf "%s-webhook-tls" (include "tensorkiln.fullname" .)) .Values.webhook.certSecretName -}}
{{- end -}}

{{/* "true" when cert-manager issues the webhook certificate. */}}
{{- define "tensorkiln.useCertManager" -}}
{{- if and .Values.webhook.enabled .Values.webhook.certManager (.Capabilities.APIVersions.Has "cert-manager.io/v1") -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the operator keeps the webhook certificate itself (webhook on, no cert-manager). */}}
{{- define "tensorkiln.selfSignedWebhook" -}}
{{- if and .Values.webhook.enabled (not (include "tensorkiln.useCertManager" .)) -}}
true
{{- end -}}
{{- end -}}

{{- define "tensorkiln.useServiceMonitor" -}}
{{- if and .Values.metrics.serviceMonitor.enabled (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor") -}}
true
{{- end -}}
{{- end -}}

{{- define "tensorkiln.useTritonPodMonitor" -}}
{{- if and .Values.metrics.tritonPodMonitor.enabled (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PodMonitor") -}}
true
{{- end -}}
{{- end -}}

{{- define "tensorkiln.usePrometheusRule" -}}
{{- if and .Values.alerts.enabled (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule") -}}
true
{{- end -}}
{{- end -}}
