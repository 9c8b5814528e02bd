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

{{/* The workers' ServiceAccount. */}}
{{- define "context-stream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "context-stream.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The gateway's own ServiceAccount. */}}
{{- define "context-stream.gatewayServiceAccountName" -}}
{{- if .Values.gateway.serviceAccount.create }}
{{- default (include "context-stream.gatewayName" .) .Values.gateway.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.gateway.serviceAccount.name }}
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
{{- with .Values.redis.loader }}
{{- if and .existingSecret (not (semverCompare ">=1.29.0-0" $.Capabilities.KubeVersion.Version)) }}
{{- fail (printf "redis.loader.existingSecret needs Kubernetes >= 1.29 (the loader is a native sidecar: an initContainer with restartPolicy Always), this is %s: unset it and load the library as an admin (docs/deploy.md, \"Redis users\")" $.Capabilities.KubeVersion.Version) }}
{{- end }}
{{- if and .existingSecret (eq .username $.Values.redis.auth.username) }}
{{- fail "redis.loader.username must name another Redis user than redis.auth.username: the worker's user may only FCALL (docs/deploy.md, \"Redis users\")" }}
{{- end }}
{{- end }}
{{- if .Values.gateway.enabled }}
{{- include "context-stream.validateGateway" . }}
{{- end }}
{{- if .Values.networkPolicy.enabled }}
{{- include "context-stream.validateNetworkPolicy" . }}
{{- end }}
{{- end }}

{{/*
An empty peer list in a NetworkPolicy rule means "any peer": the chart never lets an
unset or emptied value open a port that way. "Anywhere" is said explicitly.
*/}}
{{- define "context-stream.validateNetworkPolicy" -}}
{{- $np := .Values.networkPolicy }}
{{- $anywhere := "for anywhere on these ports list both {ipBlock: {cidr: 0.0.0.0/0}} and {namespaceSelector: {}}" }}
{{- if not $np.dns.to }}
{{- fail (printf "networkPolicy.dns.to is empty: name the cluster DNS (the default selects k8s-app: kube-dns in kube-system), or %s" $anywhere) }}
{{- end }}
{{- range $peers := list "kafkaTo" "redisTo" }}
{{- if not (get $np.worker $peers) }}
{{- fail (printf "networkPolicy.worker.%s is empty: name where the workers may connect (ipBlock CIDRs, namespaceSelector/podSelector), or %s" $peers $anywhere) }}
{{- end }}
{{- end }}
{{- if .Values.gateway.enabled }}
{{- if not (or $np.gateway.from $np.gateway.allowFromAnywhere) }}
{{- fail "networkPolicy.gateway.from is empty: name who may reach the gateway (the Ingress controller's namespace, your UI backends), or set networkPolicy.gateway.allowFromAnywhere true" }}
{{- end }}
{{- if not $np.gateway.redisTo }}
{{- fail (printf "networkPolicy.gateway.redisTo is empty: name where the gateway's Redis is, or %s" $anywhere) }}
{{- end }}
{{- if and .Values.gateway.auth.jwksUrl (not $np.gateway.jwksTo) }}
{{- fail (printf "networkPolicy.gateway.jwksTo is empty but gateway.auth.jwksUrl is set: name where the key server is (an ipBlock of the identity provider), or %s" $anywhere) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The gateway's settings. In the chart it listens on 0.0.0.0, where it refuses to start
without keys to check tokens against unless authentication is turned off explicitly.
*/}}
{{- define "context-stream.validateGateway" -}}
{{- $gw := .Values.gateway }}
{{- $jwks := $gw.auth.jwks }}
{{- $keyFile := or $jwks.existingSecret $jwks.existingConfigMap }}
{{- if eq $gw.auth.mode "jwt" }}
{{- if not (or $keyFile $gw.auth.jwksUrl) }}
{{- fail "gateway.auth.mode jwt needs the keys to verify tokens with: set gateway.auth.jwks.existingSecret or gateway.auth.jwks.existingConfigMap (a JWKS or PEM public key under gateway.auth.jwks.key), or gateway.auth.jwksUrl (https); or set gateway.auth.mode none explicitly (no authentication: every client that reaches the gateway reads every session)" }}
{{- end }}
{{- if and $jwks.existingSecret $jwks.existingConfigMap }}
{{- fail "gateway.auth.jwks: set existingSecret or existingConfigMap, not both" }}
{{- end }}
{{- if and $keyFile $gw.auth.jwksUrl }}
{{- fail "gateway.auth: set the keys as a file (gateway.auth.jwks) or as a URL (gateway.auth.jwksUrl), not both" }}
{{- end }}
{{- /* values.schema.json says so too; this holds when the schema is skipped. */}}
{{- if not (trim $gw.auth.audience) }}
{{- fail "gateway.auth.audience is required with token keys: set the \"aud\" your issuer puts in tokens for this gateway, so that tokens issued for another service are refused" }}
{{- end }}
{{- else if or $keyFile $gw.auth.jwksUrl $gw.auth.audience $gw.auth.issuer }}
{{- fail "gateway.auth.mode none checks no tokens: unset gateway.auth.jwks, jwksUrl, audience and issuer, or set gateway.auth.mode jwt" }}
{{- end }}
{{- /* values.schema.json says so too; this holds when the schema is skipped. */}}
{{- if and (eq $gw.auth.mode "none") .Values.networkPolicy.gateway.allowFromAnywhere }}
{{- fail "gateway.auth.mode none with networkPolicy.gateway.allowFromAnywhere: any source could read every session; set gateway.auth.mode jwt (with its keys), or name who may reach the gateway in networkPolicy.gateway.from" }}
{{- end }}
{{- if and (eq $gw.auth.mode "none") (not .Values.networkPolicy.enabled) (ne $gw.service.type "ClusterIP") }}
{{- fail (printf "gateway.auth.mode none on a %s Service with networkPolicy.enabled false: any source could read every session; set gateway.auth.mode jwt (with its keys), or keep the NetworkPolicies on and name who may reach the gateway in networkPolicy.gateway.from" $gw.service.type) }}
{{- end }}
{{- if regexMatch "^rediss?://[^/@]*:[^/@]*@" (include "context-stream.gatewayRedisUrl" .) }}
{{- fail "gateway.redis.url carries a password: put it in the Secret named by gateway.redis.auth.existingSecret" }}
{{- end }}
{{- if and .Values.redis.auth.existingSecret (not $gw.redis.auth.existingSecret) }}
{{- fail "redis.auth.existingSecret is set (Redis needs AUTH) but gateway.redis.auth.existingSecret is not: the gateway reads Redis as its own read-only user (docs/deploy.md, \"Redis users\")" }}
{{- end }}
{{- if eq (include "context-stream.gatewayServiceAccountName" .) (include "context-stream.serviceAccountName" .) }}
{{- fail (printf "the gateway and the workers share the ServiceAccount %q: give gateway.serviceAccount.name another name (the workers' identity must not reach the internet-facing gateway)" (include "context-stream.serviceAccountName" .)) }}
{{- end }}
{{- if and $gw.redis.auth.existingSecret (eq $gw.redis.auth.username .Values.redis.auth.username) }}
{{- fail "gateway.redis.auth.username must name another Redis user than redis.auth.username: the gateway's user is read-only (docs/deploy.md, \"Redis users\")" }}
{{- end }}
{{- with $gw.autoscaling }}
{{- if .enabled }}
{{- if gt (int .minReplicas) (int .maxReplicas) }}
{{- fail (printf "gateway.autoscaling.minReplicas %d is above maxReplicas %d" (int .minReplicas) (int .maxReplicas)) }}
{{- end }}
{{- if not (dig "requests" "cpu" "" $gw.resources) }}
{{- fail "gateway.autoscaling needs gateway.resources.requests.cpu: the CPU target is a percentage of it" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The worker's environment: its ConfigMap, then Kafka and Redis credentials from Secrets.
*/}}
{{- define "context-stream.workerEnv" -}}
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

{{/*
The gateway's environment: its own ConfigMap and its own read-only Redis user's password.
It never talks to Kafka, so it gets no Kafka setting, credential or key.
*/}}
{{- define "context-stream.gatewayEnv" -}}
envFrom:
  - configMapRef:
      name: {{ include "context-stream.gatewayName" . }}
env:
  {{- if .Values.gateway.redis.auth.existingSecret }}
  - name: REDIS_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ .Values.gateway.redis.auth.existingSecret }}
        key: {{ .Values.gateway.redis.auth.passwordKey }}
  {{- end }}
{{- end }}

