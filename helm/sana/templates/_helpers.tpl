{{/*
Names, labels and the values derived from several settings.
*/}}

{{- define "sana.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name prefix of every resource. Kept to 40 characters so that suffixes
such as "-kafka-headless" and Spark's executor pod names stay within the
63-character DNS label limit.
*/}}
{{- define "sana.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sana.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels shared by every object. */}}
{{- define "sana.labels" -}}
helm.sh/chart: {{ include "sana.chart" . }}
app.kubernetes.io/name: {{ include "sana.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sana
{{- end }}

{{/* Selector labels of one component: include "sana.selectorLabels" (list . "manager") */}}
{{- define "sana.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "sana.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* The manager image reference. */}}
{{- define "sana.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Spark executor image: the manager image unless overridden. */}}
{{- define "sana.executorImage" -}}
{{- $image := .Values.spark.kubernetes.executor.image -}}
{{- printf "%s:%s" (default .Values.image.repository $image.repository) (default (default .Chart.AppVersion .Values.image.tag) $image.tag) }}
{{- end }}

{{/* In-cluster DNS name of a Service of this release: include "sana.serviceHost" (list . "redis") */}}
{{- define "sana.serviceHost" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s.%s.svc.%s" (include "sana.fullname" $root) (index . 1) $root.Release.Namespace $root.Values.clusterDomain }}
{{- end }}

{{/* SANA_SPARK_MASTER */}}
{{- define "sana.sparkMaster" -}}
{{- if eq .Values.spark.mode "kubernetes" }}
{{- .Values.spark.kubernetes.master }}
{{- else }}
{{- .Values.spark.local.master }}
{{- end }}
{{- end }}

{{/* SANA_KAFKA_BOOTSTRAP */}}
{{- define "sana.kafkaBootstrap" -}}
{{- if eq .Values.kafka.mode "internal" }}
{{- printf "%s:9092" (include "sana.serviceHost" (list . "kafka")) }}
{{- else }}
{{- .Values.kafka.external.bootstrap }}
{{- end }}
{{- end }}

{{/* The Secret that holds SANA_REDIS_URL, and its key. */}}
{{- define "sana.redisSecretName" -}}
{{- if and (eq .Values.redis.mode "internal") .Values.redis.internal.existingSecret }}
{{- .Values.redis.internal.existingSecret }}
{{- else if and (eq .Values.redis.mode "external") .Values.redis.external.existingSecret }}
{{- .Values.redis.external.existingSecret }}
{{- else }}
{{- printf "%s-redis" (include "sana.fullname" .) }}
{{- end }}
{{- end }}

{{- define "sana.redisUrlKey" -}}
{{- if eq .Values.redis.mode "internal" }}
{{- .Values.redis.internal.keys.url }}
{{- else if .Values.redis.external.existingSecret }}
{{- .Values.redis.external.existingSecretKey }}
{{- else -}}
redis-url
{{- end }}
{{- end }}

{{/* Does the chart create the Redis Secret itself? */}}
{{- define "sana.createRedisSecret" -}}
{{- if eq .Values.redis.mode "internal" }}
{{- if not .Values.redis.internal.existingSecret }}true{{ end }}
{{- else if not .Values.redis.external.existingSecret }}true
{{- end }}
{{- end }}

{{/* Name of the manager's ServiceAccount (spark.mode=kubernetes only). */}}
{{- define "sana.serviceAccountName" -}}
{{- default (printf "%s-spark" (include "sana.fullname" .)) .Values.spark.kubernetes.serviceAccount.name }}
{{- end }}

{{/* Name of the checkpoint claim. */}}
{{- define "sana.checkpointClaim" -}}
{{- default (printf "%s-checkpoints" (include "sana.fullname" .)) .Values.checkpoints.persistence.existingClaim }}
{{- end }}

{{/* Pod-level security context shared by Redis and Kafka: non-root as the given uid. */}}
{{- define "sana.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ . }}
runAsGroup: {{ . }}
fsGroup: {{ . }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "sana.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: {{ . }}
capabilities:
  drop:
    - ALL
{{- end }}

{{/* SANA_WAN_CONFIG: where the WAN configuration is mounted; empty when none is set. */}}
{{- define "sana.wanConfigPath" -}}
{{- if or .Values.wan.config .Values.wan.existingConfigMap }}/etc/sana/wan/wan.json{{ end }}
{{- end }}
