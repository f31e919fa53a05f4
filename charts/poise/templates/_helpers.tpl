{{/*
Name of the chart, or nameOverride.
*/}}
{{- define "poise.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: fullnameOverride, or the release name (plus the chart name unless
the release name already contains it). Truncated to 63 characters.
*/}}
{{- define "poise.fullname" -}}
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

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "poise.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "poise.labels" -}}
helm.sh/chart: {{ include "poise.chart" . }}
{{ include "poise.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: controlplane
app.kubernetes.io/part-of: poise
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels: stable across upgrades (Deployment selectors are immutable).
*/}}
{{- define "poise.selectorLabels" -}}
app.kubernetes.io/name: {{ include "poise.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of the ServiceAccount.
*/}}
{{- define "poise.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "poise.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference: repository:tag, the tag defaulting to the chart's appVersion.
*/}}
{{- define "poise.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Fail early on inconsistent TLS and authentication values.
*/}}
{{- define "poise.validateTLS" -}}
{{- $modes := splitList "," .Values.xds.auth }}
{{- if and .Values.tls.clientCA (not .Values.tls.enabled) }}
{{- fail "tls.clientCA (mTLS) needs tls.enabled=true and tls.secretName" }}
{{- end }}
{{- if and .Values.tls.clientCA (not .Values.tls.secretName) }}
{{- fail "tls.clientCA (mTLS) needs tls.secretName: a Secret whose ca.crt is the CA that signs your clients' certificates (the chart's own CA signs only the serving certificate)" }}
{{- end }}
{{- if and (has "token" $modes) (not .Values.tls.enabled) }}
{{- fail "xds.auth token needs tls.enabled: Envoy and gRPC clients send their token over TLS only; for plaintext development set xds.auth=none" }}
{{- end }}
{{- if and (has "mtls" $modes) (not (and .Values.tls.enabled .Values.tls.clientCA)) }}
{{- fail "xds.auth mtls needs tls.enabled and tls.clientCA: the client certificates it reads are those the TLS handshake verifies" }}
{{- end }}
{{- if and .Values.tls.generated.caNamespaces (or (not .Values.tls.enabled) .Values.tls.secretName) }}
{{- fail "tls.generated.caNamespaces publishes the chart's own CA, which exists only with tls.enabled and no tls.secretName: distribute the CA of your own Secret's issuer yourself (e.g. cert-manager's trust-manager)" }}
{{- end }}
{{- end }}

{{/*
Name of the Secret the replicas serve xDS TLS with: tls.secretName, or the
one the chart makes.
*/}}
{{- define "poise.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "poise.fullname" .) | trunc 63 | trimSuffix "-") .Values.tls.secretName }}
{{- end }}

{{/*
Name of the chart's own CA: the Secret holding its certificate and key, and
the ConfigMaps holding its certificate alone.
*/}}
{{- define "poise.caName" -}}
{{- printf "%s-ca" (include "poise.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
DNS names of the generated serving certificate, comma-separated: the xDS
Service's names in the cluster, then tls.generated.extraDNSNames.
*/}}
{{- define "poise.tlsDNSNames" -}}
{{- $svc := include "poise.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.tls.generated.clusterDomain) }}
{{- concat $names .Values.tls.generated.extraDNSNames | uniq | join "," }}
{{- end }}

{{/*
Name of the release's cluster-scoped objects (ClusterRole, ClusterRoleBinding,
PriorityLevelConfiguration, FlowSchema): the release namespace and the full
name, so releases of one name in two namespaces do not collide.
*/}}
{{- define "poise.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "poise.fullname" .) | trunc 253 | trimSuffix "-" }}
{{- end }}

{{/*
Name of the status writer's Lease (--leader-election-id): one per release,
so two releases in one namespace elect separately.
*/}}
{{- define "poise.leaseName" -}}
{{- printf "%s-status-writer" (include "poise.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The rules that read the topology and write the status of poise.dev kinds:
cluster-wide, or in watchNamespace only.
*/}}
{{- define "poise.topologyRules" -}}
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [poise.dev]
  resources: [endpointsets, localities, partitions, spatialdomains, upstreams]
  verbs: [get, list, watch]
- apiGroups: [poise.dev]
  resources: [endpointsets/status, localities/status, partitions/status, spatialdomains/status, upstreams/status]
  verbs: [get, patch, update]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}