{{/* The worker's read-only mounts of the TLS Secrets, and /tmp (HOME, TMPDIR) on the read-only root. */}}
{{- define "context-stream.workerVolumeMounts" -}}
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

{{- define "context-stream.workerVolumes" -}}
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
{{ include "context-stream.redisTlsVolume" . }}
{{- end }}
{{- end }}

{{- define "context-stream.redisTlsVolume" -}}
- name: redis-tls
  secret:
    secretName: {{ .Values.redis.tls.caSecret }}
    defaultMode: 0440
    items:
      - key: {{ .Values.redis.tls.caKey }}
        path: {{ .Values.redis.tls.caKey }}
{{- end }}

{{/* The gateway's mounts: /tmp, the Redis CA, the JWT verification keys. */}}
{{- define "context-stream.gatewayVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if include "context-stream.gatewayRedisTlsMounted" . }}
- name: redis-tls
  mountPath: {{ include "context-stream.redisTlsDir" . }}
  readOnly: true
{{- end }}
{{- if include "context-stream.jwksMounted" . }}
# The directory, never a subPath: the kubelet swaps the files of a
# directory mount when the Secret or ConfigMap changes (within about a
# minute), so rotated keys reach the gateway, which re-reads the file,
# without a restart. A subPath mount is copied once and never updated.
- name: jwt-keys
  mountPath: {{ include "context-stream.jwksDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "context-stream.gatewayVolumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- if include "context-stream.gatewayRedisTlsMounted" . }}
{{ include "context-stream.redisTlsVolume" . }}
{{- end }}
{{- with .Values.gateway.auth.jwks }}
{{- if .existingSecret }}
- name: jwt-keys
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .key }}
        path: {{ .key }}
{{- else if .existingConfigMap }}
- name: jwt-keys
  configMap:
    name: {{ .existingConfigMap }}
    defaultMode: 0440
    items:
      - key: {{ .key }}
        path: {{ .key }}
{{- end }}
{{- end }}
{{- end }}

