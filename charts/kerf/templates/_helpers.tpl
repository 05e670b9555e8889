{{- define "kerf.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "kerf.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kerf.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kerf.serviceAccountName" -}}
{{- default (include "kerf.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "kerf.tlsSecretName" -}}
{{ include "kerf.fullname" . }}-webhook-tls
{{- end -}}

{{- /* The names the apiserver reaches the webhook Service at: the serving certificate's names. */ -}}
{{- define "kerf.serviceNames" -}}
{{ include "kerf.fullname" . }}-webhook.{{ .Release.Namespace }}.svc,{{ include "kerf.fullname" . }}-webhook.{{ .Release.Namespace }}.svc.cluster.local
{{- end -}}

{{- define "kerf.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{- /* Where the apiserver sends admission requests for `path`. */ -}}
{{- define "kerf.clientConfig" -}}
{{- if .root.Values.webhook.url }}
url: {{ printf "%s%s" (trimSuffix "/" .root.Values.webhook.url) .path | quote }}
{{- with .root.Values.webhook.caBundle }}
caBundle: {{ . }}
{{- end }}
{{- else }}
service:
  name: {{ include "kerf.fullname" .root }}-webhook
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path }}
  port: 443
{{- end }}
{{- end -}}

{{- /* cert-manager injects the CA bundle into the webhook configurations from the Certificate. */ -}}
{{- define "kerf.webhookAnnotations" -}}
{{- if and .Values.certManager.enabled (not .Values.webhook.url) }}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "kerf.fullname" . }}-webhook
{{- end }}
{{- end -}}

{{- define "kerf.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "kerf.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "kerf.checkValues" -}}
{{- if and .Values.webhook.url (not .Values.webhook.caBundle) .Values.certManager.enabled -}}
{{- fail "webhook.url needs webhook.caBundle (the base64 PEM CA that signed the certificate kerf serves there), or certManager.enabled=false for a kerf started in self-signed mode, which injects it" -}}
{{- end -}}
{{- end -}}

{{- /* settings.featureGates (Karpenter's camelCase keys) as FEATURE_GATES: `NodeRepair=false,SpotToSpotConsolidation=true`. */}}
{{- define "kerf.featureGates" -}}
{{- $gates := list -}}
{{- range $name, $on := . -}}
{{- $gates = append $gates (printf "%s%s=%t" (upper (substr 0 1 $name)) (substr 1 -1 $name) $on) -}}
{{- end -}}
{{- join "," $gates -}}
{{- end -}}
