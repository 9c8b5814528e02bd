{{/* Names, labels and the pieces the worker and the gateway share. */}}

{{- define "context-stream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: <release>-<chart>, or the release name when it already contains the chart name. */}}
{{- define "context-stream.fullname" -}}
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

{{- define "context-stream.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "context-stream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "context-stream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "context-stream.labels" -}}
helm.sh/chart: {{ include "context-stream.chart" . }}
{{ include "context-stream.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: context-stream
{{- end }}

{{- define "context-stream.workerSelectorLabels" -}}
{{ include "context-stream.selectorLabels" . }}
app.kubernetes.io/component: worker
{{- end }}

{{- define "context-stream.gatewaySelectorLabels" -}}
{{ include "context-stream.selectorLabels" . }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "context-stream.headlessServiceName" -}}
{{- printf "%s-headless" (include "context-stream.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "context-stream.metricsServiceName" -}}
{{- printf "%s-metrics" (include "context-stream.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "context-stream.gatewayName" -}}
{{- printf "%s-gateway" (include "context-stream.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "context-stream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "context-stream.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "context-stream.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Where the Secrets with TLS material are mounted. */}}
{{- define "context-stream.kafkaTlsDir" -}}/etc/context-stream/kafka-tls{{- end }}
{{- define "context-stream.redisTlsDir" -}}/etc/context-stream/redis-tls{{- end }}

{{- define "context-stream.kafkaUsesSasl" -}}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}true{{- end }}
{{- end }}

{{- define "context-stream.kafkaUsesTls" -}}
{{- if has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL") }}true{{- end }}
{{- end }}

{{- define "context-stream.kafkaTlsMounted" -}}
{{- if and (include "context-stream.kafkaUsesTls" .) .Values.kafka.tls.existingSecret }}true{{- end }}
{{- end }}

{{- define "context-stream.redisTlsMounted" -}}
{{- if and (hasPrefix "rediss://" .Values.redis.url) .Values.redis.tls.caSecret }}true{{- end }}
{{- end }}

{{/*
Combinations that would only fail at run time fail the render instead.
*/}}
{{- define "context-stream.validate" -}}
{{- if and (include "context-stream.kafkaUsesSasl" .) (not .Values.kafka.sasl.existingSecret) }}
{{- fail (printf "kafka.securityProtocol %s needs kafka.sasl.existingSecret (a Secret with the SASL username and password)" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if ne (empty .Values.kafka.tls.certKey) (empty .Values.kafka.tls.keyKey) }}
{{- fail "kafka.tls.certKey and kafka.tls.keyKey go together (mutual TLS needs both)" }}
{{- end }}
{{- if and .Values.kafka.tls.existingSecret (not (or .Values.kafka.tls.caKey .Values.kafka.tls.certKey)) }}
{{- fail "kafka.tls.existingSecret is set but names no key: set kafka.tls.caKey and/or certKey/keyKey" }}
{{- end }}
{{- if and .Values.kafka.tls.existingSecret (not (include "context-stream.kafkaUsesTls" .)) }}
{{- fail (printf "kafka.tls.existingSecret is set but kafka.securityProtocol %s does not use TLS (SSL or SASL_SSL)" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if and .Values.redis.tls.caSecret (not (hasPrefix "rediss://" .Values.redis.url)) }}
{{- fail "redis.tls.caSecret is set but redis.url is not rediss:// (TLS)" }}
{{- end }}
{{- if regexMatch "^rediss?://[^/@]*:[^/@]*@" .Values.redis.url }}
{{- fail "redis.url carries a password: put it in the Secret named by redis.auth.existingSecret" }}
{{- end }}
{{- if and (gt (int .Values.stream.standbyReplicas) 0) (le (int .Values.replicaCount) (int .Values.stream.standbyReplicas)) }}
{{- fail (printf "stream.standbyReplicas %d needs replicaCount > %d: a standby lives on another worker" (int .Values.stream.standbyReplicas) (int .Values.stream.standbyReplicas)) }}
{{- end }}
{{- end }}

{{/*
Environment shared by the worker and the gateway: the ConfigMap, then credentials from Secrets.
*/}}
{{- define "context-stream.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "context-stream.fullname" . }}
env:
  {{- if include "context-stream.kafkaUsesSasl" . }}
  - name: KAFKA_SASL_USERNAME
    valueFrom:
      secretKeyRef:
        name: {{ .Values.kafka.sasl.existingSecret }}
        key: {{ .Values.kafka.sasl.usernameKey }}
  - name: KAFKA_SASL_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ .Values.kafka.sasl.existingSecret }}
        key: {{ .Values.kafka.sasl.passwordKey }}
  {{- end }}
  {{- if .Values.redis.auth.existingSecret }}
  - name: REDIS_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ .Values.redis.auth.existingSecret }}
        key: {{ .Values.redis.auth.passwordKey }}
  {{- end }}
{{- end }}

{{/* Read-only mounts of the TLS Secrets, and /tmp (HOME, TMPDIR) on the read-only root. */}}
{{- define "context-stream.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if include "context-stream.kafkaTlsMounted" . }}
- name: kafka-tls
  mountPath: {{ include "context-stream.kafkaTlsDir" . }}
  readOnly: true
{{- end }}
{{- if include "context-stream.redisTlsMounted" . }}
- name: redis-tls
  mountPath: {{ include "context-stream.redisTlsDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "context-stream.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- if include "context-stream.kafkaTlsMounted" . }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.tls.existingSecret }}
    defaultMode: 0440
    items:
      {{- range (list .Values.kafka.tls.caKey .Values.kafka.tls.certKey .Values.kafka.tls.keyKey) }}
      {{- if . }}
      - key: {{ . }}
        path: {{ . }}
      {{- end }}
      {{- end }}
{{- end }}
{{- if include "context-stream.redisTlsMounted" . }}
- name: redis-tls
  secret:
    secretName: {{ .Values.redis.tls.caSecret }}
    defaultMode: 0440
    items:
      - key: {{ .Values.redis.tls.caKey }}
        path: {{ .Values.redis.tls.caKey }}
{{- end }}
{{- end }}

{{/* The label matchers every alert uses: this release's scrape job unless overridden. */}}
{{- define "context-stream.alertSelector" -}}
{{- with .Values.metrics.prometheusRule.selector }}
{{- . }}
{{- else }}
{{- printf "namespace=%q, job=%q" .Release.Namespace (include "context-stream.metricsServiceName" .) }}
{{- end }}
{{- end }}