{{/* The gateway's Redis: its own URL, else the worker's. */}}
{{- define "context-stream.gatewayRedisUrl" -}}
{{- default .Values.redis.url .Values.gateway.redis.url }}
{{- end }}

{{- define "context-stream.gatewayRedisTlsMounted" -}}
{{- if and (hasPrefix "rediss://" (include "context-stream.gatewayRedisUrl" .)) .Values.redis.tls.caSecret }}true{{- end }}
{{- end }}

{{- define "context-stream.jwksDir" -}}/etc/context-stream/jwt{{- end }}

{{- define "context-stream.jwksMounted" -}}
{{- $a := .Values.gateway.auth }}
{{- if and (eq $a.mode "jwt") (or $a.jwks.existingSecret $a.jwks.existingConfigMap) }}true{{- end }}
{{- end }}

{{/*
Host header values the gateway accepts: the configured ones, then the Service's in-cluster
names (in-cluster clients, and the readiness probe, which sends the first of them).
*/}}
{{- define "context-stream.gatewayServiceHosts" -}}
{{- $svc := include "context-stream.gatewayName" . }}
{{- $ns := .Release.Namespace }}
{{- list (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.gateway.clusterDomain) (printf "%s.%s" $svc $ns) $svc | join "," }}
{{- end }}

{{- define "context-stream.gatewayAllowedHosts" -}}
{{- concat .Values.gateway.allowedHosts (splitList "," (include "context-stream.gatewayServiceHosts" .)) | uniq | join "," }}
{{- end }}

{{/* The port of a redis:// or rediss:// URL (6379 when it names none). */}}
{{- define "context-stream.redisPort" -}}
{{- $rest := regexReplaceAll "^[^@/]*@" (regexReplaceAll "^rediss?://" . "") "" }}
{{- $hostPort := regexReplaceAll "/.*$" $rest "" }}
{{- default "6379" (regexFind "[0-9]+$" (regexFind ":[0-9]+$" $hostPort)) }}
{{- end }}

{{/* The label matchers every alert uses: this release's scrape job unless overridden. */}}
{{- define "context-stream.alertSelector" -}}
{{- with .Values.metrics.prometheusRule.selector }}
{{- . }}
{{- else }}
{{- printf "namespace=%q, job=%q" .Release.Namespace (include "context-stream.metricsServiceName" .) }}
{{- end }}
{{- end }}
