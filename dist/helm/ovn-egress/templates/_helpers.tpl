{{- define "ovn-egress.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The labels selectors use: stable across upgrades (a selector is immutable). */}}
{{- define "ovn-egress.selectorLabels" -}}
app.kubernetes.io/name: ovn-egress
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* Every object's labels: the selector's and Kubernetes' recommended ones. (list $ "component") */}}
{{- define "ovn-egress.labels" -}}
{{- $root := index . 0 -}}
{{ include "ovn-egress.selectorLabels" (index . 1) }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/version: {{ $root.Values.image.tag | default $root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: ovn-egress
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ $root.Chart.Name }}-{{ $root.Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "ovn-egress.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 5
{{- end }}
