{{- define "ringmaster.name" -}}ringmaster{{- end -}}
{{- define "ringmaster.fullname" -}}ringmaster-operator{{- end -}}
{{- define "ringmaster.labels" -}}
app.kubernetes.io/name: ringmaster
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "ringmaster.selectorLabels" -}}
app.kubernetes.io/name: ringmaster
app.kubernetes.io/component: operator
{{- end -}}
{{- define "ringmaster.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace -}}
{{- end -}}
{{- define "ringmaster.advertiseURL" -}}
{{- default (printf "http://%s.%s.svc:%v" (include "ringmaster.fullname" .) .Release.Namespace .Values.ports.rendezvous) .Values.rendezvous.advertiseURL -}}
{{- end -}}
