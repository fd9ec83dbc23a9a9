{{- define "ovn-egress.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{- define "ovn-egress.labels" -}}
app.kubernetes.io/name: ovn-egress
app.kubernetes.io/component: {{ . }}
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
